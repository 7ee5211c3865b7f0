"""Parse and validate one safetensors header, treating every byte as hostile.

The format: an 8-byte little-endian length N, then N bytes of UTF-8 JSON (an object, padded
with spaces), then the tensor data. Reading a shard never touches the data.
"""

from __future__ import annotations

import json
import re
import struct
import sys
from collections.abc import Iterable
from itertools import chain, repeat
from operator import attrgetter, eq, itemgetter, sub
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
import orjson

from ..errors import HeaderError, HeaderTooLargeError, QarmError
from .checkpoint import ShardHeader, TensorEntry

HEADER_CAP = 100_000_000
"""The safetensors library's own limit on the header length, in bytes."""

DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
"""Bits per element of every dtype the safetensors format defines."""

MAX_DIM = 2**53
"""Dimensions beyond this cannot come from a real file and would overflow other readers."""

BITS_LIMIT = 2**64
"""The safetensors library counts a tensor's elements and bits in 64-bit unsigned integers and
refuses a tensor whose count overflows them; so does qarm (before any comparison with offsets)."""

ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


def length_prefix(prefix: bytes, *, where: str, size: int, cap: int = HEADER_CAP) -> int:
    """Decode and bound the 8-byte length prefix of a file of ``size`` bytes."""
    if len(prefix) < 8:
        raise HeaderError(where, f"file is {size} bytes, shorter than the 8-byte length prefix")
    length: int = struct.unpack("<Q", prefix[:8])[0]
    if length > cap:
        raise HeaderTooLargeError(where, f"header length {length} is above the cap of {cap} bytes")
    if 8 + length > size:
        raise HeaderError(where, f"header length {length} runs past the end of a {size}-byte file")
    if length < 2:
        raise HeaderError(where, f"header length {length} cannot hold a JSON object")
    return length


def _reject_duplicates(where: str) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):  # rare: find which key, in Python, only then
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise HeaderError(where, f"duplicate key {key!r}")
                seen.add(key)
        return out

    return hook


def _reject_constant(where: str) -> Any:
    def hook(token: str) -> Any:
        raise HeaderError(where, f"non-standard JSON literal {token}")

    return hook


CONTAINER_DENSITY = 8
"""A JSON document may hold one ``[`` or ``{`` per this many characters (plus
:data:`CONTAINER_FLOOR`). Parsing makes an object of 56 bytes or more for each, 30 times the two
characters ``[]`` take: a 100 MB document of empty lists would take gigabytes. The densest real
documents hold one per 17 characters (a header of one-letter tensor names) or one per 11 (a
manifest written as list rows), so this refuses none of them."""

CONTAINER_FLOOR = 1024


def loads_strict(
    text: str,
    where: str,
    error: type[QarmError] = HeaderError,
    *,
    max_containers: int | None = None,
) -> Any:
    """``json.loads`` that refuses duplicate keys, NaN/Infinity, pathological nesting, integers
    beyond Python's digit limit, lone surrogates (not Unicode text: the safetensors library
    refuses them too) and more ``[``/``{`` than :data:`CONTAINER_DENSITY` allows (or
    ``max_containers``), all as ``error`` naming ``where``.

    Most documents are parsed by orjson (:func:`loads_fast`), which gives exactly what this
    strict parse gives or gives nothing, and then this parse runs and refuses what it refuses."""
    fast = loads_fast(text, max_containers)
    if fast is not _NO_PROOF:
        return fast
    return _loads_checked(text, where, error, max_containers)


def _loads_checked(
    text: str, where: str, error: type[QarmError], max_containers: int | None
) -> Any:
    """The strict parse itself: Python's json with a duplicate-key hook."""
    try:
        _check_containers(text, where, max_containers)
        document = json.loads(
            text,
            object_pairs_hook=_reject_duplicates(where),
            parse_constant=_reject_constant(where),
        )
        if _SURROGATE_ESCAPE.search(text):
            _reject_surrogates(document, where)
        return document
    except HeaderError as exc:
        if error is HeaderError:
            raise
        raise error(exc.where, exc.problem) from None
    except RecursionError:
        raise error(where, "JSON is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise error(
            where, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise error(where, _long_integer(text) or f"not valid JSON: {exc}") from None
    except MemoryError:
        raise error(where, f"JSON of {len(text)} characters is too large to parse") from None


_NO_PROOF: Any = object()
"""What :func:`loads_fast` answers when it cannot prove its parse is the strict one."""

FAST_DEPTH = 64
"""Deeper documents are left to the strict parser (whose recursion limit orjson's differs from)."""


def loads_fast(text: str | bytes, max_containers: int | None = None) -> Any:
    """orjson's parse of ``text`` when it is provably what :func:`loads_strict` returns, else
    :data:`_NO_PROOF` (then the strict parser decides, and names any fault).

    The proof: ``text`` holds no backslash, so every string in it is spelled as it decodes (no
    escape can spell a key twice or a surrogate); orjson refuses NaN, Infinity and invalid
    UTF-8 itself; no float appears (orjson reads an integer beyond 64 bits as one, and a float
    may round otherwise); no container is nested deeper than :data:`FAST_DEPTH`; the container
    count is within the strict parser's cheap bound; and no object held a duplicate key: every
    ``:`` outside a string separates exactly one key from its value, so the colons of the text
    less those inside strings count the keys written, which equals the keys kept only when
    no key was written twice in one object."""
    if isinstance(text, bytes):
        if not text.isascii() or b"\\" in text:  # the strict parser measures characters
            return _NO_PROOF
        colons, brackets = text.count(b":"), text.count(b"[") + text.count(b"{")
    else:
        if "\\" in text:
            return _NO_PROOF
        colons, brackets = text.count(":"), text.count("[") + text.count("{")
    allowed = len(text) // CONTAINER_DENSITY + CONTAINER_FLOOR
    if max_containers is not None:
        allowed = min(allowed, max_containers)
    if not (len(text) // 2 < allowed or brackets <= allowed):
        return _NO_PROOF
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _NO_PROOF
    if not _keys_and_colons(document, colons):
        return _NO_PROOF
    return document


def _keys_and_colons(document: Any, colons: int) -> bool:
    """Whether a parsed document's text, holding ``colons`` colons and no backslash, wrote no
    key twice in one object (see :func:`loads_fast`); False also where it holds a float or
    nests deeper than :data:`FAST_DEPTH`. Walked one depth at a time, each depth's objects,
    lists and strings counted in bulk (in C); the strings only when some colon is not a key's
    (the colons equal the keys kept when no key was written twice and no string holds one)."""
    keys = 0
    texts: list[Any] = []  # what holds the strings: key iterables, and levels holding strings
    level = [document]
    for _depth in range(FAST_DEPTH + 1):
        kinds = set(map(type, level))
        if float in kinds:
            return False
        if str in kinds:
            texts.append(level)  # its strings are picked out only if they must be counted
        has_dicts, has_lists = dict in kinds, list in kinds
        if not has_dicts and not has_lists:
            break
        dicts = level if kinds == _DICT else [v for v in level if type(v) is dict]
        lists = [v for v in level if type(v) is list] if has_lists else []
        keys += sum(map(len, dicts))
        texts.append(chain.from_iterable(dicts))
        level = list(chain(chain.from_iterable(map(dict.values, dicts)), *lists))
    else:
        return False
    if colons == keys:
        return True
    return colons == keys + sum("".join(_strings(part)).count(":") for part in texts)


def _strings(part: Any) -> Any:
    """The strings of one level (a list of values), or the keys themselves (an iterable)."""
    if type(part) is list:
        return [v for v in part if type(v) is str]
    return part


def _check_containers(text: str, where: str, cap: int | None) -> None:
    allowed = len(text) // CONTAINER_DENSITY + CONTAINER_FLOOR
    if cap is not None:
        allowed = min(allowed, cap)
    if len(text) // 2 < allowed or text.count("[") + text.count("{") <= allowed:
        return  # the common case: counted in C, strings included
    outside = _STRING.sub("", text)  # only brackets outside strings make objects
    found = outside.count("[") + outside.count("{")
    if found <= allowed:
        return
    depth = sys.getrecursionlimit()
    if "[" * depth in outside or "{" * depth in outside:
        raise RecursionError  # the parser would stop there too: say so
    raise HeaderError(
        where,
        f"JSON holds {found} '[' and '{{' in {len(text)} characters, more than the "
        f"{allowed} qarm parses in such a document (each is an object in memory)",
    )


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _long_integer(text: str) -> str | None:
    """Where the first integer of more digits than Python converts is, or None."""
    limit = sys.get_int_max_str_digits()
    match = re.search(rf"[0-9]{{{limit + 1},}}", text) if limit else None
    if match is None:
        return None
    line = text.count("\n", 0, match.start()) + 1
    column = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
    return (
        f"an integer of {len(match.group())} digits at line {line} column {column}, more than "
        f"the {limit} any number qarm reads may have"
    )


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
"""The escape of a surrogate code point: only a document holding one can decode to a lone
surrogate (raw UTF-8 cannot encode one)."""
_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_surrogates(document: Any, where: str) -> None:
    """Refuse a key or string holding a lone surrogate (a pair decodes to one character)."""
    stack: list[tuple[Any, str]] = [(document, "$")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                _surrogate_free(key, f"the key (in {path})", where)
                stack.append((item, f"{path}[{key!r}]"))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))
        elif isinstance(value, str):
            _surrogate_free(value, f"the string at {path}", where)


def _surrogate_free(text: str, what: str, where: str) -> None:
    found = _SURROGATE.search(text)
    if found is not None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        raise HeaderError(
            where,
            f"{what} {shown!r} holds a lone surrogate ({found.group()!r}), which is not "
            "Unicode text",
        )


_NEGATIVE_ZERO = re.compile(r"[\[,]\s*-0+(?![\d.eE])")
"""What may be an integer ``-0`` in a list (shapes and data_offsets); checked by a parse."""


def _refuse_negative_zero(text: str, file: str) -> None:
    """json reads the integer -0 as 0; the safetensors library refuses it (no unsigned
    integer), so a header holding one is refused too. A string holding "-0" is no integer."""

    def integer(literal: str) -> int:
        if literal.startswith("-") and not literal.strip("-0"):
            raise HeaderError(
                file, "a shape or data offset is -0, which the safetensors library refuses"
            )
        return int(literal)

    json.loads(text, parse_int=integer)


def parse_header(raw: bytes, *, file: str, size: int, header_length: int) -> ShardHeader:
    """Parse the header bytes of ``file`` (without the prefix) and validate every entry."""
    fast = _parse_fast(raw)
    if fast is not None:
        metadata, entries, columns = fast
    else:
        (metadata, entries), columns = _parse_strict(raw, file), None
    data_length = size - 8 - header_length
    ordered = validate_layout(entries, data_length=data_length, where=file, columns=columns)
    return ShardHeader(
        file=file,
        size=size,
        header_length=header_length,
        metadata=metadata,
        tensors=tuple(ordered),
    )


Parsed = tuple[dict[str, str] | None, list[TensorEntry]]
Columns = tuple[list[str], list[tuple[int, ...]], list[int], list[int]]
"""The entries' dtypes, shapes, begins and ends, in the entries' order."""
FastParsed = tuple[dict[str, str] | None, list[TensorEntry], Columns]


def _parse_strict(raw: bytes, file: str) -> Parsed:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(file, f"header is not UTF-8 (byte {exc.start})") from None
    if not text.startswith("{"):
        raise HeaderError(file, "header does not start with a JSON object")
    document = loads_strict(text, file)
    if not isinstance(document, dict):
        raise HeaderError(file, "header is not a JSON object")
    # rare: only then read every integer ("-" first: one character is found at memchr's speed)
    if "-" in text and "-0" in text and _NEGATIVE_ZERO.search(text):
        _refuse_negative_zero(text, file)
    metadata = document.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise HeaderError(file, "__metadata__ must map strings to strings")
    return metadata, _entries(document, file)


_NEGATIVE_ZERO_BYTES = re.compile(_NEGATIVE_ZERO.pattern.encode())


if TYPE_CHECKING:
    _Dtype = str
else:
    # decoded as the one string of each known dtype, not a string per tensor; an unknown
    # dtype fails the typed decode, and the strict parse names it
    _Dtype = Literal[tuple(DTYPE_BITS)]


class _Entry(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """One header entry exactly as the format defines it; msgspec checks every type in C."""

    dtype: _Dtype
    shape: tuple[Annotated[int, msgspec.Meta(ge=0, lt=MAX_DIM)], ...]
    data_offsets: tuple[
        Annotated[int, msgspec.Meta(ge=0, lt=MAX_DIM)],
        Annotated[int, msgspec.Meta(ge=0, lt=MAX_DIM)],
    ]


_HEADER = msgspec.json.Decoder(dict[str, _Entry])
_METADATA = msgspec.json.Decoder(dict[str, str])
_WS = rb"[ \t\r\n]*"
_LEADING_METADATA = re.compile(rb'\{%s"__metadata__"%s:%s(\{[^{}\[\]]*\})%s(,?)' % ((_WS,) * 4))
"""``__metadata__`` where the safetensors library writes it, first; an object that holds no
container, so its end is the first ``}`` (strings hold no brace: the text has no backslash and
the match starts at the text's first quote)."""
_ENTRY_DTYPE, _ENTRY_SHAPE = attrgetter("dtype"), attrgetter("shape")
_ENTRY_OFFSETS = attrgetter("data_offsets")


def _parse_fast(raw: bytes) -> FastParsed | None:
    """What :func:`_parse_strict` returns, decoded by msgspec into typed entries, and the
    entries' columns (for :func:`validate_layout`), for a header that is sound; None for any
    other (the strict parse then refuses it by name, or accepts it the slow way).

    Sound here: ASCII without a backslash (every string spelled as it decodes), no ``-0``,
    ``__metadata__`` absent or first and strings to strings, every entry exactly ``dtype`` (a
    known one) / ``shape`` / ``data_offsets`` of the right types and bounds (checked by the
    typed decode, so no other object, no float, no bool is anywhere), and no key written
    twice: every ``:`` outside a string separates one key, so the text's colons less those
    inside its strings must equal the keys kept (see :func:`loads_fast`)."""
    if raw[:1] != b"{" or not raw.isascii() or b"\\" in raw:
        return None
    # one byte is looked for at memchr's speed, two at a tenth of it: most headers hold no "-"
    if b"-" in raw and b"-0" in raw and _NEGATIVE_ZERO_BYTES.search(raw):
        return None
    metadata: dict[str, str] | None = None
    body = raw
    colons = 0
    has_metadata = b'"__metadata__"' in raw
    if has_metadata:
        leading = _LEADING_METADATA.match(raw)
        if leading is None:
            return None
        try:
            metadata = _METADATA.decode(leading[1])
        except msgspec.DecodeError:
            return None
        colons = (
            len(metadata) + "".join(metadata).count(":") + "".join(metadata.values()).count(":")
        )
        colons += 1  # the colon after "__metadata__"
        rest = raw[leading.end() :]
        closes = rest.lstrip(b" \t\r\n").startswith(b"}")
        if closes == bool(leading[2]):
            return None  # a comma before the end, or none before more: not JSON
        body = b"{" + rest
    try:
        document = _HEADER.decode(body)
    except msgspec.DecodeError:
        return None
    if has_metadata and b'"__metadata__"' in body:
        return None  # a second one
    values = document.values()
    dtypes = list(map(_ENTRY_DTYPE, values))
    colons += 4 * len(dtypes)
    written = raw.count(b":")
    # equal before the names' own colons are counted proves it alone: none lost, none in a name
    if written != colons and written != colons + "".join(document).count(":"):
        return None
    offsets = list(chain.from_iterable(map(_ENTRY_OFFSETS, values)))
    # one object per distinct shape (and, by _Dtype, dtype), not one per tensor: a million
    # entries hold a few dozen of each, and memory first touched costs time of its own
    shapes = list(map(_ENTRY_SHAPE, values))
    shapes = list(map({}.setdefault, shapes, shapes))
    begins, ends = offsets[0::2], offsets[1::2]
    fields = zip(document, dtypes, shapes, begins, ends, strict=True)
    entries = list(map(tuple.__new__, repeat(TensorEntry), fields))
    return metadata, entries, (dtypes, shapes, begins, ends)


def _entries(document: dict[str, Any], where: str) -> list[TensorEntry]:
    """Every entry, checked column by column in C; the first entry that fails is then found
    and named by :func:`_entry`."""
    columns = _columns(document)
    if columns is not None:
        return columns[0]
    return [_entry(name, value, where) for name, value in document.items()]


def _columns(document: dict[str, Any]) -> tuple[list[TensorEntry], list[str]] | None:
    """(the entries, their dtypes) when every entry is sound, checked on whole columns in C;
    None when any is not."""
    values = list(document.values())
    if set(map(type, values)) <= _DICT and all(map(eq, map(dict.keys, values), repeat(ENTRY_KEYS))):
        dtypes = list(map(_DTYPE, values))
        shapes = list(map(_SHAPE, values))
        offsets = list(map(_OFFSETS, values))
        if (
            set(map(type, dtypes)) <= _STR
            and set(map(type, shapes)) <= _LIST
            and set(map(type, offsets)) <= _LIST
            and set(map(len, offsets)) <= _TWO
            and _counts(list(chain.from_iterable(shapes)))
            and _counts(flat := list(chain.from_iterable(offsets)))
        ):
            fields = zip(document, dtypes, map(tuple, shapes), flat[0::2], flat[1::2], strict=True)
            return list(map(tuple.__new__, repeat(TensorEntry), fields)), dtypes
    return None


def _counts(items: list[Any]) -> bool:
    """All ints (not bools, not floats) in [0, MAX_DIM)."""
    return set(map(type, items)) <= _INT and (
        not items or (min(items) >= 0 and max(items) < MAX_DIM)
    )


_DTYPE, _SHAPE, _OFFSETS = itemgetter("dtype"), itemgetter("shape"), itemgetter("data_offsets")
_DICT, _STR, _LIST, _INT, _TWO = {dict}, {str}, {list}, {int}, {2}


def _entry(name: str, value: Any, where: str) -> TensorEntry:
    if not isinstance(value, dict):
        raise HeaderError(where, f"tensor {name!r}: entry is not an object")
    if set(value) != ENTRY_KEYS:
        raise HeaderError(
            where, f"tensor {name!r}: keys {sorted(value)} are not {sorted(ENTRY_KEYS)}"
        )
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if not isinstance(dtype, str):
        raise HeaderError(where, f"tensor {name!r}: dtype is not a string")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise HeaderError(where, f"tensor {name!r}: shape {shape!r} is not a list of counts")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
        raise HeaderError(where, f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end]")
    return TensorEntry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _is_count(value: object) -> bool:
    return type(value) is int and 0 <= value < MAX_DIM


def expected_nbytes(entry: TensorEntry, where: str) -> int:
    """Bytes a tensor of this dtype and shape occupies, refusing sub-byte misalignment."""
    bits = DTYPE_BITS.get(entry.dtype)
    if bits is None:
        raise HeaderError(where, f"tensor {entry.name!r}: unknown dtype {entry.dtype!r}")
    numel = 1
    for dim in entry.shape:
        numel *= dim
    total_bits = numel * bits
    if total_bits >= BITS_LIMIT:
        raise HeaderError(
            where, f"tensor {entry.name!r}: shape {list(entry.shape)} overflows 64 bits"
        )
    if total_bits % 8:
        raise HeaderError(
            where,
            f"tensor {entry.name!r}: {numel} elements of {entry.dtype} do not end on a byte",
        )
    return total_bits // 8


def validate_layout(
    entries: Iterable[TensorEntry],
    *,
    data_length: int,
    where: str,
    columns: Columns | None = None,
) -> list[TensorEntry]:
    """Sizes match dtype x shape; offsets run from 0 with no overlap or hole and fill the file.

    Checked on whole columns in C (``columns``: the entries' own, where the parse made them);
    only a header that fails is walked entry by entry, to name the first tensor at fault."""
    given = entries if isinstance(entries, list) else list(entries)
    dtypes, shapes, begins, ends = columns if columns is not None else _columns_of(given)
    sizes = _Sizes(where)
    try:
        needed = list(map(sizes.__getitem__, zip(dtypes, shapes, strict=True)))
    except HeaderError:
        # named on the first tensor that has the fault in data order, as the walk would meet it
        for entry in sorted(given, key=_DATA_ORDER):
            expected_nbytes(entry, where)
        raise
    # A header as the safetensors library writes it lists its tensors in data order: checked
    # as given, in C; sorted only when not (or when an empty tensor makes the order a tie).
    if 0 not in sizes.values() and _contiguous(begins, ends, needed, data_length):
        return given
    ordered = sorted(given, key=_DATA_ORDER)
    dtypes, shapes, begins, ends = _columns_of(ordered)
    needed = list(map(sizes.__getitem__, zip(dtypes, shapes, strict=True)))
    if _contiguous(begins, ends, needed, data_length):
        return ordered
    _name_the_fault(ordered, data_length, where)
    raise AssertionError("a layout that fails in bulk fails entry by entry")  # unreachable


class _Sizes(dict[tuple[str, tuple[int, ...]], int]):
    """Bytes per (dtype, shape), each computed once, on first lookup."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def __missing__(self, key: tuple[str, tuple[int, ...]]) -> int:
        size = self[key] = expected_nbytes(TensorEntry("", key[0], key[1], 0, 0), self.where)
        return size


def _columns_of(entries: list[TensorEntry]) -> Columns:
    return (
        list(map(_TENSOR_DTYPE, entries)),
        list(map(_TENSOR_SHAPE, entries)),
        list(map(_BEGIN, entries)),
        list(map(_END, entries)),
    )


def _contiguous(begins: list[int], ends: list[int], needed: list[int], data_length: int) -> bool:
    """Offsets run from 0 in this order with no overlap or hole, fill the data, and each
    span is its dtype x shape (``needed``, in the same order)."""
    return (
        (ends[-1] if ends else 0) == data_length
        and (not begins or begins[0] == 0)
        and begins[1:] == ends[:-1]
        and list(map(sub, ends, begins)) == needed
    )


_DATA_ORDER = itemgetter(3, 4, 0)
_TENSOR_DTYPE, _TENSOR_SHAPE = itemgetter(1), itemgetter(2)
_BEGIN, _END = itemgetter(3), itemgetter(4)


def _name_the_fault(ordered: list[TensorEntry], data_length: int, where: str) -> None:
    cursor = 0
    for entry in ordered:
        if entry.end < entry.begin:
            raise HeaderError(where, f"tensor {entry.name!r}: data_offsets end before they begin")
        nbytes = expected_nbytes(entry, where)
        if entry.end - entry.begin != nbytes:
            raise HeaderError(
                where,
                f"tensor {entry.name!r}: data_offsets span {entry.end - entry.begin} bytes, "
                f"{entry.dtype} {list(entry.shape)} needs {nbytes}",
            )
        if entry.begin < cursor:
            raise HeaderError(where, f"tensor {entry.name!r}: data_offsets overlap another tensor")
        if entry.begin > cursor:
            raise HeaderError(
                where, f"tensor {entry.name!r}: hole of {entry.begin - cursor} bytes before it"
            )
        cursor = entry.end
    if cursor != data_length:
        raise HeaderError(
            where,
            f"tensors end at byte {cursor} of the data but the file holds {data_length} data "
            f"bytes (8 + header + data must equal the file size)",
        )
