"""The headers of many local shards, read by forked copies of the process alongside it.

A million entries' headers take about a second of one CPU to parse, and each shard's header
is parsed on its own. Where more CPUs are free, copies of the process (``aside.py``) each read
and parse a run of the shards, exactly as the process would, and send each header back as
columns: its names, dtypes, shapes and offsets. Turning those into the same
:class:`ShardHeader` takes the process about a quarter of what parsing takes. A CPU that comes
free while the process reads (a copy doing other work, such as parsing the declaration, has
done it) is given the back of what the process has left, to a copy started before any header
was read and waiting since.

What is read never depends on the copies: a shard a copy could not read, and every shard of a
copy that ended early, is read by the process itself, meeting any error where it would have.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from functools import partial
from itertools import pairwise, repeat
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import QarmError
from .aside import Aside, busy, can_fork
from .checkpoint import ShardHeader, TensorEntry

MIN_SHARDS_PER_READER = 8
"""Each reader (a copy, or the process itself) takes at least this many shards: a copy takes
a few milliseconds to start, which a handful of headers does not repay."""

MAX_COPIES = 7
"""Beyond this, turning the copies' columns into headers is what takes the process's time."""

Read: TypeAlias = Callable[[Path, str], ShardHeader]
"""Reads and parses one shard (path, file), raising a :class:`QarmError` for a bad one."""

_Sent: TypeAlias = tuple[str, Any]
"""(file, the header's columns), or (file, None): the copy could not read it."""


def read_headers(
    shards: Sequence[tuple[str, Path]],
    read: Read,
    *,
    copies: int | None = None,
    standbys: int | None = None,
    free: Callable[[], int] | None = None,
) -> Iterator[tuple[str, ShardHeader | QarmError]]:
    """Each of ``shards`` (file, path) in order, with its header, or the error reading it gave.

    ``copies``: how many forked copies read a run each from the start (by default one per CPU
    that neither this process nor a copy at work keeps busy, fewer for few shards).
    ``standbys``: how many copies wait, started but idle, for a CPU to come free while the
    process reads its own run (by default one per copy at work now: the CPU it keeps busy is
    free once its work is done). ``free``: how many CPUs are free now (by default the CPUs
    less this process and the copies at work), asked after each shard the process reads."""
    cpus = _cpus()
    at_work = busy()
    wanted = _copies(len(shards), cpus, at_work) if copies is None else copies
    runs = _runs(len(shards), wanted + 1) if wanted > 0 and can_fork() else [len(shards)]
    bounds = [0]
    for length in runs:
        bounds.append(bounds[-1] + length)
    parts = [list(shards[a:b]) for a, b in pairwise(bounds)]
    # the copies are started first, then the process reads its own run
    asides = [Aside(partial(_sent, part, read)) for part in parts[1:]]
    waiting = min(at_work, MAX_COPIES - len(asides)) if standbys is None else standbys
    try:
        yield from _read_sharing(
            parts[0],
            read,
            free or (lambda: cpus - 1 - busy()),
            waiting if can_fork() and len(parts[0]) >= 2 * MIN_SHARDS_PER_READER + 1 else 0,
        )
        for part, aside in zip(parts[1:], asides, strict=True):
            yield from _received(part, aside, read)
    finally:
        for aside in asides:
            aside.close()


def _read_sharing(
    part: Sequence[tuple[str, Path]],
    read: Read,
    free: Callable[[], int],
    standbys: int,
) -> Iterator[tuple[str, ShardHeader | QarmError]]:
    """The process's own run, read here in order, but for the back of what is left each time
    a CPU is free and the rest is long enough for two readers: a copy on standby, started
    before any header was read (so that it shares none of them with the process, and the
    process writes no page it shares), is given that back part. The later a copy is given
    its part, the nearer the front that part: the parts are taken in order once the process
    has read its own."""
    waiting: list[_Standby] = []
    for _ in range(standbys):
        try:
            waiting.append(_Standby(part, read, [copy.orders for copy in waiting]))
        except OSError:  # no file descriptors to spare: fewer copies wait
            break
    given: list[tuple[Sequence[tuple[str, Path]], Aside[_Sent]]] = []
    end = len(part)
    try:
        done = 0
        while done < end:
            yield from _read_here(part[done : done + 1], read)
            done += 1
            if waiting and end - done >= 2 * MIN_SHARDS_PER_READER and free() > 0:
                back = _runs(end - done, 2)[1]
                copy = waiting.pop()
                given.insert(0, (part[end - back : end], copy.give(end - back, end)))
                end -= back
        for run, aside in given:
            yield from _received(run, aside, read)
    finally:
        for copy in waiting:
            copy.dismiss()
        for _run, aside in given:
            aside.close()


class _Standby:
    """A copy started before the process reads a header, waiting (blocked on a pipe, using no
    CPU) to be given a run of ``part`` to read and send as :func:`_sent` does, or dismissed."""

    def __init__(self, part: Sequence[tuple[str, Path]], read: Read, others: list[int]) -> None:
        """``others``: the ends that give earlier copies their orders (the child closes them,
        so that only the process holds each, and a dismissed copy reads the end of its pipe)."""
        taken, self.orders = os.pipe()
        work = partial(_ordered, part, read, taken, (self.orders, *others))
        self.aside: Aside[_Sent] = Aside(work, standby=True)
        os.close(taken)

    def give(self, begin: int, end: int) -> Aside[_Sent]:
        self.aside.to_work()
        # a copy that has ended, or was never made, reads nothing: no order is written to it
        # (with SIGPIPE at its default, as a program embedding the library may set it, the
        # write would end this process), and what it would have sent is read here
        if not self.aside.ready():
            with suppress(OSError):
                os.write(self.orders, _ORDER.pack(begin, end))
        os.close(self.orders)
        return self.aside

    def dismiss(self) -> None:
        os.close(self.orders)  # the copy reads the pipe's end and ends, sending nothing
        self.aside.close()


_ORDER = struct.Struct("<QQ")


def _ordered(
    part: Sequence[tuple[str, Path]], read: Read, orders: int, unused: tuple[int, ...]
) -> Iterator[_Sent]:
    """In a copy on standby: :func:`_sent` of the run it is given, nothing if dismissed."""
    for end in unused:
        os.close(end)
    order = b""
    while len(order) < _ORDER.size:
        got = os.read(orders, _ORDER.size - len(order))
        if not got:
            return iter(())
        order += got
    begin, end = _ORDER.unpack(order)
    return _sent(part[begin:end], read)


def _copies(shards: int, cpus: int, at_work: int) -> int:
    free = cpus - 1 - at_work
    return max(0, min(free, MAX_COPIES, shards // MIN_SHARDS_PER_READER - 1))


def _cpus() -> int:
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


def _runs(total: int, readers: int) -> list[int]:
    """Run lengths as even as can be, the longer ones last (the process reads the first)."""
    base, extra = divmod(total, readers)
    return [base + (i >= readers - extra) for i in range(readers)]


def _read_here(
    part: Sequence[tuple[str, Path]], read: Read
) -> Iterator[tuple[str, ShardHeader | QarmError]]:
    for file, path in part:
        try:
            yield file, read(path, file)
        except QarmError as exc:
            yield file, exc


def _received(
    part: Sequence[tuple[str, Path]], aside: Aside[_Sent], read: Read
) -> Iterator[tuple[str, ShardHeader | QarmError]]:
    for place, (file, path) in enumerate(part):
        sent = aside.next()
        if sent is None or sent[0] != file:  # the copy ended: the rest is read here
            aside.close()
            yield from _read_here(part[place:], read)
            return
        if sent[1] is None:  # the copy could not read it: read here, for the error it gives
            yield from _read_here([(file, path)], read)
            continue
        yield file, _header(file, sent[1])


def _sent(part: Sequence[tuple[str, Path]], read: Read) -> Iterator[_Sent]:
    """In a copy: each shard's columns, or None where it does not read; all worked out before
    any is sent, for a pipe holds a few dozen kB and the process reads it only once its own
    run is read."""
    sent: list[_Sent] = []
    for file, path in part:
        try:
            header = read(path, file)
        except QarmError:
            sent.append((file, None))
            continue
        sent.append((file, _columns(header)))
    return iter(sent)


def _columns(header: ShardHeader) -> tuple[Any, ...]:
    tensors = header.tensors
    names, dtypes, shapes, begins, ends = (
        (list(column) for column in zip(*tensors, strict=True)) if tensors else ([], [], [], [], [])
    )
    # one string and a split cost far less than a string each, where no name holds a break
    joined = "\n".join(names)
    sent_names: str | list[str] = joined if joined.count("\n") == max(len(names) - 1, 0) else names
    return (
        header.size,
        header.header_length,
        header.metadata,
        header.remote_sha256,
        sent_names,
        dtypes,
        shapes,
        begins,
        ends,
    )


def _header(file: str, columns: tuple[Any, ...]) -> ShardHeader:
    size, header_length, metadata, sha256, names, dtypes, shapes, begins, ends = columns
    if isinstance(names, str):
        names = names.split("\n") if names or dtypes else []
    fields = zip(names, dtypes, shapes, begins, ends, strict=True)
    return ShardHeader(
        file=file,
        size=size,
        header_length=header_length,
        metadata=metadata,
        tensors=tuple(map(tuple.__new__, repeat(TensorEntry), fields)),
        remote_sha256=sha256,
    )
