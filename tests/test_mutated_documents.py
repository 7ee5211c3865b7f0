"""Every producer checkpoint with its JSON documents or a shard's header bent out of shape (a
value of another type, a key gone or added, a string lengthened): the audit ends in a report
that renders, or in a named QarmError; never another exception. See docs/reliability.md."""

from __future__ import annotations

import copy
import json
import random
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qarm_audit import audit
from qarm_audit.errors import QarmError
from qarm_audit.report import render_json, render_markdown

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
FIXTURES = sorted(p.name for p in PRODUCERS.iterdir() if p.is_dir())
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# values the formats give meaning to, and values of every other JSON type
ATOMS: list[Any] = [
    None, True, False, 0, -1, 1.5, 2**70, "", "re:.*", "re:(", "*", "\u202e", "a" * 300, [], {},
    ["re:.*"], {"": 1}, "NVFP4", "FP8", "W4A16", "int", "float", "tensor", "group", "channel",
    "block", 4, 8, 16, 32, 128, [128, 128], "lm_head",
]  # fmt: skip
KEYS = [
    "ignore", "targets", "quant_algo", "group_size", "format", "config_groups", "exclude_modules",
    "quantized_layers", "kv_cache_scheme", "quant_method", "bits", "weight_block_size", "dtype",
]  # fmt: skip
GONE = object()


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, (*path, index))


def _put(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return {} if value is GONE else value
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if value is GONE:
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return document


def _atom(rng: random.Random) -> Any:
    """A copy of one of :data:`ATOMS`: a later bend may change a list or dict in place, and the
    shared one would then differ from one example to the next."""
    return copy.deepcopy(rng.choice(ATOMS))


def bend(document: Any, rng: random.Random) -> Any:
    """One change at a node chosen anywhere in the document."""
    path, value = rng.choice(list(_nodes(document)))
    roll = rng.random()
    if roll < 0.15 and path:
        return _put(document, path, GONE)
    if roll < 0.3 and isinstance(value, dict):
        value[rng.choice(KEYS)] = _atom(rng)
        return document
    if roll < 0.4 and isinstance(value, str):
        return _put(document, path, value + rng.choice(["\n", ".*", "]", "\x00", "\u00e9"]))
    return _put(document, path, _atom(rng))


def _bend_a_header(shard: Path, rng: random.Random) -> None:
    raw = shard.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = bend(json.loads(raw[8 : 8 + length]), rng)
    text = json.dumps(header).encode()
    shard.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + length :])


def _bent_copy_audits(fixture: str, pattern: str, data: st.DataObject, bend_file: Any) -> None:
    """A copy of the fixture with one of its files matching ``pattern`` bent by ``bend_file``
    ends in a report that renders, or in a named error."""
    source = PRODUCERS / fixture
    name = data.draw(st.sampled_from(sorted(p.name for p in source.glob(pattern))))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "c"
        shutil.copytree(source, folder)
        bend_file(folder / name)
        try:
            report = audit(str(folder))
        except QarmError:
            return
        render_json(report)
        render_markdown(report)


def _bend_a_document(path: Path, rng: random.Random) -> None:
    document = json.loads(path.read_text())
    for _ in range(rng.randint(1, 3)):
        document = bend(document, rng)
    path.write_text(json.dumps(document))


@PROPERTY
@given(fixture=st.sampled_from(FIXTURES), rng=st.randoms(use_true_random=False), data=st.data())
def test_a_bent_document_ends_in_a_report_or_a_named_error(
    fixture: str, rng: random.Random, data: st.DataObject
) -> None:
    _bent_copy_audits(fixture, "*.json", data, lambda path: _bend_a_document(path, rng))


@PROPERTY
@given(fixture=st.sampled_from(FIXTURES), rng=st.randoms(use_true_random=False), data=st.data())
def test_a_bent_header_ends_in_a_report_or_a_named_error(
    fixture: str, rng: random.Random, data: st.DataObject
) -> None:
    def bend_twice(path: Path) -> None:
        for _ in range(rng.randint(1, 2)):
            _bend_a_header(path, rng)

    _bent_copy_audits(fixture, "*.safetensors", data, bend_twice)
