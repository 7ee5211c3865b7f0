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
