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

from conftest import fp8_modelopt, llama, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

WEIGHTS = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}


def quip(online: bool) -> dict[str, Any]:
    """A transform_config as llm-compressor's QuIP writes it: ``u`` on the Linear inputs and
    ``v`` on their outputs, each half fused into the weights and, where ``online``, the other
    half applied at run time."""

    def pair(fused: str, run: str) -> list[dict[str, Any]]:
        args = [{"targets": ["Linear"], "location": fused, "inverse": True, "ignore": ["lm_head"]}]
        if online:
            args.append({"targets": ["Linear"], "location": run, "ignore": ["lm_head"]})
        return args

    scheme = {"type": "random-hadamard", "randomize": False, "requires_grad": False}
    return {
        "config_groups": {
            "u": {**scheme, "apply": pair("weight_input", "input")},
            "v": {**scheme, "apply": pair("weight_output", "output")},
        }
    }


def audited(root: Path, transform_config: Any, engine: str) -> Report:
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": WEIGHTS, "format": "float-quantized"}
        },
        "ignore": ["lm_head"],
        "transform_config": transform_config,
    }
    tensors = llama(2, lambda m, o, i: fp8_modelopt(m, o, i, input_scale=False))
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    documents = {"config.json": {**config, "quantization_config": block}}
    folder = write_checkpoint(root, {"model.safetensors": tensors}, documents)
    return audit(str(folder), engine=engine)


def refused(report: Report) -> list[str]:
    return [r.message for r in report.refusals if r.code == "transform-not-applied"]


def test_sglang_never_applies_an_online_transform(tmp_path: Path) -> None:
    [message] = refused(audited(tmp_path, quip(online=True), "sglang"))
    assert message == (
        "config.json: quantization_config: transform_config applies transforms at run time "
        "(u at input, v at output); sglang v0.5.23 reads no transform_config, so the weights, "
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
