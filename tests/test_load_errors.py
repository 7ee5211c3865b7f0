"""The engine's words for a refusal qarm finds by itself are picked by the module's scheme
family, by what the finding says and by whether a quantization is declared, and appended for
the engine profile chosen, per release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import H, fp8_modelopt, llama, modelopt_file, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

MODULE = "model.layers.0.mlp.down_proj"
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1}


def _folder(root: Path, tensors: dict[str, Any], declaration: dict[str, Any] | None) -> Path:
    documents: dict[str, Any] = {"config.json": CONFIG}
    if declaration is not None:
        documents["hf_quant_config.json"] = declaration
    return write_checkpoint(root, {"model.safetensors": tensors}, documents)


def _messages(report: Report, code: str) -> list[str]:
    return [r.message for r in report.refusals if r.code == code]


def test_a_partial_group_quotes_the_scheme_familys_error(tmp_path: Path) -> None:
    nvfp4 = {
        f"{MODULE}.weight": ("U8", (H, 12)),
        f"{MODULE}.weight_scale": ("F8_E4M3", (H, 2)),  # in=24: one whole group and a partial
        f"{MODULE}.weight_scale_2": ("F32", ()),
    }
    folder = _folder(tmp_path / "nv", nvfp4, modelopt_file("NVFP4"))
    [message] = _messages(audit(str(folder)), "operand-shape")
    assert message == (
        f"{MODULE} has in=24, not a multiple of NVFP4's group of 16: the producer writes the "
        'last group partial, as a whole one; vllm v0.34.0 raises at load: "Unsupported model '
        'when in features size is not multiple of 16"'
    )
    mxfp8 = {
        f"{MODULE}.weight": ("F8_E4M3", (H, 48)),
        f"{MODULE}.weight_scale": ("U8", (H, 2)),  # in=48: one whole group of 32 and a partial
    }
    folder = _folder(tmp_path / "mx", mxfp8, modelopt_file("MXFP8"))
    [message] = _messages(audit(str(folder)), "operand-shape")
    assert message.endswith('raises at load: "MXFP8 requires input size divisible by 32, got <in>"')


def test_sglang_quotes_its_own_words_and_none_it_has_not(tmp_path: Path) -> None:
    nvfp4 = {
        f"{MODULE}.weight": ("U8", (H, 12)),
        f"{MODULE}.weight_scale": ("F8_E4M3", (H, 2)),
        f"{MODULE}.weight_scale_2": ("F32", ()),
    }
    folder = _folder(tmp_path / "nv", nvfp4, modelopt_file("NVFP4"))
    [message] = _messages(audit(str(folder), engine="sglang"), "operand-shape")
    assert message.endswith(
        '; sglang v0.5.23 raises at load: "Unsupported model when in features size is not '
        'multiple of 16"'
    )
    # MXFP8 runs on sm100 only, where SGLang builds the layer: no words are put in its mouth
    mxfp8 = {
        f"{MODULE}.weight": ("F8_E4M3", (H, 48)),
        f"{MODULE}.weight_scale": ("U8", (H, 2)),
    }
    folder = _folder(tmp_path / "mx", mxfp8, modelopt_file("MXFP8"))
    [message] = _messages(audit(str(folder), engine="sglang"), "operand-shape")
    assert message.endswith("the producer writes the last group partial, as a whole one")
    # a missing layer: SGLang's loader checks no coverage, quantized or not
    plain = {k: v for k, v in llama(2).items() if ".layers.1." not in k}
    folder = write_checkpoint(
        tmp_path / "p",
        {"model.safetensors": plain},
        {"config.json": {**CONFIG, "num_hidden_layers": 2}},
    )
    [message] = _messages(audit(str(folder), engine="sglang==0.5.22"), "layers-incomplete")
    assert message.endswith(
        "; sglang v0.5.22: its default loader checks no parameter coverage, quantized or not, "
        "so what is missing computes with memory never written"
    )


def test_another_shape_of_the_same_code_quotes_nothing(tmp_path: Path) -> None:
    wrong = {
        f"{MODULE}.weight": ("U8", (H, H // 2)),
        f"{MODULE}.weight_scale": ("F8_E4M3", (H, 3)),  # in=64 writes 4 groups
        f"{MODULE}.weight_scale_2": ("F32", ()),
    }
    folder = _folder(tmp_path / "nv", wrong, modelopt_file("NVFP4"))
    [message] = _messages(audit(str(folder)), "operand-shape")
    assert "vllm v0.34.0" not in message


def test_a_missing_layer_is_a_load_error_only_where_nothing_is_quantized(tmp_path: Path) -> None:
    """vLLM checks every parameter was filled for an unquantized model, and for no other."""
    quantized = {k: v for k, v in llama(2, fp8_modelopt).items() if ".layers.1." not in k}
    folder = write_checkpoint(
        tmp_path / "q",
        {"model.safetensors": quantized},
        {"config.json": {**CONFIG, "num_hidden_layers": 2}, "hf_quant_config.json": FP8},
    )
    [message] = _messages(audit(str(folder)), "layers-incomplete")
    assert message.endswith(
        "; vllm v0.34.0: loads a quantized checkpoint without checking that every parameter "
        "was filled (it checks an unquantized one only), so what is missing computes with "
        "memory never written"
    )
    plain = {k: v for k, v in llama(2).items() if ".layers.1." not in k}
    folder = write_checkpoint(
        tmp_path / "p",
        {"model.safetensors": plain},
        {"config.json": {**CONFIG, "num_hidden_layers": 2}},
    )
    [message] = _messages(audit(str(folder)), "layers-incomplete")
    assert message.endswith(
        '; vllm v0.34.0 raises at load: "Following weights were not initialized from '
        "checkpoint: {<the missing layers' norm weights: parameters of linear, MoE and "
        'embedding layers are not checked>}"'
    )
    # an older release, its own citation
    [message] = _messages(audit(str(folder), engine="vllm==0.30.0"), "layers-incomplete")
    assert "; vllm v0.30.0 raises at load:" in message


def _warnings(report: Report, code: str) -> list[str]:
    return [r.message for r in report.warnings if r.code == code]


def test_vllm_checks_an_unquantized_checkpoint_only_outside_linear_moe_and_embedding_layers(
    tmp_path: Path,
) -> None:
    """Its check that an unquantized checkpoint filled every parameter leaves out each module
    whose quant method processes its weights after loading (vllm-project/vllm
    vllm/model_executor/model_loader/default_loader.py@4ba787ec9 L537-539): every unquantized
    linear, MoE and embedding method does. A missing projection or expert loads silently."""
    layers = {**CONFIG, "num_hidden_layers": 3}
    gone = {k: v for k, v in llama(3).items() if ".layers.1.self_attn.v_proj." not in k}
    folder = write_checkpoint(tmp_path / "v", {"model.safetensors": gone}, {"config.json": layers})
    [message] = _warnings(audit(str(folder), engine="vllm==0.33.0"), "layer-modules-differ")
    assert message.endswith(
        '; vllm v0.33.0: raises "Following weights were not initialized from checkpoint" only '
        "where what is missing is no linear, MoE or embedding layer (a norm): its check that an "
        "unquantized checkpoint filled every parameter leaves those layers' parameters out "
        "(their unquantized methods process their weights after loading), so a missing "
        "projection loads without an error and computes with memory never written"
    )
    assert "raises at load" not in message
    # 0.34.0 names each shard of a fused projection a layer was not given (pop_missing_shards)
    [message] = _warnings(audit(str(folder)), "layer-modules-differ")
    assert '; vllm v0.34.0: raises "Following weights were not initialized from checkpoint" ' in (
        message
    )
    assert "where what is missing is one shard of a fused projection" in message
    experts = {**llama(1)}
    for e in (0, 1, 3):  # expert 2 is not shipped
        for proj in ("gate_proj", "up_proj", "down_proj"):
            experts[f"model.layers.0.mlp.experts.{e}.{proj}.weight"] = ("BF16", (H, H))
    moe = {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "num_hidden_layers": 1,
        "num_experts": 4,
    }
    folder = write_checkpoint(tmp_path / "e", {"model.safetensors": experts}, {"config.json": moe})
    [message] = _messages(audit(str(folder)), "experts-incomplete")
    assert message.endswith(
        "; vllm v0.34.0: loads it without an error: its check that an unquantized checkpoint "
        "filled every parameter leaves out the experts layer's (its unquantized MoE method "
        "processes its weights after loading), so what is missing computes with memory never "
        "written"
    )


FP8 = modelopt_file("FP8", excludes=["lm_head"])
