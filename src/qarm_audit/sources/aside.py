"""Work done in a forked copy of the process while the process goes on.

A million-tensor folder's index is proven by writing it again from the headers (half a
second), and its declaration parsed (another half), while the process reads and groups the
headers: a copy of the process works it out on another CPU meanwhile. The copy shares every
object the process holds at the fork, so nothing is sent to it; it sends back what it worked
out, pickled. What it sends is what the same work gives here: where the copy cannot be made
or gives nothing, the caller does the work itself, so what the audit reports never depends on
whether it ran aside, or on timing. A check whose answer is wanted only at the end
(:class:`CheckAside`) runs at the lowest priority, so that copies whose values are wanted
sooner take the free CPUs first, and is never waited for: not answered when asked, it is
worked out here.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import BinaryIO, Generic, TypeVar

_T = TypeVar("_T")

_LENGTH = 8
"""Each value is sent as its pickle's length (8 bytes, little-endian), then the pickle."""

_running: dict[int, BinaryIO] = {}
"""The children started and not yet closed: pid -> the pipe they send on."""


def busy() -> int:
    """How many children are at work: started, not yet closed, and with nothing sent yet. A
    child sends once its work is done (every caller here works all out before sending), so
    one whose pipe holds a value is taken to be idle, waiting for it to be read."""
    if not _running:
        return 0
    try:
        sent, _, _ = select.select(list(_running.values()), [], [], 0)
    except (OSError, ValueError):
        return len(_running)
    return len(_running) - len(sent)


class Aside(Generic[_T]):
    """The values ``work()`` yields, worked out in a forked child where that is safe (see
    :func:`can_fork`); :meth:`next` waits for the next one. No child, or one that ended or
    failed before a value, gives None for it: the caller then works it out itself."""

    def __init__(
        self,
        work: Callable[[], Iterable[_T]],
        *,
        fork: bool = True,
        nice: int = 0,
        standby: bool = False,
    ) -> None:
        """``nice``: added to the child's nice value, for work whose value is wanted late.
        ``standby``: the work waits for the caller to give it its part (see
        :meth:`to_work`); until then the child is not counted as at work (:func:`busy`)."""
        self._child: tuple[int, BinaryIO] | None = None
        if fork and can_fork():
            self._child = _start(work, nice)
            if self._child is not None and not standby:
                self.to_work()

    def to_work(self) -> None:
        """The child is at work from now (for a child started on ``standby``)."""
        if self._child is not None:
            _running[self._child[0]] = self._child[1]

    @property
    def forked(self) -> bool:
        """Whether a child was started (and has not been stopped yet)."""
        return self._child is not None

    def ready(self) -> bool:
        """Whether :meth:`next` would not wait: a value (or the child's end) is there."""
        if self._child is None:
            return True
        try:
            readable, _, _ = select.select([self._child[1]], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def next(self) -> _T | None:
        if self._child is None:
            return None
        pipe = self._child[1]
        try:
            head = pipe.read(_LENGTH)
            body = pipe.read(int.from_bytes(head, "little")) if len(head) == _LENGTH else b""
        except OSError:
            head, body = b"", b""
        if len(head) < _LENGTH or len(body) < int.from_bytes(head, "little"):
            self.close()  # ended, killed, out of memory, or its work failed
            return None
        value: _T = pickle.loads(body)
        return value

    def close(self) -> None:
        """No more values wanted: the child, if still working, is stopped, and reaped."""
        if self._child is None:
            return
        pid, pipe = self._child
        self._child = None
        _running.pop(pid, None)
        pipe.close()  # a child writing now meets a closed pipe and ends
        try:
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)  # pure work, nothing to flush: stop it now
                os.waitpid(pid, 0)
        except (OSError, ChildProcessError):
            pass


class CheckAside:
    """A yes-or-no ``check()`` run aside (:class:`Aside`) whose answer is wanted only at the
    end: the child yields its CPU to the process and to copies whose values are wanted
    sooner (the highest nice value), and :meth:`answer` takes the child's answer where it is
    there, else stops the child and runs the check here (a child starved by a busy machine
    is never waited for). Asked once, the answer is kept."""

    def __init__(self, check: Callable[[], bool], *, fork: bool = True) -> None:
        self._check = check
        self._answer: bool | None = None
        self._aside: Aside[bool] = Aside(lambda: (check(),), fork=fork, nice=LATE)

    @property
    def forked(self) -> bool:
        return self._aside.forked

    def ready(self) -> bool:
        """Whether the child has answered (or ended): :meth:`answer` would take its answer."""
        return self._aside.ready()

    def answer(self) -> bool:
        if self._answer is None:
            answered = self._aside.next() if self._aside.ready() else None
            self._aside.close()
            self._answer = self._check() if not isinstance(answered, bool) else answered
        return self._answer


LATE = 19
"""The nice value added to a child whose answer is wanted only at the end."""


def can_fork() -> bool:
    """A fork without an exec is safe on Linux while this thread is the only one: a thread
    holding a lock at the fork would leave it held in the child forever (and Python warns
    about it from 3.12). Other systems do the work in the process."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
    )


def _start(work: Callable[[], Iterable[object]], nice: int) -> tuple[int, BinaryIO] | None:
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no file descriptors to spare: the work is done here
        return None
    try:
        pid = os.fork()
    except OSError:  # no memory or processes to spare: the work is done here
        os.close(read_end)
        os.close(write_end)
        return None
    if pid == 0:  # pragma: no cover - the child; what it sends is what the tests compare
        code = 1
        try:
            os.close(read_end)
            if nice:
                os.nice(nice)
            with os.fdopen(write_end, "wb") as pipe:
                for value in work():
                    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
                    pipe.write(len(data).to_bytes(_LENGTH, "little"))
                    pipe.write(data)
                    pipe.flush()
            code = 0
        finally:
            # no exit handler, no flush of the parent's buffers, no teardown: only the values
            os._exit(code)
    os.close(write_end)
    return pid, os.fdopen(read_end, "rb")
