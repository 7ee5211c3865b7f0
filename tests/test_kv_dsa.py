"""SGLang and DeepSeek sparse attention (DSA: DeepSeek V3.2, GLM-5; ``index_topk`` in
config.json), read from SGLang 0.5.22 and 0.5.23:

- ``_dsa_kv_cache_dtype_default`` (``srt/arg_groups/overrides.py``) replaces
  ``--kv-cache-dtype auto`` with fp8_e4m3 from sm100 and bfloat16 below it, before the
  declaration is read: a declared FP8 KV cache is bfloat16 on Hopper (``kv-cache-ignored``).
- From sm100 the DeepSeek weight loader renames ModelOpt's ``self_attn.k_proj.k_scale`` to
  ``self_attn.attn_mqa.k_scale``, and the default DSA backend, trtllm, writes the FP8 cache
  without a scale and reads with ``bmm1_scale = q_scale * k_scale * layer.scaling``
  (``srt/layers/attention/dsa_backend.py``): a shipped k_scale other than 1.0 multiplies the
  attention logits (``kv-scale-on-logits``; ``-unread`` without ``--probe-scalars``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from qarm_audit import audit
from test_kv_unbuilt import CORPUS, VLLM, codes, modelopt_deepseek

SGLANG = ["sglang==0.5.22", "sglang==0.5.23"]
MODELOPT_NAMES = ("k_proj.k_scale", "v_proj.v_scale")
DSA = {"index_topk": 2048}


def glm5(root: Path, kv_value: float | None = None, **config: object) -> Path:
    return modelopt_deepseek(
        root,
        architecture="GlmMoeDsaForCausalLM",
        kv_names=MODELOPT_NAMES,
        kv_value=kv_value,
        config_extra={**DSA, **config},
    )


@pytest.mark.parametrize("engine", SGLANG)
def test_sglang_keeps_a_dsa_kv_cache_in_bfloat16_below_sm100(tmp_path: Path, engine: str) -> None:
    report = audit(str(glm5(tmp_path / "g")), engine=engine, gpu="sm90")
    assert codes(report) == ["kv-cache-ignored"]
    message = report.warnings[0].message
    assert "sets the KV-cache dtype of a DeepSeek sparse-attention model" in message
    assert "on sm90 with --kv-cache-dtype auto the KV cache is bfloat16" in message
    # learnable attention sinks keep bfloat16 on every GPU
    sinks = audit(str(glm5(tmp_path / "s", learnable_sink=True)), engine=engine, gpu="sm100")
    assert "kv-cache-ignored" in codes(sinks)
    # no index_topk: not sparse attention, the declaration decides
    dense = modelopt_deepseek(tmp_path / "d", architecture="GlmMoeDsaForCausalLM")
    assert codes(audit(str(dense), engine=engine, gpu="sm90")) == []
    # no GPU known: nothing said of it
    assert "kv-cache-ignored" not in codes(audit(str(glm5(tmp_path / "n")), engine=engine))


@pytest.mark.parametrize("engine", SGLANG)
def test_sglang_multiplies_dsa_logits_by_a_modelopt_k_scale(tmp_path: Path, engine: str) -> None:
    report = audit(str(glm5(tmp_path / "g")), engine=engine, gpu="sm100")
    assert codes(report) == ["kv-scale-on-logits-unread"]
    message = report.warnings[0].message
    assert "2 k_scale tensors are shipped as <layer>.self_attn.k_proj.k_scale" in message
    assert "bmm1_scale = q_scale * k_scale * layer.scaling" in message
    assert "--probe-scalars reads them" in message
    # read: a calibrated scale is refused, scales of 1.0 are not
    calibrated = audit(
        str(glm5(tmp_path / "c", 0.0625)), engine=engine, gpu="sm100", probe_scalars=True
    )
    refusal = [f for f in calibrated.refusals if f.code == "kv-scale-on-logits"]
    assert len(refusal) == 1
    assert "2 of them are not 1.0 (e.g. model.layers.0.self_attn.k_proj.k_scale = 0.0625)" in (
        refusal[0].message
    )
    ones = audit(str(glm5(tmp_path / "o", 1.0)), engine=engine, gpu="sm100", probe_scalars=True)
    assert not {"kv-scale-on-logits", "kv-scale-on-logits-unread"} & set(codes(ones))
    # a bare self_attn.k_scale is not renamed into attn_mqa, so never applied
    bare = modelopt_deepseek(tmp_path / "b", architecture="GlmMoeDsaForCausalLM", config_extra=DSA)
    assert codes(audit(str(bare), engine=engine, gpu="sm100")) == []
    # vLLM is not SGLang
    assert "kv-scale-on-logits-unread" not in codes(
        audit(str(glm5(tmp_path / "v")), engine="vllm==0.33.0", gpu="sm100")
    )


# DeepSeek V3/R1 without sparse attention: on sm100 SGLang picks trtllm_mla, whose decode writes
# the FP8 latent cache unscaled and reads with q_scale * k_scale * softmax_scale, k_scale taken
# only where the KV cache is FP8 (a ModelOpt FP8 kv_cache_quant_algo under auto).
@pytest.mark.parametrize("engine", SGLANG)
def test_sglang_multiplies_mla_logits_by_a_modelopt_k_scale_on_sm100(
    tmp_path: Path, engine: str
) -> None:
    root = modelopt_deepseek(tmp_path / "v3", kv_names=MODELOPT_NAMES)
    report = audit(str(root), engine=engine, gpu="sm100")
    assert codes(report) == ["kv-scale-on-logits-unread"]
    assert "trtllm_mla" in report.warnings[0].message
    # trtllm_mla is the default on sm100 only; fa3 and others there read no k_scale
    for gpu in ("sm90", "sm120"):
        assert codes(audit(str(root), engine=engine, gpu=gpu)) == []
    read = audit(
        str(modelopt_deepseek(tmp_path / "c", kv_names=MODELOPT_NAMES, kv_value=0.125)),
        engine=engine,
        gpu="sm100",
        probe_scalars=True,
    )
    assert "kv-scale-on-logits" in codes(read)
    # Kimi K2.5's text model is DeepseekV3ForCausalLM, loaded by the same loader
    kimi = modelopt_deepseek(tmp_path / "k", kv_names=MODELOPT_NAMES, kimi=True)
    assert codes(audit(str(kimi), engine=engine, gpu="sm100")) == ["kv-scale-on-logits-unread"]
    # a KV algorithm SGLang does not take keeps the cache bfloat16, where k_scale is not read
    int8 = modelopt_deepseek(tmp_path / "i", kv_names=MODELOPT_NAMES, kv_algo="INT8")
    assert "kv-scale-on-logits-unread" not in codes(audit(str(int8), engine=engine, gpu="sm100"))


# Real exports: ModelOpt 0.47 (FP8_DEFAULT_CFG + FP8_KV_CFG) of a tiny DeepSeek-V3 and GLM-5 from
# transformers 5.17 writes the KV scales of MLA attention as self_attn.k_proj.k_scale, calibrated
# (0.0016-0.0019 here), not 1.0.
@pytest.mark.parametrize("engine", SGLANG)
def test_real_modelopt_mla_exports_under_sglang(engine: str) -> None:
    v3 = str(CORPUS / "modelopt-deepseek-v3-fp8kv")
    assert codes(audit(v3, engine=engine, gpu="sm90")) == []
    read = audit(v3, engine=engine, gpu="sm100", probe_scalars=True)
    assert codes(read) == ["kv-scale-on-logits"]
    assert "2 of them are not 1.0 (e.g. model.layers.0.self_attn.k_proj.k_scale = 0.00" in (
        read.refusals[0].message
    )
    glm = str(CORPUS / "modelopt-glm-moe-dsa-fp8kv")
    assert codes(audit(glm, engine=engine, gpu="sm90")) == ["kv-cache-ignored"]
    assert codes(audit(glm, engine=engine, gpu="sm100", probe_scalars=True)) == [
        "kv-scale-on-logits"
    ]


@pytest.mark.parametrize("engine", VLLM)
def test_real_modelopt_mla_exports_under_vllm(engine: str) -> None:
    v3 = audit(str(CORPUS / "modelopt-deepseek-v3-fp8kv"), engine=engine, gpu="sm100")
    assert codes(v3) == ["kv-scales-unloaded"]
    assert "self_attn.mla_attn.mla_attn" in v3.warnings[0].message
    glm = audit(str(CORPUS / "modelopt-glm-moe-dsa-fp8kv"), engine=engine, gpu="sm100")
    assert "kv-scales-unloaded" in codes(glm)
    assert "sparse multi-head latent attention" in glm.warnings[0].message
    # the indexer's wk and weights_proj, which vLLM builds fused and without a quant config,
    # ship FP8 operands
    indexer = {f.module for f in glm.refusals if f.code == "unquantized-ships-quantized"}
    assert indexer == {
        f"model.layers.{n}.self_attn.indexer.{leaf}"
        for n in (0, 1)
        for leaf in ("wk", "weights_proj")
    }
