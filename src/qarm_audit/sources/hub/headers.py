"""Every shard's header by range reads, many shards at a time; and ``--probe-scalars`` bytes.

A shard takes a first read sized by sizing.py and, when its header turns out longer, exactly one
second read of the missing remainder. Each read is a checked range read (ranges.py) retried as
retry.py says; each header is parsed with every check of a local read and handed to the cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import nullcontext

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
        estimator: Estimator,
        cache: HeaderCache,
        *,
        policy: RetryPolicy,
        headers: Mapping[str, str],
        workers: int,
    ) -> None:
        self.ctx = ctx
        self.watch = watch
        self.estimator = estimator
        self.cache = cache
        self.policy = policy
        self.headers = headers
        self.workers = workers

    def fetch(self, shards: list[Shard]) -> list[ShardHeader]:
        """Every shard's header, in the order given, read by at most ``workers`` threads."""
        if not shards:
            return []
        results: dict[str, ShardHeader] = {}
        self.watch.headers_started(len(shards))
        workers = self.workers
        pool = ThreadPoolExecutor(
            max_workers=min(workers, len(shards)), thread_name_prefix="qarm-header"
        )
        try:
            # The first wave (one shard per worker) starts before any header has arrived, so it
            # never uses what headers teach; deciding that by position, not by timing, keeps
            # the requests of a run reproducible.
            futures: dict[Future[ShardHeader], str] = {
                pool.submit(self._shard, shard, i >= workers): shard.file
                for i, shard in enumerate(shards)
            }
            with self.ctx.deadline.interruptible() if self.ctx.deadline else nullcontext():
                for future in as_completed(futures):
                    results[futures[future]] = future.result()
                    self.watch.header_read(futures[future])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.watch.headers_finished()
        return [results[shard.file] for shard in shards]

    def _shard(self, shard: Shard, learned: bool) -> ShardHeader:
        if shard.size < 8:
            length_prefix(b"", where=shard.file, size=shard.size)
        first = self.estimator.first_read(shard.file, shard.size, learned=learned)
        data = self.range(shard, 0, max(first, 8) - 1)
        length = length_prefix(data[:8], where=shard.file, size=shard.size)
        end = 8 + length
        if len(data) < end:
            data += self.range(shard, len(data), end - 1)
        header = parse_header(data[8:end], file=shard.file, size=shard.size, header_length=length)
        self.estimator.observe(header)
        self.cache.store(shard.file, data[:end])
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
