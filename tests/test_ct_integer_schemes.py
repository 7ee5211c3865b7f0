"""compressed-tensors integer schemes vLLM has no arm for: integer weights with FP8 activations
(llm-compressor's W4AFP8), and integer weight-only in another format than pack-quantized.

vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py
``_get_scheme_from_parts`` (0.30-0.33): only ``_is_fp8_w4a8_sm90`` takes integer weights with
float activations (4-bit group weights, dynamic per-token activations, compute capability 90
exactly), giving ``CompressedTensorsW4A8Fp8``, whose weight parameter is ``weight_packed``
(``schemes/compressed_tensors_w4a8_fp8.py``); on any other GPU, or for any other such scheme,
it raises "No compressed-tensors compatible scheme was found" (0.30, whose
``_is_dynamic_token_w4a8_int`` tests no activation type, builds ``CompressedTensorsW4A8Int``
for the dynamic per-token ones instead: its int8 weight, one int4 value per int8, fails
Humming's layout check after the load, or a pack-quantized weight the loader's shape check).
llm-compressor 0.14 saves
W4AFP8 int-quantized, one int4 value per int8 ``weight`` (fixtures/producers/
llmcompressor-w4afp8), which no parameter of that scheme takes: the weight loader raises.
Integer weight-only goes to CompressedTensorsWNA16 only where the format is pack-quantized; in
an activation-quantization format (int-quantized) ``_is_static_tensor_w8a8`` then reads the
absent input activations' ``num_bits``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report
from qarm_audit.sources import open_source

W4AFP8 = REPO / "fixtures" / "producers" / "llmcompressor-w4afp8"
W4A8_INT = REPO / "fixtures" / "producers" / "llmcompressor-w4a8-int"
VLLM = ["vllm==0.30.0", "vllm==0.31.0", "vllm==0.32.0", "vllm==0.33.0"]


def fixture_tensors(folder: Path = W4AFP8) -> dict[str, Any]:
    """A producer fixture's tensors as ``write_checkpoint`` takes them: (dtype, shape)."""
    shards = open_source(str(folder)).shards
    return {t.name: (t.dtype, t.shape) for shard in shards for t in shard.tensors}


def variant(root: Path, *, packed: bool, activations: dict[str, Any] | None = None) -> Path:
    """The W4AFP8 fixture's model: its weights packed (pack-quantized, ``weight_packed`` and
    ``weight_shape``) or as shipped, and its activations as given."""
    tensors = fixture_tensors()
    if packed:
        for name, (dtype, shape) in list(tensors.items()):
            if dtype == "I8" and name.endswith(".weight"):
                module = name.removesuffix(".weight")
                del tensors[name]
                tensors[f"{module}.weight_packed"] = ("I32", (shape[0], shape[1] // 8))
                tensors[f"{module}.weight_shape"] = ("I64", (2,))
    config = json.loads((W4AFP8 / "config.json").read_text())
    block = config["quantization_config"]
    group = block["config_groups"]["group_0"]
    if packed:
        block["format"] = group["format"] = "pack-quantized"
    if activations is not None:
        group["input_activations"].update(activations)
    return write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": config})


def arm_and_codes(report: Report) -> tuple[list[str], list[str]]:
    executed = sorted({str(a.executed) for a in report.arms})
    return executed, sorted({f.code for f in report.refusals})


@pytest.mark.parametrize("engine", VLLM)
def test_llm_compressors_w4afp8_loads_nowhere(engine: str) -> None:
    on_hopper = audit(str(W4AFP8), engine=engine, gpu="sm90")
    assert arm_and_codes(on_hopper) == (["none"], ["no-arm"])
    assert "registers the int4 weight as weight_packed" in on_hopper.refusals[0].message
    assert "There is no module or parameter named '<layer>.weight'" in (
        on_hopper.refusals[0].message
    )
    # 0.30 builds CompressedTensorsW4A8Int for these (its _is_dynamic_token_w4a8_int tests no
    # activation type), whose int8 weight Humming, the one kernel for signed int4, refuses
    words = (
        "weight shape mismatched"
        if engine == "vllm==0.30.0"
        else "No compressed-tensors compatible scheme was found"
    )
    for gpu in ("sm80", "sm89", "sm100", "sm120"):
        elsewhere = audit(str(W4AFP8), engine=engine, gpu=gpu)
        assert arm_and_codes(elsewhere) == (["none"], ["no-arm"]), gpu
        assert words in elsewhere.refusals[0].message, gpu


@pytest.mark.parametrize("engine", VLLM)
def test_llm_compressors_int_w4a8_fails_after_the_load_everywhere(engine: str) -> None:
    """int4 weights with INT8 dynamic per-token activations (the W4A8 preset) build
    CompressedTensorsW4A8Int, whose int8 weight only Humming takes; Humming's layout check
    asserts after the load. Was clean, the arm not modelled."""
    for gpu in ("sm80", "sm89", "sm90", "sm100", "sm120"):
        report = audit(str(W4A8_INT), engine=engine, gpu=gpu)
        assert arm_and_codes(report) == (["none"], ["no-arm"]), gpu
        message = report.refusals[0].message
        if engine == "vllm==0.30.0" and gpu == "sm90":
            # 0.30's _is_fp8_w4a8 tests no activation type either: CompressedTensorsW4A8Fp8
            assert "registers the int4 weight as weight_packed" in message
        else:
            assert "weight shape mismatched" in message, gpu
            assert "CompressedTensorsW4A8Int" in message, gpu


def test_a_packed_weight_under_int_quantized_w4a8_fails_the_loader(tmp_path: Path) -> None:
    """CompressedTensorsW4A8Int registers its int8 weight as ``weight_packed`` too: a packed
    int32 ``weight_packed`` shipped under an int-quantized declaration does not fit it."""
    tensors = fixture_tensors(W4A8_INT)
    for name, (dtype, shape) in list(tensors.items()):
        if dtype == "I8" and name.endswith(".weight"):
            del tensors[name]
            tensors[f"{name}_packed"] = ("I32", (shape[0], shape[1] // 8))
    config = json.loads((W4A8_INT / "config.json").read_text())
    folder = write_checkpoint(tmp_path, {"model.safetensors": tensors}, {"config.json": config})
    report = audit(str(folder), engine="vllm", gpu="sm100")
    # the shipped operands are refused against the declaration too; the arm says why vLLM fails
    assert [str(arm.executed) for arm in report.arms] == ["none"]
    assert "the weight loader's shape assertion fails" in report.arms[0].reason


def test_packed_w4afp8_runs_on_sm90_only(tmp_path: Path) -> None:
    folder = variant(tmp_path / "packed", packed=True)
    hopper = audit(str(folder), engine="vllm", gpu="sm90")
    assert hopper.verdict == "clean", [*hopper.refusals, *hopper.warnings]
    assert arm_and_codes(hopper) == (["W4A8-INT"], [])
    assert arm_and_codes(audit(str(folder), engine="vllm", gpu="sm100")) == (["none"], ["no-arm"])


def test_static_fp8_activations_have_no_scheme_even_on_sm90(tmp_path: Path) -> None:
    static = {"dynamic": False}  # per token, as declared: only dynamic is changed
    folder = variant(tmp_path / "static", packed=True, activations=static)
    report = audit(str(folder), engine="vllm", gpu="sm90")
    assert "no-arm" in {f.code for f in report.refusals}
    assert "No compressed-tensors compatible scheme was found" in report.refusals[0].message


def int_quantized_w8a16(root: Path) -> Path:
    """llm-compressor's W8A16 (fixtures/producers/llmcompressor-w8a16) written int-quantized
    instead: each weight as I8, unpacked."""
    source = W4AFP8.parent / "llmcompressor-w8a16"
    tensors = {}
    for name, (dtype, shape) in fixture_tensors(source).items():
        module, _, operand = name.rpartition(".")
        if operand == "weight_packed":
            tensors[f"{module}.weight"] = ("I8", (shape[0], shape[1] * 4))
        elif operand != "weight_shape":
            tensors[name] = (dtype, shape)
    config = json.loads((source / "config.json").read_text())
    block = config["quantization_config"]
    block["format"] = block["config_groups"]["group_0"]["format"] = "int-quantized"
    return write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": config})


@pytest.mark.parametrize("engine", VLLM)
def test_integer_weight_only_int_quantized_has_no_scheme(tmp_path: Path, engine: str) -> None:
    report = audit(str(int_quantized_w8a16(tmp_path / "iq")), engine=engine, gpu="sm90")
    assert arm_and_codes(report) == (["none"], ["no-arm"])
    assert "'NoneType' object has no attribute 'num_bits'" in report.refusals[0].message
