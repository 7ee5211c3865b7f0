"""What SGLang 0.5.22-0.5.23 builds for compressed-tensors integer routed experts, on
llm-compressor 0.14's own Qwen3-MoE checkpoints.

sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/
compressed_tensors.py@v0.5.23 ``get_moe_scheme`` (expert 0's scheme decides the layer):
weight-only channel or group integers take, under ``--moe-runner-backend auto``,
CompressedTensorsWNA16TritonMoE on sm100-sm109 for symmetric INT4 groups of 32 or 128 without
actorder, else CompressedTensorsWNA16MoE (Marlin MoE); both raise unless the config's top-level
``format`` is ``pack-quantized`` (schemes/compressed_tensors_wNa16_moe.py), so FP8 attention
beside W4A16 experts (``mixed-precision``) fails the load. INT8 W8A8 has an NPU scheme only.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from qarm_audit import audit
from qarm_audit.report.model import ArmRow, Report

CORPUS = REPO / "fixtures" / "producers"
RELEASES = ["sglang==0.5.22", "sglang==0.5.23"]
EXPERTS = 24  # 2 layers x 4 experts x gate/up/down


def experts_row(report: Report) -> ArmRow:
    [row] = [a for a in report.arms if a.modules == EXPERTS]
    return row


@pytest.mark.parametrize("engine", RELEASES)
def test_int4_experts_run_marlin_moe_or_triton_on_sm100(engine: str) -> None:
    for gpu in ("sm80", "sm90", "sm120"):
        report = audit(str(CORPUS / "llmcompressor-moe-w4a16"), engine=engine, gpu=gpu)
        assert report.verdict == "clean", gpu
        row = experts_row(report)
        assert (row.executed, row.kernel) == ("W4A16-INT", "Marlin MoE"), gpu
        assert row.log == "Using CompressedTensorsWNA16MarlinMoEMethod"
    sm100 = experts_row(audit(str(CORPUS / "llmcompressor-moe-w4a16"), engine=engine, gpu="sm100"))
    assert (sm100.executed, sm100.kernel) == ("W4A16-INT", "Triton WNA16 MoE")
    assert sm100.log == "Using CompressedTensorsWNA16TritonMoE (SM100/SM103 auto default)"


def edited(tmp_path: Path, name: str, change: Callable[[dict[str, Any]], object]) -> Path:
    """The corpus checkpoint ``name`` copied, ``change`` applied to its config.json."""
    root = tmp_path / name
    shutil.copytree(CORPUS / name, root)
    config = json.loads((root / "config.json").read_text())
    change(config)
    (root / "config.json").write_text(json.dumps(config))
    return root


def group(config: dict[str, Any], part: str = "weights") -> dict[str, Any]:
    """The first config group's ``weights`` (or ``input_activations``), to edit in place."""
    found: dict[str, Any] = config["quantization_config"]["config_groups"]["group_0"][part]
    return found


def with_weights(tmp_path: Path, name: str, **weights: object) -> Path:
    return edited(tmp_path, name, lambda config: group(config).update(weights))


def with_group(tmp_path: Path, name: str, **keys: object) -> Path:
    def change(config: dict[str, Any]) -> None:
        config["quantization_config"]["config_groups"]["group_0"].update(keys)

    return edited(tmp_path, name, change)


def with_architecture(tmp_path: Path, name: str, architecture: str) -> Path:
    return edited(tmp_path, name, lambda config: config.update(architectures=[architecture]))


def with_format(tmp_path: Path, name: str, value: str) -> Path:
    return edited(tmp_path, name, lambda config: config["quantization_config"].update(format=value))


def static_w8a8(tmp_path: Path) -> Path:
    """llm-compressor's INT8 W8A8 MoE with static per-tensor activations."""
    return edited(
        tmp_path,
        "llmcompressor-moe-w8a8-int8",
        lambda config: group(config, "input_activations").update(dynamic=False, strategy="tensor"),
    )


@pytest.mark.parametrize(
    "weights",
    [{"group_size": 64}, {"actorder": "group"}, {"symmetric": False}],
)
def test_triton_takes_only_symmetric_groups_of_32_or_128_without_actorder(
    tmp_path: Path, weights: dict[str, object]
) -> None:
    root = with_weights(tmp_path, "llmcompressor-moe-w4a16", **weights)
    row = experts_row(audit(str(root), engine="sglang", gpu="sm100"))
    assert (row.executed, row.kernel) == ("W4A16-INT", "Marlin MoE")


def test_mixed_precision_config_fails_the_experts(tmp_path: Path) -> None:
    name = "llmcompressor-moe-fp8attn-w4a16experts"
    report = audit(str(CORPUS / name), engine="sglang", gpu="sm90")
    assert report.verdict == "refused"
    assert experts_row(report).executed == "none"
    refusal = next(r for r in report.refusals if r.code == "no-arm")
    assert "('For Fused MoE layers, only ', 'pack-quantized ', " in refusal.message
    # the attention group is FP8 and runs; vLLM reads each group's own format
    assert {a.executed for a in report.arms if a.modules != EXPERTS} == {"W8A8-FP8"}
    assert audit(str(CORPUS / name), engine="vllm", gpu="sm90").verdict == "clean"
    # the same experts in a config whose format is pack-quantized: Marlin MoE
    root = with_format(tmp_path, name, "pack-quantized")
    assert experts_row(audit(str(root), engine="sglang", gpu="sm90")).executed == "W4A16-INT"


def test_int8_and_other_widths_of_weight_only_experts(tmp_path: Path) -> None:
    symmetric = with_weights(tmp_path, "llmcompressor-moe-w4a16", num_bits=8)
    row = experts_row(audit(str(symmetric), engine="sglang", gpu="sm90"))
    assert (row.executed, row.kernel) == ("W8A16-INT", "Marlin MoE")
    asymmetric = with_weights(
        tmp_path / "a", "llmcompressor-moe-w4a16", num_bits=8, symmetric=False
    )
    row = experts_row(audit(str(asymmetric), engine="sglang", gpu="sm90"))
    assert row.executed == "none"
    assert "get_scalar_type asserts" in row.reason
    # a 4-bit asymmetric group still runs Marlin MoE, with zero points
    zero_points = with_weights(tmp_path / "z", "llmcompressor-moe-w4a16", symmetric=False)
    assert experts_row(audit(str(zero_points), engine="sglang", gpu="sm90")).executed == (
        "W4A16-INT"
    )
    # neither 4 nor 8 bits: the scheme raises as it is built
    two = with_weights(tmp_path / "2", "llmcompressor-moe-w4a16", num_bits=2)
    report = audit(str(two), engine="sglang", gpu="sm90")
    assert experts_row(report).executed == "none"
    # a per-tensor integer reaches the w4a8 test, which reads the activations it has not
    tensor = with_weights(
        tmp_path / "t", "llmcompressor-moe-w4a16", strategy="tensor", group_size=None
    )
    row = experts_row(audit(str(tensor), engine="sglang", gpu="sm90"))
    assert row.executed == "none"
    assert "no attribute 'num_bits'" in next(
        r.message for r in audit(str(tensor), engine="sglang", gpu="sm90").refusals
    )


@pytest.mark.parametrize("engine", RELEASES)
def test_int8_w8a8_experts_have_an_npu_scheme_only(tmp_path: Path, engine: str) -> None:
    report = audit(str(CORPUS / "llmcompressor-moe-w8a8-int8"), engine=engine, gpu="sm90")
    assert report.verdict == "refused"
    assert experts_row(report).executed == "none"
    assert any(
        "The W8A8Int8 Fused MoE scheme is implemented only for NPU for now." in r.message
        for r in report.refusals
    )
    # static per-tensor activations reach the final RuntimeError instead
    row = experts_row(audit(str(static_w8a8(tmp_path)), engine=engine, gpu="sm90"))
    assert row.executed == "none"
    assert "ends in a RuntimeError" in row.reason


def test_another_moe_runner_backend_is_not_modelled() -> None:
    report = audit(
        str(CORPUS / "llmcompressor-moe-w4a16"),
        engine="sglang",
        gpu="sm90",
        env={"moe_runner_backend": "triton"},
    )
    assert experts_row(report).executed == "unknown"


# vLLM 0.30-0.33 (compressed_tensors_moe/compressed_tensors_moe.py get_moe_method) reads the
# group's format, and builds INT8 W8A8 experts for dynamic per-token activations only.
VLLM = ["vllm==0.30.0", "vllm==0.33.0"]


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_integer_experts(tmp_path: Path, engine: str) -> None:
    w4a16 = experts_row(audit(str(CORPUS / "llmcompressor-moe-w4a16"), engine=engine, gpu="sm90"))
    assert w4a16.executed == "W4A16-INT"
    assert w4a16.log == "Using CompressedTensorsWNA16MoEMethod"
    w8a8 = audit(str(CORPUS / "llmcompressor-moe-w8a8-int8"), engine=engine, gpu="sm90")
    assert w8a8.verdict == "clean"
    assert "CompressedTensorsW8A8Int8MoEMethod" in experts_row(w8a8).reason
    # static activations: dense layers take them, routed experts do not
    report = audit(str(static_w8a8(tmp_path)), engine=engine, gpu="sm90")
    assert experts_row(report).executed == "none"
    assert {a.executed for a in report.arms if a.modules != EXPERTS} == {"W8A8-INT"}
    # weight-only experts whose group is not pack-quantized
    unpacked = with_group(tmp_path / "u", "llmcompressor-moe-w4a16", format="int-quantized")
    row = experts_row(audit(str(unpacked), engine=engine, gpu="sm90"))
    assert row.executed == "none"
    assert "taken only where their group's format is pack-quantized" in row.reason


MXFP4_EXPERTS = "llmcompressor-moe-experts-mxfp4a16"


@pytest.mark.parametrize("engine", RELEASES)
def test_mxfp4_experts_lose_their_packed_weights(engine: str) -> None:
    """Mxfp4MoEMethod registers w13_weight, and the expert mapping makes weight_packed
    experts.w13_weight_packed: Qwen3-MoE's loader skips it, and the experts run on zeros."""
    report = audit(str(CORPUS / MXFP4_EXPERTS), engine=engine, gpu="sm90")
    assert report.verdict == "refused"
    [refusal] = report.refusals
    assert refusal.code == "operand-unloaded"
    assert "24 modules ship weight_packed" in refusal.message
    assert "Qwen3MoeForCausalLM weight loader renames it to experts.w13_weight_packed" in (
        refusal.message
    )
    assert "the experts compute with their zero-initialized weights" in refusal.message
    # with the attention MXFP4 too, its dense layers have no scheme at all (no-arm), and
    # only the experts lose their weights to the loader
    every = audit(str(CORPUS / "llmcompressor-moe-mxfp4a16"), engine=engine, gpu="sm90")
    [unloaded] = [r for r in every.refusals if r.code == "operand-unloaded"]
    assert "24 modules ship weight_packed" in unloaded.message
    # vLLM's MXFP4 experts method registers w13_weight_packed
    in_vllm = audit(str(CORPUS / MXFP4_EXPERTS), engine="vllm", gpu="sm90")
    assert in_vllm.refusals == [] and [f.code for f in in_vllm.warnings] == ["arm-unknown"]


def test_how_each_loader_meets_the_dropped_name(tmp_path: Path) -> None:
    mixtral = with_architecture(tmp_path / "m", MXFP4_EXPERTS, "MixtralForCausalLM")
    [refusal] = audit(str(mixtral), engine="sglang", gpu="sm90").refusals
    assert "raises KeyError" in refusal.message
    # KimiK3 renames weight_packed to weight first; a loader not read says nothing
    for architecture in ("KimiK3LinearForCausalLM", "SomeNewMoeForCausalLM"):
        root = with_architecture(tmp_path / architecture, MXFP4_EXPERTS, architecture)
        codes = {r.code for r in audit(str(root), engine="sglang", gpu="sm90").refusals}
        assert "operand-unloaded" not in codes, architecture
    # a config whose format does not name mxfp4 takes get_moe_scheme instead
    mixed = with_format(tmp_path / "x", MXFP4_EXPERTS, "mixed-precision")
    codes = {r.code for r in audit(str(mixed), engine="sglang", gpu="sm90").refusals}
    assert "operand-unloaded" not in codes


@pytest.mark.parametrize("engine", RELEASES)
def test_mxfp8_experts_have_no_moe_scheme(tmp_path: Path, engine: str) -> None:
    report = audit(str(CORPUS / "llmcompressor-moe-mxfp8"), engine=engine, gpu="sm100")
    row = experts_row(report)
    assert row.executed == "none"
    assert "ends in a RuntimeError" in row.reason
    # weight-only: the W4A8 test reads the activations it has not
    root = with_group(tmp_path, "llmcompressor-moe-mxfp8", input_activations=None)
    row = experts_row(audit(str(root), engine=engine, gpu="sm100"))
    assert row.executed == "none"
    assert "reads the missing input activations' num_bits" in row.reason
    # vLLM has an MXFP8 experts method
    assert audit(str(CORPUS / "llmcompressor-moe-mxfp8"), engine="vllm", gpu="sm100").verdict == (
        "clean"
    )


@pytest.mark.parametrize("engine", RELEASES)
def test_w4afp8_experts_of_llm_compressor_have_an_npu_scheme_only(
    tmp_path: Path, engine: str
) -> None:
    """llm-compressor's W4AFP8 preset is saved int-quantized, so _is_wint4afp8 (pack-quantized
    only) does not take the experts and _is_dynamic_token_w4a8 raises."""
    row = experts_row(audit(str(CORPUS / "llmcompressor-moe-w4afp8"), engine=engine, gpu="sm90"))
    assert row.executed == "none"
    assert "whose scheme is for NPU only" in row.reason
    packed = with_format(tmp_path, "llmcompressor-moe-w4afp8", "pack-quantized")
    assert experts_row(audit(str(packed), engine=engine, gpu="sm90")).executed == "unknown"
