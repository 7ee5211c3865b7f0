"""A checkpoint folder on disk: a plain folder or a Hugging Face cache snapshot.

Only the declaration documents, the index and the 8-byte prefix and header of each
``.safetensors`` file at the top of the folder (and of each shard the index names) are read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import FetchError, QarmError, ShardIndexError, SourceSpecError
from .aside import CheckAside
from .checkpoint import (
    DECLARATION_FILES,
    INDEX_FILE,
    SINGLE_FILE,
    Ahead,
    Checkpoint,
    DerivedIndex,
    HeaderOwners,
    Origin,
    PendingProof,
    ShardHeader,
    ShardIndex,
)
from .document_file import DOCUMENT_CAP, DocumentFile, read_document
from .header import HEADER_CAP, length_prefix, parse_header
from .index import (
    holds_as_plain,
    index_head,
    index_in_file_order,
    index_of_headers,
    parse_index,
    parsed_as_assumed,
    proven_as_plain,
    proven_index,
    written_index,
)
from .shard_reads import read_headers

READ_CAP = 64 * 1024
"""Largest single tensor-byte read a local source serves (the scalar probe asks for far less)."""


def read_text(path: Path, where: str, cap: int = DOCUMENT_CAP) -> str:
    """Read a UTF-8 document, bounded in size."""
    return _decode(read_document(path, where, cap), where)


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceSpecError(where, f"not UTF-8 text (byte {exc.start})") from None


def read_local_shard(path: Path, file: str, cap: int = HEADER_CAP) -> ShardHeader:
    """Read the prefix and header of one shard; never the tensor data."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            length = length_prefix(handle.read(8), where=file, size=size, cap=cap)
            raw = handle.read(length)
    except OSError as exc:
        raise FetchError(file, f"cannot read: {exc.strerror or exc}") from None
    return parse_header(raw, file=file, size=size, header_length=length)


@dataclass(frozen=True)
class LocalBytes:
    """``read_bytes(file, start, length)`` over the shards of one local checkpoint: seek and read.

    Serves only the shard files the checkpoint was read from, never more than :data:`READ_CAP`
    bytes at once, and refuses a file that now resolves outside the checkpoint.
    """

    root: Path
    allowed: Path
    files: frozenset[str]

    def __call__(self, file: str, start: int, length: int) -> bytes:
        if file not in self.files:
            raise SourceSpecError(file, "is not a shard of this checkpoint")
        if start < 0 or length < 0 or length > READ_CAP:
            raise SourceSpecError(file, f"refusing a read of {length} bytes at {start}")
        path = _contained(self.root / file, self.allowed, file)
        try:
            with path.open("rb") as handle:
                handle.seek(start)
                data = handle.read(length)
        except OSError as exc:
            raise FetchError(file, f"cannot read: {exc.strerror or exc}") from None
        if len(data) != length:
            raise FetchError(file, f"asked {length} bytes at {start}, the file gave {len(data)}")
        return data


def _cache_repo(root: Path) -> tuple[str, str, Path] | None:
    """``(repo_id, revision, repo_dir)`` when ``root`` is ``models--o--n/snapshots/<rev>``."""
    resolved = root.resolve()
    if resolved.parent.name != "snapshots":
        return None
    repo_dir = resolved.parent.parent
    parts = repo_dir.name.split("--")
    if len(parts) < 3 or parts[0] != "models":
        return None
    return "/".join(parts[1:]), resolved.name, repo_dir


def _contained(path: Path, allowed: Path, where: str) -> Path:
    """Refuse a file whose real location is outside the checkpoint (a hostile symlink)."""
    real = path.resolve()
    if not real.is_relative_to(allowed):
        raise SourceSpecError(where, f"resolves outside the checkpoint, to {real}")
    return real


def _present(path: Path, where: str) -> bool:
    """True for a regular file (through symlinks), False when nothing has the name. A name that
    exists but cannot be read as a file (a dangling symlink, e.g. an evicted cache blob, or a
    folder) is an error, never "absent": an unread declaration must not audit as no declaration.
    """
    try:
        if path.is_file():
            return True
        if path.exists():  # through a link too: a link to /dev/zero is no dangling one
            raise SourceSpecError(where, "exists but is not a regular file")
        if path.is_symlink():
            raise FetchError(where, "is a symlink to nothing (a dangling link); cannot read it")
    except OSError as exc:  # a folder that cannot be searched (no x permission)
        raise FetchError(where, f"cannot read: {exc.strerror or exc}") from None
    return False


@dataclass(frozen=True)
class _Folder:
    """What every reading of one folder shares: where it is, what may be read, its
    declaration documents."""

    origin: Origin
    documents: dict[str, str]
    root: Path
    allowed: Path
    location: str


def read_folder(
    root: Path, location: str, *, prove_aside: bool = False, ahead: Ahead | None = None
) -> Checkpoint:
    """Read a checkpoint folder (single file, sharded with an index, or a cache snapshot).

    ``prove_aside``: prove the index against the headers in a forked child while the caller
    goes on (``aside.py``); the checkpoint returned is the one read when the proof holds, and
    carries it as ``pending`` for the caller to settle (:func:`~.checkpoint.settled`).
    ``ahead``: told the declaration documents once they are read, before the index and any
    shard's header are, then each header as it is read."""
    if not root.is_dir():
        raise SourceSpecError(location, "not a directory")
    cache = _cache_repo(root)
    allowed = cache[2] if cache else root.resolve()
    origin = (
        Origin("hf-cache", location, repo=cache[0], revision=cache[1])
        if cache
        else Origin("local", location)
    )
    documents: dict[str, str] = {}
    for name in DECLARATION_FILES:
        candidate = root / name
        if _present(candidate, name):
            documents[name] = read_text(_contained(candidate, allowed, name), name)
    if ahead is not None:
        ahead.documents(documents)
    folder = _Folder(origin, documents, root, allowed, location)
    index_path = root / INDEX_FILE
    if _present(index_path, INDEX_FILE):
        # read where it is looked at: the proof aside reads it whole, where it runs
        index = DocumentFile(_contained(index_path, allowed, INDEX_FILE), INDEX_FILE)
        read = _listed_shards(root, allowed, ahead)

        def unproven() -> Checkpoint:
            return _by_index(folder, index.whole(), read)

        if prove_aside:
            optimistic = _proof_aside(folder, index, read)
            if optimistic is None:
                optimistic = _parse_aside(folder, index.whole(), read, unproven)
            if optimistic is not None:
                return optimistic
        return _read_index(folder, index.whole(), read)
    if _present(root / SINGLE_FILE, SINGLE_FILE):
        shard_files = [SINGLE_FILE]
    else:
        try:
            found = sorted(p.name for p in root.glob("*.safetensors"))
        except OSError as exc:
            raise FetchError(location, f"cannot list the folder: {exc.strerror or exc}") from None
        shard_files = [name for name in found if _present(root / name, name)]
    return _checkpoint(folder, None, _shards(folder, shard_files, {}), None)


def _proven(
    folder: _Folder,
    raw: bytes,
    proven: tuple[ShardIndex, list[ShardHeader], DerivedIndex | None],
) -> Checkpoint:
    index, named, derived = proven
    text = None if derived is not None else _decode(raw, INDEX_FILE)
    return _checkpoint(folder, text, named, index, derived)


def _read_index(folder: _Folder, raw: bytes, read: dict[str, ShardHeader]) -> Checkpoint:
    """The checkpoint of an index read whole: proven against the headers, else parsed."""
    proven = index_of_headers(raw, list(read.values()))
    return _proven(folder, raw, proven) if proven is not None else _by_index(folder, raw, read)


def _proof_aside(
    folder: _Folder, index: DocumentFile, read: dict[str, ShardHeader]
) -> Checkpoint | None:
    """The checkpoint as read when the index proof holds, the proof started aside, where
    the index is read whole; here only its head and a few windows of it are read. None where
    the index cannot be the one proven (it is then parsed, as without ``prove_aside``)."""
    head = index_head(index, list(read.values()))
    if head is None:
        return None
    rest, named = head

    def here() -> Checkpoint:  # what reading it whole, without the proof aside, gives
        return _read_index(folder, index.whole(), read)

    try:
        assumed = proven_as_plain(index, rest, named)
    except QarmError:  # a shard name no index may hold: met, or not, as reading it whole does
        return here()
    if assumed is None:  # a text the checkpoint keeps
        raw = index.whole()
        proof = CheckAside(lambda: written_index(raw, rest, named) is not None)
        try:
            checkpoint = _proven(folder, raw, proven_index(raw, rest, named, HeaderOwners(named)))
        except QarmError:
            if proof.answer():
                raise  # what reading without the proof aside raises too
            return here()
    else:
        shard_index, derived = assumed
        proof = CheckAside(lambda: _holds_as_plain(index, rest, named, derived))
        checkpoint = _checkpoint(folder, None, named, shard_index, derived)
    return replace(checkpoint, pending=PendingProof(holds=proof.answer, otherwise=here))


def _holds_as_plain(
    index: DocumentFile, rest: dict[str, Any], named: list[ShardHeader], derived: DerivedIndex
) -> bool:
    """:func:`holds_as_plain` on the index read whole (aside): an index that no longer reads
    does not hold, and reading it again meets the error."""
    try:
        raw = index.whole()
    except QarmError:
        return False
    return holds_as_plain(raw, rest, named, derived)


def _parse_aside(
    folder: _Folder,
    raw: bytes,
    read: dict[str, ShardHeader],
    unproven: Callable[[], Checkpoint],
) -> Checkpoint | None:
    """The checkpoint parsing the index gives, where it names every header name -> its shard
    and its shards in file-name order (:func:`index_in_file_order`), the parse and that check
    made aside; None where the index cannot be read so (it is then parsed here). For an index
    laid out as transformers lays it out but not sorted, which the proof cannot take."""
    try:
        assumed = index_in_file_order(raw, list(read.values()))
        if assumed is None:
            return None
        text = _decode(raw, INDEX_FILE)
    except QarmError:  # a file name no index may hold, a text that is not UTF-8
        return None  # parsed here, meeting the error where reading it does
    index, named = assumed
    proof = CheckAside(lambda: parsed_as_assumed(text, index, named))
    checkpoint = _checkpoint(folder, text, named, index)
    return replace(checkpoint, pending=PendingProof(holds=proof.answer, otherwise=unproven))


def _by_index(folder: _Folder, raw: bytes, read: dict[str, ShardHeader]) -> Checkpoint:
    """The checkpoint of an index not proven against the headers: parsed and checked by name,
    its shards in its order."""
    index_text = _decode(raw, INDEX_FILE)
    index = parse_index(index_text)
    return _checkpoint(folder, index_text, _shards(folder, index.shard_files, read), index)


def _shards(folder: _Folder, files: list[str], read: dict[str, ShardHeader]) -> list[ShardHeader]:
    """The header of each of ``files``, in order (taken from ``read`` where it is there)."""
    shards = []
    for file in files:
        path = folder.root / file
        if not _present(path, file):
            raise ShardIndexError(
                INDEX_FILE, f"names shard {file!r}, which is not in {folder.location}"
            )
        real = _contained(path, folder.allowed, file)
        shards.append(read[file] if file in read else read_local_shard(real, file))
    return shards


def _listed_shards(root: Path, allowed: Path, ahead: Ahead | None) -> dict[str, ShardHeader]:
    """The header of every ``.safetensors`` file at the top of the folder that reads cleanly,
    by name, in file-name order (``ahead`` told each as it is read): what an index usually
    names, read before the index is parsed so that :func:`index_of_headers` can prove the two
    agree. A file that does not read is left out here; if the index names it, it is read
    again in the index's order and refused there."""
    try:
        found = sorted(p.name for p in root.glob("*.safetensors"))
    except OSError:
        return {}
    shards: list[tuple[str, Path]] = []
    for file in found:
        try:
            if _present(root / file, file):
                shards.append((file, _contained(root / file, allowed, file)))
        except QarmError:
            continue
    read: dict[str, ShardHeader] = {}
    for file, header in read_headers(shards, read_local_shard):
        if isinstance(header, ShardHeader):
            read[file] = header
            if ahead is not None:
                ahead.header(header)
    return {file: read[file] for file, _ in shards if file in read}


def _checkpoint(
    folder: _Folder,
    index_text: str | None,
    shards: list[ShardHeader],
    index: ShardIndex | None,
    derived: DerivedIndex | None = None,
) -> Checkpoint:
    if not folder.documents and not shards:
        raise SourceSpecError(
            folder.location, "holds no declaration document and no .safetensors file"
        )
    return Checkpoint(
        origin=folder.origin,
        documents=folder.documents,
        index_text=index_text,
        shards=tuple(shards),
        read_bytes=LocalBytes(
            folder.root, folder.allowed, frozenset(shard.file for shard in shards)
        ),
        derived_index=derived,
        parsed_index=index,
    )
