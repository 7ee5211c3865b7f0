"""Property tests: any input parses or raises a named QarmError; valid inputs round-trip."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qarm_audit.declarations import read_declaration
from qarm_audit.errors import QarmError
from qarm_audit.modules.inventory import (
    ModuleInfo,
    assign_engine_names,
    build_inventory,
    experts_layer,
    experts_layers,
)
from qarm_audit.resolve import resolve
from qarm_audit.sources import header as header_module
from qarm_audit.sources.checkpoint import Checkpoint, Origin, ShardHeader, TensorEntry
from qarm_audit.sources.header import DTYPE_BITS, length_prefix, parse_header
from qarm_audit.sources.hub import sizing
from qarm_audit.sources.index import parse_index
from qarm_audit.sources.manifest import parse_manifest, render_manifest

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.binary(max_size=400))
def test_any_bytes_parse_or_raise_a_named_error(data: bytes) -> None:
    try:
        length = length_prefix(data[:8], where="x", size=len(data))
        parse_header(data[8 : 8 + length], file="x", size=len(data), header_length=length)
    except QarmError:
        pass


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def header_bytes(document: object) -> bytes:
    body = json.dumps(document).encode()
    return struct.pack("<Q", len(body)) + body


@FAST
@given(st.dictionaries(st.text(max_size=10), JSONISH, max_size=5), st.integers(0, 64))
def test_any_json_header_parses_or_raises_a_named_error(document: dict, data: int) -> None:
    raw = header_bytes(document) + b"\x00" * data
    try:
        length = length_prefix(raw[:8], where="x", size=len(raw))
        parse_header(raw[8 : 8 + length], file="x", size=len(raw), header_length=length)
    except QarmError:
        pass


TENSORS = st.lists(
    st.tuples(
        st.text(alphabet="abc.", min_size=1, max_size=12),
        st.sampled_from(sorted(b for b in DTYPE_BITS if DTYPE_BITS[b] >= 8)),
        st.lists(st.integers(0, 5), max_size=3),
    ),
    max_size=8,
    unique_by=lambda t: t[0],
)


@FAST
@given(TENSORS)
def test_valid_headers_parse_and_round_trip_through_a_manifest(tensors: list) -> None:
    header: dict = {}
    offset = 0
    for name, dtype, shape in tensors:
        numel = 1
        for d in shape:
            numel *= d
        size = numel * DTYPE_BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = header_bytes(header) + b"\x00" * offset
    length = length_prefix(raw[:8], where="x", size=len(raw))
    shard = parse_header(
        raw[8 : 8 + length], file="m.safetensors", size=len(raw), header_length=length
    )
    assert sorted(t.name for t in shard.tensors) == sorted(t[0] for t in tensors)
    order = [(t.begin, t.end, t.name) for t in shard.tensors]
    assert order == sorted(order)  # entries come back in data order
    checkpoint = Checkpoint(Origin("local", "x"), {"config.json": "{}\n"}, None, (shard,))
    text = render_manifest(checkpoint)
    again = parse_manifest(text, "m")
    assert again.shards == checkpoint.shards
    assert render_manifest(again) == text


@FAST
@given(st.text(max_size=200))
def test_any_index_text_parses_or_raises_a_named_error(text: str) -> None:
    with contextlib.suppress(QarmError):
        parse_index(text)


@FAST
@given(JSONISH)
def test_any_declaration_reads_or_raises_a_named_error(document: object) -> None:
    for wrap in (document, {"quantization_config": document}, {"quantization": document}):
        with contextlib.suppress(QarmError):
            read_declaration({"config.json": json.dumps(wrap)})


MODULE = st.lists(
    st.sampled_from(
        [
            "model",
            "layers",
            "0",
            "1",
            "mlp",
            "experts",
            "q_proj",
            "k_proj",
            "v_proj",
            "gate_proj",
            "up_proj",
            "self_attn",
            "lm_head",
            "language_model",
        ]
    ),
    min_size=1,
    max_size=6,
).map(".".join)
PATTERN = st.lists(
    st.sampled_from(
        ["model", "layers", "*", "0", "mlp", "q_proj", "gate", "experts", "?", "[01]", "lm_head"]
    ),
    min_size=1,
    max_size=5,
).map(".".join)


@FAST
@given(
    st.lists(MODULE, min_size=1, max_size=12, unique=True),
    st.lists(PATTERN, max_size=6),
    st.lists(MODULE, max_size=6),
)
def test_resolver_gives_every_module_exactly_one_membership(
    modules: list[str], excludes: list[str], listed: list[str]
) -> None:
    tensors = [TensorEntry(f"{m}.weight", "BF16", (4, 4), 0, 0) for m in modules]
    inventory = build_inventory(tensors)
    for quantization in (
        {"quant_algo": "NVFP4", "exclude_modules": excludes},
        {
            "quant_algo": "MIXED_PRECISION",
            "exclude_modules": excludes,
            "quantized_layers": {m: {"quant_algo": "FP8"} for m in listed}
            or {"x": {"quant_algo": "FP8"}},
        },
    ):
        declaration = read_declaration(
            {
                "hf_quant_config.json": json.dumps(
                    {"producer": {"name": "modelopt"}, "quantization": quantization}
                )
            }
        )
        resolution = resolve(declaration, inventory)
        assert set(resolution.memberships) == set(inventory)


@FAST
@given(
    st.lists(st.text(alphabet="ab.c1", min_size=1, max_size=5), min_size=1, max_size=8),
    st.text(alphabet="ab.c1x", max_size=14),
)
def test_the_trie_regex_finds_exactly_the_words_that_occur(words: list[str], text: str) -> None:
    import re

    from qarm_audit.resolve.matchers import trie_regex

    assert bool(re.compile(trie_regex(words)).search(text)) == any(w in text for w in words)


# -- the column-wise header checks decide exactly as the entry-by-entry ones --------------------

# Mostly valid, so that one bad value among good ones reaches the column-wise path.
GOOD_DIM = st.integers(0, 8)
DIM = st.one_of(GOOD_DIM, GOOD_DIM, GOOD_DIM, st.sampled_from([-1, 2**53, True, 2.0, "4", None]))
OFFSETS = st.one_of(
    st.tuples(GOOD_DIM, GOOD_DIM).map(list),
    st.tuples(GOOD_DIM, GOOD_DIM).map(list),
    st.lists(DIM, max_size=3),
)
ENTRY = st.one_of(
    st.fixed_dictionaries(
        {
            "dtype": st.sampled_from(["F32", "BF16", "U8", "F4", "F32", "F7", 3]),
            "shape": st.one_of(st.lists(DIM, max_size=3), st.sampled_from([None, "2", {"a": 1}])),
            "data_offsets": OFFSETS,
        }
    ),
    JSONISH,
)


def _outcome(check: object) -> object:
    try:
        return ("ok", check())  # type: ignore[operator]
    except QarmError as exc:
        return ("error", str(exc))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=4), ENTRY, max_size=5))
def test_column_wise_entry_checks_equal_the_entry_by_entry_ones(document: dict) -> None:
    fast = _outcome(lambda: header_module._entries(document, "x"))
    slow = _outcome(lambda: [header_module._entry(k, v, "x") for k, v in document.items()])
    assert fast == slow


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.sampled_from(["F32", "U8", "F4", "F7"]), st.lists(GOOD_DIM, max_size=2)),
        max_size=5,
    ),
    st.sampled_from(["none", "begin", "end", "length", "swap", "shift", "resize"]),
    st.integers(0, 4),
    st.integers(-4, 4),
)
def test_column_wise_layout_check_accepts_exactly_what_the_walk_accepts(
    rows: list[tuple[str, list[int]]], fault: str, at: int, delta: int
) -> None:
    """A contiguous layout from the declared sizes, then at most one fault planted in it."""
    entries, cursor = [], 0
    for i, (dtype, shape) in enumerate(rows):
        numel = 1
        for d in shape:
            numel *= d
        size = numel * DTYPE_BITS.get(dtype, 32) // 8
        entries.append(TensorEntry(f"t{i}", dtype, tuple(shape), cursor, cursor + size))
        cursor += size
    length = cursor + (delta if fault == "length" else 0)
    if entries and fault not in ("none", "length"):
        i = at % len(entries)
        e = entries[i]
        if fault == "begin":
            entries[i] = e._replace(begin=max(0, e.begin + delta))
        elif fault == "end":
            entries[i] = e._replace(end=max(0, e.end + delta))
        elif fault == "swap":
            entries[i] = e._replace(begin=e.end, end=e.begin)
        elif fault == "shift":  # moved whole: its own span is right, its place is not
            entries[i] = e._replace(begin=max(0, e.begin + delta), end=max(0, e.end + delta))
        else:  # resized in place: contiguous, but the span is not dtype x shape
            end = max(e.begin, e.end + delta)
            entries[i] = e._replace(end=end)
            if i + 1 < len(entries):
                entries[i + 1] = entries[i + 1]._replace(begin=end)
            else:
                length = end
    ordered = sorted(entries, key=lambda e: (e.begin, e.end, e.name))
    fast = _outcome(lambda: header_module.validate_layout(entries, data_length=length, where="x"))
    walk = _outcome(lambda: header_module._name_the_fault(ordered, length, "x"))
    if fast[0] == "ok":
        assert walk == ("ok", None)
    else:
        assert walk[0] == "error"


def test_a_layout_is_returned_in_data_order_ties_by_name() -> None:
    """Empty tensors share an offset: the header's order is not data order then, and the
    entries come back sorted (begin, end, name), as for a header listed out of order."""
    from qarm_audit.sources.checkpoint import TensorEntry

    given = [
        TensorEntry("z", "F32", (0,), 0, 0),
        TensorEntry("a", "F32", (0,), 0, 0),
        TensorEntry("w", "F32", (1,), 0, 4),
    ]
    ordered = header_module.validate_layout(given, data_length=4, where="x")
    assert [e.name for e in ordered] == ["a", "z", "w"]
    shuffled = [given[2], given[1], given[0]]
    ordered = header_module.validate_layout(shuffled, data_length=4, where="x")
    assert [e.name for e in ordered] == ["a", "z", "w"]


_EXPERT_REGEX = re.compile(r"^(?P<experts>.*\.experts)\.\d+\.[^.]+$")
_PIECES = ["", "a", "experts", "a.b", "x\ny", "\n", ".", "q.experts.z"]
_MIDDLES = [".experts.", "experts.", ".experts.x.", ".Experts."]
_NUMBERS = ["7", "12", "", "\u0663", "\u00b2", "1a", "\n"]


def test_the_experts_layer_is_what_the_regex_takes_from_the_name() -> None:
    names = [
        f"{head}{middle}{number}.{leaf}"
        for head, middle, number, leaf in itertools.product(_PIECES, _MIDDLES, _NUMBERS, _PIECES)
    ]
    for name in names:
        expected = _EXPERT_REGEX.match(name)
        assert experts_layer(name) == (expected["experts"] if expected else None), name


@given(st.text(max_size=30))
def test_the_experts_layer_of_any_text_is_what_the_regex_takes(name: str) -> None:
    expected = _EXPERT_REGEX.match(name)
    assert experts_layer(name) == (expected["experts"] if expected else None)


def test_the_experts_layers_worked_out_per_parent_are_those_of_each_name() -> None:
    """experts_layers decides once per parent; every name gets what experts_layer says, as
    its engine name and as the experts layer the layer tree takes from the inventory."""
    names = [
        f"{head}{middle}{number}.{leaf}"
        for head, middle, number, leaf in itertools.product(_PIECES, _MIDDLES, _NUMBERS, _PIECES)
    ]
    assert experts_layers(names) == [experts_layer(name) or "" for name in names]
    modules = {name: ModuleInfo(name) for name in names}
    assign_engine_names(modules)
    for name, info in modules.items():
        assert info.engine_name == (experts_layer(name) or name), name
        assert info.experts == (experts_layer(name) or ""), name


def _entry_bytes(entry: TensorEntry) -> int:
    """An entry's compact JSON besides its quoted name, written out entry by entry."""
    return (
        sizing.ENTRY_BYTES
        + len(entry.dtype)
        + len(",".join(map(str, entry.shape)))
        + len(str(entry.begin))
        + len(str(entry.end))
    )


HEADER_ENTRIES = st.lists(
    st.builds(
        TensorEntry,
        st.text("ab.", min_size=1, max_size=6),
        st.sampled_from(sorted(DTYPE_BITS)),
        st.lists(st.integers(0, 10**6), max_size=3).map(tuple),
        st.integers(0, 10**12),
        st.integers(0, 10**12),
    ),
    min_size=1,  # a shard the index names no tensor of teaches nothing
    max_size=30,
)


@FAST
@given(HEADER_ENTRIES, st.integers(0, 10**4))
def test_the_size_estimator_learns_each_suffix_as_a_walk_over_the_entries_would(
    entries: list[TensorEntry], spare: int
) -> None:
    names = [entry.name for entry in entries]
    estimator = sizing.Estimator({"s": names}, None, shards=2)
    base = 2 + 2 * len(names) + sum(len(n.encode()) for n in names)
    length = base + sum(map(_entry_bytes, entries)) + spare
    estimator.observe(ShardHeader("s", 10**13, length, None, tuple(entries)))
    expected: dict[str, list[int]] = {}
    for entry in entries:
        tally = expected.setdefault(entry.name.rpartition(".")[2], [0, 0])
        tally[0] += _entry_bytes(entry)
        tally[1] += 1
    assert estimator._suffix == expected
    assert list(estimator._suffix) == list(expected)  # the same order: the same float sums
    assert estimator._rest == spare
