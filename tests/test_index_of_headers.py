"""A folder's index proven against its headers by rendering it from them (``index_of_headers``):
the same checkpoint as parsing the index and looking every name up, and every disagreement
still found, when the index is written as ``transformers`` writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import write_safetensors
from qarm_audit import audit
from qarm_audit.errors import QarmError
from qarm_audit.sources import open_source
from qarm_audit.sources.index import (
    ShardIndex,
    _dumps_writes_the_same,
    _head,
    _keys_may_be_sorted,
    index_head,
    index_text_of,
    parse_index,
    written_index,
)
from qarm_audit.sources.local import read_local_shard

INDEX = "model.safetensors.index.json"
FIRST, SECOND = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"


def transformers_index(
    weight_map: dict[str, str], total_size: float | None, tail: str = "\n"
) -> str:
    """The text ``transformers`` writes (``save_pretrained``'s sharded index)."""
    document: dict[str, Any] = {"weight_map": weight_map}
    if total_size is not None:
        document["metadata"] = {"total_size": total_size}
    return json.dumps(document, indent=2, sort_keys=True) + tail


def folder(
    root: Path,
    shards: dict[str, dict[str, Any]],
    weight_map: dict[str, str] | None = None,
    total_size: float | None = None,
    tail: str = "\n",
) -> Path:
    for file, tensors in shards.items():
        write_safetensors(root / file, tensors)
    if weight_map is None:
        weight_map = {name: file for file, tensors in shards.items() for name in tensors}
    if total_size is None:
        total_size = 8 * sum(len(tensors) for tensors in shards.values())
    (root / INDEX).write_text(transformers_index(weight_map, total_size, tail))
    return root


TWO = {
    FIRST: {"a.weight": ("F32", (2,)), "c.weight": ("F32", (2,))},
    SECOND: {"b.weight": ("F32", (2,))},
}


def parsed(root: Path) -> ShardIndex:
    return parse_index((root / INDEX).read_text())


@pytest.mark.parametrize("tail", ["\n", ""])
def test_an_index_written_by_transformers_is_proven_and_the_checkpoint_is_the_parsed_one(
    tmp_path: Path, tail: str
) -> None:
    # first mention in the sorted index: SECOND (its "a...") before FIRST
    shards = {
        FIRST: {"z.weight": ("F32", (2,)), "b.weight": ("F32", (2,))},
        SECOND: {"a.weight": ("F32", (2,))},
    }
    root = folder(tmp_path, shards, tail=tail)
    checkpoint = open_source(str(root))
    index = checkpoint.parsed_index
    assert index is not None and index.from_headers
    assert index.weight_map == parsed(root).weight_map
    assert index.shard_files == parsed(root).shard_files == [SECOND, FIRST]
    assert [shard.file for shard in checkpoint.shards] == [SECOND, FIRST]
    assert index.total_size == 24
    # held as the rule transformers wrote it by, which renders the file again
    assert checkpoint.index_text is None and checkpoint.derived_index is not None
    assert index_text_of(checkpoint) == (root / INDEX).read_text()
    assert audit(str(root)).refusals == []


@pytest.mark.parametrize(
    ("name", "rest"),
    [
        ("caf\u00e9.weight", {"metadata": {"total_size": 8}}),
        ("del\x7f.weight", {"metadata": {"total_size": 8}}),
        ("a.weight", {"metadata": {"total_size": 8, "ratio": 0.5}}),
    ],
)
def test_an_index_json_dumps_would_spell_otherwise_is_kept_as_text(
    tmp_path: Path, name: str, rest: dict[str, Any]
) -> None:
    """Proven by orjson's rendering, but json.dumps (which a derived index renders with)
    escapes non-ASCII and DEL and spells floats its own way: the text is kept verbatim."""
    write_safetensors(tmp_path / FIRST, {name: ("F32", (2,))})
    text = orjson.dumps(
        {**rest, "weight_map": {name: FIRST}}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    ).decode()
    (tmp_path / INDEX).write_text(text, encoding="utf-8")
    checkpoint = open_source(str(tmp_path))
    assert checkpoint.parsed_index is not None and checkpoint.parsed_index.from_headers
    assert checkpoint.derived_index is None
    assert checkpoint.index_text == text


_ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=126), max_size=8)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _ASCII,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ASCII, inner, max_size=3),
    max_leaves=8,
)


@given(
    rest=st.dictionaries(_ASCII.filter(lambda k: k != "weight_map"), _VALUES, max_size=3),
    weight_map=st.dictionaries(_ASCII, _ASCII, max_size=6),
)
def test_json_dumps_writes_what_orjson_writes_where_the_rule_is_kept(
    rest: dict[str, Any], weight_map: dict[str, str]
) -> None:
    """The ground of index_of_headers' derived index: on ASCII text without DEL and without a
    float, json.dumps(indent=2, sort_keys=True) and orjson's indented sorted output agree."""
    document = {**rest, "weight_map": weight_map}
    written = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    assert _dumps_writes_the_same(written, rest)
    assert json.dumps(document, indent=2, sort_keys=True).encode() == written


def test_an_index_written_otherwise_is_parsed_and_gives_the_same_checkpoint(tmp_path: Path) -> None:
    proven = folder(tmp_path / "proven", TWO)
    other = folder(tmp_path / "other", TWO)
    document = json.loads((other / INDEX).read_text())
    (other / INDEX).write_text(json.dumps(document))  # compact: not what is rendered
    a, b = open_source(str(proven)), open_source(str(other))
    assert a.parsed_index is not None and a.parsed_index.from_headers
    assert b.parsed_index is not None and not b.parsed_index.from_headers
    assert a.shards == b.shards
    assert a.parsed_index.weight_map == b.parsed_index.weight_map
    assert a.parsed_index.shard_files == b.parsed_index.shard_files


DISAGREEING = [
    ("swapped", {"a.weight": SECOND, "b.weight": FIRST, "c.weight": FIRST}, "index-disagrees"),
    (
        "ghost",
        {"a.weight": FIRST, "b.weight": SECOND, "c.weight": FIRST, "d.weight": FIRST},
        "index-disagrees",
    ),
    ("unlisted", {"a.weight": FIRST, "b.weight": SECOND}, "index-disagrees"),
]


@pytest.mark.parametrize(
    ("case", "weight_map", "code"), DISAGREEING, ids=[c[0] for c in DISAGREEING]
)
def test_an_index_in_transformers_form_that_disagrees_is_refused(
    tmp_path: Path, case: str, weight_map: dict[str, str], code: str
) -> None:
    root = folder(tmp_path, TWO, weight_map)
    index = open_source(str(root)).parsed_index
    assert index is not None and not index.from_headers
    assert code in [r.code for r in audit(str(root)).refusals]


def test_a_wrong_total_size_in_transformers_form_is_refused(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO, total_size=25)
    assert [r.code for r in audit(str(root)).refusals] == ["index-total-size"]


def test_a_key_written_twice_is_refused_as_the_parser_refuses_it(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO)
    text = (root / INDEX).read_text()
    line = f'    "b.weight": "{SECOND}",\n'
    assert line in text
    (root / INDEX).write_text(text.replace(line, line + line))
    with pytest.raises(QarmError, match="duplicate"):
        open_source(str(root))


def test_a_name_in_two_shards_is_refused_by_name(tmp_path: Path) -> None:
    shards = {
        FIRST: {"a.weight": ("F32", (2,)), "c.weight": ("F32", (2,))},
        SECOND: {"a.weight": ("F32", (2,)), "b.weight": ("F32", (2,))},
    }
    weight_map = {"a.weight": SECOND, "b.weight": SECOND, "c.weight": FIRST}
    root = folder(tmp_path, shards, weight_map)
    index = open_source(str(root)).parsed_index
    assert index is not None and not index.from_headers
    with pytest.raises(QarmError, match="duplicate name"):
        audit(str(root))


def test_a_safetensors_file_the_index_does_not_name_is_not_audited(tmp_path: Path) -> None:
    """Mistral-style repos ship ``consolidated.safetensors`` beside the shards: it is read while
    guessing the shards, but the checkpoint is the index's, as before."""
    root = folder(tmp_path, TWO)
    write_safetensors(root / "consolidated.safetensors", {"a.weight": ("F32", (2,))})
    checkpoint = open_source(str(root))
    assert [shard.file for shard in checkpoint.shards] == [FIRST, SECOND]
    assert checkpoint.parsed_index is not None and not checkpoint.parsed_index.from_headers
    assert audit(str(root)).totals.tensors == 3


def test_an_unreadable_file_the_index_does_not_name_stops_nothing(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO)
    (root / "broken.safetensors").write_bytes(b"\xff" * 16)
    checkpoint = open_source(str(root))
    assert checkpoint.parsed_index is not None and checkpoint.parsed_index.from_headers
    assert [shard.file for shard in checkpoint.shards] == [FIRST, SECOND]


def test_an_unreadable_shard_the_index_names_is_refused_by_its_name(tmp_path: Path) -> None:
    root = folder(tmp_path, TWO)
    (root / SECOND).write_bytes(b"\xff" * 16)
    with pytest.raises(QarmError) as info:
        open_source(str(root))
    assert SECOND in str(info.value)


def test_an_index_of_no_names_beside_no_shard_is_still_nothing_to_audit(tmp_path: Path) -> None:
    (tmp_path / INDEX).write_text(transformers_index({}, 0))
    write_safetensors(tmp_path / "empty.safetensors", {})
    with pytest.raises(QarmError, match="holds no declaration document"):
        open_source(str(tmp_path))


def hub_index(weight_map: dict[str, str], total_size: int) -> str:
    """The text huggingface_hub's ``save_torch_state_dict`` writes: ``json.dump(index, f,
    indent=2)``, the keys in the order the state dict gives them (huggingface/huggingface_hub
    src/huggingface_hub/serialization/_torch.py@v2.4.0, ``save_torch_state_dict``)."""
    return json.dumps({"metadata": {"total_size": total_size}, "weight_map": weight_map}, indent=2)


# the least name last ("lm_head" after the model's layers, as a state dict gives it): its
# keys rise everywhere but at the end, which the adjacent pairs looked at may not reach
MODEL_ORDER = {
    FIRST: {f"model.layers.{n:04d}.weight": ("F32", (2,)) for n in range(2000)},
    SECOND: {"lm_head.weight": ("F32", (2,))},
}
# the least name first, then out of order further on (q before k)
LATER_OUT_OF_ORDER = {
    FIRST: {"a.weight": ("F32", (2,)), "m.q.weight": ("F32", (2,))},
    SECOND: {"m.k.weight": ("F32", (2,)), "z.weight": ("F32", (2,))},
}


@pytest.mark.parametrize("shards", [MODEL_ORDER, LATER_OUT_OF_ORDER], ids=["first", "later"])
def test_an_index_in_state_dict_order_is_parsed_not_proven(
    tmp_path: Path, shards: dict[str, dict[str, Any]]
) -> None:
    """Keys not sorted: the text cannot be the one transformers writes, so it is parsed at once
    (proving it aside would fail once the audit is done and run the audit twice)."""
    root = folder(tmp_path / "hub", shards)
    weight_map = {name: file for file, tensors in shards.items() for name in tensors}
    (root / INDEX).write_text(hub_index(weight_map, 8 * len(weight_map)))
    raw = (root / INDEX).read_bytes()
    assert index_head(raw, [read_local_shard(root / f, f) for f in shards]) is None
    checkpoint = open_source(str(root))
    assert checkpoint.parsed_index is not None and not checkpoint.parsed_index.from_headers
    assert checkpoint.parsed_index.weight_map == weight_map
    sorted_root = folder(tmp_path / "sorted", shards)
    by_file = sorted(open_source(str(sorted_root)).shards, key=lambda shard: shard.file)
    assert list(checkpoint.shards) == by_file  # in the order the index first names them
    ours, theirs = audit(str(root)), audit(str(sorted_root))
    assert (ours.verdict, ours.modules, ours.refusals) == (
        theirs.verdict,
        theirs.modules,
        theirs.refusals,
    )


_NAMES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


@given(
    rest=st.dictionaries(_ASCII.filter(lambda k: k < "weight_map"), _VALUES, max_size=3),
    weight_map=st.dictionaries(_NAMES, _ASCII, min_size=1, max_size=40),
    tail=st.sampled_from([b"", b"\n"]),
)
def test_no_index_transformers_writes_is_turned_away_by_its_key_order(
    rest: dict[str, Any], weight_map: dict[str, str], tail: bytes
) -> None:
    """The key-order look (first key, adjacent keys rising, the text ending with the
    weight_map) never refuses the writer's text, whatever the names hold (quotes,
    backslashes, control characters, non-ASCII), with or without the final newline the proof
    allows. The keys before the weight_map are those that sort before it: a key after it is
    never proven (see the next test)."""
    raw = orjson.dumps(
        {**rest, "weight_map": weight_map}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    )
    cut = raw.find(b'\n  "weight_map": {')
    assert cut >= 0
    assert _keys_may_be_sorted(raw + tail, cut, min(weight_map))


@pytest.mark.parametrize("after", [1, {"a": 1}, [], "z"])
def test_an_index_with_a_key_after_the_weight_map_is_parsed_not_proven(
    tmp_path: Path, after: object
) -> None:
    """A key sorting after ``weight_map`` ends the text after the weight_map; the proof writes
    only the keys before it, so the text is turned away before a proof that could not hold,
    and the checkpoint is the one parsing the index gives."""
    root = folder(tmp_path / "after", TWO)
    weight_map = {name: file for file, tensors in TWO.items() for name in tensors}
    document = {"weight_map": weight_map, "zeta": after}
    (root / INDEX).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    raw = (root / INDEX).read_bytes()
    shards = [read_local_shard(root / f, f) for f in TWO]
    assert index_head(raw, shards) is None
    head = _head(raw)
    assert head is not None and written_index(raw, head[0], shards) is None  # could not hold
    checkpoint = open_source(str(root))
    assert checkpoint.parsed_index is not None and not checkpoint.parsed_index.from_headers
    assert checkpoint.parsed_index.weight_map == weight_map


def test_an_index_written_with_crlf_line_ends_is_parsed_not_proven(tmp_path: Path) -> None:
    """transformers' index written in text mode on Windows: the same text with CRLF line ends,
    which orjson never writes; parsed at once rather than proven aside and found wrong."""
    crlf = folder(tmp_path / "crlf", TWO)
    # without metadata: the head before weight_map ("{" and a CR) still reads as JSON
    weight_map = {name: file for file, tensors in TWO.items() for name in tensors}
    text = transformers_index(weight_map, None)
    (crlf / INDEX).write_bytes(text.replace("\n", "\r\n").encode())
    raw = (crlf / INDEX).read_bytes()
    assert index_head(raw, [read_local_shard(crlf / f, f) for f in TWO]) is None
    checkpoint = open_source(str(crlf))
    assert checkpoint.parsed_index is not None and not checkpoint.parsed_index.from_headers
    lf_root = folder(tmp_path / "lf", TWO)
    (lf_root / INDEX).write_text(text)
    lf = open_source(str(lf_root))
    assert checkpoint.shards == lf.shards
    assert lf.parsed_index is not None and lf.parsed_index.from_headers
    assert checkpoint.parsed_index.weight_map == lf.parsed_index.weight_map


def test_a_crlf_line_end_before_the_weight_map_is_not_the_writers(tmp_path: Path) -> None:
    """One CRLF line end, before the weight_map, in a text that ends as the writer's does: the
    head alone already tells that the writer did not write it (its end does not)."""
    root = folder(tmp_path, TWO)
    weight_map = {name: file for file, tensors in TWO.items() for name in tensors}
    text = transformers_index(weight_map, None).replace("{\n", "{\r\n", 1)
    raw = text.encode()
    shards = [read_local_shard(root / f, f) for f in TWO]
    assert index_head(raw, shards) is None
    assert index_head(raw.replace(b"\r", b""), shards) is not None
