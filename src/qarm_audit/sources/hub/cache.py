"""qarm's header cache under the Hub cache, and the audit read from it offline.

``<HF_HUB_CACHE>/models--owner--name/qarm-audit/``: ``<sha>/<shard>.header`` (the 8-byte prefix
and the header, exactly as served), ``<sha>/listing.json`` (the documents present, the shards
with size and LFS sha256) and ``refs/<branch or tag>`` (the sha it pointed at when last read
online). Written after every online read; read only when ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import threading
import urllib.parse
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from huggingface_hub import HfApi, constants, try_to_load_from_cache
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.file_download import repo_folder_name

from ...errors import HeaderError
from ..checkpoint import DECLARATION_FILES, INDEX_FILE, Checkpoint, Origin, ShardHeader
from ..header import length_prefix, parse_header
from ..index import check_shard_name
from ..local import read_text
from .failures import Context, HubOfflineError
from .listing import SHA
from .observer import HubObserver
from .ranges import Shard

CACHE_DIR = "qarm-audit"
"""Folder under ``<HF_HUB_CACHE>/models--owner--name/`` that holds the cached headers."""

CACHE_FORMAT = "qarm-hub-headers/1"


class HeaderCache:
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
    def for_sha(cls, repo: str, sha: str) -> HeaderCache:
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

    def finish(self, ref: str | None, documents: Iterable[str], shards: list[Shard]) -> None:
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
            if SHA.fullmatch(sha):
                return sha
    return None


def read_offline(ctx: Context, *, pinned: bool, watch: HubObserver) -> Checkpoint:
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
            _check_against_snapshot(ctx.repo, sha, file, data)
            header = parse_header(data[8:], file=file, size=size, header_length=length)
            shards.append(dataclasses.replace(header, remote_sha256=sha256))
            watch.header_read(file)
    finally:
        watch.headers_finished()
    return Checkpoint(
        origin=Origin(OFFLINE_KIND, ctx.location, repo=ctx.repo, revision=sha),
        documents={n: texts[n] for n in DECLARATION_FILES if n in texts},
        index_text=texts.get(INDEX_FILE),
        shards=tuple(shards),
    )


OFFLINE_KIND = "hub-offline"
"""The source kind of an audit read from qarm's header cache: never taken for an online one."""


def _check_against_snapshot(repo: str, sha: str, file: str, cached: bytes) -> None:
    """Where the Hub cache holds the shard itself (``hf download``), the cached header must be
    the file's own first bytes: an edited cache never passes for the checkpoint."""
    found = try_to_load_from_cache(repo, file, revision=sha)
    if not isinstance(found, str):
        return
    try:
        with open(found, "rb") as handle:
            real = handle.read(len(cached))
    except OSError:
        return
    if real != cached:
        raise HubOfflineError(
            file,
            f"the header qarm cached for {repo}@{sha} differs from the shard in the Hub cache "
            f"({found}); the offline cache was edited or is stale: audit online",
        )
