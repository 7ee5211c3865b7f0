"""The one thread that ends every Hub request at its deadline: due sockets are shut down, ended
requests' sockets never are, and the entries of ended requests do not pile up."""

from __future__ import annotations

import socket
import time

from qarm_audit.sources.hub.watchdog import COMPACT_SLACK, Watchdog


def _shut_down(sock: socket.socket, within: float = 5.0) -> bool:
    """Whether the peer of ``sock`` sees it shut down (EOF) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_socket_is_shut_down_when_due_and_a_forgotten_one_never() -> None:
    watchdog = Watchdog()
    due, due_peer = socket.socketpair()
    kept, kept_peer = socket.socketpair()
    with due, due_peer, kept, kept_peer:
        token = watchdog.watch(kept, 0.2)
        watchdog.watch(due, 0.2)
        watchdog.forget([token])
        assert _shut_down(due_peer)
        assert not _shut_down(kept_peer, within=0.5)
        kept.sendall(b"x")  # still open both ways
        assert kept_peer.recv(1) == b"x"


def test_an_earlier_deadline_wakes_the_thread_from_a_later_one() -> None:
    watchdog = Watchdog()
    late, late_peer = socket.socketpair()
    soon, soon_peer = socket.socketpair()
    with late, late_peer, soon, soon_peer:
        watchdog.watch(late, 300)
        time.sleep(0.2)  # the thread is asleep until the later one
        started = time.monotonic()
        watchdog.watch(soon, 0.1)
        assert _shut_down(soon_peer)
        assert time.monotonic() - started < 60
        assert not _shut_down(late_peer, within=0.2)


def test_the_entries_of_ended_requests_are_dropped() -> None:
    watchdog = Watchdog()
    a, b = socket.socketpair()
    with a, b:
        for _ in range(10 * COMPACT_SLACK):
            watchdog.forget([watchdog.watch(a, 300)])
        assert len(watchdog._due) <= 2 + COMPACT_SLACK  # 2 x live (one at a time) + the slack
