"""Header-only manifests: a lossless, diff-friendly capture of everything an audit reads.

Layout (JSON, one tensor per line, documents as lists of lines so reviews diff line by line)::

    {"format": "qarm-manifest/1",
     "origin": {"repo": ..., "revision": ...},
     "documents": {"config.json": ["{", "  ...", "}", ""]},
     "index": ["{", ...] or null,
     "shards": [
      {"file": ..., "size": ..., "header_length": ..., "metadata": {...} or null,
       "remote_sha256": ... or null,
       "tensors": [
        ["name", "DTYPE", [shape], begin, end],
        ...]}]}
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import FetchError, HeaderError, ManifestError
from .checkpoint import Checkpoint, Origin, ShardHeader, TensorEntry
from .header import MAX_DIM, loads_strict, validate_layout
from .index import check_shard_name

FORMAT = "qarm-manifest/1"
MANIFEST_CAP = 2 * 1024 * 1024 * 1024


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "))


def _lines(text: str) -> str:
    return "[" + ",\n  ".join(_dump(line) for line in text.split("\n")) + "]"


def render_manifest(checkpoint: Checkpoint) -> str:
    """The manifest text of a checkpoint: the same checkpoint always gives the same bytes."""
    origin = {"repo": checkpoint.origin.repo, "revision": checkpoint.origin.revision}
    out = ["{", f'"format": {_dump(FORMAT)},', f'"origin": {_dump(origin)},', '"documents": {']
    docs = sorted(checkpoint.documents.items())
    for i, (name, text) in enumerate(docs):
        comma = "," if i < len(docs) - 1 else ""
        out.append(f" {_dump(name)}: {_lines(text)}{comma}")
    out.append("},")
    index = "null" if checkpoint.index_text is None else _lines(checkpoint.index_text)
    out.append(f'"index": {index},')
    out.append('"shards": [')
    for s, shard in enumerate(checkpoint.shards):
        head = {
            "file": shard.file,
            "size": shard.size,
            "header_length": shard.header_length,
            "metadata": shard.metadata,
            "remote_sha256": shard.remote_sha256,
        }
        out.append(" " + _dump(head)[:-1] + ', "tensors": [')
        rows = [
            "  " + _dump([t.name, t.dtype, list(t.shape), t.begin, t.end]) for t in shard.tensors
        ]
        out.append(",\n".join(rows))
        out.append(" ]}" + ("," if s < len(checkpoint.shards) - 1 else ""))
    out.append("]}")
    return "\n".join(out) + "\n"


def write_manifest(checkpoint: Checkpoint, path: Path, *, force: bool = False) -> bool:
    """Write atomically. Returns False when an identical file is already there.

    A different existing file is never replaced without ``force``.
    """
    text = render_manifest(checkpoint)
    data = gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode()
    if path.exists():
        if path.read_bytes() == data:
            return False
        if not force:
            raise ManifestError(str(path), "exists with different content (use --force)")
    directory = path.parent if str(path.parent) else Path(".")
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)  # mkstemp makes 0600; a manifest is an ordinary file
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return True


def is_manifest_text(head: bytes) -> bool:
    return b'"qarm-manifest/' in head[:200]


def read_manifest(path: Path, location: str) -> Checkpoint:
    """Load and validate a manifest as hostile input."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise FetchError(location, f"cannot read manifest: {exc}") from None
    if len(raw) > MANIFEST_CAP:
        raise ManifestError(location, "manifest is above the size cap")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(location, "manifest is not UTF-8") from None
    return parse_manifest(text, location)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, list) or not all(isinstance(line, str) for line in value):
        raise ManifestError(where, "document must be a list of lines")
    return "\n".join(value)


def parse_manifest(text: str, location: str) -> Checkpoint:
    try:
        document = loads_strict(text, location)
    except HeaderError as exc:
        raise ManifestError(location, exc.problem) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ManifestError(location, f"not a {FORMAT} manifest")
    origin = document.get("origin") or {}
    if not isinstance(origin, dict):
        raise ManifestError(location, "origin must be an object")
    repo, revision = origin.get("repo"), origin.get("revision")
    if not all(v is None or isinstance(v, str) for v in (repo, revision)):
        raise ManifestError(location, "origin repo and revision must be strings or null")
    documents_raw = document.get("documents") or {}
    if not isinstance(documents_raw, dict):
        raise ManifestError(location, "documents must be an object")
    documents = {name: _text(lines, f"{location}: {name}") for name, lines in documents_raw.items()}
    index_raw = document.get("index")
    index_text = None if index_raw is None else _text(index_raw, f"{location}: index")
    shards_raw = document.get("shards")
    if not isinstance(shards_raw, list):
        raise ManifestError(location, "shards must be a list")
    shards = tuple(_shard(raw, location) for raw in shards_raw)
    return Checkpoint(
        origin=Origin("manifest", location, repo=repo, revision=revision),
        documents=documents,
        index_text=index_text,
        shards=shards,
    )


def _shard(raw: Any, location: str) -> ShardHeader:
    if not isinstance(raw, dict):
        raise ManifestError(location, "each shard must be an object")
    file = raw.get("file")
    if not isinstance(file, str):
        raise ManifestError(location, "shard without a file name")
    where = f"{location}: {file}"
    check_shard_name(file, where)
    size, length = raw.get("size"), raw.get("header_length")
    if type(size) is not int or type(length) is not int or size < 0 or length < 0:
        raise ManifestError(where, "size and header_length must be non-negative integers")
    metadata = raw.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
    ):
        raise ManifestError(where, "metadata must map strings to strings")
    sha = raw.get("remote_sha256")
    if sha is not None and not isinstance(sha, str):
        raise ManifestError(where, "remote_sha256 must be a string or null")
    rows = raw.get("tensors")
    if not isinstance(rows, list):
        raise ManifestError(where, "tensors must be a list")
    entries = []
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != 5
            or not isinstance(row[0], str)
            or not isinstance(row[1], str)
            or not isinstance(row[2], list)
            or not all(type(d) is int and 0 <= d < MAX_DIM for d in row[2])
            or not all(type(o) is int and o >= 0 for o in row[3:])
        ):
            raise ManifestError(where, f"malformed tensor row {str(row)[:120]}")
        entries.append(TensorEntry(row[0], row[1], tuple(row[2]), row[3], row[4]))
    names = {e.name for e in entries}
    if len(names) != len(entries):
        raise ManifestError(where, "a tensor name appears twice in one shard")
    validate_layout(entries, data_length=size - 8 - length, where=where)
    return ShardHeader(
        file=file,
        size=size,
        header_length=length,
        metadata=metadata,
        tensors=tuple(entries),
        remote_sha256=sha,
    )
