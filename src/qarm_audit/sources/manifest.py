"""Header-only manifests: a lossless, diff-friendly capture of everything an audit reads.

Layout (JSON, one tensor per line, documents as lists of lines so reviews diff line by line)::

    {"format": "qarm-manifest/2",
     "origin": {"repo": ..., "revision": ...},
     "documents": {"config.json": ["{", "  ...", "}", ""]},
     "index": ["{", ...] or {"weight_map": "from the shards", "rest": {...}, "tail": "\\n"}
              or null,
     "shards": [
      {"file": ..., "size": ..., "header_length": ..., "metadata": {...} or null,
       "remote_sha256": ... or null,
       "tensors": [
        "name\tDTYPE\tdim,dim",
        ...]}]}

Tensor rows are listed in data order; each one's ``data_offsets`` follow from the sizes before
it, because a valid shard's data is contiguous from 0 (checked before any manifest is written).
A row whose name holds a tab is written as ``["name", "DTYPE", [dims]]`` instead.

The index is written as an object instead of lines when its text is exactly what
``transformers`` writes for these headers (see :class:`~.checkpoint.DerivedIndex`): a million
names are then not stored twice, and index and headers agree by construction.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import zlib
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import FetchError, HeaderError, ManifestError, OutputError
from .checkpoint import Checkpoint, DerivedIndex, Origin, ShardHeader, TensorEntry
from .header import BITS_LIMIT, DTYPE_BITS, MAX_DIM, loads_strict
from .index import check_shard_name, derive_index

FORMAT = "qarm-manifest/2"
DERIVED = "from the shards"
"""The ``weight_map`` value of an index written as a rule (see :class:`DerivedIndex`)."""
MANIFEST_CAP = 2 * 1024 * 1024 * 1024


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "))


def _string_list(items: list[str]) -> str:
    """A JSON list of strings, one per line. ``", "`` occurs in the compact encoding only
    between two elements (a quote inside a string is always escaped), so splitting there is
    exact, and the whole list is encoded in C."""
    return json.dumps(items, ensure_ascii=True).replace('", "', '",\n  "')


def _lines(text: str) -> str:
    return _string_list(text.split("\n"))


def _row(entry: TensorEntry) -> str | list[object]:
    if "\t" in entry.name:
        return [entry.name, entry.dtype, list(entry.shape)]
    return f"{entry.name}\t{entry.dtype}\t{','.join(map(str, entry.shape))}"


def _rows(tensors: tuple[TensorEntry, ...]) -> str:
    """``[`` then one row per line, each indented by two spaces, then `` ]``."""
    rows = [_row(t) for t in tensors]
    if not rows:
        return "[]"
    if all(isinstance(r, str) for r in rows):
        body = json.dumps(rows, ensure_ascii=True)[1:-1].replace('", "', '",\n  "')
    else:
        body = ",\n  ".join(_dump(r) for r in rows)
    return "[\n  " + body + "\n ]"


def render_manifest(checkpoint: Checkpoint) -> str:
    """The manifest text of a checkpoint: the same checkpoint always gives the same bytes."""
    origin = {"repo": checkpoint.origin.repo, "revision": checkpoint.origin.revision}
    out = ["{", f'"format": {_dump(FORMAT)},', f'"origin": {_dump(origin)},', '"documents": {']
    docs = sorted(checkpoint.documents.items())
    for i, (name, text) in enumerate(docs):
        comma = "," if i < len(docs) - 1 else ""
        out.append(f" {_dump(name)}: {_lines(text)}{comma}")
    out.append("},")
    out.append(f'"index": {_index(checkpoint)},')
    out.append('"shards": [')
    for s, shard in enumerate(checkpoint.shards):
        head = {
            "file": shard.file,
            "size": shard.size,
            "header_length": shard.header_length,
            "metadata": shard.metadata,
            "remote_sha256": shard.remote_sha256,
        }
        ordered = tuple(sorted(shard.tensors, key=_data_order))
        comma = "," if s < len(checkpoint.shards) - 1 else ""
        out.append(" " + _dump(head)[:-1] + ', "tensors": ' + _rows(ordered) + "}" + comma)
    out.append("]}")
    return "\n".join(out) + "\n"


def _index(checkpoint: Checkpoint) -> str:
    derived = derive_index(checkpoint)
    if derived is not None:
        rule = {"weight_map": DERIVED, "rest": derived.rest, "tail": derived.tail}
        return json.dumps(rule, ensure_ascii=True, sort_keys=True)
    return "null" if checkpoint.index_text is None else _lines(checkpoint.index_text)


def _data_order(entry: TensorEntry) -> tuple[int, int, str]:
    return entry.begin, entry.end, entry.name


def write_manifest(checkpoint: Checkpoint, path: Path, *, force: bool = False) -> bool:
    """Write atomically. Returns False when an identical file is already there.

    A different existing file is never replaced without ``force``. A target that exists and is
    not a regular file (``/dev/stdout``, a named pipe) is written through, never replaced.
    """
    text = render_manifest(checkpoint)
    data = gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode()
    try:
        if path.is_file():
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                return False
            if not force:
                raise ManifestError(str(path), "exists with different content (use --force)")
        elif path.exists():
            with path.open("wb") as out:
                out.write(data)
            return True
        _replace(path, data)
    except OSError as exc:
        raise OutputError(str(path), f"cannot write the manifest: {exc.strerror or exc}") from None
    return True


def _replace(path: Path, data: bytes) -> None:
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


def is_manifest_text(head: bytes) -> bool:
    return b'"qarm-manifest/' in head[:200]


def read_manifest(path: Path, location: str) -> Checkpoint:
    """Load and validate a manifest as hostile input.

    A plain manifest above :data:`MANIFEST_CAP` is refused unread; a gzip one is inflated in
    pieces, and refused as soon as it passes the cap or :data:`GZIP_RATIO` times its compressed
    size (past :data:`GZIP_FLOOR`), so that a small bomb never inflates in memory."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if handle.read(2) == b"\x1f\x8b":
                handle.seek(0)
                raw: bytes | bytearray = _inflate(handle, size, location)
            elif size > MANIFEST_CAP:
                raise ManifestError(
                    location, f"manifest of {size} bytes is above the {MANIFEST_CAP}-byte cap"
                )
            else:
                handle.seek(0)
                raw = handle.read()
    except OSError as exc:
        raise FetchError(location, f"cannot read manifest: {exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(location, "manifest is not UTF-8") from None
    del raw
    return parse_manifest(text, location)


GZIP_RATIO = 128
"""Most bytes a gzip manifest may inflate to per compressed byte (past :data:`GZIP_FLOOR`).
qarm's own manifests inflate 24 to 32 times (1M tensors: 3.6 MB to 103 MB); deflate can reach
1032, and a 0.9 MB file of spaces inflates to 0.9 GB."""

GZIP_FLOOR = 64 * 1024 * 1024
"""A gzip manifest may always inflate this far, whatever its ratio."""

_PIECE = 1024 * 1024


def _inflate(handle: BinaryIO, compressed: int, location: str) -> bytearray:
    limit = min(MANIFEST_CAP, max(GZIP_FLOOR, GZIP_RATIO * compressed))
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
            while piece := stream.read(_PIECE):
                out += piece
                if len(out) > limit:
                    raise ManifestError(
                        location,
                        f"gzip manifest of {compressed} bytes inflates past {limit} bytes (the "
                        f"{MANIFEST_CAP}-byte cap, or {GZIP_RATIO} times its size): a "
                        "compression bomb, not a manifest",
                    )
    # a file that is read but is no whole gzip stream is bad input, not a failed read
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise ManifestError(location, f"not a whole gzip stream: {exc}") from None
    return out


def _text(value: Any, where: str) -> str:
    if not isinstance(value, list) or not set(map(type, value)) <= {str}:
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
    derived = None
    if isinstance(index_raw, dict):
        derived, index_text = _derived(index_raw, f"{location}: index"), None
    else:
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
        derived_index=derived,
    )


def _derived(raw: dict[str, Any], where: str) -> DerivedIndex:
    rest, tail = raw.get("rest"), raw.get("tail")
    if (
        set(raw) != {"weight_map", "rest", "tail"}
        or raw["weight_map"] != DERIVED
        or not isinstance(rest, dict)
        or "weight_map" in rest
        or tail not in ("\n", "")
    ):
        raise ManifestError(
            where,
            f'an index object must be {{"weight_map": "{DERIVED}", "rest": {{...}}, '
            '"tail": "\\n" or ""}, with no weight_map in rest',
        )
    return DerivedIndex(rest=rest, tail=tail)


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
    names, dtypes, shapes = _columns(rows, where)
    if len(set(names)) != len(names):
        raise ManifestError(where, "a tensor name appears twice in one shard")
    sizes = _sizes(dtypes, shapes, names, where)
    ends = list(accumulate(sizes))
    data_length = size - 8 - length
    if (ends[-1] if ends else 0) != data_length:
        raise HeaderError(
            where,
            f"tensors hold {ends[-1] if ends else 0} bytes but the file holds {data_length} data "
            "bytes (8 + header + data must equal the file size)",
        )
    begins = [0, *ends[:-1]] if ends else []
    fields = zip(names, dtypes, shapes, begins, ends, strict=True)
    # tuple.__new__ builds each entry in C (TensorEntry._make is a Python call per row)
    entries = tuple(map(tuple.__new__, repeat(TensorEntry), fields))
    return ShardHeader(
        file=file,
        size=size,
        header_length=length,
        metadata=metadata,
        tensors=entries,
        remote_sha256=sha,
    )


def _columns(rows: list[Any], where: str) -> tuple[list[str], list[str], list[tuple[int, ...]]]:
    """Names, dtypes and shapes of a shard's rows; column-wise, so a million rows stay cheap."""
    if not rows:
        return [], [], []
    if set(map(type, rows)) <= {str}:
        parts = "\t".join(rows).split("\t")
        if len(parts) != 3 * len(rows):
            bad = next(r for r in rows if r.count("\t") != 2)
            raise ManifestError(where, f"malformed tensor row {bad[:120]!r}")
        names, dtypes, shape_texts = parts[0::3], parts[1::3], parts[2::3]
        parsed = {text: _shape(text, where) for text in set(shape_texts)}
        return names, dtypes, list(map(parsed.__getitem__, shape_texts))
    names, dtypes, shapes = [], [], []
    for row in rows:
        if isinstance(row, str):
            fields = row.split("\t")
            if len(fields) != 3:
                raise ManifestError(where, f"malformed tensor row {row[:120]!r}")
            names.append(fields[0])
            dtypes.append(fields[1])
            shapes.append(_shape(fields[2], where))
        elif (
            isinstance(row, list)
            and len(row) == 3
            and isinstance(row[0], str)
            and isinstance(row[1], str)
            and isinstance(row[2], list)
            and all(type(d) is int and 0 <= d < MAX_DIM for d in row[2])
        ):
            names.append(row[0])
            dtypes.append(row[1])
            shapes.append(tuple(row[2]))
        else:
            raise ManifestError(where, f"malformed tensor row {str(row)[:120]}")
    return names, dtypes, shapes


def _shape(text: str, where: str) -> tuple[int, ...]:
    if not text:
        return ()
    dims = text.split(",")
    if not all(d.isascii() and d.isdigit() and len(d) < 17 for d in dims):
        raise ManifestError(where, f"malformed shape {text[:60]!r}")
    shape = tuple(int(d) for d in dims)
    if any(d >= MAX_DIM for d in shape):
        raise ManifestError(where, f"shape {text[:60]!r} has a dimension beyond any real file")
    return shape


def _sizes(
    dtypes: list[str], shapes: list[tuple[int, ...]], names: list[str], where: str
) -> list[int]:
    """Bytes per tensor, computed once per distinct (dtype, shape)."""
    table: dict[tuple[str, tuple[int, ...]], int] = {}
    for key in set(zip(dtypes, shapes, strict=True)):
        dtype, shape = key
        bits = DTYPE_BITS.get(dtype)
        if bits is None:
            name = names[dtypes.index(dtype)]
            raise HeaderError(where, f"tensor {name!r}: unknown dtype {dtype!r}")
        numel = 1
        for dim in shape:
            numel *= dim
        if numel * bits >= BITS_LIMIT or numel * bits % 8:
            name = next(n for n, d, s in zip(names, dtypes, shapes, strict=True) if (d, s) == key)
            if numel * bits >= BITS_LIMIT:
                raise HeaderError(where, f"tensor {name!r}: shape {list(shape)} overflows 64 bits")
            raise HeaderError(
                where, f"tensor {name!r}: {numel} elements of {dtype} do not end on a byte"
            )
        table[key] = numel * bits // 8
    return list(map(table.__getitem__, zip(dtypes, shapes, strict=True)))
