"""qarm's header cache inside the Hub cache's snapshot, and the audit read offline.

``<HF_HUB_CACHE>/models--owner--name/snapshots/<sha>/.qarm-audit/``: ``<shard>.header`` (the
8-byte prefix and the header, exactly as served) and ``listing.json`` (every file of the commit,
the documents present, the shards with size and LFS sha256). It lives in the revision's snapshot,
so huggingface_hub counts it (``hf cache ls``) and removes it with the revision (``hf cache rm``,
``hf cache prune``); a branch or tag is recorded in the Hub cache's own ``refs/`` by
``hf_hub_download`` (listing.py). Written after every online read; read only when
``HF_HUB_OFFLINE`` is set, together with what ``hf download`` put in the snapshot.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from huggingface_hub import constants
from huggingface_hub.file_download import repo_folder_name

try:  # huggingface_hub's own writer of refs/<revision> (what hf_hub_download calls)
    from huggingface_hub.file_download import (
        _cache_commit_hash_for_specific_revision as _cache_ref,
    )
except ImportError:  # pragma: no cover - another huggingface_hub
    _cache_ref = None  # type: ignore[assignment]

from .ranges import Shard

CACHE_DIR = ".qarm-audit"
"""Folder of a snapshot (``models--o--n/snapshots/<sha>/``) that holds the cached headers; a
hidden name, which no loader takes for a file of the checkpoint."""

CACHE_FORMAT = "qarm-hub-headers/2"


class HeaderCache:
    """``<HF_HUB_CACHE>/models--o--n/snapshots/<sha>/.qarm-audit/``: headers as served, and the
    listing.

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
        return cls(_snapshot(repo, sha) / CACHE_DIR)

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

    def finish(self, files: Iterable[str], documents: Iterable[str], shards: list[Shard]) -> None:
        self.close()
        if not self._ok or self.root is None:
            return
        listing = {
            "format": CACHE_FORMAT,
            "files": sorted(files),
            "documents": list(documents),
            "shards": [{"file": s.file, "size": s.size, "remote_sha256": s.sha256} for s in shards],
        }
        _write_atomic(self.root / "listing.json", json.dumps(listing).encode())


def storage_folder(repo: str) -> Path:
    """``<HF_HUB_CACHE>/models--owner--name``, as huggingface_hub names it."""
    return Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")


def record_ref(repo: str, ref: str, sha: str) -> None:
    """Record in the Hub cache's ``refs/`` that ``ref`` (a branch or tag) points at ``sha``, as
    huggingface_hub does after a download by that name: ``hf cache ls`` shows the ref and
    ``hf cache prune`` keeps the revision. Every request was made on the sha, so this is the
    only trace of the name. Best effort, like the rest of the cache."""
    folder = storage_folder(repo)
    parts = ref.split("/")
    if ref.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return  # not a name huggingface_hub would keep under refs/
    with contextlib.suppress(OSError, ValueError):
        if _cache_ref is not None:
            _cache_ref(str(folder), ref, sha)
        else:  # the same file, written the same way
            _write_atomic(folder / "refs" / ref, sha.encode())


def _snapshot(repo: str, sha: str) -> Path:
    return storage_folder(repo) / "snapshots" / sha


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
