"""KV-cache scales the engine cannot load are refused, and those it fills in itself are said.

What vLLM 0.33 does (vllm-project/vllm vllm/model_executor/layers/quantization/kv_cache.py
@v0.33.0 L32-L42, L69-L73, L117-L141; compressed_tensors/compressed_tensors.py@v0.33.0
L1157-L1268): a scalar per attention layer whose loader raises on more elements (per KV head
under compressed-tensors' ``attn_head``); only ``k_scale`` shipped gives ``v`` the same;
only ``v_scale`` fails an assert; nothing shipped is 1.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ct_fp8_llama, fp8_modelopt, llama, modelopt_file, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

ATTENTION = [f"model.layers.{n}.self_attn" for n in range(2)]


def modelopt(root: Path, scales: dict[str, Any], engine: str = "vllm", kv: str = "FP8") -> Report:
    """ModelOpt FP8 with a ``kv`` KV cache; ``scales`` as ModelOpt writes them, on k_proj/v_proj."""
    tensors = {**llama(2, fp8_modelopt), **scales}
    documents = {
        "config.json": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
        "hf_quant_config.json": modelopt_file("FP8", excludes=["lm_head"], kv=kv),
    }
    return audit(
        str(write_checkpoint(root, {"model.safetensors": tensors}, documents)), engine=engine
    )


def both(shape: tuple[int, ...] = ()) -> dict[str, Any]:
    out = {}
    for attention in ATTENTION:
        out[f"{attention}.k_proj.k_scale"] = ("F32", shape)
        out[f"{attention}.v_proj.v_scale"] = ("F32", shape)
    return out


def compressed_tensors(
    root: Path,
    scales: dict[str, Any],
    strategy: str,
    engine: str = "vllm",
    kv_heads: int | None = None,
) -> Report:
    """compressed-tensors FP8 weights and an FP8 KV cache of ``strategy``; the scales on the
    attention module, as llm-compressor writes them."""
    kv = {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True}
    config = {"num_key_value_heads": kv_heads} if kv_heads is not None else {}
    folder = ct_fp8_llama(root, tensors=scales, config=config, kv_cache_scheme=kv)
    return audit(str(folder), engine=engine)


def codes(report: Report) -> list[str]:
    return sorted(r.code for r in [*report.refusals, *report.warnings] if r.code.startswith("kv-"))


def test_one_scalar_of_each_on_every_layer_is_clean(tmp_path: Path) -> None:
    assert codes(modelopt(tmp_path / "c", both())) == []
    assert codes(modelopt(tmp_path / "one", both((1,)))) == []


def test_a_scale_per_head_where_the_engine_allocates_one(tmp_path: Path) -> None:
    report = modelopt(tmp_path / "c", both((8,)))
    assert codes(report) == ["kv-scale-shape"] * 4
    first = report.refusals[0]
    assert (first.module, first.tensor) == (ATTENTION[0], f"{ATTENTION[0]}.k_proj.k_scale")
    assert first.message.startswith(f"{ATTENTION[0]}.k_proj.k_scale has shape [8]; for a FP8 KV")
    # in the engine's words: BaseKVCacheMethod's KVCacheScaleParameter (vllm-project/vllm
    # vllm/model_executor/layers/quantization/kv_cache.py@v0.33.0 L35-41)
    assert first.message.endswith(
        'vllm v0.34.0 raises at load: "KV-cache scale expects a scalar weight, got shape (8,)"'
    ), first.message
    # SGLang's scalar parameters have no loader of their own: default_weight_loader's assert
    # (sgl-project/sglang python/sglang/srt/model_loader/weight_utils.py@v0.5.23)
    first = modelopt(tmp_path / "s", both((8,)), engine="sglang").refusals[0]
    assert 'raises at load: "Attempted to load weight (torch.Size([8])) into parameter ' in (
        first.message
    )
    assert "(torch.Size([]))" in first.message


@pytest.mark.parametrize(
    ("strategy", "expected"), [("attn_head", []), ("tensor", ["kv-scale-shape"] * 4)]
)
def test_compressed_tensors_scales_per_head_only_under_attn_head(
    tmp_path: Path, strategy: str, expected: list[str]
) -> None:
    scales = {f"{a}.{s}": ("F32", (8,)) for a in ATTENTION for s in ("k_scale", "v_scale")}
    report = compressed_tensors(tmp_path / "c", scales, strategy)
    assert codes(report) == expected
    if expected:  # compressed-tensors' own scalar parameter, loaded by default_weight_loader
        assert report.refusals[0].message.endswith(
            'raises at load: "Attempted to load weight (torch.Size([8])) into parameter '
            '(torch.Size([1]))"'
        ), report.refusals[0].message


@pytest.mark.parametrize(
    ("shape", "refused"),
    [
        ((8, 1, 1), False),  # as llm-compressor writes it: flattened by the loader
        ((8,), False),
        ((), False),  # one scale, broadcast to every head
        ((1, 1, 1), False),
        ((4, 1, 1), True),  # fewer than the heads: the copy fails
        ((16,), True),  # more: the first 8 are taken, the rest cut without a word
    ],
)
def test_per_head_scales_are_one_per_kv_head_of_the_config(
    tmp_path: Path, shape: tuple[int, ...], refused: bool
) -> None:
    scales = {f"{a}.{s}": ("F32", shape) for a in ATTENTION for s in ("k_scale", "v_scale")}
    report = compressed_tensors(tmp_path / "c", scales, "attn_head", kv_heads=8)
    assert codes(report) == (["kv-scale-shape"] * 4 if refused else [])
    if refused:
        assert report.refusals[0].message.startswith(
            f"{ATTENTION[0]}.k_scale has shape {list(shape)}; under compressed-tensors' "
            "strategy attn_head the engine allocates one scale per KV head (config.json: 8) "
            "and copies the flattened scale's first 8: fewer fail the load, more are cut "
            "without a word; vllm v0.34.0: its per-head loader flattens the scale"
        )
    # a config that states no head count: any shape is flattened and taken
    assert codes(compressed_tensors(tmp_path / "n", scales, "attn_head")) == []


def test_sglang_ignores_a_compressed_tensors_kv_cache_other_than_static_per_tensor_fp8(
    tmp_path: Path,
) -> None:
    """sgl-project/sglang python/sglang/srt/layers/quantization/compressed_tensors/
    compressed_tensors.py@v0.5.23 L219-223, L1276-1285: any other kv_cache_scheme is ignored."""
    per_head = {f"{a}.{s}": ("F32", (8,)) for a in ATTENTION for s in ("k_scale", "v_scale")}
    del per_head[f"{ATTENTION[1]}.k_scale"]  # a lone v_scale, which SGLang would assert on
    report = compressed_tensors(tmp_path / "h", per_head, "attn_head", engine="sglang")
    assert codes(report) == ["kv-cache-ignored"]  # the scales unread: none missing to it
    [warning] = [w for w in report.warnings if w.code == "kv-cache-ignored"]
    assert warning.message.startswith(
        "config.json: quantization_config declares a KV cache of FP8, strategy "
        "attn_head, symmetric, static; sglang v0.5.23 takes a compressed-tensors "
        "kv_cache_scheme only as static symmetric per-tensor FP8"
    )
    per_tensor = {f"{a}.{s}": ("F32", ()) for a in ATTENTION for s in ("k_scale", "v_scale")}
    report = compressed_tensors(tmp_path / "t", per_tensor, "tensor", engine="sglang")
    assert [w.code for w in report.warnings if w.code == "kv-cache-ignored"] == []
    # vLLM takes the per-head form
    report = compressed_tensors(tmp_path / "v", per_head, "attn_head")
    assert [w.code for w in report.warnings if w.code == "kv-cache-ignored"] == []


def test_a_v_scale_without_its_k_scale_fails_the_load(tmp_path: Path) -> None:
    scales = {k: v for k, v in both().items() if not k.startswith(f"{ATTENTION[1]}.k_proj")}
    report = modelopt(tmp_path / "c", scales)
    assert [(r.code, r.module) for r in report.refusals] == [("kv-k-scale-missing", ATTENTION[1])]
    assert report.refusals[0].message.endswith(
        "; vllm v0.34.0: its KV-cache method asserts k_scale > 0 when one of the two scales was "
        "loaded (an AssertionError), and the load fails"
    )
    # SGLang keeps the same assert (sgl-project/sglang python/sglang/srt/layers/quantization/
    # kv_cache.py@v0.5.23 L59-74)
    [refusal] = modelopt(tmp_path / "s", scales, engine="sglang").refusals
    assert refusal.message.endswith(
        "; sglang v0.5.23: its KV-cache method asserts k_scale > 0 when one of the two scales "
        "was loaded (an AssertionError), and the load fails"
    )


def test_a_v_scale_without_its_k_scale_under_compressed_tensors_is_filled_in_by_vllm_only(
    tmp_path: Path,
) -> None:
    scales = {f"{a}.v_scale": ("F32", (1,)) for a in ATTENTION}
    scales[f"{ATTENTION[0]}.k_scale"] = ("F32", (1,))
    report = compressed_tensors(tmp_path / "c", scales, "tensor")
    assert codes(report) == ["kv-scales-partial"]
    assert "1 attention layer ships a v_scale and no k_scale" in report.warnings[0].message
    # SGLang's compressed-tensors KV-cache method keeps BaseKVCacheMethod's assert
    report = compressed_tensors(tmp_path / "s", scales, "tensor", engine="sglang")
    assert [(r.code, r.module) for r in report.refusals] == [("kv-k-scale-missing", ATTENTION[1])]


def test_a_k_scale_without_its_v_scale_is_filled_in(tmp_path: Path) -> None:
    scales = {k: v for k, v in both().items() if not k.startswith(f"{ATTENTION[0]}.v_proj")}
    report = modelopt(tmp_path / "c", scales)
    assert codes(report) == ["kv-scales-partial"]
    [warning] = report.warnings
    assert "1 attention layer ships a k_scale and no v_scale (model.layers.0.self_attn)" in (
        warning.message
    )
    assert "v takes the layer's k_scale" in warning.message


def test_a_layer_without_either_scale_is_filled_in(tmp_path: Path) -> None:
    scales = {k: v for k, v in both().items() if not k.startswith(ATTENTION[1])}
    report = modelopt(tmp_path / "c", scales)
    assert codes(report) == ["kv-scales-partial"]
    assert "1 attention layer ships no KV scale (model.layers.1.self_attn)" in (
        report.warnings[0].message
    )


def test_vllm_keeps_a_modelopt_kv_cache_other_than_fp8_or_nvfp4_in_the_models_dtype(
    tmp_path: Path,
) -> None:
    """vllm-project/vllm vllm/utils/torch_utils.py@v0.33.0 (get_kv_cache_quant_algo_string, the
    same in 0.30-0.32): a ModelOpt kv_cache_quant_algo other than fp8 or nvfp4, lowered, falls
    back to "auto" with a warning; the KV-cache method is built all the same and loads the
    scales (ModelOptQuantConfigBase.get_quant_method)."""
    report = modelopt(tmp_path / "int8", both(), kv="INT8")
    assert codes(report) == ["kv-cache-ignored"]
    assert report.warnings[0].message.startswith(
        "hf_quant_config.json declares a KV cache of INT8; vllm v0.34.0 maps a ModelOpt "
        "kv_cache_quant_algo to a KV-cache dtype only as FP8 or NVFP4 (in any case): it logs "
        "\"WARNING: Unknown kv_cache_quant_algo 'INT8' in model config. Supported values: "
        "['fp8', 'nvfp4']. Falling back to 'auto'.\""
    )
    assert codes(modelopt(tmp_path / "lower", both(), kv="fp8")) == []
    assert codes(modelopt(tmp_path / "nvfp4", both(), kv="NVFP4")) == []
    # the scales are loaded all the same: one the loader refuses still fails the load ...
    assert codes(modelopt(tmp_path / "shape", both((8,)), kv="INT8")) == [
        "kv-cache-ignored",
        *["kv-scale-shape"] * 4,
    ]
    # ... but none missing matters to a KV cache in the model's dtype
    assert codes(modelopt(tmp_path / "none", {}, kv="INT8")) == ["kv-cache-ignored"]
    only_k = {k: v for k, v in both().items() if k.endswith("k_scale")}
    assert codes(modelopt(tmp_path / "k", only_k, kv="INT8")) == ["kv-cache-ignored"]
    assert codes(modelopt(tmp_path / "k8", only_k)) == ["kv-scales-partial"]


def test_sglang_keeps_a_modelopt_kv_cache_other_than_fp8_in_the_models_dtype(
    tmp_path: Path,
) -> None:
    """sgl-project/sglang python/sglang/srt/mem_cache/kv_cache_dtype.py@v0.5.23 L49-59 (L41-48
    in 0.5.22): with --kv-cache-dtype auto only a kv_cache_quant_algo of FP8, upper-cased,
    makes an FP8 KV cache; ModelOptQuantConfig builds its KV-cache method for any non-empty
    value (layers/quantization/modelopt_quant.py L347-348), so the scales are loaded."""
    report = modelopt(tmp_path / "nvfp4", both(), engine="sglang", kv="NVFP4")
    assert codes(report) == ["kv-cache-ignored"]
    assert report.warnings[0].message.startswith(
        "hf_quant_config.json declares a KV cache of NVFP4; sglang v0.5.23 sets an FP8 KV "
        "cache from a ModelOpt kv_cache_quant_algo only when it is FP8 (in any case): for "
        "NVFP4, with --kv-cache-dtype auto, the KV cache stays in the model's dtype"
    )
    assert codes(modelopt(tmp_path / "lower", both(), engine="sglang", kv="fp8")) == []
    shape = modelopt(tmp_path / "shape", both((8,)), engine="sglang", kv="INT8")
    assert codes(shape) == ["kv-cache-ignored", *["kv-scale-shape"] * 4]
