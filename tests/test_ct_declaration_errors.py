"""compressed-tensors config groups vLLM and SGLang refuse as they read the declaration.

vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/
compressed_tensors.py@v0.33.0 (the same in 0.30-0.32; the wheels pin compressed-tensors 0.17.0)
``_quantization_scheme_map_from_config``: every group's ``weights`` is validated as
``QuantizationArgs`` (a group without them raises pydantic's ValidationError), and an
``actorder`` of ``group`` or ``dynamic`` (``true`` reads as ``group``) raises. SGLang 0.5.22 and
0.5.23 validate the weights alike (sgl-project/sglang python/sglang/srt/layers/quantization/
compressed_tensors/compressed_tensors.py); vLLM drops an attention-only group first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import CT_FP8 as FP8
from conftest import ct_fp8_llama
from qarm_audit import audit
from qarm_audit.report.model import Report


def declared(root: Path, groups: dict[str, Any], engine: str = "vllm") -> Report:
    return audit(str(ct_fp8_llama(root, groups=groups)), engine=engine)


def refused(report: Report) -> list[str]:
    return [r.message for r in report.refusals if r.code == "engine-refuses-declaration"]


@pytest.mark.parametrize(
    ("actorder", "said"), [("group", "'group'"), (True, "'group'"), ("DYNAMIC", "'dynamic'")]
)
def test_vllm_refuses_activation_ordering_by_group(
    tmp_path: Path, actorder: Any, said: str
) -> None:
    weights = {**FP8, "actorder": actorder}
    report = declared(tmp_path, {"group_0": {"targets": ["Linear"], "weights": weights}})
    [message] = refused(report)
    assert message.startswith(
        "config.json: quantization_config declares group_0; vllm v0.34.0 refuses it "
        'as it reads the declaration (_quantization_scheme_map_from_config): "Compressed-tensors '
        f"group/dynamic activation ordering (actorder={said}) is no longer supported."
    )


@pytest.mark.parametrize("actorder", ["weight", "static", False, None])
def test_other_orderings_are_read(tmp_path: Path, actorder: Any) -> None:
    weights = {**FP8, "actorder": actorder}
    report = declared(tmp_path, {"group_0": {"targets": ["Linear"], "weights": weights}})
    assert refused(report) == []


WEIGHTLESS = {"input_activations": {**FP8, "dynamic": False}}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_group_without_weights_fails_the_declaration(tmp_path: Path, engine: str) -> None:
    report = declared(tmp_path, {"outputs": {"targets": ["re:.*o_proj$"], **WEIGHTLESS}}, engine)
    [message] = refused(report)
    assert "declares config group 'outputs' with no weights;" in message
    assert (
        '"1 validation error for QuantizationArgs: Input should be a valid dictionary or '
        'instance of QuantizationArgs [type=model_type, input_value=None, input_type=NoneType]"'
    ) in message


def test_an_attention_only_group_without_weights_is_dropped_by_vllm_first(tmp_path: Path) -> None:
    groups = {"attention": {"targets": ["LlamaAttention"], **WEIGHTLESS}}
    assert refused(declared(tmp_path / "v", groups)) == []
    assert len(refused(declared(tmp_path / "s", groups, "sglang"))) == 1
