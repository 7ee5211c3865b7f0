"""A compressed-tensors config group that quantizes attention on its own is dropped by vLLM.

vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/
compressed_tensors.py@v0.33.0 L235-250 (the same in 0.30-0.32): ``from_config`` keeps only the
groups that do not do attention quantization: one whose single target ends in "Attention"
(``LlamaAttention``, as llm-compressor's attention-quantization examples write it) is skipped
with a warning before the target map is built. SGLang keeps the group, and fails on it: its
weights are validated as the declaration is read.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CT_FP8 as WEIGHTS
from conftest import ct_fp8_llama
from qarm_audit import audit
from qarm_audit.report.model import Report

ACTIVATIONS = {**WEIGHTS, "dynamic": False}
ATTENTION = [f"model.layers.{n}.self_attn" for n in range(2)]


def audited(root: Path, attention_targets: list[str], engine: str = "vllm") -> Report:
    """FP8 weights on every Linear, and a group of ``attention_targets`` quantizing the
    attention's inputs; q/k/v scales shipped on each attention module, as llm-compressor
    writes them."""
    groups = {"attention": {"targets": attention_targets, "input_activations": ACTIVATIONS}}
    scales = {f"model.layers.{n}.self_attn.{x}_scale": ("F32", ()) for n in range(2) for x in "qkv"}
    return audit(str(ct_fp8_llama(root, groups=groups, tensors=scales)), engine=engine)


def codes(report: Report) -> list[str]:
    return sorted(f.code for f in [*report.refusals, *report.warnings])


def test_vllm_drops_a_group_whose_only_target_is_an_attention_class(tmp_path: Path) -> None:
    report = audited(tmp_path, ["LlamaAttention"])
    # the engine's view no longer puts the attention modules in the group, so the producer's
    # view (which does not either) agrees with it
    assert codes(report) == ["config-group-skipped"]
    assert report.warnings[0].message.startswith(
        "config.json: quantization_config: config group 'attention' targets only "
        "'LlamaAttention'; vllm v0.34.0 drops the group before it matches any layer, logging "
        '"Skipping CompressedTensors config group for LlamaAttention. Attention quant is '
        'coupled with KV-cache quantization in vLLM.": the attention quantization it '
        "declares is not run"
    )
    # the raw string's end is tested, a re: target's included
    assert codes(audited(tmp_path / "re", ["re:.*LlamaAttention"])) == ["config-group-skipped"]


@pytest.mark.parametrize(
    "targets", [["LlamaAttention", "re:.*o_proj$"], ["re:.*self_attn$"], ["LlamaAttentionX"]]
)
def test_other_groups_are_kept(tmp_path: Path, targets: list[str]) -> None:
    assert "config-group-skipped" not in codes(audited(tmp_path, targets))


def test_sglang_keeps_the_group_and_fails_on_its_missing_weights(tmp_path: Path) -> None:
    """SGLang validates the group's weights as it reads the declaration (an attention group
    declares none): test_ct_declaration_errors.py."""
    report = audited(tmp_path, ["LlamaAttention"], engine="sglang")
    assert codes(report) == ["engine-refuses-declaration"]


def test_a_kept_group_names_no_attention_container_by_its_class(tmp_path: Path) -> None:
    """A group vLLM keeps (two targets) that names the attention class beside Linear: vLLM
    tests class targets only on the layers it asks for a quant method (its Linear, LM-head,
    embedding and MoE layers: ``CompressedTensorsConfig.get_quant_method``), never on the
    ``LlamaAttention`` container that holds the KV scales, so the engine's view leaves the
    container out of the group, as the producer's view does: no disagreement is warned."""
    groups = {"group_0": {"targets": ["Linear", "LlamaAttention"], "weights": WEIGHTS}}
    kv = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
    scales = {f"model.layers.{n}.self_attn.{x}_scale": ("F32", ()) for n in range(2) for x in "kv"}
    folder = ct_fp8_llama(tmp_path, groups=groups, tensors=scales, kv_cache_scheme=kv)
    report = audit(str(folder), engine="vllm")
    assert codes(report) == []
    rows = {row["module"]: row for row in report.modules}
    assert [(rows[a]["bucket"], rows[a]["how"]) for a in ATTENTION] == [("unlisted", "none")] * 2
    # the projections are still the group's
    assert {r["bucket"] for m, r in rows.items() if m.endswith("_proj")} == {"group_0"}
