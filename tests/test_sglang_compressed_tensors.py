"""What SGLang 0.5.22-0.5.23 builds for compressed-tensors integer, MX and block-FP8 schemes on
a dense layer, on llm-compressor 0.14's own checkpoints.

sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/
compressed_tensors.py@v0.5.23 ``_get_scheme_from_parts``: pack-quantized 4- or 8-bit integer
weight-only is CompressedTensorsWNA16 (GPTQ Marlin, minimum capability 80), any other integer
weight-only raises; INT8 W8A8 is CompressedTensorsW8A8Int8 (minimum 80, activations quantized
per token at run time); integer weights with FP8 activations and the MX formats reach the final
"No compressed-tensors compatible scheme was found."; block FP8 below sm89 takes
CompressedTensorsW8A16Fp8 (schemes/compressed_tensors_w8a16_fp8.py), which takes the channel and
tensor strategies only. ``get_linear_scheme`` checks each scheme's minimum capability as the
layer is built.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from qarm_audit import audit
from qarm_audit.report.model import Report
from test_ct_integer_schemes import int_quantized_w8a16

CORPUS = REPO / "fixtures" / "producers"
RELEASES = ["sglang==0.5.22", "sglang==0.5.23"]


def outcome(name: str | Path, engine: str, gpu: str) -> tuple[set[str], set[str]]:
    report: Report = audit(str(CORPUS / name), engine=engine, gpu=gpu)
    return {str(a.executed) for a in report.arms}, {r.code for r in report.refusals}


@pytest.mark.parametrize("engine", RELEASES)
@pytest.mark.parametrize(
    ("name", "arm"), [("llmcompressor-w4a16", "W4A16-INT"), ("llmcompressor-w8a16", "W8A16-INT")]
)
def test_integer_weight_only_runs_marlin_from_sm80(engine: str, name: str, arm: str) -> None:
    for gpu in ("sm80", "sm90", "sm100", "sm120"):
        assert outcome(name, engine, gpu) == ({arm}, set()), gpu
    report = audit(str(CORPUS / name), engine=engine, gpu="sm75")
    assert {r.code for r in report.refusals} == {"no-arm"}
    assert "Min capability: 80. ', 'Current capability: 75." in report.refusals[0].message


def test_integer_weight_only_in_another_format_has_no_scheme(tmp_path: Path) -> None:
    report = audit(str(int_quantized_w8a16(tmp_path / "iq")), engine="sglang", gpu="sm90")
    assert {r.code for r in report.refusals} == {"no-arm"}
    assert "Other method (CompressedTensorsW4A16Sparse24) is not supported now" in (
        report.refusals[0].message
    )


@pytest.mark.parametrize("engine", RELEASES)
@pytest.mark.parametrize(
    "name",
    [
        "llmcompressor-w4afp8",
        "llmcompressor-mxfp4",
        "llmcompressor-mxfp4a16",
        "llmcompressor-mxfp8",
    ],
)
def test_no_dense_scheme_for_w4afp8_or_the_mx_formats(engine: str, name: str) -> None:
    for gpu in ("sm80", "sm90", "sm100", "sm120"):
        report = audit(str(CORPUS / name), engine=engine, gpu=gpu)
        assert {str(a.executed) for a in report.arms} == {"none"}, gpu
        assert "No compressed-tensors compatible scheme was found." in report.refusals[0].message


@pytest.mark.parametrize("engine", RELEASES)
def test_int8_w8a8_runs_to_sm90_and_is_not_modelled_above(engine: str) -> None:
    name = "llmcompressor-w8a8-int8"
    for gpu in ("sm80", "sm89", "sm90"):
        assert outcome(name, engine, gpu) == ({"W8A8-INT"}, set()), gpu
    for gpu in ("sm100", "sm120"):
        assert outcome(name, engine, gpu) == ({"unknown"}, set()), gpu


@pytest.mark.parametrize("engine", RELEASES)
def test_block_fp8_needs_sm89(engine: str) -> None:
    name = "llmcompressor-fp8-block"
    report = audit(str(CORPUS / name), engine=engine, gpu="sm80")
    assert {str(a.executed) for a in report.arms} == {"none"}
    assert "Unsupported weight strategy=<strategy>" in report.refusals[0].message
    for gpu in ("sm89", "sm90", "sm100"):
        assert outcome(name, engine, gpu) == ({"W8A8-FP8"}, set()), gpu


def as_architecture(root: Path, source: str, architecture: str) -> Path:
    """A producer fixture whose config.json names another architecture."""
    folder = root / architecture
    shutil.copytree(CORPUS / source, folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("engine", RELEASES)
def test_kimi_k3_renames_weight_packed_away(tmp_path: Path, engine: str) -> None:
    """sgl-project/sglang python/sglang/srt/models/kimi_k3.py: load_weights renames every
    weight_packed to weight (for compressed-tensors MXFP4 experts) outside Ascend NPUs."""
    folder = as_architecture(tmp_path, "llmcompressor-w4a16", "KimiK3LinearForCausalLM")
    report = audit(str(folder), engine=engine, gpu="sm90")
    assert {(r.code, r.tensor.rpartition(".")[2]) for r in report.refusals} == {
        ("operand-unloaded", "weight_packed")
    }
    assert "renames it to weight" in report.refusals[0].message


def test_hyv4_renames_weight_scale_away(tmp_path: Path) -> None:
    """sgl-project/sglang python/sglang/srt/models/hunyuan_v4.py: load_weights appends _inv to
    every .weight_scale, as its MXFP8 and block-FP8 checkpoints name it."""
    nvfp4 = as_architecture(tmp_path / "nvfp4", "modelopt-nvfp4", "HYV4ForCausalLM")
    report = audit(str(nvfp4), engine="sglang", gpu="sm100")
    assert {r.code for r in report.refusals} == {"operand-unloaded"}
    fp8 = as_architecture(tmp_path / "ct", "llmcompressor-fp8-static", "HYV4ForCausalLM")
    report = audit(str(fp8), engine="sglang", gpu="sm90")
    assert {r.code for r in report.refusals} == {"operand-unloaded"}
    # the same checkpoints under their own architecture, and under vLLM, load their scales
    assert audit(str(CORPUS / "modelopt-nvfp4"), engine="sglang", gpu="sm100").refusals == []
    assert audit(str(nvfp4), engine="vllm", gpu="sm100").refusals == []
    # its own MXFP8 format registers weight_scale_inv: the rename is right there
    mxfp8 = as_architecture(tmp_path / "mx", "modelopt-mxfp8", "HYV4ForCausalLM")
    assert audit(str(mxfp8), engine="sglang", gpu="sm100").refusals == []
    # a compressed-tensors MX checkpoint fails before any weight is loaded
    mx = as_architecture(tmp_path / "ctmx", "llmcompressor-mxfp8", "HYV4ForCausalLM")
    assert {r.code for r in audit(str(mx), engine="sglang", gpu="sm100").refusals} == {"no-arm"}
