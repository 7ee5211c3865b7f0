"""``model.safetensors.index.json``: which shard holds which tensor."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter, itemgetter
from typing import Any, Protocol

import msgspec
import orjson

from ..errors import HeaderError, QarmError, ShardIndexError
from .checkpoint import (
    INDEX_FILE,
    Checkpoint,
    DerivedIndex,
    HeaderOwners,
    ShardHeader,
    ShardIndex,
    header_owners,
)
from .header import loads_strict


class _IndexJSONError(HeaderError, ShardIndexError):
    """JSON-level failure inside the index, raised under its index name."""


class IndexText(Protocol):
    """The index's bytes as :func:`index_head` reads them: the bytes themselves, or a file
    read only where it is looked at (``document_file.py``), bounds at or above 0."""

    def __len__(self) -> int: ...

    def __getitem__(self, key: slice, /) -> bytes: ...

    def find(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...

    def endswith(self, suffix: bytes, start: int = ..., end: int = ..., /) -> bool: ...


def parse_index(text: str, where: str = INDEX_FILE) -> ShardIndex:
    """Parse the index, refusing duplicate names and unsafe shard paths."""
    typed = _parse_typed(text)
    if typed is not None:
        return _index(typed, typed["weight_map"], where)
    document = loads_strict(text, where, error=_IndexJSONError)
    if not isinstance(document, dict):
        raise ShardIndexError(where, "index is not a JSON object")
    weight_map = document.get("weight_map")
    if not isinstance(weight_map, dict) or not set(map(type, weight_map.values())) <= {str}:
        raise ShardIndexError(where, "weight_map must map tensor names to shard file names")
    return _index(document, weight_map, where)


class _IndexDocument(msgspec.Struct, forbid_unknown_fields=True):
    """The index as transformers writes it: every type checked by msgspec, in C."""

    weight_map: dict[str, str]
    metadata: dict[str, int | str] | msgspec.UnsetType = msgspec.UNSET


_INDEX = msgspec.json.Decoder(_IndexDocument)


def _parse_typed(text: str) -> dict[str, Any] | None:
    """The index as :func:`loads_strict` would return it, when it is ``weight_map`` and an
    optional ``metadata`` of integers and strings, written without a backslash and with no key
    twice (the colons outside strings count the keys kept: see ``loads_fast``); else None, and
    the strict parse decides."""
    if "\\" in text:
        return None
    try:
        parsed = _INDEX.decode(text)
    except msgspec.DecodeError:
        return None
    weight_map = parsed.weight_map
    document: dict[str, Any] = {"weight_map": weight_map}
    keys = 1 + len(weight_map)  # each key's colon; strings' own colons are counted below
    strings: list[Iterable[str]] = [weight_map.keys(), weight_map.values()]
    if parsed.metadata is not msgspec.UNSET:
        metadata = parsed.metadata
        document["metadata"] = metadata
        keys += 1 + len(metadata)
        strings += [metadata.keys(), [v for v in metadata.values() if type(v) is str]]
    colons = text.count(":")
    # colons == keys proves it alone: no key was lost and no string holds a colon
    if colons != keys and colons != keys + sum("".join(part).count(":") for part in strings):
        return None
    return document


def index_of_headers(
    raw: bytes, shards: Sequence[ShardHeader]
) -> tuple[ShardIndex, list[ShardHeader], DerivedIndex | None] | None:
    """The index and the shards it names, in its order, when ``raw`` is byte for byte what
    ``transformers`` writes for these headers (``json.dumps(indent=2, sort_keys=True)``, with
    or without a final newline); None otherwise, and the index is parsed and checked by name.
    The third part is the index as a rule over the headers, where ``json.dumps`` writes the
    same bytes as orjson: the checkpoint then holds that rule, not a copy of the text.

    Equal bytes prove at once that the text is JSON with no key twice, that its weight_map is
    exactly every header name -> its shard, and that no name is in two shards; so a million
    names are neither parsed again nor looked up. orjson writes the text to compare (its
    sorted keys are in code point order, as Python's are); the keys before ``weight_map``
    (``metadata``) are parsed by the strict parser from the text's head."""
    head = index_head(raw, shards)
    if head is None:
        return None
    rest, named = head
    weight_map = written_index(raw, rest, named)
    if weight_map is None:
        return None
    return proven_index(raw, rest, named, weight_map)


def index_head(
    raw: IndexText, shards: Sequence[ShardHeader]
) -> tuple[dict[str, Any], list[ShardHeader]] | None:
    """What :func:`index_of_headers` reads before it compares: the keys before ``weight_map``
    and the shards with tensors, in the index's order; None where the text cannot be the one
    ``transformers`` writes for them."""
    head = _head(raw)
    if head is None:
        return None
    rest, cut = head
    named = [shard for shard in shards if shard.tensors]
    if not named:
        return None
    # first mention in the sorted text: the shards by their least name
    named.sort(key=lambda shard: min(map(_NAME, shard.tensors)))
    if not _keys_may_be_sorted(raw, cut, min(map(_NAME, named[0].tensors))):
        return None
    return rest, named


def _head(raw: IndexText) -> tuple[dict[str, Any], int] | None:
    """The keys before ``weight_map``, parsed from the text's head, and where ``weight_map``
    begins; None where the text is not laid out with indent 2 or its head is no JSON object."""
    cut = raw.find(b'\n  "weight_map": {')
    if cut < 0 or raw[cut - 1 : cut] == b"\r":
        return None  # a line end written as CRLF (a text-mode write on Windows) is not the writer's
    try:
        rest = loads_strict(raw[:cut].rstrip(b",").decode() + "}", INDEX_FILE)
    except (HeaderError, UnicodeDecodeError):
        return None
    if not isinstance(rest, dict) or "weight_map" in rest:
        return None
    return rest, cut


def index_in_file_order(
    raw: bytes, shards: Sequence[ShardHeader]
) -> tuple[ShardIndex, list[ShardHeader]] | None:
    """For an index laid out with indent 2 whose keys need not be sorted (huggingface_hub's
    ``save_torch_state_dict`` writes ``json.dump(index, indent=2)`` in state-dict order): the
    index and shards that parsing it gives where it maps every header name to its shard and
    first names the shards in file-name order, as such a writer fills them; that is checked by
    :func:`parsed_as_assumed`. ``metadata`` is read from the head. None where the head does not
    read, or names no shard with tensors."""
    head = _head(raw)
    named = sorted((shard for shard in shards if shard.tensors), key=_FILE)
    if head is None or not named:
        return None
    return _from_headers(head[0], HeaderOwners(named), named), named


def parsed_as_assumed(text: str, assumed: ShardIndex, named: Sequence[ShardHeader]) -> bool:
    """Whether parsing the index gives what :func:`index_in_file_order` assumed: the same
    shards first named in the same order, the same ``total_size``, and every header name
    mapped to its shard. An index that does not parse is not (reading it meets its error)."""
    try:
        parsed = parse_index(text)
    except QarmError:
        return False
    return (
        parsed.shard_files == assumed.shard_files
        and parsed.total_size == assumed.total_size
        and names_each_shard(parsed.weight_map, named)
    )


def names_each_shard(weight_map: Mapping[str, str], shards: Sequence[ShardHeader]) -> bool:
    """Whether ``weight_map`` is exactly every header name -> its shard: as many names as the
    headers hold, each header's names all mapped to that header's shard (so no name is in two
    shards either). Looked up in C, without a second million-entry mapping."""
    if len(weight_map) != sum(len(shard.tensors) for shard in shards):
        return False
    get = weight_map.get
    for shard in shards:
        names = list(map(_NAME, shard.tensors))
        if list(map(get, names)).count(shard.file) != len(names):
            return False
    return True


_FILE = attrgetter("file")

_ENTRY = b'\n    "'
"""Where each weight_map entry begins in the text ``transformers`` writes (indent 2)."""

_WRITERS_END = b"\n  }\n}"
"""How the text transformers writes ends (before a final newline): the weight_map closes, then
the document."""

SORT_PROBES = 256
"""Pairs of adjacent weight_map keys compared by :func:`_keys_may_be_sorted`."""


def _keys_may_be_sorted(raw: IndexText, cut: int, least: str) -> bool:
    """False where the weight_map after ``cut`` cannot be the one ``transformers`` writes,
    whose keys are sorted: its first key is not ``least`` (the least tensor name), or of
    :data:`SORT_PROBES` pairs of adjacent keys spread over it, one does not rise. An index
    in the order a state dict gives (huggingface_hub's ``save_torch_state_dict`` writes
    ``json.dump(index, indent=2)``) is then parsed at once, rather than proven aside while the
    audit runs and found wrong only once the audit is done, which would run it twice.

    The text must also end as the writer's does, with the weight_map (its last key, for the
    keys before it sort first): the proof writes only those keys and the weight_map, so no
    text with a key after the weight_map is proven. That end is where the keys are compared
    up to, found without a search through tens of megabytes of names.

    Only a key spelled without an escape is compared: its bytes are then its UTF-8, whose
    order is the code point order the writer sorts by, so a text the proof would accept is
    never turned away here. A text this lets through is still proven in full."""
    stop = len(raw) - raw.endswith(b"\n")  # the one final newline the proof allows
    if not raw.endswith(_WRITERS_END, 0, stop):
        return False
    end = stop - len(_WRITERS_END)
    first = raw.find(_ENTRY, cut + 1, end)
    if first < 0:
        return True  # no entry where the writer puts them: the proof decides
    key = _key_at(raw, first + len(_ENTRY))
    # a header name holds no lone surrogate (the header parse refuses one), so it encodes
    if key is not None and key != least.encode():
        return False
    for at in range(first, end, max((end - first) // SORT_PROBES, 1)):
        one = raw.find(_ENTRY, at, end)
        two = raw.find(_ENTRY, one + 1, end) if one >= 0 else -1
        if two < 0:
            break
        a, b = _key_at(raw, one + len(_ENTRY)), _key_at(raw, two + len(_ENTRY))
        if a is not None and b is not None and a >= b:
            return False
    return True


def _key_at(raw: IndexText, start: int) -> bytes | None:
    """The key whose text begins at ``start`` (after its opening quote), or None where it is
    spelled with an escape (its bytes then need not sort as the key does)."""
    close = raw.find(b'"', start)
    key = raw[start:close]
    return None if close < 0 or b"\\" in key else key


def written_index(
    raw: bytes, rest: dict[str, Any], named: Sequence[ShardHeader]
) -> dict[str, str] | None:
    """Every header name -> its shard, when ``raw`` is exactly the index ``transformers``
    writes with it after ``rest`` (see :func:`index_of_headers`); else None."""
    weight_map = header_owners(named)
    if len(weight_map) != sum(len(shard.tensors) for shard in named):
        return None  # a name in two shards: the integrity check names it
    try:
        written = orjson.dumps(
            {**rest, "weight_map": weight_map}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
        )
    except orjson.JSONEncodeError:  # an integer beyond 64 bits: the text is parsed instead
        return None
    if not (raw.startswith(written) and raw[len(written) :] in (b"", b"\n")):
        return None
    return weight_map


def proven_index(
    raw: bytes, rest: dict[str, Any], named: Sequence[ShardHeader], weight_map: Mapping[str, str]
) -> tuple[ShardIndex, list[ShardHeader], DerivedIndex | None]:
    """:func:`index_of_headers`' answer for an index :func:`written_index` proves: the shard
    names checked, ``metadata.total_size`` read. ``weight_map`` is that proof's mapping, or a
    :class:`HeaderOwners` of ``named`` that stands for it."""
    tail = "\n" if raw.endswith(b"\n") else ""  # the proof allows this one, or none
    derived = DerivedIndex(rest=rest, tail=tail) if _dumps_writes_the_same(raw, rest) else None
    return _from_headers(rest, weight_map, named), list(named), derived


def proven_as_plain(
    raw: IndexText, rest: dict[str, Any], named: Sequence[ShardHeader]
) -> tuple[ShardIndex, DerivedIndex] | None:
    """:func:`proven_index`'s index and derived index for a text read only where
    :func:`index_head` looked (its shards are ``named``, in that order), the text taken to be
    plain (ASCII without DEL), which only the whole text tells: they hold where
    :func:`holds_as_plain` does. None where ``rest`` holds a float: json.dumps may spell it
    otherwise than orjson, so the checkpoint keeps the text, which is then read whole."""
    if _holds_float(rest):
        return None
    derived = DerivedIndex(rest=rest, tail="\n" if raw.endswith(b"\n") else "")
    return _from_headers(rest, HeaderOwners(named), named), derived


def holds_as_plain(
    raw: bytes, rest: dict[str, Any], named: Sequence[ShardHeader], derived: DerivedIndex
) -> bool:
    """Whether :func:`proven_as_plain`'s answer is :func:`index_of_headers`' for the whole
    text ``raw``: the text is exactly what ``transformers`` writes after ``rest`` for the
    headers (:func:`written_index`), ends as ``derived`` says, and is plain."""
    return (
        written_index(raw, rest, named) is not None
        and raw.endswith(b"\n") == (derived.tail == "\n")
        and _dumps_writes_the_same(raw, rest)
    )


def _from_headers(
    rest: dict[str, Any], weight_map: Mapping[str, str], named: Sequence[ShardHeader]
) -> ShardIndex:
    """The index whose weight_map is ``named``'s header names -> shard, in their order: the
    shard names checked, ``metadata.total_size`` read from ``rest``."""
    index = _index(rest, weight_map, INDEX_FILE, [shard.file for shard in named])
    return ShardIndex(index.weight_map, index.total_size, from_headers=True)


_NAME = itemgetter(0)


def _dumps_writes_the_same(raw: bytes, rest: dict[str, Any]) -> bool:
    """Whether ``json.dumps(indent=2, sort_keys=True)`` writes the text orjson wrote, so that
    a :class:`DerivedIndex` stands for it: ASCII without DEL (json escapes it, orjson does
    not; non-ASCII json escapes too) and no float in the keys before ``weight_map`` (the two
    spell some floats differently). Proven on generated documents by
    ``tests/test_index_of_headers.py``."""
    return raw.isascii() and b"\x7f" not in raw and not _holds_float(rest)


def _holds_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(map(_holds_float, value.values()))
    if isinstance(value, list):
        return any(map(_holds_float, value))
    return False


def _index(
    document: dict[str, Any],
    weight_map: Mapping[str, str],
    where: str,
    shard_files: Iterable[str] | None = None,
) -> ShardIndex:
    """``shard_files``: the shards ``weight_map`` names, in first-mention order, where they are
    known without a pass over it."""
    files = dict.fromkeys(weight_map.values()) if shard_files is None else shard_files
    for shard in files:
        check_shard_name(shard, where)
    total_size: int | None = None
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and "total_size" in metadata:
        raw = metadata["total_size"]
        if type(raw) is int and raw >= 0:
            total_size = raw
        elif type(raw) is float and raw.is_integer() and raw >= 0:
            total_size = int(raw)
        else:
            raise ShardIndexError(where, f"metadata.total_size {raw!r} is not a byte count")
    return ShardIndex(weight_map=weight_map, total_size=total_size)


def check_shard_name(name: str, where: str) -> None:
    """A shard is a plain relative name: no absolute path, no ``..``, no backslash, no NUL."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or (len(name) > 1 and name[1] == ":")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ShardIndexError(where, f"shard file name {name!r} is not a plain relative name")
    if not name.endswith(".safetensors"):
        raise ShardIndexError(where, f"shard file name {name!r} does not end in .safetensors")


def render_derived(derived: DerivedIndex, weight_map: dict[str, str]) -> str:
    """The index text a :class:`DerivedIndex` stands for, given every header name's shard."""
    document = {**derived.rest, "weight_map": weight_map}
    return json.dumps(document, indent=2, sort_keys=True) + derived.tail


def derive_index(checkpoint: Checkpoint) -> DerivedIndex | None:
    """The checkpoint's index as a :class:`DerivedIndex`, when its text is exactly the one
    ``transformers`` writes for these headers; None otherwise (the text is then kept)."""
    if checkpoint.derived_index is not None:
        return checkpoint.derived_index
    text = checkpoint.index_text
    if text is None:
        return None
    try:
        document = loads_strict(text, INDEX_FILE)
    except HeaderError:
        return None
    if not isinstance(document, dict) or "weight_map" not in document:
        return None
    owner = header_owners(checkpoint.shards)
    if len(owner) != sum(len(shard.tensors) for shard in checkpoint.shards):
        return None  # a name twice: keep the text, let the integrity check name it
    rest = {key: value for key, value in document.items() if key != "weight_map"}
    for tail in ("\n", ""):
        derived = DerivedIndex(rest=rest, tail=tail)
        if render_derived(derived, owner) == text:
            return derived
    return None


def index_text_of(checkpoint: Checkpoint) -> str | None:
    """The index text verbatim, whichever way the checkpoint holds it."""
    if checkpoint.derived_index is not None:
        return render_derived(checkpoint.derived_index, header_owners(checkpoint.shards))
    return checkpoint.index_text


def load_index(checkpoint: Checkpoint, owner: Mapping[str, str]) -> ShardIndex | None:
    """The checkpoint's index, parsed once; ``owner`` is :func:`header_owners` of its shards."""
    if checkpoint.parsed_index is not None:
        return checkpoint.parsed_index
    if checkpoint.index_text is not None:
        return parse_index(checkpoint.index_text)
    if checkpoint.derived_index is not None:
        return _index(checkpoint.derived_index.rest, owner, INDEX_FILE)
    return None
