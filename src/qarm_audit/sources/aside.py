"""Work done in a forked copy of the process while the process goes on.

A million-tensor folder's index is proven by writing it again from the headers (half a
second), and its declaration parsed (another half), while the process reads and groups the
headers: a copy of the process works it out on another CPU meanwhile. The copy shares every
object the process holds at the fork, so nothing is sent to it; it sends back what it worked
out, pickled. What it sends is what the same work gives here: where the copy cannot be made
or gives nothing, the caller does the work itself, so what the audit reports never depends on
whether it ran aside, or on timing. A check whose answer is wanted only at the end
(:class:`CheckAside`) runs at the lowest priority, so that copies whose values are wanted
sooner take the free CPUs first, and is waited for only while it gets on with its work: starved
by a busy machine when asked, it is worked out here. :func:`usable_cpus` (a container's CPU
quota included) is what callers size their copies and their own share of the work by.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import suppress
from io import FileIO
from pathlib import Path
from typing import Generic, TypeVar

_T = TypeVar("_T")

PIPE_BYTES = 1 << 20
"""What a child's pipe is asked to hold."""

_LENGTH = 8
"""Each value is sent as its pickle's length (8 bytes, little-endian), then the pickle."""


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
    ) -> None:
        """``nice``: added to the child's nice value, for work whose value is wanted late."""
        self._child: tuple[int, FileIO] | None = None
        if fork and can_fork():
            self._child = _start(work, nice)

    @property
    def forked(self) -> bool:
        """Whether a child was started (and has not been stopped yet)."""
        return self._child is not None

    def ready(self) -> bool:
        """Whether :meth:`next` would not wait: a value (or the child's end) is there."""
        return self._child is None or readable([self._child[1].fileno()], 0)

    def finishing(self) -> bool:
        """Whether :meth:`next` has its value, waiting for it while the child gets at least
        :data:`PROGRESS` of a CPU (the process, waiting, leaves its own CPU free): False for a
        child starved by a busy machine, or whose use of the CPU cannot be read."""
        while not self.ready():
            used = self._cpu_seconds()
            if used is None:
                return False
            readable([self.fileno()], PROGRESS_WINDOW)
            now = self._cpu_seconds()
            if not self.ready() and (now is None or now - used < PROGRESS * PROGRESS_WINDOW):
                return False
        return True

    def _cpu_seconds(self) -> float | None:
        """The CPU time the child has used, from ``/proc``; None where it cannot be read."""
        if self._child is None:
            return None
        try:
            stat = Path(f"/proc/{self._child[0]}/stat").read_bytes()
            fields = stat.rpartition(b")")[2].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def fileno(self) -> int:
        """The pipe the child sends on, to wait on with others (only while :attr:`forked`)."""
        if self._child is None:
            raise ValueError("no child")
        return self._child[1].fileno()

    def next(self) -> _T | None:
        if self._child is None:
            return None
        pipe = self._child[1]
        try:
            head = _exactly(pipe, _LENGTH)
            body = _exactly(pipe, int.from_bytes(head, "little")) if head is not None else None
        except OSError:
            body = None
        if body is None:
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
    sooner (the highest nice value), and :meth:`answer` takes the child's answer, waiting for
    it while the child gets on with it, else stops the child and runs the check here (a child
    starved by a busy machine is not waited for). Asked once, the answer is kept."""

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
            answered = self._aside.next() if self._aside.finishing() else None
            self._aside.close()
            self._answer = self._check() if not isinstance(answered, bool) else answered
        return self._answer


LATE = 19
"""The nice value added to a child whose answer is wanted only at the end."""

PROGRESS = 0.2
"""The share of a CPU a child must get, while the process waits for its answer, to be waited
for further: less, and a busy machine starves it (at :data:`LATE`), so the process works the
answer out itself."""

PROGRESS_WINDOW = 0.1
"""Seconds over which that share is measured (the kernel counts CPU time in 10 ms ticks)."""


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


def readable(pipes: list[int], timeout: float | None) -> bool:
    """Whether one of ``pipes`` has something to read (or has ended), waiting up to
    ``timeout`` seconds (None: until one does). ``poll``, not ``select``: a process holding
    many files has pipes numbered past what ``select`` takes."""
    poller = select.poll()
    for pipe in pipes:
        poller.register(pipe, select.POLLIN)
    try:
        return bool(poller.poll(None if timeout is None else timeout * 1000))
    except OSError:  # interrupted, out of memory: taken as there, and read
        return True


def usable_cpus() -> int:
    """The CPUs this process may run on, no more than a container's CPU quota allows."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _cpu_quota()
    return max(1, min(cpus, quota)) if quota is not None else cpus


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
CFS_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
CFS_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def _cpu_quota() -> int | None:
    """The CPU quota of the cgroup a container sees as its own (``docker --cpus``: cgroup v2's
    ``cpu.max``, v1's CFS quota and period), in whole CPUs rounded up; None where there is
    none or it cannot be read. The CPUs the process may run on do not show it."""
    try:
        if CPU_MAX.exists():
            quota, _, period = CPU_MAX.read_text().partition(" ")
        else:
            quota, period = CFS_QUOTA.read_text(), CFS_PERIOD.read_text()
        allowed, each = int(quota), int(period)
    except (OSError, ValueError):  # "max": no quota
        return None
    return -(-allowed // each) if allowed > 0 and each > 0 else None


def _exactly(pipe: FileIO, length: int) -> bytearray | None:
    """``length`` bytes from ``pipe``, or None where it ends first. The pipe is unbuffered, so
    that what the child has sent and is not read yet is in the pipe, where :meth:`Aside.ready`
    and a wait on :meth:`Aside.fileno` see it, never in a buffer here."""
    data = bytearray(length)
    view = memoryview(data)
    got = 0
    while got < length:
        read = pipe.readinto(view[got:])
        if not read:
            return None
        got += read
    return data


def _start(work: Callable[[], Iterable[object]], nice: int) -> tuple[int, FileIO] | None:
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no file descriptors to spare: the work is done here
        return None
    # a child sending many values goes on working while the last waits to be read (Linux
    # holds 64 kB in a pipe by default, and lets an unprivileged process ask for up to 1 MB)
    with suppress(OSError, AttributeError):
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
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
    return pid, FileIO(read_end, "rb")
