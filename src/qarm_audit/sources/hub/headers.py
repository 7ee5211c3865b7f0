"""Every shard's header by range reads, many shards at a time; and ``--probe-scalars`` bytes.

A shard takes a first read sized by sizing.py and, when its header turns out longer, exactly one
second read of the missing remainder. Each read is a checked range read (ranges.py) retried as
retry.py says; each header is parsed with every check of a local read and handed to the cache.
Reads can start before the shards to read are known (:meth:`HeaderFetcher.read_ahead`, while the
documents download); only those of shards then asked for are parsed, cached and audited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from typing import Any

from ...errors import SourceSpecError, UsageError
from ..checkpoint import ShardHeader
from ..header import length_prefix, parse_header
from .cache import HeaderCache
from .failures import Context
from .observer import HubObserver
from .ranges import Shard, read_range
from .retry import RetryPolicy, requesting
from .sizing import Estimator

TENSOR_READ_CAP = 64 * 1024
"""Largest single read of tensor bytes (``--probe-scalars`` asks for a few bytes at a time)."""


class HeaderFetcher:
    def __init__(
        self,
        ctx: Context,
        watch: HubObserver,
        cache: HeaderCache,
        *,
        policy: RetryPolicy,
        headers: Mapping[str, str],
        workers: int,
    ) -> None:
        self.ctx = ctx
        self.watch = watch
        self.cache = cache
        self.policy = policy
        self.headers = headers
        self.workers = workers
        self.estimator: Estimator | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: dict[str, tuple[Shard, Future[bytes]]] = {}

    def read_ahead(self, shards: list[Shard], first_read: Callable[[Shard], int]) -> None:
        """Start reading these shards' headers now, before :meth:`fetch` is told which shards
        to read (while the documents download): it takes each one it is asked for, and drops
        the others unread or unparsed. ``first_read`` sizes each one's first read."""
        pool = self._started()
        for shard in shards:
            if shard.file not in self._ahead:
                self._ahead[shard.file] = (shard, pool.submit(self._raw, shard, first_read))

    def fetch(self, shards: list[Shard], estimator: Estimator) -> list[ShardHeader]:
        """Every shard's header, in the order given, read by at most ``workers`` threads."""
        self.estimator = estimator
        if not shards:
            self.close()
            return []
        results: dict[str, ShardHeader] = {}
        self.watch.headers_started(len(shards))
        pool = self._started()
        try:
            ahead: dict[Future[bytes], Shard] = {}
            for shard in shards:  # the same listing made both: the same Shard
                started = self._ahead.pop(shard.file, None)
                if started is not None:
                    ahead[started[1]] = shard
            self._drop_ahead()  # not asked for: those not started never start
            # The first wave (one shard per worker) starts before any header has arrived, so it
            # never uses what headers teach; deciding that by position, not by timing, keeps
            # the requests of a run reproducible.
            pending: dict[Future[Any], Shard] = dict(ahead)
            taken = set(ahead.values())
            for i, shard in enumerate(shards):
                if shard not in taken:
                    pending[pool.submit(self._shard, shard, i >= self.workers)] = shard
            with self.ctx.deadline.interruptible() if self.ctx.deadline else nullcontext():
                for future in as_completed(pending):
                    shard = pending[future]
                    value: bytes | ShardHeader = future.result()
                    # read ahead: not parsed yet
                    results[shard.file] = (
                        value if isinstance(value, ShardHeader) else self._header(shard, value)
                    )
                    self.watch.header_read(shard.file)
        finally:
            self.close()
            self.watch.headers_finished()
        return [results[shard.file] for shard in shards]

    def close(self) -> None:
        """Stop what was not started and wait for what was (reads ahead included)."""
        self._drop_ahead()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _drop_ahead(self) -> None:
        for _, dropped in self._ahead.values():
            dropped.cancel()
        self._ahead.clear()

    def _started(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix="qarm-header"
            )
        return self._pool

    def _shard(self, shard: Shard, learned: bool) -> ShardHeader:
        estimator = self.estimator
        assert estimator is not None  # set by fetch before any of these is submitted
        return self._header(
            shard,
            self._raw(shard, lambda s: estimator.first_read(s.file, s.size, learned=learned)),
        )

    def _raw(self, shard: Shard, first_read: Callable[[Shard], int]) -> bytes:
        """The 8-byte prefix and the header: a first read, then the remainder if it is short."""
        if shard.size < 8:
            length_prefix(b"", where=shard.file, size=shard.size)
        data = self.range(shard, 0, max(first_read(shard), 8) - 1)
        length = length_prefix(data[:8], where=shard.file, size=shard.size)
        end = 8 + length
        if len(data) < end:
            data += self.range(shard, len(data), end - 1)
        return data[:end]

    def _header(self, shard: Shard, data: bytes) -> ShardHeader:
        """The header parsed with every check of a local read, learned from and cached."""
        length = len(data) - 8
        header = parse_header(data[8:], file=shard.file, size=shard.size, header_length=length)
        if self.estimator is not None:
            self.estimator.observe(header)
        self.cache.store(shard.file, data)
        return dataclasses.replace(header, remote_sha256=shard.sha256)

    def range(self, shard: Shard, start: int, end: int) -> bytes:
        """Bytes ``start..end`` (inclusive) of the shard, retried; failures as qarm errors."""
        return requesting(
            lambda tries, deadline: read_range(
                shard,
                start,
                end,
                headers=self.headers,
                policy=self.policy,
                tries=tries,
                deadline=deadline,
            ),
            self.policy,
            self.ctx,
            where=shard.file,
            what=f"reading bytes {start}-{end}",
            file=shard.file,
        )


class TensorBytes:
    """``read_bytes`` for ``--probe-scalars``: checked range reads at the pinned sha, bounded."""

    def __init__(self, fetcher: HeaderFetcher, shards: list[Shard]) -> None:
        self.fetcher = fetcher
        self.shards = {shard.file: shard for shard in shards}

    def __call__(self, file: str, start: int, length: int) -> bytes:
        shard = self.shards.get(file)
        if shard is None:
            raise SourceSpecError(file, "is not a shard of this checkpoint")
        if length <= 0 or length > TENSOR_READ_CAP or start < 0 or start + length > shard.size:
            raise UsageError(file, f"a read of {length} bytes at {start} is out of bounds")
        return self.fetcher.range(shard, start, start + length - 1)
