"""vLLM refuses an NVFP4 KV cache on a model it builds multi-head latent attention for, read
from vLLM 0.30-0.33: with ``--kv-cache-dtype auto`` ``resolve_kv_cache_dtype_string``
(``utils/torch_utils.py``) takes ``nvfp4`` from a ModelOpt declaration, and
``VllmConfig.validate_nvfp4_kv_cache_with_mla`` (``config/vllm.py``) raises where
``ModelConfig.use_mla`` holds: the text model's ``model_type`` is one ``is_deepseek_mla``
names (a list that differs per release) and ``kv_lora_rank`` is not None (``head_dim`` where
``compress_ratios`` is stated), unless ``is_causal`` is falsy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qarm_audit import audit
from qarm_audit.report.model import Report
from test_kv_unbuilt import VLLM, ct_deepseek, modelopt_deepseek

SGLANG = ["sglang==0.5.22", "sglang==0.5.23"]
ERROR = "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) backends."


def refusals(report: Report) -> list[str]:
    return [f.message for f in report.refusals if f.code == "engine-refuses-declaration"]


def nvfp4_kv(root: Path, **options: Any) -> Path:
    return modelopt_deepseek(root, kv_algo="NVFP4", **options)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_refuses_an_nvfp4_kv_cache_with_mla_at_start(tmp_path: Path, engine: str) -> None:
    report = audit(str(nvfp4_kv(tmp_path / "v3")), engine=engine)
    assert report.verdict == "refused"
    [message] = refusals(report)
    assert "declares a KV cache of NVFP4" in message
    assert "refuses it at start, as it validates its configuration" in message
    assert f'"{ERROR} Please use a different --kv-cache-dtype' in message
    assert "vllm/config/vllm.py@" in message
    # the engine does not start: what it would load is not said
    assert [f.code for f in [*report.refusals, *report.warnings] if f.code.startswith("kv-")] == []
    # the text model's type decides: Kimi K2.5's text_config is kimi_k2
    assert refusals(audit(str(nvfp4_kv(tmp_path / "k", kimi=True)), engine=engine))
    # an FP8 KV cache, a model without kv_lora_rank, and SGLang: no such check
    assert not refusals(audit(str(modelopt_deepseek(tmp_path / "fp8")), engine=engine))
    assert not refusals(audit(str(nvfp4_kv(tmp_path / "mha", mla=False)), engine=engine))
    for sglang in SGLANG:
        assert not refusals(audit(str(nvfp4_kv(tmp_path / "v3")), engine=sglang))


@pytest.mark.parametrize(
    ("config", "mla"),
    [
        ({"model_type": "llama"}, False),  # a type is_deepseek_mla does not name
        ({"is_causal": False}, False),  # bidirectional: no MLA kernel
        ({"is_causal": True}, True),
        ({"kv_lora_rank": None}, False),
        ({"kv_lora_rank": 0}, True),  # not None, as vLLM tests it
        # DeepSeek V4's form: compress_ratios asks for head_dim in place of kv_lora_rank
        ({"compress_ratios": [1, 4], "head_dim": 512}, True),
        ({"compress_ratios": [1, 4]}, False),
        # stated but falsy: the releases test it differently (hasattr, truthiness)
        ({"compress_ratios": [], "head_dim": 512}, False),
    ],
)
def test_the_model_is_mla_as_vllm_decides(
    tmp_path: Path, config: dict[str, Any], mla: bool
) -> None:
    root = nvfp4_kv(tmp_path / "m", config_extra=config)
    assert bool(refusals(audit(str(root), engine="vllm==0.33.0"))) is mla


def test_the_model_types_are_the_releases_own(tmp_path: Path) -> None:
    """``longcat_flash_ngram`` is among is_deepseek_mla's types in 0.30 and 0.31 only."""
    root = nvfp4_kv(tmp_path / "l", config_extra={"model_type": "longcat_flash_ngram"})
    found = {engine: bool(refusals(audit(str(root), engine=engine))) for engine in VLLM}
    assert found == {
        "vllm==0.30.0": True,
        "vllm==0.31.0": True,
        "vllm==0.32.0": False,
        "vllm==0.33.0": False,
    }


def test_a_compressed_tensors_nvfp4_kv_cache_sets_no_dtype(tmp_path: Path) -> None:
    """vLLM takes a KV-cache dtype from a ModelOpt declaration only: a compressed-tensors
    kv_cache_scheme of 4-bit floats leaves --kv-cache-dtype auto as it is."""
    root = ct_deepseek(tmp_path / "ct")
    config = json.loads((root / "config.json").read_text())
    config["quantization_config"]["kv_cache_scheme"].update(num_bits=4)
    (root / "config.json").write_text(json.dumps(config))
    report = audit(str(root), engine="vllm==0.33.0")
    assert report.declaration.kv_cache is not None
    assert report.declaration.kv_cache.algo == "NVFP4"  # read as the same algorithm
    assert not refusals(report)


@pytest.mark.parametrize(
    "options",
    [
        {"kv_names": ()},  # none shipped
        # a model whose loader would load them, each of the wrong shape
        {
            "architecture": "KimiLinearForCausalLM",
            "config_extra": {"model_type": "kimi_linear"},
            "scale": (8,),
        },
    ],
)
def test_an_engine_that_does_not_start_loads_no_kv_scale(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    report = audit(str(nvfp4_kv(tmp_path / "r", **options)), engine="vllm==0.33.0")
    assert [f.code for f in [*report.refusals, *report.warnings]] == ["engine-refuses-declaration"]
    # the same with an FP8 KV cache, which vLLM takes: the scales are checked
    fp8 = audit(str(modelopt_deepseek(tmp_path / "f", **options)), engine="vllm==0.33.0")
    assert {f.code for f in [*fp8.refusals, *fp8.warnings]} & {
        "kv-scales-missing",
        "kv-scale-shape",
    }
