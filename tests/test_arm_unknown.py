"""An arm the profile does not model is never part of a clean verdict: ``arm-unknown`` warns on
the GPU given (or on every GPU), ``arm-unknown-on-some-gpus`` notes part of the range."""

from __future__ import annotations

from conftest import REPO
from qarm_audit import audit

CORPUS = REPO / "fixtures" / "producers"
INT8 = CORPUS / "llmcompressor-w8a8-int8"


def test_an_arm_not_modelled_on_the_gpu_given_is_a_warning() -> None:
    # SGLang's INT8 GEMM above sm90 is compiled code the profile does not read
    report = audit(str(INT8), engine="sglang", gpu="sm100")
    assert [str(a.executed) for a in report.arms] == ["unknown"]
    assert report.verdict == "warnings"
    [warning] = report.warnings
    assert warning.code == "arm-unknown"
    assert "W8A8-INT on sm100 (14 modules) is not modelled" in warning.message
    assert "nothing vouches that it loads" in warning.message
    assert warning.module == "model.layers.0.mlp.down_proj"


def test_an_arm_not_modelled_on_part_of_the_range_is_a_note_that_asks_for_a_gpu() -> None:
    report = audit(str(INT8), engine="sglang")
    assert {(str(a.executed), a.gpu) for a in report.arms} == {
        ("W8A8-INT", "sm80-sm90"),
        ("unknown", "sm100+"),
    }
    assert report.verdict == "clean" and report.warnings == []
    [note] = [n for n in report.notes if n.code.startswith("arm-")]
    assert note.code == "arm-unknown-on-some-gpus"
    assert "on sm100+" in note.message and note.message.endswith("give --gpu to decide")


def test_an_arm_modelled_everywhere_leaves_no_such_finding() -> None:
    report = audit(str(INT8), engine="sglang", gpu="sm90")
    assert report.verdict == "clean"
    assert not [f for f in [*report.warnings, *report.notes] if f.code.startswith("arm-unknown")]
