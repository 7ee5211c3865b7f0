"""One thread that shuts sockets down when their deadlines pass, for every request at once.

A timer thread per request would do the same, at the price of starting and stopping a thread
for each of the hundreds of range reads of a large checkpoint (measured: a few per cent of a
Hub audit's CPU at 0 ms latency, docs/performance.md). Here a request registers its socket and
the moment it is due; the one thread sleeps until the earliest is due, and a request that ends
first unregisters its sockets, after which they are never touched.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable

COMPACT_SLACK = 64
"""Entries of ended requests the heap may hold beyond twice the live ones before it is rebuilt
(each ended entry would otherwise stay until its own deadline, 300 s by default)."""


class Watchdog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wake = threading.Condition(threading.Lock())
        self._due: list[tuple[float, int, socket.socket]] = []
        self._live: set[int] = set()
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, seconds: float) -> int:
        """Shut ``sock`` down ``seconds`` from now unless :meth:`forget` comes first; the token
        to forget it by."""
        with self._wake:
            token = next(self._tokens)
            entry = (self._clock() + max(seconds, 0.0), token, sock)
            heapq.heappush(self._due, entry)
            self._live.add(token)
            if len(self._due) > 2 * len(self._live) + COMPACT_SLACK:
                self._due = [e for e in self._due if e[1] in self._live]
                heapq.heapify(self._due)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="qarm-deadlines", daemon=True
                )
                self._thread.start()
            elif self._due[0] is entry:
                self._wake.notify()
        return token

    def forget(self, tokens: list[int]) -> None:
        """The requests of these tokens ended: their sockets are left alone from now on."""
        with self._wake:
            self._live.difference_update(tokens)

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._due and self._due[0][1] not in self._live:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                when, token, sock = self._due[0]
                left = when - self._clock()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(self._due)
                self._live.discard(token)
                shut(sock)


def shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


WATCHDOG = Watchdog()
"""The process's one watchdog: its thread starts with the first watched request."""
