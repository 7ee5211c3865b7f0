"""The audit of a Hub checkpoint with ``HF_HUB_OFFLINE`` set: from the Hub cache, no request.

What it takes, all from ``<HF_HUB_CACHE>/models--owner--name/``:

* the revision: a sha as given, or the sha the Hub cache's ``refs/<branch or tag>`` names (as
  ``hf download`` and qarm's online audits leave them);
* the commit's **whole** file list: qarm's ``listing.json`` (cache.py), else the tree listing
  huggingface_hub keeps for a commit it downloaded (``trees/<sha>.json``, written by
  ``hf download`` / ``snapshot_download``). Without one the audit is refused: a snapshot may hold
  only some of the files, and weight files it lacks could not be reported as unread. Every file
  of the snapshot must be in that list, or the list is not this commit's;
* the documents from the snapshot (``hf_hub_download(..., local_files_only=True)``);
* each shard's header from the shard in the snapshot when ``hf download`` put it there (checked
  against qarm's cached header when both exist), else from qarm's cached header.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, OfflineModeIsEnabled

from ...errors import HeaderError
from ..checkpoint import DECLARATION_FILES, INDEX_FILE, Checkpoint, Origin, ShardHeader
from ..header import length_prefix, parse_header
from ..index import check_shard_name, parse_index
from ..local import read_text
from .cache import CACHE_DIR, CACHE_FORMAT, storage_folder
from .failures import Context, HubOfflineError
from .listing import SHA, shard_files
from .observer import HubObserver

OFFLINE_KIND = "hub-offline"
"""The source kind of an audit read from the Hub cache: never taken for an online one."""

TREE_FORMAT = 1
"""The ``format_version`` of huggingface_hub's ``trees/<sha>.json`` that is understood."""


@dataclasses.dataclass(frozen=True)
class _Listing:
    files: dict[str, tuple[int | None, str | None]]
    """Every file of the commit: its size and LFS sha256 where known."""
    origin: str
    """Where the list came from, for messages."""


def read_offline(ctx: Context, *, pinned: bool, watch: HubObserver) -> Checkpoint:
    """The checkpoint from the Hub cache (snapshot, refs, tree listing) and qarm's headers."""
    storage = storage_folder(ctx.repo)
    sha = ctx.revision.lower() if pinned else _cached_ref(storage, ctx.revision)
    if sha is None:
        raise HubOfflineError(
            ctx.location,
            f"HF_HUB_OFFLINE is set and {ctx.revision!r} of {ctx.repo} was never resolved "
            "online; name the commit sha, or run once online (`qarm audit` or `hf download`)",
        )
    if not pinned:
        watch.resolved(ctx.revision, sha)
    ctx = dataclasses.replace(ctx, sha=sha)
    snapshot = storage / "snapshots" / sha
    headers = snapshot / CACHE_DIR
    stored, tree = _qarm_listing(headers), _tree_listing(storage, sha)
    if stored is not None and tree is not None:
        _agree(ctx, sha, stored, tree)
    listing = stored or tree
    if listing is None:
        raise HubOfflineError(
            ctx.location,
            f"HF_HUB_OFFLINE is set and the Hub cache holds no file list of {ctx.repo}@{sha} "
            "(an online `qarm audit` or `hf download` of the whole repository writes one); "
            "run once online, or audit a manifest written by `qarm manifest`",
        )
    extra = sorted(set(_snapshot_files(snapshot)) - set(listing.files))
    if extra:
        raise HubOfflineError(
            ctx.location,
            f"the Hub snapshot of {ctx.repo}@{sha} holds {', '.join(map(repr, extra[:3]))}, "
            f"which {listing.origin} does not name: it is not this commit's file list (edited "
            "or stale); audit online",
        )
    names = [n for n in (*DECLARATION_FILES, INDEX_FILE) if n in listing.files]
    texts = _documents(ctx, sha, names)
    index_text = texts.get(INDEX_FILE)
    index = parse_index(index_text) if index_text is not None else None
    shard_names, _ = shard_files(listing.files, index)
    shards: list[ShardHeader] = []
    watch.headers_started(len(shard_names))
    try:
        for file in shard_names:
            shards.append(_header(ctx, listing, snapshot, headers, file))
            watch.header_read(file)
    finally:
        watch.headers_finished()
    return Checkpoint(
        origin=Origin(OFFLINE_KIND, ctx.location, repo=ctx.repo, revision=sha),
        documents={n: texts[n] for n in DECLARATION_FILES if n in texts},
        index_text=index_text,
        shards=tuple(shards),
        parsed_index=index,
        listed_files=tuple(sorted(listing.files)),
    )


def _agree(ctx: Context, sha: str, stored: _Listing, tree: _Listing) -> None:
    """qarm's stored listing and huggingface_hub's of the same commit name the same files, of
    the same sizes where both know one; else one was edited (or is stale) and neither is
    trusted."""
    differ = sorted(set(stored.files) ^ set(tree.files))
    differ += sorted(
        name
        for name, (size, _) in stored.files.items()
        if size is not None and tree.files.get(name, (None, None))[0] not in (None, size)
    )
    if differ:
        raise HubOfflineError(
            ctx.location,
            f"{stored.origin} and {tree.origin} disagree on {', '.join(map(repr, differ[:3]))} "
            f"of {ctx.repo}@{sha}: the offline cache was edited or is stale; audit online",
        )


def _cached_ref(storage: Path, ref: str) -> str | None:
    """The sha the Hub cache's ``refs/<ref>`` names (huggingface_hub writes it)."""
    try:
        sha = (storage / "refs" / ref).read_text().strip().lower()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return sha if SHA.fullmatch(sha) else None


def _qarm_listing(headers: Path) -> _Listing | None:
    try:
        data = json.loads((headers / "listing.json").read_text())
        if data.get("format") != CACHE_FORMAT:
            return None
        files: dict[str, tuple[int | None, str | None]] = {
            str(name): (None, None) for name in data["files"]
        }
        for shard in data["shards"]:
            files[str(shard["file"])] = (int(shard["size"]), shard["remote_sha256"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return _Listing(files, f"the listing qarm stored ({headers / 'listing.json'})")


def _tree_listing(storage: Path, sha: str) -> _Listing | None:
    """huggingface_hub's listing of a commit it downloaded (``trees/<sha>.json``)."""
    path = storage / "trees" / f"{sha}.json"
    try:
        data: Any = json.loads(path.read_text())
        if data.get("format_version") != TREE_FORMAT:
            return None
        files: dict[str, tuple[int | None, str | None]] = {}
        for name, entry in data["files"].items():
            size = entry.get("lfs_size", entry.get("size"))
            files[str(name)] = (
                size if isinstance(size, int) else None,
                entry.get("lfs_sha256") if isinstance(entry.get("lfs_sha256"), str) else None,
            )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return _Listing(files, f"huggingface_hub's listing of the commit ({path})")


def _snapshot_files(snapshot: Path) -> list[str]:
    """The files of the snapshot (``/`` separators), qarm's own folder left out."""
    try:
        return [
            p.relative_to(snapshot).as_posix()
            for p in snapshot.rglob("*")
            if p.relative_to(snapshot).parts[0] != CACHE_DIR and not p.is_dir()
        ]
    except OSError:
        return []


def _documents(ctx: Context, sha: str, names: list[str]) -> dict[str, str]:
    api = HfApi()
    texts: dict[str, str] = {}
    for name in names:
        try:
            path = api.hf_hub_download(ctx.repo, name, revision=sha, local_files_only=True)
        except (LocalEntryNotFoundError, EntryNotFoundError, OfflineModeIsEnabled):
            raise HubOfflineError(
                name,
                f"HF_HUB_OFFLINE is set and {name} of {ctx.repo}@{sha} is not in the Hub cache",
            ) from None
        texts[name] = read_text(Path(path), name)
    return texts


def _header(
    ctx: Context, listing: _Listing, snapshot: Path, headers: Path, file: str
) -> ShardHeader:
    check_shard_name(file, INDEX_FILE)
    size, sha256 = listing.files.get(file, (None, None))
    shard = snapshot / file
    cached = headers / f"{file}.header"
    try:
        stored: bytes | None = cached.read_bytes()
    except OSError:
        stored = None
    if shard.is_file():  # `hf download` put the shard itself in the snapshot
        size = shard.stat().st_size
        with shard.open("rb") as handle:
            length = length_prefix(handle.read(8), where=file, size=size)
            handle.seek(0)
            data = handle.read(8 + length)
        if stored is not None and stored != data:
            raise HubOfflineError(
                file,
                f"the header qarm cached for {ctx.repo}@{ctx.sha} differs from the shard in the "
                f"Hub cache ({shard}); the offline cache was edited or is stale: audit online",
            )
    elif stored is not None and size is not None:
        data = stored
        length = length_prefix(data[:8], where=file, size=size)
        if len(data) != 8 + length:
            raise HeaderError(
                file, f"cached header in {headers} is {len(data)} bytes, not {8 + length}"
            )
    else:
        raise HubOfflineError(
            file,
            f"HF_HUB_OFFLINE is set and {file} of {ctx.repo}@{ctx.sha} is neither in the Hub "
            f"snapshot nor its header in qarm's cache ({headers})",
        )
    header = parse_header(data[8:], file=file, size=size, header_length=length)
    return dataclasses.replace(header, remote_sha256=sha256)
