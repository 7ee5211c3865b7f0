"""Every real declaration in tests/data/realworld, on its real architecture, exported the way its
producer writes it: the audit under vLLM refuses only what vLLM itself refuses.

The checkpoints are written by the producers' own rules, never by qarm's:
- compressed-tensors declarations: the library's ``apply_quantization_config`` assigns the schemes
  and its ``ModelCompressor`` writes the tensors (``weight_packed``, scales, zero points) of each
  module it quantized, saved by the safetensors library;
- ModelOpt declarations: the exporter quantizes every ``nn.Linear`` except the modules its
  ``exclude_modules`` names (fnmatch, as ``hf_quant_config.json`` is written), and leaves the
  routers (not ``nn.Linear`` in transformers), norms and embeddings in BF16.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest

from conftest import REALWORLD, nvfp4_modelopt, sized, write_checkpoint
from qarm_audit import audit

# --- ModelOpt: names per architecture, written as the exporter writes them --------------------

MLA = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
MLA_NORMS = ("q_a_layernorm", "kv_a_layernorm")
GQA = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
WIDTH = 64


def _deepseek(layers: int = 4, dense: int = 1, experts: int = 2) -> Iterator[tuple[str, str]]:
    """DeepSeek-V3 names (also GLM-5's): MLA attention, dense layers first, then MoE layers
    with a router ``mlp.gate`` (not an ``nn.Linear``), routed and shared experts."""
    yield "model.embed_tokens", "embedding"
    for i in range(layers):
        p = f"model.layers.{i}"
        yield from ((f"{p}.self_attn.{leaf}", "linear") for leaf in MLA)
        yield from ((f"{p}.self_attn.{leaf}", "norm") for leaf in MLA_NORMS)
        yield from (
            (f"{p}.{leaf}", "norm") for leaf in ("input_layernorm", "post_attention_layernorm")
        )
        if i < dense:
            yield from ((f"{p}.mlp.{leaf}", "linear") for leaf in MLP)
            continue
        yield f"{p}.mlp.gate", "router"
        for e in range(experts):
            yield from ((f"{p}.mlp.experts.{e}.{leaf}", "linear") for leaf in MLP)
        yield from ((f"{p}.mlp.shared_experts.{leaf}", "linear") for leaf in MLP)
    yield "model.norm", "norm"
    yield "lm_head", "linear"


def _deepseek_v4(layers: int, experts: int = 2) -> Iterator[tuple[str, str]]:
    """DeepSeek-V4 as its original checkpoints name it (``layers.N.attn.wq_a``, ``ffn``,
    ``embed``, ``head``; what vLLM's mapper reads, deepseek_v4/nvidia/model.py): from layer 2
    on, a compressor and an indexer in the attention (``compress_ratios``); every layer MoE
    with a router (no ``nn.Linear``), routed experts ``w1``/``w2``/``w3`` and shared experts."""
    yield "embed", "embedding"
    for i in range(layers):
        c = f"layers.{i}"
        yield from (
            (f"{c}.attn.{leaf}", "linear") for leaf in ("wq_a", "wkv", "wq_b", "wo_a", "wo_b")
        )
        yield from ((f"{c}.attn.{leaf}", "norm") for leaf in ("q_norm", "kv_norm"))
        if i >= 2:
            for part in ("attn.compressor", "attn.indexer.compressor"):
                yield from ((f"{c}.{part}.{leaf}", "linear") for leaf in ("wkv", "wgate"))
                yield f"{c}.{part}.norm", "norm"
            yield from ((f"{c}.attn.indexer.{leaf}", "linear") for leaf in ("wq_b", "weights_proj"))
        yield f"{c}.ffn.gate", "router"
        for e in range(experts):
            yield from ((f"{c}.ffn.experts.{e}.{w}", "linear") for w in ("w1", "w2", "w3"))
        yield from ((f"{c}.ffn.shared_experts.{w}", "linear") for w in ("w1", "w2", "w3"))
        yield from ((f"{c}.{leaf}", "norm") for leaf in ("attn_norm", "ffn_norm"))
    yield "norm", "norm"
    yield "head", "linear"


def _qwen3(layers: int = 2, experts: int = 0) -> Iterator[tuple[str, str]]:
    yield "model.embed_tokens", "embedding"
    for i in range(layers):
        p = f"model.layers.{i}"
        yield from ((f"{p}.self_attn.{leaf}", "linear") for leaf in GQA)
        yield from ((f"{p}.self_attn.{leaf}", "norm") for leaf in ("q_norm", "k_norm"))
        yield from (
            (f"{p}.{leaf}", "norm") for leaf in ("input_layernorm", "post_attention_layernorm")
        )
        if not experts:
            yield from ((f"{p}.mlp.{leaf}", "linear") for leaf in MLP)
            continue
        yield f"{p}.mlp.gate", "router"
        for e in range(experts):
            yield from ((f"{p}.mlp.experts.{e}.{leaf}", "linear") for leaf in MLP)
    yield "model.norm", "norm"
    yield "lm_head", "linear"


def _modelopt_export(modules: Iterator[tuple[str, str]], excludes: list[str]) -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    for name, kind in modules:
        if kind == "norm":
            tensors[f"{name}.weight"] = ("BF16", (WIDTH,))
        elif kind == "linear" and not any(fnmatch.fnmatchcase(name, p) for p in excludes):
            tensors.update(nvfp4_modelopt(name, WIDTH, WIDTH, input_scale=True))
        else:
            tensors[f"{name}.weight"] = ("BF16", (WIDTH, WIDTH))
    return tensors


DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "q_lora_rank": 8,
}
GLM5 = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa"}
DEEPSEEK_V4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}

MODELOPT: dict[str, tuple[str, Any, dict[str, Any]]] = {
    # case: (declaration file, modules, config.json)
    "trtllm-deepseek-r1-nvfp4": (
        "hf_quant_config.json",
        _deepseek,
        DEEPSEEK_V3,
    ),
    "aic-deepseek-v3-0324-nvfp4": (
        "hf_quant_config.json",
        _deepseek,
        DEEPSEEK_V3,
    ),
    "aic-glm5-nvfp4": ("hf_quant_config.json", _deepseek, {**GLM5, "q_lora_rank": 8}),
    # MIXED_PRECISION keyed by the experts layers of all 43 and 61 layers
    "aic-deepseek-v4-flash-nvfp4": (
        "hf_quant_config.json",
        lambda: _deepseek_v4(43),
        {**DEEPSEEK_V4, "q_lora_rank": 1024},
    ),
    "aic-deepseek-v4-pro-nvfp4": (
        "hf_quant_config.json",
        lambda: _deepseek_v4(61),
        {**DEEPSEEK_V4, "q_lora_rank": 1536},
    ),
    "aic-qwen3-30b-a3b-nvfp4": (
        "hf_quant_config.json",
        lambda: _qwen3(experts=2),
        {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"},
    ),
    "aic-qwen3-32b-nvfp4": (
        "hf_quant_config.json",
        _qwen3,
        {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    ),
    "aic-rh-glm-5.3-nvfp4-modelopt-in-config": ("config.json", _deepseek, {}),
}

REFUSED_BY_VLLM = {
    # Excludes kv_a_proj_with_mqa but not q_a_proj: vLLM fuses the two into fused_qkv_a_proj
    # (q_lora_rank set) and raises "Detected some but not all shards ... are quantized".
    "trtllm-deepseek-r1-nvfp4": "fused-shards-disagree",
    # Targets the class Linear and ignores nothing: compressed-tensors quantizes lm_head (an
    # nn.Linear); vLLM builds it as a ParallelLMHead, which no class target "Linear" reaches, and
    # has no parameter for lm_head.weight_packed.
    "ct-example-int4-w4a16": "unquantized-ships-quantized",
    # Its kv_cache_scheme writes no "symmetric": vLLM's compressed-tensors KV-cache method
    # reads the key as written and raises "Only support symmetric scaling factor".
    "llmc-tinyllama-fp8-kv-legacy-compression-config": "engine-refuses-declaration",
}


def _excludes(document: dict[str, Any]) -> list[str]:
    if "quantization" in document:  # hf_quant_config.json
        return list(document["quantization"].get("exclude_modules") or [])
    block = document["quantization_config"]
    return list(block.get("ignore") or block.get("exclude_modules") or [])


def _check(report: Any, case: str) -> None:
    codes = {r.code for r in report.refusals}
    expected = REFUSED_BY_VLLM.get(case)
    if expected is None:
        assert report.refusals == [], [(r.code, r.module) for r in report.refusals]
    else:
        assert expected in codes


@pytest.mark.parametrize("case", sorted(MODELOPT))
def test_a_modelopt_export_of_a_real_declaration_is_refused_only_where_vllm_refuses(
    case: str, tmp_path: Path
) -> None:
    file, modules, config = MODELOPT[case]
    document = json.loads((REALWORLD / case / file).read_text())
    documents = {file: document} if file != "config.json" else {}
    config_json = {**document, **config} if file == "config.json" else config
    tensors = _modelopt_export(modules(), _excludes(document))
    config_json = sized(config_json, tensors)
    folder = write_checkpoint(
        tmp_path / case, {"model.safetensors": tensors}, {"config.json": config_json, **documents}
    )
    report = audit(str(folder))
    assert report.layer_tree is not None and report.layer_tree.modelled
    _check(report, case)


def test_the_refused_modelopt_case_is_refused_on_the_fused_mla_layer_only(tmp_path: Path) -> None:
    case = "trtllm-deepseek-r1-nvfp4"
    file, modules, config = MODELOPT[case]
    document = json.loads((REALWORLD / case / file).read_text())
    tensors = _modelopt_export(modules(), _excludes(document))
    folder = write_checkpoint(
        tmp_path / case,
        {"model.safetensors": tensors},
        {"config.json": sized(config, tensors), file: document},
    )
    refused = {r.module.rsplit(".", 1)[-1] for r in audit(str(folder)).refusals}
    assert refused <= {"fused_qkv_a_proj", "q_a_proj", "kv_a_proj_with_mqa"}


# --- compressed-tensors: the library's own assignment and compressor --------------------------

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "deepseek_v3": DEEPSEEK_V3,
    "laguna": {"architectures": ["LagunaForCausalLM"], "model_type": "laguna"},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
}

COMPRESSED_TENSORS: dict[str, tuple[str, str]] = {
    # case: (declaration file, ct_oracle tree)
    "aic-kimi-k2.5-nvfp4-named": ("config.json", "deepseek_v3"),
    "aic-poolside-laguna-xs2-fp8": ("config.json", "laguna"),
    "ct-example-mixed-precision-fp8-nvfp4": ("mixed_precision_config.json", "qwen3"),
    "ct-example-int8-w8a8": ("int8_config.json", "llama"),
    "ct-example-int4-w4a16": ("int4_config.json", "llama"),
    "llmc-tinyllama-fp8-kv-legacy-compression-config": ("fp8-default-kv_config.json", "llama"),
    "llmc-tinyllama-fp8-static-legacy-compression-config": ("fp8-config.json", "llama"),
}
# Not here: llmc-example-fakequant-int8 (the `fakequant` format no longer exists in
# compressed-tensors, so no producer writes it), RedHat's DeepSeek-V4 declaration (its regexes,
# written in vLLM's names, match nothing on the tree transformers builds, so the library would
# export it unquantized: tests/test_differential.py), the sparsity-only checkpoint
# (tests/test_engines.py) and the header summary.

PREFIX = {"aic-kimi-k2.5-nvfp4-named": "language_model."}
"""Kimi-K2.5 ships its text model under ``language_model.`` (its vision tower beside it)."""


def _block(document: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The quantization block and where it sits (a recipe example is the bare block)."""
    for key in ("quantization_config", "compression_config"):
        if key in document:
            return document[key], key
    text = document.get("text_config") or {}
    if "quantization_config" in text:
        return text["quantization_config"], "text_config"
    return document, ""


def _ct_export(tree: str, block: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state dict, the quantization_config the compressor writes) for the tree."""
    import torch
    from compressed_tensors.compressors import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        ModelCompressor,
    )
    from compressed_tensors.quantization import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        QuantizationConfig,
        apply_quantization_config,
    )

    import ct_oracle

    config = QuantizationConfig.model_validate(deepcopy(block))
    model = ct_oracle.build_tree(tree).to(torch.bfloat16)
    model.config = ct_oracle._decoder_config()
    apply_quantization_config(model, config, show_progress=False)
    for module in model.modules():
        # an attention module carries the KV-cache scheme and no weight to compress
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is not None and scheme.weights is None:
            del module.quantization_scheme
    compressor = ModelCompressor.from_pretrained_model(
        model, quantization_format=block.get("format")
    )
    assert compressor is not None and compressor.quantization_config is not None
    compressor.compress_model(model)
    written = compressor.quantization_config.model_dump(exclude_none=True)
    return {k: v.contiguous() for k, v in model.state_dict().items()}, written


@pytest.mark.parametrize("case", sorted(COMPRESSED_TENSORS))
def test_a_compressed_tensors_export_of_a_real_declaration_loads_as_vllm_loads_it(
    case: str, tmp_path: Path
) -> None:
    pytest.importorskip("compressed_tensors")
    from safetensors.torch import save_file

    file, tree = COMPRESSED_TENSORS[case]
    document = json.loads((REALWORLD / case / file).read_text())
    block, key = _block(document)
    state, written = _ct_export(tree, block)
    if not key:
        # a recipe example: the checkpoint's config.json holds what the compressor writes
        document, key, block = {"quantization_config": written}, "quantization_config", written
    # a real checkpoint's config.json keeps its own architecture (Kimi-K2.5's nests the text
    # model's quantization_config under text_config)
    config = document if "architectures" in document else {**document, **ARCHITECTURES[tree]}
    folder = tmp_path / case
    folder.mkdir()
    prefix = PREFIX.get(case, "")
    save_file({prefix + k: v for k, v in state.items()}, str(folder / "model.safetensors"))
    config = sized(config, [prefix + k for k in state])
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    report = audit(str(folder))
    assert report.layer_tree is not None and report.layer_tree.modelled
    _check(report, case)
