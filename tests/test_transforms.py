"""Online transforms of a compressed-tensors ``transform_config`` that the engine never applies.

compressed-tensors' ``TransformLocation``: ``weight_input`` and ``weight_output`` are fused into
the weights when the model is saved; ``input``, ``output``, ``k_cache`` and ``q_attn`` are
applied to activations at run time (``is_online``). A QuIP- or SpinQuant-style checkpoint
pairs each online transform with its inverse fused into a weight, so an engine that skips the
online half computes with weights rotated for activations it never rotates. SGLang 0.5.22 and
0.5.23 read no ``transform_config`` (no module of ``sglang/srt`` but a debug truncator names
one); vLLM applies online input and output transforms on its Linear layers
(vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/transform/
linear.py@v0.33.0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import CT_FP8 as WEIGHTS
from conftest import REPO, ct_fp8_llama, fp8_modelopt, llama, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report


def quip(online: bool) -> dict[str, Any]:
    """A transform_config as llm-compressor 0.14's QuIPModifier writes it: ``u`` fused into the
    weights' outputs and applied to the outputs, ``v`` applied to the inputs and fused into the
    weights' inputs; with ``online`` false, only the fused halves."""

    def args(location: str) -> dict[str, Any]:
        return {"targets": ["Linear"], "location": location, "ignore": ["lm_head"]}

    scheme = {"type": "random-hadamard", "randomize": False, "requires_grad": False}
    u = [args("weight_output")] + ([args("output")] if online else [])
    v = ([args("input")] if online else []) + [args("weight_input")]
    return {"config_groups": {"u": {**scheme, "apply": u}, "v": {**scheme, "apply": v}}}


def audited(root: Path, transform_config: Any, engine: str) -> Report:
    folder = ct_fp8_llama(root, transform_config=transform_config)
    return audit(str(folder), engine=engine)


def refused(report: Report) -> list[str]:
    return [r.message for r in report.refusals if r.code == "transform-not-applied"]


def test_sglang_never_applies_an_online_transform(tmp_path: Path) -> None:
    [message] = refused(audited(tmp_path, quip(online=True), "sglang"))
    assert message == (
        "config.json: quantization_config: transform_config applies transforms at run time "
        "(u at output, v at input); sglang v0.5.23 reads no transform_config, so the weights, "
        "written for rotated activations, meet unrotated ones and the model computes wrong "
        "numbers without a word"
    )


@pytest.mark.parametrize(
    ("transform_config", "engine"),
    [
        (quip(online=True), "vllm"),  # applied on its Linear layers
        (quip(online=False), "sglang"),  # fused into the weights only: nothing to apply
        ({"config_groups": ["not", "a", "mapping"]}, "sglang"),
        ({"config_groups": {"u": {"apply": [{"location": 7}]}}}, "sglang"),
    ],
)
def test_nothing_to_refuse(tmp_path: Path, transform_config: Any, engine: str) -> None:
    assert refused(audited(tmp_path, transform_config, engine)) == []


QUIP = REPO / "fixtures" / "producers" / "llmcompressor-quip-w4a16"
"""llm-compressor 0.14.0.1's QuIP (v and u random Hadamards in blocks of 32) then W4A16: one
shared transform of each half is saved, as ``q_proj.v_input.weight`` and
``q_proj.u_output.weight`` (F64 [32, 32])."""


def test_a_real_quip_checkpoint_is_clean_under_vllm_and_refused_under_sglang() -> None:
    report = audit(str(QUIP), engine="vllm")
    assert report.refusals == []
    # the saved transforms are no layers: vLLM loads them into its HadamardTransform submodules
    transforms = [m for m in report.modules if m["module"].endswith(("v_input", "u_output"))]
    assert [m["module"] for m in transforms] == [
        "model.layers.0.self_attn.q_proj.u_output",
        "model.layers.0.self_attn.q_proj.v_input",
    ]
    assert {m["bucket"] for m in transforms} == {"unlisted"}
    report = audit(str(QUIP), engine="sglang")
    assert [r.code for r in report.refusals] == ["transform-not-applied"]
    assert "(u at output, v at input)" in report.refusals[0].message


def test_a_regex_target_over_every_module_does_not_reach_a_saved_transform(
    tmp_path: Path,
) -> None:
    """No engine builds a quant method for a transform, whatever a target matches."""
    tensors = llama(2, lambda m, o, i: fp8_modelopt(m, o, i, input_scale=False))
    tensors["model.layers.0.self_attn.q_proj.v_input.weight"] = ("F64", (32, 32))
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {
                "targets": ["re:model\\.layers\\..*"],
                "weights": WEIGHTS,
                "format": "float-quantized",
            }
        },
        "transform_config": quip(online=True),
    }
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    documents = {"config.json": {**config, "quantization_config": block}}
    folder = write_checkpoint(tmp_path, {"model.safetensors": tensors}, documents)
    report = audit(str(folder), engine="vllm")
    assert [(r.code, r.module) for r in report.refusals] == []


MOE_QUIP = REPO / "fixtures" / "producers" / "llmcompressor-moe-quip-w4a16"
"""The same recipe on a Qwen3-MoE: llm-compressor linearizes the experts, so its "Linear"
targets every expert projection; the router (``mlp.gate``) and lm_head are ignored."""


def test_vllm_applies_no_transform_on_routed_experts() -> None:
    """vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/
    compressed_tensors.py@v0.33.0 L159-183: get_linear_transform_schemes is asked for LinearBase
    layers only; the MoE method reads no transform_config."""
    report = audit(str(MOE_QUIP), engine="vllm")
    assert [(r.code, r.module) for r in report.refusals] == [
        ("transform-not-applied", f"model.layers.{n}.mlp.experts") for n in (0, 0, 1, 1)
    ]
    assert report.refusals[0].message.startswith(
        "model.layers.0.mlp.experts: config.json: quantization_config's transform u at output "
        "rotates model.layers.0.mlp.experts.0.down_proj and 11 more at run time; vllm v0.34.0 "
        "applies online transforms only on the Linear layers it builds with the quant config, "
        "not on its RoutedExperts"
    )
    # the attention and the dense layers take theirs: nothing else is refused
    assert audit(str(QUIP), engine="vllm").refusals == []
