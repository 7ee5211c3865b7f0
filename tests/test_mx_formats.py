"""MX formats written by the real producers on the CPU, against vLLM 0.30-0.33.

compressed-tensors MXFP4 (``mxfp4-pack-quantized``: weights fp4 in groups of 32 with E8M0
``uint8`` scales, no global scale), written by llm-compressor 0.14.0.1
(``fixtures/producers/llmcompressor-mxfp4``, ``-mxfp4a16``, ``-moe-mxfp4a16``): every MXFP4
Linear is ``CompressedTensorsW4A4Mxfp4`` (min capability 80), which asks
``init_mxfp4_linear_kernel`` for MXFP4 dynamic activations whatever was declared; FlashInfer's
W4A4 kernel takes them on sm100+, Marlin (weight-only) below
(vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w4a4_mxfp4.py,
vllm/model_executor/kernels/linear/__init__.py ``_POSSIBLE_MXFP4_KERNELS``). Their operands,
and compressed-tensors MXFP8's (``llmcompressor-mxfp8``) and ModelOpt MXFP4's, are checked
against what each producer writes; a scheme qarm has no operand contract for is never clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from qarm_audit import audit
from test_producers import Tensors, plant, zeros

CORPUS = REPO / "fixtures" / "producers"
DOWN = "model.layers.0.mlp.down_proj"  # weight_packed [128, 128]: in = 256, 8 scales a row
RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]


def arms(
    name: str, release: str, gpu: str, env: dict[str, str] | None = None
) -> set[tuple[str, str]]:
    report = audit(str(CORPUS / name), engine=f"vllm=={release}", gpu=gpu, env=env)
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    return {(a.declared, a.executed) for a in report.arms}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(
    ("gpu", "mxfp4", "mxfp4a16"),
    [
        ("sm80", "W4A16-MXFP4", "W4A16-MXFP4"),
        ("sm90", "W4A16-MXFP4", "W4A16-MXFP4"),
        ("sm100", "W4A4-MXFP4", "W4A4-MXFP4"),
        ("sm120", "W4A4-MXFP4", "W4A4-MXFP4"),
    ],
)
def test_executed_arm_per_gpu(release: str, gpu: str, mxfp4: str, mxfp4a16: str) -> None:
    assert arms("llmcompressor-mxfp4", release, gpu) == {("W4A4-MXFP4", mxfp4)}
    assert arms("llmcompressor-mxfp4a16", release, gpu) == {("W4A16-MXFP4", mxfp4a16)}


def test_weight_only_declared_runs_w4a4_on_blackwell_and_says_so() -> None:
    report = audit(str(CORPUS / "llmcompressor-mxfp4a16"), engine="vllm==0.33.0", gpu="sm100")
    assert report.refusals == []
    (warning,) = report.warnings
    assert warning.code == "declared-arm-differs"
    assert "declared W4A16-MXFP4 -> executed W4A4-MXFP4" in warning.message
    clean = audit(str(CORPUS / "llmcompressor-mxfp4a16"), engine="vllm==0.33.0", gpu="sm90")
    assert clean.verdict == "clean"


@pytest.mark.parametrize("release", RELEASES)
def test_below_sm80_is_refused_with_the_engines_message(release: str) -> None:
    report = audit(str(CORPUS / "llmcompressor-mxfp4"), engine=f"vllm=={release}", gpu="sm75")
    assert {r.code for r in report.refusals} == {"no-arm"}
    assert "Min capability: 80. Current capability: 75." in report.refusals[0].message


def test_marlin_backend_keeps_weight_only_on_blackwell() -> None:
    got = arms("llmcompressor-mxfp4", "0.33.0", "sm100", env={"linear_backend": "marlin"})
    assert got == {("W4A4-MXFP4", "W4A16-MXFP4")}


def test_routed_experts_arm_is_unknown_not_guessed() -> None:
    report = audit(str(CORPUS / "llmcompressor-moe-mxfp4a16"), engine="vllm==0.33.0", gpu="sm90")
    by_arm = {(a.declared, a.executed): a.modules for a in report.arms}
    assert by_arm == {("W4A16-MXFP4", "W4A16-MXFP4"): 8, ("W4A16-MXFP4", "unknown"): 24}


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        ({f"{DOWN}.weight_scale": zeros("U8", (128, 16))}, "operand-shape"),  # groups of 16
        ({f"{DOWN}.weight_scale": zeros("F8_E8M0", (128, 8))}, "operand-dtype"),  # cast on load
        ({f"{DOWN}.weight_global_scale": zeros("F32", (1,))}, "operand-unexpected"),  # NVFP4's
        ({f"{DOWN}.weight_zero_point": zeros("U8", (128, 8))}, "operand-unexpected"),  # symmetric
        ({f"{DOWN}.input_global_scale": zeros("F32", (1,))}, "operand-unexpected"),  # dynamic
    ],
)
def test_what_the_compressor_does_not_write_is_refused(
    tmp_path: Path, edit: Tensors, code: str
) -> None:
    folder = plant(tmp_path, "llmcompressor-mxfp4", lambda t: t.update(edit))
    report = audit(str(folder), engine="vllm==0.33.0", gpu="sm100")
    assert {(r.code, r.module) for r in report.refusals} == {(code, DOWN)}


def test_modelopt_mxfp4_operands_are_checked_too() -> None:
    """ModelOpt's MXFP4 (vLLM refuses the algorithm: no-arm) is checked against what
    ``MXFP4QTensor`` writes, so a stray is named beside the engine's refusal."""
    report = audit(str(CORPUS / "modelopt-mxfp4"), engine="vllm==0.33.0", gpu="sm100")
    assert {r.code for r in report.refusals} == {"no-arm"}


def test_modelopt_mxfp4_stray_is_refused(tmp_path: Path) -> None:
    folder = plant(
        tmp_path, "modelopt-mxfp4", lambda t: t.update({f"{DOWN}.weight_scale_2": zeros("F32", ())})
    )
    report = audit(str(folder), engine="vllm==0.33.0", gpu="sm100")
    assert {r.code for r in report.refusals} == {"no-arm", "operand-unexpected"}
    assert {r.module for r in report.refusals if r.code == "operand-unexpected"} == {DOWN}


def test_compressed_tensors_mxfp8_operands_are_checked(tmp_path: Path) -> None:
    """llm-compressor's MXFP8 (``mxfp8-quantized``): an F8_E4M3 weight and one U8 E8M0 scale
    per 32, as vLLM's CompressedTensorsW8A8Mxfp8 loads them."""
    sound = audit(str(CORPUS / "llmcompressor-mxfp8"), engine="vllm==0.33.0", gpu="sm100")
    assert sound.verdict == "clean"
    for edit, code in [
        ({f"{DOWN}.weight_scale": zeros("U8", (128, 16))}, "operand-shape"),
        ({f"{DOWN}.weight_global_scale": zeros("F32", (1,))}, "operand-unexpected"),
    ]:
        folder = plant(tmp_path / code, "llmcompressor-mxfp8", lambda t, e=edit: t.update(e))
        report = audit(str(folder), engine="vllm==0.33.0", gpu="sm100")
        assert {(r.code, r.module) for r in report.refusals} == {(code, DOWN)}


def test_a_scheme_without_an_operand_contract_is_never_clean() -> None:
    """ModelOpt INT4-AWQ has no operand contract in qarm: its modules' tensors are not checked,
    and the report says so beside whatever else it finds."""
    report = audit(str(CORPUS / "modelopt-int4-awq"), engine="vllm==0.33.0", gpu="sm90")
    (warning,) = [w for w in report.warnings if w.code == "operands-unchecked"]
    assert "W4A16_AWQ (W4A16-INT-AWQ)" in warning.message and "14 modules" in warning.message


def test_asymmetric_mxfp4_is_refused_by_vllm(tmp_path: Path) -> None:
    """vLLM's _is_mxfp4 (and _is_nvfp4_format) require symmetric weights, and no other scheme
    takes 4-bit float weights: get_scheme raises as it builds the first layer."""
    import json
    import shutil

    folder = tmp_path / "asym"
    shutil.copytree(CORPUS / "llmcompressor-mxfp4", folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = False
    (folder / "config.json").write_text(json.dumps(config))
    report = audit(str(folder), engine="vllm==0.33.0", gpu="sm100")
    refused = [r for r in report.refusals if r.code == "engine-refuses-declaration"]
    assert refused and "No compressed-tensors compatible scheme was found" in refused[0].message
    for other in ("llmcompressor-mxfp4", "llmcompressor-w4a16-asym"):  # symmetric; not MXFP4
        sound = audit(str(CORPUS / other), engine="vllm==0.33.0", gpu="sm100")
        assert "engine-refuses-declaration" not in {r.code for r in sound.refusals}, other
