"""A quantized checkpoint missing a layer or an expert is refused, and one layer without a
module that the others of its kind ship is a warning.

vLLM checks that every parameter was filled only for an unquantized model
(vllm-project/vllm vllm/model_executor/model_loader/default_loader.py@v0.33.0 L510-L523), so a
quantized checkpoint without one of these loads and computes with memory never written. Each
shape of absence has its case here, and each layout a real model has (dense and MoE layers, an
MTP layer, interleaved attention kinds) has one that stays clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import INTER, H, fp8_modelopt, llama, modelopt_file, plain, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

FP8 = modelopt_file("FP8", excludes=["lm_head", "*.mlp.gate"])


def config(**values: Any) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **values}


def folder(root: Path, tensors: dict[str, Any], **values: Any) -> Path:
    documents = {"config.json": config(**values), "hf_quant_config.json": FP8}
    return write_checkpoint(root, {"model.safetensors": tensors}, documents)


def refusals(report: Report, code: str) -> list[tuple[str, str]]:
    return [(r.module, r.message) for r in report.refusals if r.code == code]


def moe(layers: int, experts: int, *, dense: int = 0) -> dict[str, Any]:
    """Layers of attention, the first ``dense`` with a dense MLP, the rest with routed experts,
    a router and a shared expert, every Linear in ModelOpt FP8."""
    t: dict[str, Any] = {"model.embed_tokens.weight": ("BF16", (256, H))}
    for n in range(layers):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", (H,))
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.update(fp8_modelopt(f"{p}.self_attn.{proj}"))
        mlps = [f"{p}.mlp"] if n < dense else [f"{p}.mlp.shared_experts"]
        if n >= dense:
            t.update(plain(f"{p}.mlp.gate", experts, H))
            mlps += [f"{p}.mlp.experts.{e}" for e in range(experts)]
        for mlp in mlps:
            for proj, out, inp in (("gate_proj", INTER, H), ("up_proj", INTER, H)):
                t.update(fp8_modelopt(f"{mlp}.{proj}", out, inp))
            t.update(fp8_modelopt(f"{mlp}.down_proj", H, INTER))
    return t


def without(tensors: dict[str, Any], *prefixes: str) -> dict[str, Any]:
    return {k: v for k, v in tensors.items() if not k.startswith(prefixes)}


FULL = dict(num_hidden_layers=4, n_routed_experts=4)
VLLM = "vllm v0.34.0"
"""The default engine profile's label: each message ends in what that engine does."""


def test_a_whole_checkpoint_of_dense_and_moe_layers_is_clean(tmp_path: Path) -> None:
    report = audit(str(folder(tmp_path / "c", moe(4, 4, dense=1), **FULL)))
    assert report.refusals == [], report.refusals


def test_an_expert_without_any_tensor(tmp_path: Path) -> None:
    t = without(moe(4, 4, dense=1), "model.layers.2.mlp.experts.3.")
    report = audit(str(folder(tmp_path / "c", t, **FULL)))
    assert refusals(report, "experts-incomplete") == [
        (
            "model.layers.2.mlp.experts",
            "model.layers.2.mlp.experts: config.json's n_routed_experts is 4, and expert 3 ships "
            f"no tensor; {VLLM}: loads a quantized checkpoint without checking that every "
            "parameter was filled (it checks an unquantized one only), so what is missing "
            "computes with memory never written",
        )
    ]


def test_an_expert_without_one_projection(tmp_path: Path) -> None:
    t = without(moe(4, 4, dense=1), "model.layers.1.mlp.experts.0.up_proj.")
    report = audit(str(folder(tmp_path / "c", t, **FULL)))
    [(module, message)] = refusals(report, "experts-incomplete")
    assert module == "model.layers.1.mlp.experts"
    assert "expert 0 ships no up_proj;" in message


def test_experts_beyond_the_configs_count(tmp_path: Path) -> None:
    report = audit(
        str(folder(tmp_path / "c", moe(4, 4, dense=1), num_hidden_layers=4, n_routed_experts=3))
    )
    [(_, message)] = refusals(report, "experts-incomplete")[:1]
    assert "n_routed_experts is 3, and experts 3 are beyond that count" in message
    assert len(refusals(report, "experts-incomplete")) == 3  # every MoE layer


def test_a_gap_in_the_experts_without_a_count_in_the_config(tmp_path: Path) -> None:
    t = without(moe(2, 4), "model.layers.0.mlp.experts.1.")
    report = audit(str(folder(tmp_path / "c", t)))
    [(_, message)] = refusals(report, "experts-incomplete")
    assert message.startswith("model.layers.0.mlp.experts: experts 0 to 3, and expert 1 ships no")


def test_a_last_layer_the_config_counts_is_missing(tmp_path: Path) -> None:
    t = without(moe(4, 4, dense=1), "model.layers.3.")
    report = audit(str(folder(tmp_path / "c", t, **FULL)))
    assert refusals(report, "layers-incomplete") == [
        (
            "model.layers",
            "model.layers: config.json's num_hidden_layers is 4, and layer 3 ships no tensor; "
            f"{VLLM}: loads a quantized checkpoint without checking that every parameter was "
            "filled (it checks an unquantized one only), so what is missing computes with "
            "memory never written",
        )
    ]


def test_a_gap_in_the_layers_without_a_count_in_the_config(tmp_path: Path) -> None:
    t = without(llama(4, fp8_modelopt), "model.layers.1.", "model.layers.2.")
    report = audit(str(folder(tmp_path / "c", t)))
    [(_, message)] = refusals(report, "layers-incomplete")
    assert message.startswith("model.layers: it ships layers up to 3, and layers 1, 2 ship no")


def warnings(report: Report, code: str) -> list[tuple[str, str]]:
    return [(r.module, r.message) for r in report.warnings if r.code == code]


def test_a_projection_missing_from_one_layer(tmp_path: Path) -> None:
    """A warning, not a refusal: a model can build one layer of a kind of its own without it
    (Gemma's KV-shared layers ship no k_proj or v_proj), which the names alone cannot tell."""
    t = without(llama(3, fp8_modelopt), "model.layers.1.self_attn.v_proj.")
    report = audit(str(folder(tmp_path / "c", t, num_hidden_layers=3)))
    assert warnings(report, "layer-modules-differ") == [
        (
            "model.layers.1.self_attn",
            "model.layers.1.self_attn ships no v_proj, which 2 other layers of model.layers "
            "ship beside the same modules (k_proj, o_proj, q_proj); unless the model builds "
            "this one layer without them (a layer of a kind of its own: Gemma's KV-shared "
            "layers, one full-attention layer among sliding ones), they are missing; "
            f"{VLLM}: loads a quantized checkpoint without checking that every parameter was "
            "filled (it checks an unquantized one only)",
        )
    ]
    assert report.verdict == "warnings"


def test_a_layer_with_its_norms_and_nothing_else(tmp_path: Path) -> None:
    t = without(llama(2, fp8_modelopt), "model.layers.1.self_attn.", "model.layers.1.mlp.")
    report = audit(str(folder(tmp_path / "c", t, num_hidden_layers=2)))
    [(module, message)] = warnings(report, "layer-modules-differ")
    assert module == "model.layers.1"
    assert message.startswith("model.layers.1 ships no mlp, self_attn, which 1 other layer of")


@pytest.mark.parametrize(
    "case",
    ["first-dense-layer", "mtp-layer", "interleaved-attention", "vision-encoder", "kinds-once"],
)
def test_layers_of_different_kinds_are_not_taken_for_gaps(tmp_path: Path, case: str) -> None:
    """Kimi K2's one dense layer before its MoE layers, DeepSeek's MTP layer past
    num_hidden_layers with modules of its own, Qwen3-Next's linear and full attention, a
    vision encoder's layers beside the decoder's, and layers each of a kind of its own (one
    holding what another does and more): none lacks anything."""
    t = moe(4, 4, dense=1)
    if case == "mtp-layer":
        t.update(moe(5, 4, dense=1))
        t.update(plain("model.layers.4.eh_proj", H, 2 * H))
        t["model.layers.4.enorm.weight"] = ("BF16", (H,))
    if case == "interleaved-attention":
        for n in (0, 2):
            t = without(t, f"model.layers.{n}.self_attn.")
            for proj in ("in_proj_qkvz", "out_proj"):
                t.update(fp8_modelopt(f"model.layers.{n}.linear_attn.{proj}"))
    values = FULL
    if case == "kinds-once":  # three layers of three kinds, one holding more than another
        t, values = moe(3, 4, dense=1), dict(num_hidden_layers=3, n_routed_experts=4)
        t = without(t, "model.layers.1.self_attn.")
        t.update(fp8_modelopt("model.layers.1.linear_attn.out_proj"))
        t.update(fp8_modelopt("model.layers.2.cross_attn.q_proj"))
    if case == "vision-encoder":  # fewer layers than the decoder's, under a ".model.layers"
        for n in range(3):
            t.update(plain(f"model.visual.layers.{n}.attn.qkv", 3 * H, H))
            t.update(plain(f"vision_model.model.layers.{n}.mlp.fc1", 3 * H, H))
    report = audit(str(folder(tmp_path / "c", t, **values)))
    assert refusals(report, "layers-incomplete") == []
    assert refusals(report, "experts-incomplete") == []
    assert warnings(report, "layer-modules-differ") == []


def test_a_number_of_thousands_of_digits_is_refused_not_read(tmp_path: Path) -> None:
    """Python refuses to read an integer of more than 4 300 digits; such a name is one more
    gap, not a crash."""
    t = moe(2, 2)
    t.update(fp8_modelopt(f"model.layers.1.mlp.experts.{'9' * 5000}.up_proj", INTER, H))
    report = audit(str(folder(tmp_path / "c", t)))
    [(_, message)] = refusals(report, "experts-incomplete")
    assert "more ship no tensor" in message
