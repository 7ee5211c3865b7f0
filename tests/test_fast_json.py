"""A fast parse stands in for the strict parser only where it provably gives the same answer.

Documents are parsed by orjson (``loads_fast``), headers and indexes by msgspec into typed
entries (``_parse_fast``, ``_parse_typed``), when a cheap proof says the strict parser
(Python's json with a duplicate-key hook, a surrogate walk, a digit limit, a container bound)
would return exactly the same value; otherwise the strict
parser runs and refuses by name. These properties feed hostile texts (duplicate keys at any
depth, keys spelled by escapes, surrogates, big integers, -0, NaN, floats, odd whitespace) and
check: whenever the fast path answers, the strict one answers the same, type for type; and the
public functions give the strict one's answer or its exact error.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from qarm_audit.errors import HeaderError, ShardIndexError
from qarm_audit.sources import header as header_module
from qarm_audit.sources import index as index_module
from qarm_audit.sources.header import _NO_PROOF, loads_fast, loads_strict, parse_header

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

PROPERTY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def typed(value: Any) -> Any:
    """A value with every type made part of equality (1 == 1.0 == True otherwise)."""
    if isinstance(value, dict):
        return ("dict", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


KEY_CHARS = st.sampled_from(["a", "b", ":", '"', "\\", "\u00e9", "\ud800", "\udc00", "0", " "])
KEYS = st.lists(KEY_CHARS, max_size=3).map("".join)


def spell(text: str, escape: Any) -> str:
    """A JSON string literal for ``text``, each character raw or as a ``\\u`` escape."""
    out = []
    for char in text:
        if (
            char in '"\\'
            or ord(char) < 0x20
            or 0xD800 <= ord(char) <= 0xDFFF
            or escape.draw(st.booleans())
        ):
            out.append(
                f"\\u{ord(char):04x}"
                if escape.draw(st.booleans()) or char not in '"\\'
                else "\\" + char
            )
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


NUMBERS = st.sampled_from(
    [
        "0",
        "-0",
        "1",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
        "1" + "0" * 5000,
        "1.5",
        "1e400",
        "NaN",
        "-Infinity",
        "1.0",
        "true",
        "null",
    ]
)


@st.composite
def json_text(draw: Any, depth: int = 0) -> str:
    """Hostile JSON-ish text: objects may repeat a key (spelled the same or by an escape)."""
    kind = draw(
        st.sampled_from(
            ["object", "list", "string", "number"] if depth < 4 else ["number", "string"]
        )
    )
    if kind == "number":
        return draw(NUMBERS)
    if kind == "string":
        return spell(draw(KEYS), draw(st.data()))
    if kind == "list":
        items = draw(st.lists(json_text(depth + 1), max_size=3))
        return "[" + ",".join(items) + "]"
    pairs = draw(st.lists(st.tuples(KEYS, json_text(depth + 1)), max_size=4))
    if pairs and draw(st.booleans()):  # write one key again, perhaps spelled otherwise
        pairs.append((draw(st.sampled_from([k for k, _ in pairs])), draw(json_text(depth + 1))))
    data = draw(st.data())
    space = draw(st.sampled_from(["", " ", "\n", "\t", "\r\n  "]))
    return "{" + ",".join(f"{spell(k, data)}{space}:{space}{v}" for k, v in pairs) + "}"


def strict(text: str, max_containers: int | None = None) -> Any:
    return header_module._loads_checked(text, "doc", HeaderError, max_containers)


def outcome(call: Any) -> Any:
    try:
        return ("value", typed(call()))
    except HeaderError as exc:
        return ("error", str(exc))


@PROPERTY
@given(json_text())
@example('{"a":1,"a":2}')
@example('{"a":1,"\\u0061":2}')
@example('{"x":{"a":[1,{"b":1,"b":1}]}}')
@example('{"a:":1,"b":"c:d"}')
@example('{"a":"\\ud800"}')
@example("[18446744073709551616]")
def test_the_fast_parse_is_the_strict_parse_or_no_answer(text: str) -> None:
    fast = loads_fast(text)
    if fast is not _NO_PROOF:
        assert ("value", typed(fast)) == outcome(lambda: strict(text))
    assert outcome(lambda: loads_strict(text, "doc")) == outcome(lambda: strict(text))
    raw = text.encode("utf-8", "surrogatepass")
    fast_bytes = loads_fast(raw)
    if fast_bytes is not _NO_PROOF:
        assert ("value", typed(fast_bytes)) == outcome(lambda: strict(text))


def test_a_duplicate_key_at_any_depth_is_refused_as_before() -> None:
    for text in ('{"a":1,"a":2}', '{"x":[{"k":1,"k":1}]}', '{"a":1,"\\u0061":2}'):
        assert loads_fast(text) is _NO_PROOF
        with pytest.raises(HeaderError, match="duplicate key"):
            loads_strict(text, "doc")
    assert loads_fast('{"a":1,"b":{"a":2}}') == {"a": 1, "b": {"a": 2}}


# --- headers -----------------------------------------------------------------------------------

DTYPES = st.sampled_from(["F32", "BF16", "U8", "F8_E4M3", "F8:x", 'F"', "7"])
COUNT = st.sampled_from(["0", "1", "2", "4", "-0", "3.0", "18446744073709551616", "true", '"1"'])


@st.composite
def header_text(draw: Any) -> bytes:
    """Safetensors-shaped header text, sound or broken in one of many ways."""
    data = draw(st.data())
    entries = []
    offset = 0
    for n in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(["w", "a.b", "x:y", "\u00e9", "w", "layers.0"])) + str(n)
        dims = draw(st.lists(st.sampled_from([1, 2, 4]), max_size=2))
        numel = 1
        for d in dims:
            numel *= d
        size = numel * 4
        parts = [
            ("dtype", json.dumps("F32") if draw(st.integers(0, 5)) else spell(draw(KEYS), data)),
            ("shape", "[" + ",".join(map(str, dims)) + "]"),
            ("data_offsets", f"[{offset},{offset + size}]"),
        ]
        offset += size
        if draw(st.integers(0, 6)) == 0:
            parts.append((draw(st.sampled_from(["dtype", "shape", "extra"])), draw(COUNT)))
        if draw(st.integers(0, 6)) == 0:
            parts[2] = ("data_offsets", f"[{draw(COUNT)},{offset}]")
        body = ",".join(f"{spell(k, data)}:{v}" for k, v in parts)
        entries.append((name, "{" + body + "}"))
    if entries and draw(st.integers(0, 4)) == 0:
        entries.append(draw(st.sampled_from(entries)))  # a tensor named twice
    meta = draw(
        st.sampled_from(['{"format":"pt"}', '{"a":"b:c","a":"d"}', "null", '{"a":1}', None])
    )
    items = ([("__metadata__", meta)] if meta is not None else []) + entries
    text = "{" + ",".join(f"{spell(k, data)}:{v}" for k, v in items) + "}"
    raw = text.encode("utf-8", "surrogatepass")
    return raw + b" " * draw(st.integers(0, 7))


def header_outcome(call: Any) -> Any:
    try:
        metadata, entries = call()
        return ("value", typed(metadata), [tuple(map(typed, e)) for e in entries])
    except HeaderError as exc:
        return ("error", str(exc))


@PROPERTY
@given(header_text())
@example(b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}')
@example(b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"dtype":"F32"}}')
@example(
    b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
)
@example(b'{"__metadata__":{"a":"b","a":"c"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}')
@example(b'{"w":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}')
@example(b'{"x:y":{"dtype":"F:32","shape":[1],"data_offsets":[0,4]}}')
def test_the_fast_header_parse_is_the_strict_one_or_no_answer(raw: bytes) -> None:
    fast = header_module._parse_fast(raw)
    slow = header_outcome(lambda: header_module._parse_strict(raw, "h.safetensors"))
    if fast is not None:
        assert header_outcome(lambda: fast[:2]) == slow
    size = 8 + len(raw) + 1024
    assert outcome_of_parse(raw, size) == outcome_of_parse(raw, size, fast_path=False)


def outcome_of_parse(raw: bytes, size: int, fast_path: bool = True) -> Any:
    saved = header_module._parse_fast
    if not fast_path:
        header_module._parse_fast = lambda raw: None  # type: ignore[assignment]
    try:
        shard = parse_header(raw, file="h.safetensors", size=size, header_length=len(raw))
        return ("value", typed(shard.metadata), [tuple(map(typed, e)) for e in shard.tensors])
    except HeaderError as exc:
        return ("error", str(exc))
    finally:
        header_module._parse_fast = saved


def test_a_sound_header_takes_the_fast_path() -> None:
    raw = b'{"__metadata__":{"format":"pt"},"a:b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    assert header_module._parse_fast(raw) == (
        {"format": "pt"},
        [("a:b", "F32", (2,), 0, 8)],
        (["F32"], [(2,)], [0], [8]),
    )


def test_the_bench_writes_headers_as_the_safetensors_library_does(tmp_path: Path) -> None:
    from synthetic import safetensors_header
    from tests.conftest import write_safetensors

    specs = [
        ("b.weight", "BF16", (4, 8)),
        ("a.weight_scale", "F8_E4M3", (4, 2)),
        ("a.weight", "U8", (4, 4)),
        ("a.weight_scale_2", "F32", ()),
        ("c", "F32", (3,)),
    ]
    write_safetensors(
        tmp_path / "x.safetensors", {n: (d, s) for n, d, s in specs}, {"format": "pt"}
    )
    written = (tmp_path / "x.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", written[:8])
    head, data = safetensors_header(specs)
    assert head == written[: 8 + length]
    assert len(head) + data == len(written)


# --- indexes -----------------------------------------------------------------------------------

INDEX_KEYS = st.sampled_from(["weight_map", "metadata", "weight_map", "extra", "w", "a:b"])
INDEX_VALUES = st.sampled_from(
    ['"s.safetensors"', '"a:b.safetensors"', "5", "-1", "1.5", "true", "null", '"x\\u0061"', "{}"]
)


@st.composite
def index_text(draw: Any) -> str:
    """Index-shaped text: weight_map and metadata in any order, repeated, mistyped, extended."""
    data = draw(st.data())

    def obj(keys: Any, values: Any) -> str:
        pairs = draw(st.lists(st.tuples(keys, values), max_size=4))
        return "{" + ",".join(f"{spell(k, data)}:{v}" for k, v in pairs) + "}"

    names = st.sampled_from(["w", "a.b", "x:y", "\u00e9", "w", '"'])
    top = []
    for key in draw(st.lists(INDEX_KEYS, min_size=1, max_size=3)):
        if key == "weight_map":
            top.append(f'"weight_map":{obj(names, INDEX_VALUES)}')
        elif key == "metadata":
            top.append(f'"metadata":{obj(st.sampled_from(["total_size", "t:s"]), INDEX_VALUES)}')
        else:
            top.append(f"{spell(key, data)}:{draw(INDEX_VALUES)}")
    return "{" + ",".join(top) + "}"


@PROPERTY
@given(index_text())
@example('{"weight_map":{"a":"s.safetensors","a":"t.safetensors"}}')
@example('{"weight_map":{"a":"s.safetensors"},"weight_map":{}}')
@example('{"metadata":{"total_size":5,"total_size":6},"weight_map":{}}')
@example('{"weight_map":{"x:y":"a:b.safetensors"},"metadata":{"t:s":"c:d"}}')
def test_the_typed_index_parse_is_the_strict_one_or_no_answer(text: str) -> None:
    typed_parse = index_module._parse_typed(text)
    if typed_parse is not None:  # the same keys and values (their order is not read)
        strict_parse = strict(text)
        assert typed(dict(sorted(typed_parse.items()))) == typed(dict(sorted(strict_parse.items())))
    assert index_outcome(text) == index_outcome(text, typed_path=False)


def index_outcome(text: str, typed_path: bool = True) -> Any:
    saved = index_module._parse_typed
    if not typed_path:
        index_module._parse_typed = lambda text: None  # type: ignore[assignment]
    try:
        index = index_module.parse_index(text)
        return ("value", typed(index.weight_map), index.total_size)
    except (HeaderError, ShardIndexError) as exc:
        return ("error", type(exc).__name__, str(exc))
    finally:
        index_module._parse_typed = saved


def test_an_index_as_transformers_writes_it_takes_the_typed_path() -> None:
    text = json.dumps(
        {"metadata": {"total_size": 8}, "weight_map": {"a:b": "model-1.safetensors"}}, indent=2
    )
    assert index_module._parse_typed(text) == {
        "weight_map": {"a:b": "model-1.safetensors"},
        "metadata": {"total_size": 8},
    }


def test_the_fast_path_holds_one_string_per_dtype_and_leaves_unknown_ones_to_the_strict() -> None:
    raw = (
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        b'"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'
    )
    parsed = header_module._parse_fast(raw)
    assert parsed is not None
    first, second = parsed[1]
    assert first.dtype is second.dtype
    assert header_module._parse_fast(raw.replace(b'"F32"', b'"F31"', 1)) is None
