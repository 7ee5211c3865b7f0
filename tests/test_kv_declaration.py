"""A compressed-tensors ``kv_cache_scheme`` vLLM cannot build is refused, in vLLM's words.

vllm-project/vllm vllm/model_executor/layers/quantization/compressed_tensors/
compressed_tensors.py@v0.33.0 L1102-1142 (the same in 0.30-0.32):
``CompressedTensorsKVCacheMethod.validate_kv_cache_scheme`` reads the mapping as written and
raises at the first check that fails: type float and num_bits 8, a strategy compressed-tensors
knows, a strategy of ``tensor`` or ``attn_head``, ``symmetric`` true. It runs as each
``Attention`` layer takes its KV-cache method (``get_quant_method``: ``isinstance(layer,
Attention)``); vLLM's MLA attention is no ``Attention`` and takes none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ct_fp8_llama
from qarm_audit import audit
from qarm_audit.report.model import Report

FP8 = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False}
WHERE = "config.json: quantization_config"


def declared(
    root: Path, kv: dict[str, Any], engine: str = "vllm", architecture: str = "LlamaForCausalLM"
) -> Report:
    """compressed-tensors FP8 weights over a tiny Llama, with ``kv`` as its kv_cache_scheme."""
    folder = ct_fp8_llama(root, config={"architectures": [architecture]}, kv_cache_scheme=kv)
    return audit(str(folder), engine=engine)


def refused(report: Report) -> list[str]:
    return [r.message for r in report.refusals if r.code == "engine-refuses-declaration"]


@pytest.mark.parametrize(
    ("changed", "said", "engine_text"),
    [
        (
            {"type": "int"},
            "INT8, strategy tensor, symmetric, static",
            "Currently supported kv cache quantization is num_bits=8, type=float, however "
            "received num_bits=8, type=int",
        ),
        (
            {"num_bits": 4},
            "NVFP4, strategy tensor, symmetric, static",
            "Currently supported kv cache quantization is num_bits=8, type=float, however "
            "received num_bits=4, type=float",
        ),
        (
            {"strategy": "head"},
            "FP8, strategy head, symmetric, static",
            "'head' is not a valid QuantizationStrategy",
        ),
        (
            {"strategy": "channel"},
            "FP8, strategy channel, symmetric, static",
            "Invalid strategy for compressed-tensors KV cache. Expected strategies: "
            "(<QuantizationStrategy.TENSOR: 'tensor'>, <QuantizationStrategy.ATTN_HEAD: "
            "'attn_head'>), found strategy: QuantizationStrategy.CHANNEL",
        ),
        (
            {"symmetric": False},
            "FP8, strategy tensor, asymmetric, static",
            "Only support symmetric scaling factor for compressed-tensors KV cache. However "
            "found symmetric: False",
        ),
    ],
)
def test_the_first_check_the_scheme_fails_is_refused_in_vllms_words(
    tmp_path: Path, changed: dict[str, Any], said: str, engine_text: str
) -> None:
    [message] = refused(declared(tmp_path, {**FP8, **changed}))
    assert message.startswith(
        f"{WHERE} declares a KV cache of {said}; vllm v0.34.0 refuses it as it builds the "
        f'first attention layer: "{engine_text}" (vllm-project/vllm '
        "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"
    )


def test_a_key_not_written_is_read_as_none_not_as_the_parsers_default(tmp_path: Path) -> None:
    """llm-compressor's 2024 TinyLlama FP8 example writes no symmetric (the realworld corpus
    holds it): compressed-tensors' parser would default it to true, vLLM reads None."""
    kv = {"num_bits": 8, "type": "float", "strategy": "tensor"}
    [message] = refused(declared(tmp_path / "sym", kv))
    assert '"Only support symmetric scaling factor' in message
    assert "However found symmetric: None" in message
    [message] = refused(declared(tmp_path / "strategy", {**FP8, "strategy": None}))
    assert '"None is not a valid QuantizationStrategy"' in message


def test_only_the_first_failing_check_is_raised(tmp_path: Path) -> None:
    [message] = refused(declared(tmp_path, {**FP8, "type": "int", "symmetric": False}))
    assert "Currently supported kv cache quantization" in message


@pytest.mark.parametrize(
    "kv",
    [
        FP8,
        {**FP8, "strategy": "attn_head"},
        {**FP8, "num_bits": 8.0},  # Python's 8.0 == 8
        {**FP8, "symmetric": 1},  # true to ``if not is_symmetric``
        {**FP8, "symmetric": "yes"},  # true to it as well (and read true by the parser)
        {**FP8, "dynamic": True},  # not checked
    ],
)
def test_schemes_vllm_builds_are_not_refused(tmp_path: Path, kv: dict[str, Any]) -> None:
    assert refused(declared(tmp_path, kv)) == []


def test_an_mla_model_takes_no_kv_cache_method_and_no_check(tmp_path: Path) -> None:
    """DeepSeek-V3's attention is vLLM's MLAAttention (by default): no KV-cache method."""
    bad = {**FP8, "symmetric": False}
    assert refused(declared(tmp_path / "mla", bad, architecture="DeepseekV3ForCausalLM")) == []
    assert len(refused(declared(tmp_path / "llama", bad))) == 1
    # an architecture not modelled is taken to build a plain Attention
    assert len(refused(declared(tmp_path / "new", bad, architecture="NewForCausalLM"))) == 1


def test_sglang_ignores_such_a_scheme_rather_than_raising(tmp_path: Path) -> None:
    report = declared(tmp_path, {**FP8, "symmetric": False}, engine="sglang")
    assert refused(report) == []
    assert [w.code for w in report.warnings if w.code == "kv-cache-ignored"] == ["kv-cache-ignored"]
