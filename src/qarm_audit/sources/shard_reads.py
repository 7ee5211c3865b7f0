"""The headers of many local shards, read by forked copies of the process alongside it.

A million entries' headers take about a second of one CPU to parse, and each shard's header
is parsed on its own. Where more CPUs are free, copies of the process (``aside.py``) each read
and parse a run of the shards from its front, exactly as the process would, and send each
header back as soon as it is parsed, as columns: its names, dtypes, shapes and offsets.
Turning those into the same :class:`ShardHeader` takes the process about a quarter of what
parsing takes, and the process takes each one as it comes, so that its caller can work on it
(the audit groups its tensors into modules) while later ones are parsed. Whenever nothing has
come in, the process reads a shard itself, from the back of the longest run still to be sent:
however busy the machine and however long the caller's work, the copies and the process meet
in the middle, with no split worked out ahead.

What is read never depends on the copies: a shard a copy could not read, and every shard of a
copy that ended early, is read by the process itself, meeting any error where it would have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, pairwise, repeat
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import QarmError
from .aside import Aside, can_fork, readable, usable_cpus
from .checkpoint import ShardHeader, TensorEntry

MIN_SHARDS_PER_READER = 8
"""Each reader (a copy, or the process itself) has at least this many shards: a copy takes a
few milliseconds to start, which a handful of headers does not repay."""

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
) -> Iterator[tuple[str, ShardHeader | QarmError]]:
    """Each of ``shards`` (file, path) with its header, or the error reading it gave, once
    each, in the order they are read: ``shards``' order where no copy reads.

    ``copies``: how many forked copies read alongside the process (by default one per CPU but
    the process's own, fewer for few shards)."""
    wanted = _copies(len(shards), usable_cpus()) if copies is None else copies
    if wanted <= 0 or not can_fork():
        yield from _read_here(shards, read)
        return
    bounds = list(accumulate(_runs(len(shards), wanted), initial=0))
    runs = [_Run(shards, begin, end, read) for begin, end in pairwise(bounds)]
    try:
        while True:
            sending = [run for run in runs if run.sent()]
            if sending:
                for run in sending:
                    yield from run.take()
                continue
            longest = max(runs, key=_Run.left_here)
            if longest.left_here():
                yield from _read_here([shards[longest.claim()]], read)
                continue
            waiting = [run for run in runs if run.front < run.end]
            if not waiting:
                return
            _wait(waiting)  # each shard left is the one a copy is parsing now
    finally:
        for run in runs:
            run.aside.close()


@dataclass(eq=False)
class _Run:
    """A run of the shards, ``[front, end)`` of it still to be had: a copy sends them from the
    front, the process reads them from the end. A copy that ended leaves them all to the
    process."""

    shards: Sequence[tuple[str, Path]]
    front: int
    end: int
    read: Read

    def __post_init__(self) -> None:
        self.aside: Aside[_Sent] = Aside(
            partial(_sent, self.shards[self.front : self.end], self.read)
        )

    def left_here(self) -> int:
        """How many of the run the process may read (none the copy is parsing now)."""
        return self.end - self.front - self.aside.forked

    def claim(self) -> int:
        """The run's last shard, taken for the process to read."""
        self.end -= 1
        return self.end

    def sent(self) -> bool:
        """Whether the copy has sent a shard (or ended): :meth:`take` would not wait."""
        return self.aside.forked and self.aside.ready()

    def take(self) -> Iterator[tuple[str, ShardHeader | QarmError]]:
        """The shard the copy sent, or, where it ended, nothing (the rest is the process's)."""
        file, path = self.shards[self.front]
        sent = self.aside.next()
        if sent is None or sent[0] != file:
            self.aside.close()
            return
        self.front += 1
        if self.front >= self.end:
            self.aside.close()  # what it would send next, the process has read
        if sent[1] is None:  # the copy could not read it: read here, for the error it gives
            yield from _read_here([(file, path)], self.read)
            return
        yield file, _header(file, sent[1])


def _wait(runs: list[_Run]) -> None:
    """Until one of ``runs``' copies has sent a shard or ended."""
    pipes = [run.aside.fileno() for run in runs if run.aside.forked]
    if pipes:
        readable(pipes, None)


def _copies(shards: int, cpus: int) -> int:
    """One per CPU but the process's own, each (and the process) with enough shards."""
    return max(0, min(cpus - 1, MAX_COPIES, shards // MIN_SHARDS_PER_READER - 1))


def _runs(total: int, readers: int) -> list[int]:
    """Run lengths as even as can be, the longer ones last."""
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


def _sent(part: Sequence[tuple[str, Path]], read: Read) -> Iterator[_Sent]:
    """In a copy: each shard's columns, or None where it does not read, sent as each is
    parsed."""
    for file, path in part:
        try:
            header = read(path, file)
        except QarmError:
            yield file, None
            continue
        yield file, _columns(header)


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
