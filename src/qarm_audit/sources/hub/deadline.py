"""Deadlines for Hub reads: one per request and one for the whole audit.

Timeouts bound each *wait* for bytes; a server that sends one byte now and then never trips them
and would hold a run forever. A deadline bounds the request as a whole, its retries included:

* every request qarm makes checks the clock as its bytes arrive and before each retry;
* once an answer's headers have arrived, its connection is shut down when the deadline passes
  (:func:`install` hooks huggingface_hub's session for that; one thread watches every request,
  watchdog.py), which also ends a document download that ``hf_hub_download`` reads in 10 MB
  chunks;
* any failure after the deadline is reported as the deadline passing.

The run then ends in a :class:`HubDeadlineError` (exit 3). A server silent before its
answer's headers is ended by the per-read timeout (``HF_HUB_DOWNLOAD_TIMEOUT``), which no request
of qarm's waits beyond what its deadline leaves.

The deadlines are :class:`~.retry.RetryPolicy` fields, else the environment
(:data:`REQUEST_ENV`, :data:`AUDIT_ENV`, in seconds), else the defaults. They only ever end a run
that a server holds far beyond any normal read: no verdict depends on them.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import httpx2
from huggingface_hub import get_session
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    parse_ratelimit_headers,
    silent_tqdm,
)

from ...errors import HubError, UsageError
from .watchdog import WATCHDOG, shut


class HubDeadlineError(HubError):
    """A Hub request, or the audit's Hub reads together, took longer than their deadline."""


REQUEST_ENV = "QARM_HUB_REQUEST_DEADLINE"
AUDIT_ENV = "QARM_HUB_DEADLINE"
REQUEST_DEFAULT = 300.0
"""Seconds one request may take, retries included (an 80 MB index at 300 kB/s fits)."""
AUDIT_DEFAULT = 1800.0
"""Seconds every Hub read of one audit may take together."""


def seconds_from_env(name: str, default: float) -> float:
    """A positive number of seconds from ``name``, else ``default``; anything else is refused."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(name, f"{raw!r} is not a positive number of seconds")
    return value


class Deadline:
    """The audit's deadline, and each request's within it."""

    def __init__(
        self,
        request: float,
        audit: float,
        clock: Callable[[], float] = time.monotonic,
        longest_wait: float = math.inf,
    ) -> None:
        """``longest_wait``: the most seconds a server may ask a retry to wait for."""
        self.request_seconds = request
        self.audit_seconds = audit
        self.clock = clock
        self.longest_wait = longest_wait
        self.audit_end = clock() + audit
        self.interrupted = False
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()

    def begin(self, where: str, what: str, commit: str | None = None) -> RequestDeadline:
        """The deadline of a request starting now; ``commit``: the commit its answer must be
        of (a document's, see ``document_answers.py``)."""
        return RequestDeadline(self, self.clock() + self.request_seconds, where, what, commit)

    def left(self) -> float:
        """Seconds left to the audit."""
        return self.audit_end - self.clock()

    def interrupt(self) -> None:
        """Ctrl-C reached the thread waiting for the reads: every answer arriving is cut off
        now and no request is made or retried, so the reading threads end at once (the
        interpreter waits for them before it exits; a dripping answer held Ctrl-C until the
        request's deadline, 300 s by default)."""
        with self._lock:
            self.interrupted = True
            live = list(self._live)
        for sock in live:
            shut(sock)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        """Around waiting for reading threads: Ctrl-C interrupts their reads too."""
        try:
            yield
        except KeyboardInterrupt:
            self.interrupt()
            raise


_CURRENT = threading.local()
"""The deadline of the request the calling thread is making, if any."""


def current_request() -> RequestDeadline | None:
    """The deadline of the request the calling thread is making (one of qarm's), or None."""
    deadline: RequestDeadline | None = getattr(_CURRENT, "deadline", None)
    return deadline


def install() -> None:
    """Watch the answers of huggingface_hub's session (once per session): an answer that
    arrives while a thread runs a request under a deadline is cut off when it passes. Answers
    to any other request (of the caller's own, say) are left alone."""
    hooks = get_session().event_hooks
    if _watch not in hooks.get("response", []):
        hooks["response"] = [*hooks.get("response", []), _watch]
    if _late not in hooks.get("request", []):
        hooks["request"] = [*hooks.get("request", []), _late]


def _late(request: httpx2.Request) -> None:
    """No request is sent once its deadline has passed: ``hf_hub_download`` resumes a download
    cut off at the deadline (5 times, 1 s apart), and each resume ends here at once. A request
    sent waits for its answer no longer than the deadline leaves: ``hf_hub_download`` asks its
    metadata again with a fixed 60 s timeout, which a silent server would otherwise use up."""
    deadline = current_request()
    if deadline is not None:
        deadline.check()
        timeouts = request.extensions.get("timeout")
        if isinstance(timeouts, dict):
            left = max(deadline.left(), 0.001)
            for phase, seconds in timeouts.items():
                timeouts[phase] = left if seconds is None else min(seconds, left)


def _watch(response: httpx2.Response) -> None:
    deadline = current_request()
    if deadline is not None:
        deadline.refuse_a_wait_past_it(response)
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            deadline.watch(sock)


class RequestDeadline:
    """One request's deadline (never later than the audit's); a context manager while the
    request runs in this thread (see :func:`install`)."""

    def __init__(
        self, owner: Deadline, end: float, where: str, what: str, commit: str | None = None
    ) -> None:
        self.owner = owner
        self.end = end
        self.where = where
        self.what = what
        self.commit = commit
        self._watched: list[int] = []
        self._socks: list[socket.socket] = []
        self._outer: RequestDeadline | None = None

    def __enter__(self) -> RequestDeadline:
        self._outer = getattr(_CURRENT, "deadline", None)
        _CURRENT.deadline = self
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _CURRENT.deadline = self._outer
        WATCHDOG.forget(self._watched)
        self._watched.clear()
        with self.owner._lock:
            self.owner._live.difference_update(self._socks)
        self._socks.clear()

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when this deadline passes (at once if it has), or when the run
        is interrupted."""
        with self.owner._lock:
            interrupted = self.owner.interrupted
            self.owner._live.add(sock)
            self._socks.append(sock)
        if interrupted:
            shut(sock)
            return
        self._watched.append(WATCHDOG.watch(sock, self.left()))

    def refuse_a_wait_past_it(self, response: httpx2.Response) -> None:
        """huggingface_hub's backoff sleeps what a 429 or 5xx answer asks (``Retry-After`` in
        seconds, or on a 429 the ``RateLimit`` reset where no request is left), plus 1 s, with
        no bound, and nothing wakes it at a deadline: where the wait asked is longer than qarm
        waits, or would pass this deadline, the request ends now."""
        status = response.status_code
        if status != 429 and status < 500:
            return
        asked = _asked_wait(response.headers, status)
        if asked is None:
            return
        wait, asked_by = asked
        reason = "rate limited (HTTP 429)" if status == 429 else f"the Hub answered HTTP {status}"
        if wait > self.owner.longest_wait:
            raise too_long_a_wait(
                self.where, self.what, reason, asked_by, wait, self.owner.longest_wait
            )
        self.check(wait + 1)

    def left(self) -> float:
        """Seconds until this request's or the audit's deadline, whichever comes first."""
        return min(self.end, self.owner.audit_end) - self.owner.clock()

    def check(self, wait: float = 0.0) -> None:
        """Raise once the request's or the audit's deadline has passed (or would, after
        waiting ``wait`` seconds)."""
        if self.owner.interrupted:
            raise HubDeadlineError(self.where, f"{self.what}: interrupted")
        now = self.owner.clock() + wait
        if now > self.owner.audit_end:
            raise HubDeadlineError(
                self.where,
                f"{self.what}: the Hub reads of this audit passed their deadline of "
                f"{self.owner.audit_seconds:g} s ({AUDIT_ENV}); the server is too slow or "
                "holds the connection open",
            )
        if now > self.end:
            raise HubDeadlineError(
                self.where,
                f"{self.what}: the request passed its deadline of "
                f"{self.owner.request_seconds:g} s ({REQUEST_ENV}); the server is too slow or "
                "holds the connection open",
            )

    def progress_class(self) -> type[silent_tqdm]:
        """A silent progress bar for ``hf_hub_download`` that checks this deadline each time
        bytes arrive (the one hook its download loop offers)."""
        deadline = self

        class _DeadlineTqdm(silent_tqdm):
            def update(self, n: Any = 1) -> Any:
                deadline.check()
                return super().update(n)

        return _DeadlineTqdm


def _asked_wait(headers: httpx2.Headers, status: int) -> tuple[float, str] | None:
    """The wait an answer asks for as huggingface_hub reads it (2.4.0 ``_http_backoff_base``:
    ``Retry-After`` in ASCII seconds, or on a 429 the ``RateLimit`` reset where no request is
    left), and the header that asks; None where it asks for none (an HTTP date included:
    huggingface_hub then waits its own backoff)."""
    if status == 429:
        limit = parse_ratelimit_headers(headers)
        if limit is not None and limit.remaining == 0:
            return float(limit.reset_in_seconds), "RateLimit"
    value = headers.get("Retry-After", "").strip()
    if value.isascii() and value.isdigit():
        return float(value), "Retry-After"
    return None


def too_long_a_wait(
    where: str, what: str, reason: str, asked_by: str, wait: float, longest: float
) -> HubError:
    """The error for a retry whose wait, asked by the server, is longer than qarm waits."""
    return HubError(
        where,
        f"{what}: {reason}, and {asked_by} asks for {wait:g} s, more than the {longest:g} s "
        "qarm waits",
    )
