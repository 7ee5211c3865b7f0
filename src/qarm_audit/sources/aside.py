"""A yes-or-no check run in a forked copy of the process while the process goes on.

A million-tensor folder's index is proven by writing it again from the headers (half a
second); nothing the audit does next depends on the answer but the end result, so a copy of
the process works it out on another CPU meanwhile. The copy shares every object the process
holds at the fork, so nothing is sent to it, and it sends back one byte. The answer is the
check's own: where the copy cannot be made or does not answer, the check runs here, so what
the audit reports never depends on whether it ran aside, or on timing.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_ANSWERS = {b"1": True, b"0": False}


class Aside:
    """``check()`` started in a forked child where that is safe (see :func:`can_fork`), else
    left to run here; :meth:`answer` waits for it. Asked once, the answer is kept."""

    def __init__(self, check: Callable[[], bool], *, fork: bool = True) -> None:
        self._check = check
        self._answer: bool | None = None
        self._child: tuple[int, int] | None = None
        if fork and can_fork():
            self._child = _start(check)

    @property
    def forked(self) -> bool:
        """Whether a child was started for the check (and has not been waited for yet)."""
        return self._child is not None

    def answer(self) -> bool:
        if self._answer is None:
            answered = _wait(*self._child) if self._child is not None else None
            self._child = None
            self._answer = self._check() if answered is None else answered
        return self._answer


def can_fork() -> bool:
    """A fork without an exec is safe on Linux while this thread is the only one: a thread
    holding a lock at the fork would leave it held in the child forever (and Python warns
    about it from 3.12). Other systems run the check in the process."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
    )


def _start(check: Callable[[], bool]) -> tuple[int, int] | None:
    read_end, write_end = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no memory or processes to spare: the check runs here
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # pragma: no cover - the child; its answer is what the tests compare
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, b"1" if check() else b"0")
            code = 0
        finally:
            # no exit handler, no flush of the parent's buffers, no teardown: only the byte
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def _wait(pid: int, read_end: int) -> bool | None:
    """The child's answer, or None where it gave none (killed, out of memory, a failure)."""
    try:
        with os.fdopen(read_end, "rb") as pipe:
            byte = pipe.read(1)
        _, status = os.waitpid(pid, 0)
    except (OSError, ChildProcessError):
        return None
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    return _ANSWERS.get(byte)
