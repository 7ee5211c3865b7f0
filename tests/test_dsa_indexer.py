"""DeepSeek sparse attention's indexer (DeepSeek V3.2, GLM-5: ``index_topk``) as each engine
builds and loads it:

- vLLM 0.30-0.33 fuses ``wk`` and ``weights_proj`` into ``wk_weights_proj``, built without a
  quant config, and ``_try_load_fp8_indexer_wk`` dequantizes an FP8 ``wk`` with a scale of at
  least one dimension into it (``model_executor/models/deepseek_v2.py``): DeepSeek-V3.2's own
  FP8 layout loads (``dequantized-on-load``), ModelOpt's per-tensor one does not.
- SGLang 0.5.22-0.5.23 builds ``weights_proj`` in bfloat16 without a quant config
  (``layers/attention/dsa/dsa_indexer.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report
from test_kv_unbuilt import CORPUS, SGLANG, VLLM
from test_native_fp8 import deepseek_config, deepseek_v3


def codes(report: Report) -> list[str]:
    """Every refusal and warning code (KV-cache ones aside: ``test_kv_dsa.py`` has those)."""
    return sorted(
        f.code for f in [*report.refusals, *report.warnings] if not f.code.startswith("kv-")
    )


def deepseek_v32(
    root: Path, wk_scale: tuple[int, ...] = (1, 2), wk_extra: dict[str, Any] | None = None
) -> Path:
    """DeepSeek-V3.2's own FP8 layout: the indexer's wq_b and wk in block FP8, weights_proj in
    BF16 (its inference code builds weights_proj in the default dtype)."""
    tensors: dict[str, Any] = deepseek_v3()
    for n in (0, 1):
        p = f"model.layers.{n}.self_attn.indexer"
        tensors[f"{p}.wq_b.weight"] = ("F8_E4M3", (2 * 128, 1536))
        tensors[f"{p}.wq_b.weight_scale_inv"] = ("F32", (2, 12))
        tensors[f"{p}.wk.weight"] = ("F8_E4M3", (128, 256))
        tensors[f"{p}.wk.weight_scale_inv"] = ("F32", wk_scale)
        tensors.update({f"{p}.wk.{operand}": spec for operand, spec in (wk_extra or {}).items()})
        tensors[f"{p}.weights_proj.weight"] = ("BF16", (2, 256))
        tensors[f"{p}.k_norm.weight"] = ("BF16", (128,))
        tensors[f"{p}.k_norm.bias"] = ("BF16", (128,))
    config = deepseek_config()
    config.update(
        architectures=["DeepseekV32ForCausalLM"],
        model_type="deepseek_v32",
        index_topk=8,
        index_n_heads=2,
        index_head_dim=128,
    )
    return write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": config})


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_dequantizes_deepseek_v32s_fp8_indexer_wk(tmp_path: Path, engine: str) -> None:
    report = audit(str(deepseek_v32(tmp_path / "v32")), engine=engine, gpu="sm100")
    assert codes(report) == []
    notes = [f for f in report.notes if f.code == "dequantized-on-load"]
    assert {f.module for f in notes} == {f"model.layers.{n}.self_attn.indexer.wk" for n in (0, 1)}
    assert "_try_load_fp8_indexer_wk" in notes[0].message
    # a 0-dim scale fails the loader's shape arithmetic: still refused
    scalar = audit(str(deepseek_v32(tmp_path / "s", wk_scale=())), engine=engine, gpu="sm100")
    assert set(codes(scalar)) == {"unquantized-ships-quantized"}
    # an INT8 weight is not taken for FP8: copied into the bfloat16 layer as it is
    int8 = deepseek_v32(tmp_path / "i", wk_extra={"weight": ("I8", (128, 256))})
    assert set(codes(audit(str(int8), engine=engine, gpu="sm100"))) == {
        "unquantized-ships-quantized"
    }
    # an activation scale beside it has no parameter in the fused layer: still refused
    extra = deepseek_v32(tmp_path / "x", wk_extra={"input_scale": ("F32", (1,))})
    assert set(codes(audit(str(extra), engine=engine, gpu="sm100"))) == {
        "unquantized-ships-quantized"
    }
    # ModelOpt's export also ships an input_scale, and an FP8 weights_proj: refused
    glm = audit(str(CORPUS / "modelopt-glm-moe-dsa-fp8kv"), engine=engine, gpu="sm100")
    refused = {f.module for f in glm.refusals if f.code == "unquantized-ships-quantized"}
    assert "model.layers.0.self_attn.indexer.wk" in refused


@pytest.mark.parametrize("engine", SGLANG)
def test_sglang_builds_the_indexer_weights_proj_in_bfloat16(tmp_path: Path, engine: str) -> None:
    # the routed experts' FP8 method is not modelled: a warning, nothing about the indexer
    v32 = audit(str(deepseek_v32(tmp_path / "v32")), engine=engine, gpu="sm100")
    assert codes(v32) == ["arm-unknown"]
    assert "native FP8 routed experts (Fp8MoEMethod) are not modelled" in v32.warnings[0].message
    glm = audit(str(CORPUS / "modelopt-glm-moe-dsa-fp8kv"), engine=engine, gpu="sm90")
    refused = {f.module for f in glm.refusals if f.code == "unquantized-ships-quantized"}
    assert refused == {f"model.layers.{n}.self_attn.indexer.weights_proj" for n in (0, 1)}
