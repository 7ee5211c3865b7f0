"""Checkpoints on the Hugging Face Hub, read header-only through ``huggingface_hub``.

For ``owner/name[@revision]`` (see docs/hub.md for the whole story):

1. ``HfApi.model_info(repo, revision=..., files_metadata=True)``: one request that names the
   commit sha the revision points at *and* lists that commit's files with their sizes and LFS
   sha256. A branch or tag is resolved here, once; every later request is built on the sha, so
   a push to the branch during the run cannot mix two revisions.
2. The declaration documents and ``model.safetensors.index.json`` that the listing holds, through
   ``hf_hub_download`` at the sha (the Hub cache: a second run makes no request for them).
3. Each shard's 8-byte prefix and header by HTTP range reads on ``/{repo}/resolve/{sha}/{file}``
   through huggingface_hub's session: a first read sized from what is known (see
   :class:`_Estimator`) and, when the header turns out longer, exactly one second read of the
   missing remainder. The server must answer ``206`` with exactly the ``Content-Range`` asked for
   and exactly that many bytes; a server that ignores ``Range`` is cut off, never downloaded.

Endpoint (``HF_ENDPOINT``), token (``HF_TOKEN`` or the saved login), cache (``HF_HUB_CACHE``),
offline mode (``HF_HUB_OFFLINE``) and error classes are huggingface_hub's own. The token is never
part of a message.

Every header fetched online is also written, once parsed, under
``<HF_HUB_CACHE>/models--owner--name/qarm-audit/<sha>/``: ``<shard>.header`` (the prefix and
header bytes exactly as served) and ``listing.json``. With ``HF_HUB_OFFLINE=1`` an audit is
read from those files and from the documents in the Hub cache, or refused with a
:class:`HubOfflineError` naming what is missing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import httpx2
from huggingface_hub import HfApi, constants, get_session, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
    build_hf_headers,
    get_token,
    hf_raise_for_status,
    silent_tqdm,
)

from ..errors import (
    HeaderError,
    HubAccessError,
    HubError,
    HubNotFoundError,
    QarmError,
    ShardIndexError,
    SourceSpecError,
    UsageError,
)
from ..runtime import VERSION
from .checkpoint import DECLARATION_FILES, INDEX_FILE, SINGLE_FILE, Checkpoint, Origin, ShardHeader
from .header import DTYPE_BITS, length_prefix, parse_header
from .index import ShardIndex, check_shard_name, parse_index
from .local import read_text

__all__ = [
    "RETRY",
    "WORKERS",
    "HubObserver",
    "HubOfflineError",
    "RangeMismatchError",
    "RangeNotHonouredError",
    "RetryPolicy",
    "read_hub",
]

T = TypeVar("T")

WORKERS = 16
"""Shards whose headers are read at the same time."""

UNKNOWN_FIRST_READ = 100_000
"""First read of a shard nothing is known about (no index names, no size hint): the same
100 kB guess as huggingface_hub's ``parse_safetensors_file_metadata``."""

SPECULATIVE_CAP = 4 * 1024 * 1024
"""A first read never speculates beyond this many bytes, whatever an estimate says."""

MIN_ENTRY_BYTES = 48
"""Fewest bytes one header entry takes besides its quoted name: ``:{"dtype":"F8","shape":[],
"data_offsets":[0,0]}`` plus the separating comma. Whitespace or escapes only add to it."""

ENTRY_BYTES = 44
"""Bytes of an entry besides its quoted name, dtype, shape and offsets (compact JSON):
``:{"dtype":"","shape":[],"data_offsets":[,]}`` and the separating comma."""

MARGIN = 0.01
"""Relative margin added to a calibrated estimate of a header's length."""

MAX_ENTRY_BYTES_HINT = 160
"""A hinted figure of bytes per entry above this is not believed (real ones are 50 to 100)."""

LEARN_SHARDS = 32
"""Headers the estimator learns from (each costs a pass over its entries)."""

ERROR_BODY_CAP = 1_000_000
"""Largest error body read to build huggingface_hub's error (larger ones are not read)."""

CACHE_DIR = "qarm-audit"
"""Folder under ``<HF_HUB_CACHE>/models--owner--name/`` that holds the cached headers."""

CACHE_FORMAT = "qarm-hub-headers/1"

_SHA = re.compile(r"[0-9a-fA-F]{40}")
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


# -- errors ---------------------------------------------------------------------------------


class RangeNotHonouredError(HubError):
    """The server answered a range request with the whole file (HTTP 200); it was not read."""


class RangeMismatchError(HubError):
    """A range answer does not carry the ``Content-Range`` or the number of bytes asked for."""


class HubOfflineError(HubError):
    """``HF_HUB_OFFLINE`` is set and something the audit needs is not in the cache."""


class _ShortBody(Exception):
    """A range answer ended before the bytes it announced (retried)."""


# -- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures are retried: timeouts, resets, 408/429/5xx, short bodies."""

    attempts: int = 4
    """Tries per request, the first included."""
    base_delay: float = 0.5
    """Seconds before the first retry; doubled after each, up to ``max_delay``."""
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    """A 429 asking to wait longer than this is not waited for: the run fails instead."""
    timeout: float | None = None
    """Seconds per request; None uses huggingface_hub's ``HF_HUB_DOWNLOAD_TIMEOUT``."""
    sleep: Callable[[float], None] = time.sleep


RETRY = RetryPolicy()
"""The policy in force (tests replace it)."""


class HubObserver(Protocol):
    """What a caller may want to show while a Hub checkpoint is read (the library prints nothing).

    Every method is called from the thread that called :func:`read_hub`.
    """

    def resolved(self, revision: str, sha: str) -> None:
        """A branch or tag (``revision``) was resolved to the commit ``sha``."""

    def headers_started(self, total: int) -> None:
        """``total`` shard headers are about to be read."""

    def header_read(self, file: str) -> None:
        """One more shard header has arrived and parsed."""

    def headers_finished(self) -> None:
        """No more headers will arrive (success or failure)."""


class _Silent:
    def resolved(self, revision: str, sha: str) -> None:
        pass

    def headers_started(self, total: int) -> None:
        pass

    def header_read(self, file: str) -> None:
        pass

    def headers_finished(self) -> None:
        pass


# -- the read -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    """What a failure message needs to say which of repo, revision or file is at fault."""

    location: str
    repo: str
    revision: str
    sha: str | None = None


@dataclass(frozen=True)
class _Shard:
    file: str
    size: int
    url: str
    sha256: str | None


def read_hub(
    repo: str,
    revision: str | None,
    *,
    location: str,
    require_pinned: bool,
    observer: HubObserver | None = None,
) -> Checkpoint:
    """Read ``repo`` at ``revision`` (None: ``main``): documents verbatim and every shard header.

    A branch or tag is resolved once to its commit sha and reported to ``observer.resolved``;
    the returned checkpoint's origin names the sha. ``require_pinned`` refuses anything but a
    full 40-hex commit sha.
    """
    watch: HubObserver = observer if observer is not None else _Silent()
    ref = revision or "main"
    pinned = _SHA.fullmatch(ref) is not None
    if require_pinned and not pinned:
        given = f"revision {ref!r}" if revision else "no revision (the default branch, main)"
        raise UsageError(
            "--require-pinned",
            f"{location}: {given} is not a full 40-hex commit sha; name the commit, "
            f"e.g. {repo}@<sha>",
        )
    ctx = _Context(location, repo, ref)
    if constants.is_offline_mode():
        return _read_offline(ctx, pinned=pinned, watch=watch)
    return _Reader(ctx, watch).read(pinned=pinned, require_pinned=require_pinned)


class _Reader:
    def __init__(self, ctx: _Context, watch: HubObserver) -> None:
        self.ctx = ctx
        self.watch = watch
        self.api = HfApi(library_name="qarm-audit", library_version=_version())
        self.timeout = _timeout()

    def read(self, *, pinned: bool, require_pinned: bool) -> Checkpoint:
        ctx = self.ctx
        info = _retrying(
            lambda: self.api.model_info(
                ctx.repo, revision=ctx.revision, files_metadata=True, timeout=self.timeout
            ),
            ctx,
            where=ctx.location,
            what="reading the file listing",
        )
        sha = (info.sha or "").lower()
        if _SHA.fullmatch(sha) is None:
            raise HubError(
                ctx.location, f"the Hub named no commit sha for revision {ctx.revision!r}"
            )
        if not pinned or sha != ctx.revision.lower():
            if require_pinned:
                raise UsageError(
                    "--require-pinned",
                    f"{ctx.location}: {ctx.revision!r} is a branch or tag pointing at {sha}, "
                    "not a commit sha",
                )
            self.watch.resolved(ctx.revision, sha)
        ctx = self.ctx = dataclasses.replace(ctx, sha=sha)
        if info.siblings is None:
            raise HubError(ctx.location, f"the Hub returned no file listing for {ctx.repo}@{sha}")
        listing = {s.rfilename: s for s in info.siblings}

        names = [n for n in (*DECLARATION_FILES, INDEX_FILE) if n in listing]
        texts = self._documents(names)
        documents = {n: texts[n] for n in DECLARATION_FILES if n in texts}
        index_text = texts.get(INDEX_FILE)
        names_by_shard: dict[str, list[str]] | None = None
        index: ShardIndex | None = None
        if index_text is not None:
            index = parse_index(index_text)
            shard_files = index.shard_files
            names_by_shard = {file: [] for file in shard_files}
            for tensor, file in index.weight_map.items():
                names_by_shard[file].append(tensor)
        elif SINGLE_FILE in listing:
            shard_files = [SINGLE_FILE]
        else:
            shard_files = sorted(n for n in listing if "/" not in n and n.endswith(".safetensors"))
        shards: list[_Shard] = []
        for file in shard_files:
            check_shard_name(file, INDEX_FILE)
            sibling = listing.get(file)
            if sibling is None:
                raise ShardIndexError(
                    INDEX_FILE, f"names shard {file!r}, which is not in {ctx.repo}@{sha}"
                )
            size = sibling.size if sibling.size is not None else getattr(sibling.lfs, "size", None)
            if not isinstance(size, int):
                raise HubError(file, f"the listing of {ctx.repo}@{sha} gives no size for it")
            url = hf_hub_url(ctx.repo, file, revision=sha, endpoint=self.api.endpoint)
            shards.append(_Shard(file, size, url, sibling.lfs.sha256 if sibling.lfs else None))
        if not documents and not shards:
            raise SourceSpecError(
                ctx.location, "holds no declaration document and no .safetensors file"
            )
        hint = _header_bytes_hint(info.safetensors, shards)
        estimator = _Estimator(names_by_shard, hint, shards=len(shards))
        cache = _HeaderCache.for_sha(ctx.repo, sha)
        fetcher = _HeaderFetcher(ctx, self.watch, estimator, cache, self.timeout)
        try:
            headers = fetcher.fetch(shards)
        finally:
            cache.close()
        cache.finish(None if ctx.revision.lower() == sha else ctx.revision, names, shards)
        return Checkpoint(
            origin=Origin("hub", ctx.location, repo=ctx.repo, revision=sha),
            documents=documents,
            index_text=index_text,
            shards=tuple(headers),
            read_bytes=_TensorBytes(fetcher, {shard.file: shard for shard in shards}),
            parsed_index=index,
        )

    def _documents(self, names: list[str]) -> dict[str, str]:
        """Download the documents in parallel into the Hub cache; return their text."""
        if not names:
            return {}
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="qarm-doc") as pool:
            futures = {name: pool.submit(self._document, name) for name in names}
            return {name: future.result() for name, future in futures.items()}

    def _document(self, name: str) -> str:
        ctx = self.ctx
        sha = ctx.sha
        path = _retrying(
            lambda: self.api.hf_hub_download(
                ctx.repo,
                name,
                revision=sha,
                etag_timeout=self.timeout,
                tqdm_class=silent_tqdm,
            ),
            ctx,
            where=name,
            what=f"downloading {name}",
            file=name,
        )
        return read_text(Path(path), name)


def _timeout() -> float:
    policy = RETRY
    return (
        policy.timeout if policy.timeout is not None else float(constants.HF_HUB_DOWNLOAD_TIMEOUT)
    )


def _header_bytes_hint(safetensors: Any, shards: list[_Shard]) -> int | None:
    """The bytes of all the shards' headers together implied by the Hub's parameter count.

    ``model_info`` reports the parameters of the repo's safetensors per dtype, so the tensor
    data takes a known number of bytes and the headers (with their 8-byte prefixes) the rest of
    the shards' sizes. Only a first-read size: a wrong hint costs an extra read or a few spare
    bytes, never a wrong answer (and an implausible one is not used).
    """
    if not shards or safetensors is None:
        return None
    parameters = getattr(safetensors, "parameters", None)
    if not isinstance(parameters, Mapping) or not parameters:
        return None
    bits = 0
    for dtype, count in parameters.items():
        if dtype not in DTYPE_BITS or not isinstance(count, int) or count < 0:
            return None
        bits += count * DTYPE_BITS[dtype]
    length = sum(s.size - 8 for s in shards) - (bits + 7) // 8
    return length if 2 * len(shards) <= length <= SPECULATIVE_CAP * len(shards) else None


# -- first-read sizing ----------------------------------------------------------------------


class _Estimator:
    """How many bytes to ask for in a shard's first read.

    With an index, the tensor names of every shard are known, and a header spends on each entry
    its quoted name plus some bytes for dtype, shape and offsets: at least
    :data:`MIN_ENTRY_BYTES`. What those bytes are is learned, best source first:

    1. From the headers that arrived (the first :data:`LEARN_SHARDS`): per name suffix
       (``weight``, ``weight_scale``, ``input_scale``...: the suffix decides dtype and rank,
       hence most of the length), plus the largest rest (metadata, padding) seen.
    2. Before any has arrived: from the Hub's parameter count in the listing, which fixes the
       bytes of all the tensor data, hence of all the headers together (:func:`_header_bytes_hint`),
       spread evenly over the entries.
    3. Without either: the lower bound, so the first read never reaches tensor data and a second
       read fetches the remainder.

    An estimate from 1 or 2 gets :data:`MARGIN` and one byte per entry on top: most shards take
    one read, and the bytes past a header stay within a few per cent of it. The first wave (one
    shard per worker) is decided by position to never use 1, so a run's requests do not depend
    on thread timing.

    Without an index, a lone shard asks for the header length the parameter count implies, and
    other shards for :data:`UNKNOWN_FIRST_READ`.
    """

    def __init__(
        self, names: Mapping[str, list[str]] | None, hint: int | None, *, shards: int
    ) -> None:
        self._names = names
        self._lock = threading.Lock()
        self._suffix: dict[str, list[int]] = {}
        self._rest = 0
        self._learned = 0
        self._base: dict[str, int] = {}
        self._leaf_counts: dict[str, Counter[str]] = {}
        # Without an index, the hint is the header length of a lone shard.
        self._lone_length = hint if names is None and shards == 1 else None
        # With one, it is spread over the entries besides their names: the figure the headers
        # teach later, averaged over the whole checkpoint.
        self._per_entry_hint: float | None = None
        if names and hint is not None:
            count = sum(len(n) for n in names.values())
            base = 0
            for file in names:
                known = self._known(file)
                base += known[1] if known else 0
            per_entry = (hint - base) / count if count else 0.0
            if MIN_ENTRY_BYTES <= per_entry <= MAX_ENTRY_BYTES_HINT:
                self._per_entry_hint = per_entry

    def _known(self, file: str) -> tuple[list[str], int] | None:
        """The shard's tensor names, and the bytes of ``{}`` and of every quoted name."""
        names = None if self._names is None else self._names.get(file)
        if not names:
            return None
        base = self._base.get(file)
        if base is None:
            base = self._base[file] = 2 + 2 * len(names) + sum(map(len, map(str.encode, names)))
        return names, base

    def _leaves(self, file: str, names: list[str]) -> Counter[str]:
        """How many of the shard's names end in each leaf (``weight``, ``weight_scale``...)."""
        with self._lock:
            counts = self._leaf_counts.get(file)
        if counts is None:
            counts = Counter(map(_LEAF, map(str.rpartition, names, repeat("."))))
            with self._lock:
                self._leaf_counts[file] = counts
        return counts

    def first_read(self, file: str, size: int, *, learned: bool = True) -> int:
        """Bytes to ask for first; ``learned=False`` ignores what arrived headers taught."""
        known = self._known(file)
        if known is not None:
            names, base = known
            with self._lock:
                means = {k: total / n for k, (total, n) in self._suffix.items()} if learned else {}
                rest = self._rest
            if means:
                fallback = max(means.values())
                leaves = self._leaves(file, names)
                entries = sum(n * means.get(leaf, fallback) for leaf, n in leaves.items())
                estimate = int((base + entries + rest) * (1 + MARGIN)) + len(names)
            elif self._per_entry_hint is not None:
                entries = len(names) * self._per_entry_hint
                estimate = int((base + entries) * (1 + MARGIN)) + len(names)
            else:
                estimate = base + len(names) * MIN_ENTRY_BYTES
            wanted = 8 + min(estimate, SPECULATIVE_CAP)
        elif self._lone_length is not None:
            wanted = 8 + self._lone_length
        else:
            wanted = UNKNOWN_FIRST_READ
        return min(size, wanted)

    def observe(self, header: ShardHeader) -> None:
        """Learn from a header that arrived (the first :data:`LEARN_SHARDS` only)."""
        known = self._known(header.file)
        if known is None or self._learned >= LEARN_SHARDS:
            return
        names, base = known
        if len(names) != len(header.tensors):
            return  # the index disagrees with this header (integrity says so): learn nothing
        sums: dict[str, list[int]] = {}
        total = 0
        for entry in header.tensors:
            length = (
                ENTRY_BYTES
                + len(entry.dtype)
                + len(",".join(map(str, entry.shape)))
                + len(str(entry.begin))
                + len(str(entry.end))
            )
            total += length
            tally = sums.setdefault(_suffix(entry.name), [0, 0])
            tally[0] += length
            tally[1] += 1
        with self._lock:
            self._learned += 1
            for key, (length, count) in sums.items():
                tally = self._suffix.setdefault(key, [0, 0])
                tally[0] += length
                tally[1] += count
            self._rest = max(self._rest, header.header_length - base - total)


def _suffix(name: str) -> str:
    return name.rpartition(".")[2]


_LEAF = itemgetter(2)


# -- header reads ---------------------------------------------------------------------------


TENSOR_READ_CAP = 64 * 1024
"""Largest single read of tensor bytes (``--probe-scalars`` asks for a few bytes at a time)."""


class _TensorBytes:
    """``read_bytes`` for ``--probe-scalars``: checked range reads at the pinned sha, bounded."""

    def __init__(self, fetcher: _HeaderFetcher, shards: dict[str, _Shard]) -> None:
        self.fetcher = fetcher
        self.shards = shards

    def __call__(self, file: str, start: int, length: int) -> bytes:
        shard = self.shards.get(file)
        if shard is None:
            raise SourceSpecError(file, "is not a shard of this checkpoint")
        if length <= 0 or length > TENSOR_READ_CAP or start < 0 or start + length > shard.size:
            raise UsageError(file, f"a read of {length} bytes at {start} is out of bounds")
        return self.fetcher._range(shard, start, start + length - 1)


class _HeaderFetcher:
    def __init__(
        self,
        ctx: _Context,
        watch: HubObserver,
        estimator: _Estimator,
        cache: _HeaderCache,
        timeout: float,
    ) -> None:
        self.ctx = ctx
        self.watch = watch
        self.estimator = estimator
        self.cache = cache
        self.timeout = timeout
        self.headers = build_hf_headers(library_name="qarm-audit", library_version=_version())

    def fetch(self, shards: list[_Shard]) -> list[ShardHeader]:
        """Every shard's header, in the order given, read by at most :data:`WORKERS` threads."""
        if not shards:
            return []
        results: dict[str, ShardHeader] = {}
        self.watch.headers_started(len(shards))
        pool = ThreadPoolExecutor(
            max_workers=min(WORKERS, len(shards)), thread_name_prefix="qarm-header"
        )
        try:
            # The first wave (one shard per worker) starts before any header has arrived, so it
            # never uses what headers teach; deciding that by position, not by timing, keeps
            # the requests of a run reproducible.
            futures: dict[Future[ShardHeader], str] = {
                pool.submit(self._shard, shard, i >= WORKERS): shard.file
                for i, shard in enumerate(shards)
            }
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                self.watch.header_read(futures[future])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.watch.headers_finished()
        return [results[shard.file] for shard in shards]

    def _shard(self, shard: _Shard, learned: bool) -> ShardHeader:
        if shard.size < 8:
            length_prefix(b"", where=shard.file, size=shard.size)
        first = self.estimator.first_read(shard.file, shard.size, learned=learned)
        data = self._range(shard, 0, max(first, 8) - 1)
        length = length_prefix(data[:8], where=shard.file, size=shard.size)
        end = 8 + length
        if len(data) < end:
            data += self._range(shard, len(data), end - 1)
        header = parse_header(data[8:end], file=shard.file, size=shard.size, header_length=length)
        self.estimator.observe(header)
        self.cache.store(shard.file, data[:end])
        return dataclasses.replace(header, remote_sha256=shard.sha256)

    def _range(self, shard: _Shard, start: int, end: int) -> bytes:
        return _retrying(
            lambda: self._range_once(shard, start, end),
            self.ctx,
            where=shard.file,
            what=f"reading bytes {start}-{end}",
            file=shard.file,
        )

    def _range_once(self, shard: _Shard, start: int, end: int) -> bytes:
        """Exactly bytes ``start..end`` (inclusive) of the shard, or an error; never more."""
        want = end - start + 1
        asked = f"bytes={start}-{end}"
        headers = {**self.headers, "Range": asked}
        with get_session().stream("GET", shard.url, headers=headers, timeout=self.timeout) as r:
            if r.status_code == 200 and not (start == 0 and end == shard.size - 1):
                raise RangeNotHonouredError(
                    shard.file,
                    f"the server ignored the Range header ({asked}) and answered HTTP 200 with "
                    f"the whole {shard.size}-byte file; qarm closed the connection instead of "
                    "downloading it",
                )
            if r.status_code not in (200, 206):
                _raise_for_status(r)
            if r.status_code == 206:
                _check_content_range(r.headers.get("Content-Range"), start, end, shard)
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > want:
                    raise RangeMismatchError(
                        shard.file,
                        f"asked for {want} bytes ({asked}) and the server sent more; "
                        "qarm stopped reading",
                    )
            if len(body) < want:
                raise _ShortBody(f"{len(body)} of {want} bytes arrived")
            return bytes(body)


def _version() -> str:
    return VERSION


def _check_content_range(value: str | None, start: int, end: int, shard: _Shard) -> None:
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if (
        match is None
        or int(match[1]) != start
        or int(match[2]) != end
        or match[3] != str(shard.size)
    ):
        raise RangeMismatchError(
            shard.file,
            f"asked for bytes {start}-{end} of {shard.size} and the server answered "
            f"Content-Range {value!r}",
        )


def _raise_for_status(response: httpx2.Response) -> NoReturn:
    """Turn an error answer into huggingface_hub's error (read only if small)."""
    try:
        length = int(response.headers.get("Content-Length", ""))
    except ValueError:
        length = -1
    if 0 <= length <= ERROR_BODY_CAP:
        response.read()
        hf_raise_for_status(response)
    raise _StatusError(response.status_code, response.headers)


class _StatusError(Exception):
    """An HTTP error answer not turned into a huggingface_hub error (body unread)."""

    def __init__(self, status: int, headers: Mapping[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = _retry_after(headers)


# -- retries and error translation ----------------------------------------------------------


def _retrying(
    call: Callable[[], T], ctx: _Context, *, where: str, what: str, file: str | None = None
) -> T:
    """``call()``, retried on transient failures; any failure leaves as a :class:`QarmError`."""
    policy = RETRY
    delay = policy.base_delay
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except QarmError:
            raise
        except Exception as exc:
            transient = _transient(exc)
            if transient is None:
                raise _translate(exc, ctx, where=where, what=what, file=file) from None
            reason, retry_after = transient
            if attempt >= policy.attempts:
                raise HubError(
                    where, _scrub(f"{what}: {reason}, {attempt} times; giving up")
                ) from None
            wait = delay if retry_after is None else retry_after
            if wait > policy.max_retry_after:
                raise HubError(
                    where,
                    f"{what}: rate limited (HTTP 429), and Retry-After asks for {wait:g} s, "
                    f"more than the {policy.max_retry_after:g} s qarm waits",
                ) from None
            policy.sleep(wait)
            delay = min(delay * 2, policy.max_delay)


def _transient(exc: Exception) -> tuple[str, float | None] | None:
    """(reason, Retry-After seconds) when ``exc`` is worth retrying, else None."""
    if isinstance(exc, httpx2.TimeoutException):
        return f"timed out ({type(exc).__name__})", None
    if isinstance(exc, (httpx2.NetworkError, httpx2.RemoteProtocolError)):
        return f"connection failed ({type(exc).__name__}: {exc})", None
    if isinstance(exc, _ShortBody):
        return f"the answer was cut short ({exc})", None
    status: int | None = None
    retry_after: float | None = None
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        retry_after = _retry_after(exc.response.headers)
    elif isinstance(exc, _StatusError):
        status, retry_after = exc.status, exc.retry_after
    if status in _RETRY_STATUS:
        label = "rate limited (HTTP 429)" if status == 429 else f"the Hub answered HTTP {status}"
        return label, retry_after if status == 429 else None
    return None


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After", "").strip()
    return float(value) if value.isdigit() else None


def _host() -> str:
    parts = urllib.parse.urlsplit(constants.ENDPOINT)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _translate(
    exc: Exception, ctx: _Context, *, where: str, what: str, file: str | None
) -> QarmError:
    """A huggingface_hub or transport failure as a named qarm error (exit 3)."""
    cause = exc.__cause__
    if isinstance(exc, LocalEntryNotFoundError) and isinstance(cause, Exception):
        # hf_hub_download's metadata request failed (after its own retries): say why.
        return _translate(cause, ctx, where=where, what=what, file=file)
    status: int | None = None
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
    elif isinstance(exc, _StatusError):
        status = exc.status
    at = f"{ctx.repo}@{ctx.sha or ctx.revision}"
    if isinstance(exc, GatedRepoError) or (
        status in (401, 403) and not isinstance(exc, RepositoryNotFoundError)
    ):
        return HubAccessError(
            ctx.location,
            f"{ctx.repo} is gated or private and the Hub refused access (HTTP {status}); set "
            "HF_TOKEN to a token that has been granted access to it",
        )
    if isinstance(exc, RepositoryNotFoundError):
        if status == 404:
            return HubNotFoundError(
                ctx.location, f"repository {ctx.repo} does not exist on {_host()}"
            )
        return HubAccessError(
            ctx.location,
            f"repository {ctx.repo} was not found, or it is private or gated (HTTP {status}); "
            "if it exists, set HF_TOKEN to a token that can read it",
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubNotFoundError(
            ctx.location, f"revision {ctx.revision!r} does not exist in {ctx.repo}"
        )
    if isinstance(exc, EntryNotFoundError) or (status == 404 and file is not None):
        return HubNotFoundError(
            where, f"file {file!r} is not in {at}, although the file listing names it"
        )
    if status == 404:
        return HubNotFoundError(ctx.location, f"{what}: {at} was not found (HTTP 404)")
    if isinstance(exc, LocalEntryNotFoundError):
        return HubError(where, f"{what}: the Hub could not be reached")
    if isinstance(exc, OfflineModeIsEnabled):
        return HubOfflineError(where, f"{what}: HF_HUB_OFFLINE is set")
    if status is not None:
        return HubError(where, f"{what}: the Hub answered HTTP {status}")
    if isinstance(exc, httpx2.HTTPError):
        return HubError(where, _scrub(f"{what}: {type(exc).__name__}: {exc}"))
    if isinstance(exc, OSError):
        return HubError(where, _scrub(f"{what}: {exc.strerror or exc}"))
    raise exc


def _scrub(text: str) -> str:
    """Belt and braces: a message never carries the token, whatever a library put in it."""
    with contextlib.suppress(Exception):
        token = get_token()
        if token:
            text = text.replace(token, "<HF_TOKEN>")
    return text


# -- the header cache and offline mode ------------------------------------------------------


class _HeaderCache:
    """``<HF_HUB_CACHE>/models--o--n/qarm-audit/<sha>/``: headers as served, and the listing.

    Writes are best-effort: an unwritable cache never fails an audit. They happen on one
    writer thread of their own, so a worker that read a header goes on to its next read while
    the file system works (a write costs more than a range read's CPU).
    """

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._ok = root is not None
        self._made = False
        self._lock = threading.Lock()
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []

    @classmethod
    def for_sha(cls, repo: str, sha: str) -> _HeaderCache:
        return cls(_cache_root(repo) / sha)

    def store(self, file: str, data: bytes) -> None:
        if not self._ok or self.root is None:
            return
        with self._lock:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="qarm-header-cache")
            self._pending.append(
                self._writer.submit(self._write, self.root / f"{file}.header", data)
            )

    def _write(self, path: Path, data: bytes) -> None:
        if self._ok:  # one writer thread: these run one after the other
            self._ok = _write_atomic(path, data, make_parent=not self._made)
            self._made = self._ok

    def close(self) -> None:
        """Wait for every queued write (also when the audit failed: they are valid headers)."""
        with self._lock:
            writer, pending, self._writer, self._pending = self._writer, self._pending, None, []
        if writer is not None:
            for future in pending:
                future.result()
            writer.shutdown()

    def finish(self, ref: str | None, documents: Iterable[str], shards: list[_Shard]) -> None:
        self.close()
        if not self._ok or self.root is None:
            return
        listing = {
            "format": CACHE_FORMAT,
            "documents": list(documents),
            "shards": [{"file": s.file, "size": s.size, "remote_sha256": s.sha256} for s in shards],
        }
        written = _write_atomic(self.root / "listing.json", json.dumps(listing).encode())
        if written and ref is not None:
            ref_file = self.root.parent / "refs" / urllib.parse.quote(ref, safe="")
            _write_atomic(ref_file, self.root.name.encode())


def _cache_root(repo: str) -> Path:
    return (
        Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model") / CACHE_DIR
    )


def _write_atomic(path: Path, data: bytes, *, make_parent: bool = True) -> bool:
    try:
        if make_parent:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


def _cached_ref(repo: str, ref: str) -> str | None:
    """The sha a branch or tag pointed at when last read online (qarm's record, then the Hub
    cache's own ``refs/``)."""
    candidates = (
        _cache_root(repo) / "refs" / urllib.parse.quote(ref, safe=""),
        _cache_root(repo).parent / "refs" / ref,
    )
    for candidate in candidates:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            sha = candidate.read_text().strip().lower()
            if _SHA.fullmatch(sha):
                return sha
    return None


def _read_offline(ctx: _Context, *, pinned: bool, watch: HubObserver) -> Checkpoint:
    """The checkpoint from the Hub cache and qarm's header cache, without a request."""
    sha = ctx.revision.lower() if pinned else _cached_ref(ctx.repo, ctx.revision)
    if sha is None:
        raise HubOfflineError(
            ctx.location,
            f"HF_HUB_OFFLINE is set and {ctx.revision!r} of {ctx.repo} was never resolved "
            "online; name the commit sha, or run once online",
        )
    if not pinned:
        watch.resolved(ctx.revision, sha)
    ctx = dataclasses.replace(ctx, sha=sha)
    root = _cache_root(ctx.repo) / sha
    try:
        listing = json.loads((root / "listing.json").read_text())
        if listing.get("format") != CACHE_FORMAT:
            raise ValueError(listing.get("format"))
        document_names = [str(n) for n in listing["documents"]]
        entries = [(str(s["file"]), int(s["size"]), s["remote_sha256"]) for s in listing["shards"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise HubOfflineError(
            ctx.location,
            f"HF_HUB_OFFLINE is set and no headers of {ctx.repo}@{sha} are cached (qarm keeps "
            f"them in {root} after an online audit); run once online, or audit a manifest "
            "written by `qarm manifest`",
        ) from None
    api = HfApi()
    texts: dict[str, str] = {}
    for name in document_names:
        try:
            path = api.hf_hub_download(ctx.repo, name, revision=sha, local_files_only=True)
        except (LocalEntryNotFoundError, EntryNotFoundError, OfflineModeIsEnabled):
            raise HubOfflineError(
                name,
                f"HF_HUB_OFFLINE is set and {name} of {ctx.repo}@{sha} is not in the Hub cache",
            ) from None
        texts[name] = read_text(Path(path), name)
    shards: list[ShardHeader] = []
    watch.headers_started(len(entries))
    try:
        for file, size, sha256 in entries:
            check_shard_name(file, INDEX_FILE)
            try:
                data = (root / f"{file}.header").read_bytes()
            except OSError:
                raise HubOfflineError(
                    file,
                    f"HF_HUB_OFFLINE is set and the header of {file} of {ctx.repo}@{sha} "
                    f"is not cached in {root}",
                ) from None
            length = length_prefix(data[:8], where=file, size=size)
            if len(data) != 8 + length:
                raise HeaderError(
                    file, f"cached header in {root} is {len(data)} bytes, not {8 + length}"
                )
            header = parse_header(data[8:], file=file, size=size, header_length=length)
            shards.append(dataclasses.replace(header, remote_sha256=sha256))
            watch.header_read(file)
    finally:
        watch.headers_finished()
    return Checkpoint(
        origin=Origin("hub", ctx.location, repo=ctx.repo, revision=sha),
        documents={n: texts[n] for n in DECLARATION_FILES if n in texts},
        index_text=texts.get(INDEX_FILE),
        shards=tuple(shards),
    )
