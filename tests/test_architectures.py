"""The layouts ``transformers`` saves for 125 tiny models of about 95 architectures audit
without a refusal, and a layer or an expert taken out of any of them is refused.

``tests/data/transformers-layouts.json`` holds what ``save_pretrained`` wrote (names, shapes
and config.json), recorded by ``scripts/derive_architecture_layouts.py``: dense and MoE models,
MoE models with dense first layers, interleaved attention kinds, Mamba and linear-attention
hybrids, vision-language models. A completeness or layer-tree check that takes a real model's
layout for a broken one goes red here, on the architecture it misreads.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from qarm_audit import audit
from qarm_audit.report.model import Report
from qarm_audit.sources.checkpoint import Checkpoint, Origin, ShardHeader, TensorEntry

LAYOUTS = Path(__file__).parent / "data" / "transformers-layouts.json"

SINGLE_KIND = {
    "gemma3n_text_kvshared1": "model.layers.3.self_attn",
    "gemma4_text_keqv_1full": "model.layers.3.self_attn",
    "gemma4_text_kvshared1": "model.layers.5.self_attn",
    "glm_moe_dsa_one_shared": "model.layers.3.self_attn",
}
"""Configs with exactly one layer of a kind of its own (the one KV-shared layer, the one
``k_eq_v`` full-attention layer, the one shared-indexer layer): it lacks a projection the
other layers ship, which the audit cannot tell from a lost one, so it warns
(``layer-modules-differ``) and does not refuse. Real checkpoints have several of each kind."""

_LAYER = re.compile(r"^((?:.*\.)?layers)\.([0-9]+)\.")
_EXPERT = re.compile(r"^(.*\.experts)\.([0-9]+)\.")


@cache
def _cases() -> dict[str, Any]:
    document = json.loads(LAYOUTS.read_text())
    assert document["format"] == "qarm-transformers-layouts/1"
    cases: dict[str, Any] = document["cases"]
    return cases


def _checkpoint(case: str, without: str = "") -> Checkpoint:
    """The case's tensors in BF16, laid out as one shard, less those under ``without``."""
    layout = _cases()[case]
    entries, offset = [], 0
    for name, shape in layout["tensors"]:
        if without and name.startswith(without):
            continue
        size = 2
        for dim in shape:
            size *= dim
        entries.append(TensorEntry(name, "BF16", tuple(shape), offset, offset + size))
        offset += size
    shard = ShardHeader("model.safetensors", 8 + 8 + offset, 8, None, tuple(entries))
    documents = {"config.json": json.dumps(layout["config"])}
    return Checkpoint(Origin("manifest", case), documents, None, (shard,))


def _findings(report: Report) -> list[tuple[str, str]]:
    return [(f.code, f.module) for f in [*report.refusals, *report.warnings]]


def test_the_layouts_cover_what_they_claim() -> None:
    cases = _cases()
    assert len(cases) == 125
    classes = {case["class"] for case in cases.values()}
    assert len(classes) >= 90
    moe = [name for name in cases if _experts_of(name)]
    assert len(moe) >= 50


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("case", sorted(_cases()))
def test_a_saved_layout_audits_without_a_refusal(case: str, engine: str) -> None:
    report = audit(_checkpoint(case), engine=engine)
    expected = [("layer-modules-differ", SINGLE_KIND[case])] if case in SINGLE_KIND else []
    assert _findings(report) == expected


def _containers(case: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for name, _ in _cases()[case]["tensors"]:
        if matched := _LAYER.match(name):
            found.setdefault(matched[1], set()).add(int(matched[2]))
    return found


def _experts_of(case: str) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for name, _ in _cases()[case]["tensors"]:
        if matched := _EXPERT.match(name):
            found.setdefault(matched[1], set()).add(int(matched[2]))
    return found


GAPS = [
    (case, container)
    for case in sorted(_cases())
    for container, numbers in sorted(_containers(case).items())
    if len(numbers) >= 3
]


@pytest.mark.parametrize(("case", "container"), GAPS)
def test_a_layer_taken_out_of_a_saved_layout_is_refused(case: str, container: str) -> None:
    report = audit(_checkpoint(case, without=f"{container}.1."))
    gaps = [r for r in report.refusals if r.code == "layers-incomplete"]
    assert [r.module for r in gaps] == [container], _findings(report)


EXPERTS = [(case, min(_experts_of(case))) for case in sorted(_cases()) if _experts_of(case)]


@pytest.mark.parametrize(("case", "layer"), EXPERTS)
def test_an_expert_taken_out_of_a_saved_layout_is_refused(case: str, layer: str) -> None:
    report = audit(_checkpoint(case, without=f"{layer}.1."))
    missing = [r for r in report.refusals if r.code == "experts-incomplete"]
    assert [r.module for r in missing] == [layer], _findings(report)
