"""Differential oracle: how compressed-tensors itself assigns schemes (the producer view).

``TREES`` are small module trees shaped as a producer sees real architectures (transformers
5.x, with llm-compressor's MoE linearization); :func:`build_tree` turns one into a tiny CPU
``torch.nn.Module`` whose classes carry exactly the given names; :func:`ct_assignments` runs the
installed compressed-tensors' own ``apply_quantization_config`` on a fresh tree and reports,
per module, which ``config_groups`` entry's scheme it received (:func:`ct_run` also returns the
targets the library warned it could not match); :func:`checkpoint_tensors` gives the tensor
names and shapes a checkpoint of the tree ships, to feed the auditor the same modules.

The library decides: nothing here matches a target, an ignore entry or a class itself. The
answers are those of whichever compressed-tensors is installed (written against 0.20.1, with
torch 2.13.0+cpu and transformers 5.24.0). torch, transformers and compressed-tensors are
imported only when a tree is built, so ``TREES`` can be read without them; a test that builds
trees skips when they are absent::

    pytest.importorskip("compressed_tensors")

Module names are the checkpoint's (as the tensors name them, ``model.layers.0.self_attn.q_proj``),
which is also what transformers 5 builds in memory for the decoder-only trees; where the two
differ (Mixtral, LLaVA, Qwen2-VL) a comment on the tree says how.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Spec = list[tuple[str, str]]
"""``(module name, class name)`` pairs, parents before children; ``""`` is the root."""

CacheKwarg = Literal["past_key_values", "cache"]

KV_CACHE = "kv_cache_scheme"
"""The label :func:`ct_assignments` gives an attention module that received only the
``kv_cache_scheme`` (compressed-tensors wraps it in a scheme of its own, no config group)."""

WIDTH = 128
"""Every Linear/Embedding has in-features (embedding dim) 128 and 4 outputs (rows): divisible by
every group (16, 32, 64, 128) and block (128x128) size, so the library logs no divisibility
warning, and still tiny (512 weights)."""

EXPERTS = 2
"""Routed experts per MoE layer."""

# --- trees --------------------------------------------------------------------------------
#
# Class names verified against transformers 5.24.0 (installed here): each architecture was
# built from a tiny config on the meta device and its ``named_modules()`` dumped, and
# ``save_pretrained`` was run to see the checkpoint names it writes. Parameterless leaves
# (activations, rotary embeddings) are left out: nothing can quantize them.
#
# MoE experts. transformers 5.x holds routed experts fused: ``mlp.experts`` is one module
# (``Qwen3MoeExperts``, ``DeepseekV3Experts``, ``MixtralExperts``, ``Qwen3NextExperts``,
# ``LagunaExperts``) with 3-D parameters ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]
# and no per-expert Linear; the router ``mlp.gate`` is a plain ``nn.Module`` with a 2-D
# ``weight`` parameter (``Qwen3MoeTopKRouter``, ``DeepseekV3TopkRouter``, ``MixtralTopKRouter``,
# ``Qwen3NextTopKRouter``, ``LagunaTopKRouter``), not an ``nn.Linear``. llm-compressor
# linearizes the experts before it applies a config: ``linearize_moe`` /
# ``load_quantizable_moe`` replace each experts module with ``LinearExperts2D`` (an
# ``nn.ModuleList``) of ``ExpertMLPWithGate`` modules holding ``gate_proj``/``up_proj``/
# ``down_proj`` as ``torch.nn.Linear`` (vllm-project/llm-compressor
# src/llmcompressor/modeling/moe/linearize.py:96-125 and linear_experts.py:26-51, 137-229
# @ab1ba3effcafc15746cd6d6ca24cba3f7bd7a582). The router is left as transformers built it.
# The trees below are that linearized view.


def _lins(prefix: str, leaves: Sequence[str]) -> Spec:
    return [(f"{prefix}.{leaf}", "Linear") for leaf in leaves]


def _experts(prefix: str, leaves: Sequence[str] = ("gate_proj", "up_proj", "down_proj")) -> Spec:
    out: Spec = [(prefix, "LinearExperts2D(ModuleList)")]
    for e in range(EXPERTS):
        out.append((f"{prefix}.{e}", "ExpertMLPWithGate"))
        out += _lins(f"{prefix}.{e}", leaves)
    return out


_MLP = ("gate_proj", "up_proj", "down_proj")
_QKVO = ("q_proj", "k_proj", "v_proj", "o_proj")
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")


def _llama_like(
    p: str,
    layers: int = 2,
    qk_norm: bool = False,
    moe: Callable[[str, int], Spec] | None = None,
    lm_head: str = "lm_head",
    root: bool = True,
    model_prefix: str = "model",
) -> Spec:
    """A Llama-shaped decoder; ``p`` is the class prefix (``Llama``, ``Qwen3``, ``Qwen3Moe``)."""
    m = model_prefix
    out: Spec = [("", f"{p}ForCausalLM")] if root else []
    out += [(m, f"{p}Model"), (f"{m}.embed_tokens", "Embedding"), (f"{m}.layers", "ModuleList")]
    for i in range(layers):
        layer = f"{m}.layers.{i}"
        out += [(layer, f"{p}DecoderLayer"), (f"{layer}.self_attn", f"{p}Attention")]
        out += _lins(f"{layer}.self_attn", _QKVO)
        if qk_norm:
            out += [(f"{layer}.self_attn.{n}", f"{p}RMSNorm") for n in ("q_norm", "k_norm")]
        if moe is None:
            out += [(f"{layer}.mlp", f"{p}MLP"), *_lins(f"{layer}.mlp", _MLP)]
        else:
            out += moe(layer, i)
        out += [(f"{layer}.{n}", f"{p}RMSNorm") for n in _LAYER_NORMS]
    out += [(f"{m}.norm", f"{p}RMSNorm"), (lm_head, "Linear")]
    return out


def _qwen3_moe_block(layer: str, _i: int) -> Spec:
    return [
        (f"{layer}.mlp", "Qwen3MoeSparseMoeBlock"),
        *_experts(f"{layer}.mlp.experts"),
        (f"{layer}.mlp.gate", "Qwen3MoeTopKRouter"),
    ]


def _deepseek_v3() -> Spec:
    """DeepSeek-V3 with ``q_lora_rank`` (MLA); layer 0 dense (``first_k_dense_replace=1``),
    layer 1 MoE. The checkpoint's MTP layer (``model.layers.61``) is not built by transformers
    (``_keys_to_ignore_on_load_unexpected``, modeling_deepseek_v3.py:552) and is left out."""
    out: Spec = [
        ("", "DeepseekV3ForCausalLM"),
        ("model", "DeepseekV3Model"),
        ("model.embed_tokens", "Embedding"),
        ("model.layers", "ModuleList"),
    ]
    for i in range(2):
        layer = f"model.layers.{i}"
        attn = f"{layer}.self_attn"
        out += [(layer, "DeepseekV3DecoderLayer"), (attn, "DeepseekV3Attention")]
        out += [
            (f"{attn}.q_a_proj", "Linear"),
            (f"{attn}.q_a_layernorm", "DeepseekV3RMSNorm"),
            (f"{attn}.q_b_proj", "Linear"),
            (f"{attn}.kv_a_proj_with_mqa", "Linear"),
            (f"{attn}.kv_a_layernorm", "DeepseekV3RMSNorm"),
            (f"{attn}.kv_b_proj", "Linear"),
            (f"{attn}.o_proj", "Linear"),
        ]
        if i == 0:
            out += [(f"{layer}.mlp", "DeepseekV3MLP"), *_lins(f"{layer}.mlp", _MLP)]
        else:
            out += [
                (f"{layer}.mlp", "DeepseekV3MoE"),
                *_experts(f"{layer}.mlp.experts"),
                (f"{layer}.mlp.gate", "DeepseekV3TopkRouter"),
                (f"{layer}.mlp.shared_experts", "DeepseekV3MLP"),
                *_lins(f"{layer}.mlp.shared_experts", _MLP),
            ]
        out += [(f"{layer}.{n}", "DeepseekV3RMSNorm") for n in _LAYER_NORMS]
    out += [("model.norm", "DeepseekV3RMSNorm"), ("lm_head", "Linear")]
    return out


def _mixtral(moe_name: str, leaves: Sequence[str]) -> Spec:
    def block(layer: str, _i: int) -> Spec:
        return [
            (f"{layer}.{moe_name}", "MixtralSparseMoeBlock"),
            (f"{layer}.{moe_name}.gate", "MixtralTopKRouter"),
            *_experts(f"{layer}.{moe_name}.experts", leaves),
        ]

    return _llama_like("Mixtral", moe=block)


def _llava() -> Spec:
    """LLaVA-1.5 (CLIP ViT tower, 2-layer projector, Llama), named as transformers 5.24 saves it.

    In memory transformers 5 names these ``model.vision_tower.*``,
    ``model.multi_modal_projector.*``, ``model.language_model.*`` and ``lm_head``. llava-hf's
    original checkpoints also have a ``vision_model.`` level
    (``vision_tower.vision_model.encoder...``) that transformers 5 strips on load
    (``PrefixChange`` for ``CLIPVisionModel``, conversion_mapping.py:971)."""
    v = "vision_tower"
    out: Spec = [
        ("", "LlavaForConditionalGeneration"),
        (v, "CLIPVisionModel"),
        (f"{v}.embeddings", "CLIPVisionEmbeddings"),
        (f"{v}.embeddings.patch_embedding", "Conv2d"),
        (f"{v}.embeddings.position_embedding", "Embedding"),
        (f"{v}.pre_layrnorm", "LayerNorm"),
        (f"{v}.encoder", "CLIPEncoder"),
        (f"{v}.encoder.layers", "ModuleList"),
    ]
    for i in range(2):
        layer = f"{v}.encoder.layers.{i}"
        out += [(layer, "CLIPEncoderLayer"), (f"{layer}.self_attn", "CLIPAttention")]
        out += _lins(f"{layer}.self_attn", ("k_proj", "v_proj", "q_proj", "out_proj"))
        out += [(f"{layer}.layer_norm1", "LayerNorm"), (f"{layer}.mlp", "CLIPMLP")]
        out += _lins(f"{layer}.mlp", ("fc1", "fc2"))
        out += [(f"{layer}.layer_norm2", "LayerNorm")]
    out += [
        (f"{v}.post_layernorm", "LayerNorm"),
        ("multi_modal_projector", "LlavaMultiModalProjector"),
        *_lins("multi_modal_projector", ("linear_1", "linear_2")),
        ("language_model", "LlamaForCausalLM"),
    ]
    out += _llama_like(
        "Llama", root=False, model_prefix="language_model.model", lm_head="language_model.lm_head"
    )
    return out


def _qwen2_vl() -> Spec:
    """Qwen2-VL: vision tower ``visual.*`` (fused ``attn.qkv``, Conv3d patch embedding, merger)
    and a 1-layer text model, named as the checkpoint (and transformers 5.24's save) has them;
    in memory transformers 5 names them ``model.visual.*`` and ``model.language_model.*``."""
    out: Spec = [
        ("", "Qwen2VLForConditionalGeneration"),
        ("visual", "Qwen2VisionTransformerPretrainedModel"),
        ("visual.patch_embed", "PatchEmbed"),
        ("visual.patch_embed.proj", "Conv3d"),
        ("visual.blocks", "ModuleList"),
    ]
    for i in range(2):
        b = f"visual.blocks.{i}"
        out += [(b, "Qwen2VLVisionBlock"), (f"{b}.norm1", "LayerNorm"), (f"{b}.norm2", "LayerNorm")]
        out += [(f"{b}.attn", "VisionAttention"), *_lins(f"{b}.attn", ("qkv", "proj"))]
        out += [(f"{b}.mlp", "VisionMlp"), *_lins(f"{b}.mlp", ("fc1", "fc2"))]
    out += [
        ("visual.merger", "PatchMerger"),
        ("visual.merger.ln_q", "LayerNorm"),
        ("visual.merger.mlp", "Sequential"),
        ("visual.merger.mlp.0", "Linear"),
        ("visual.merger.mlp.1", "GELU"),
        ("visual.merger.mlp.2", "Linear"),
    ]
    text = _llama_like("Qwen2VL", layers=1, root=False)
    # the text decoder's classes are Qwen2VLTextModel and Qwen2MLP
    rename = {"Qwen2VLModel": "Qwen2VLTextModel", "Qwen2VLMLP": "Qwen2MLP"}
    return out + [(n, rename.get(c, c)) for n, c in text]


def _qwen3_next_moe(prefix: str) -> Spec:
    return [
        (f"{prefix}.mlp", "Qwen3NextSparseMoeBlock"),
        (f"{prefix}.mlp.gate", "Qwen3NextTopKRouter"),
        *_experts(f"{prefix}.mlp.experts"),
        (f"{prefix}.mlp.shared_expert", "Qwen3NextMLP"),
        *_lins(f"{prefix}.mlp.shared_expert", _MLP),
        (f"{prefix}.mlp.shared_expert_gate", "Linear"),
    ]


def _qwen3_next_attn(prefix: str) -> Spec:
    return [
        (f"{prefix}.self_attn", "Qwen3NextAttention"),
        *_lins(f"{prefix}.self_attn", _QKVO),
        (f"{prefix}.self_attn.q_norm", "Qwen3NextRMSNorm"),
        (f"{prefix}.self_attn.k_norm", "Qwen3NextRMSNorm"),
    ]


def _qwen3_next() -> Spec:
    """Qwen3-Next hybrid: layers 0-2 Gated DeltaNet (``linear_attn``), layer 3 full attention
    (``full_attention_interval=4``), every layer sparse MoE with a shared expert and its Linear
    ``shared_expert_gate``; then the MTP block ``mtp.*``.

    transformers never builds ``mtp.*`` (``_keys_to_ignore_on_load_unexpected = [r"^mtp.*"]``,
    modeling_qwen3_next.py:947; the same in Qwen3.5), so a producer going through transformers
    never sees it; its names and classes follow vLLM's ``Qwen3NextMTP`` and the checkpoint
    (``mtp.fc``, ``mtp.pre_fc_norm_embedding``, ``mtp.pre_fc_norm_hidden``, ``mtp.layers.0.*``,
    ``mtp.norm``), not transformers. Qwen3.5 keeps the layout but splits the projections
    (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``)."""
    out: Spec = [
        ("", "Qwen3NextForCausalLM"),
        ("model", "Qwen3NextModel"),
        ("model.embed_tokens", "Embedding"),
        ("model.layers", "ModuleList"),
    ]
    for i in range(4):
        layer = f"model.layers.{i}"
        out += [(layer, "Qwen3NextDecoderLayer")]
        if i < 3:
            la = f"{layer}.linear_attn"
            out += [
                (la, "Qwen3NextGatedDeltaNet"),
                (f"{la}.conv1d", "Conv1d"),
                *_lins(la, ("in_proj_qkvz", "in_proj_ba")),
                (f"{la}.norm", "Qwen3NextRMSNormGated"),
                (f"{la}.out_proj", "Linear"),
            ]
        else:
            out += _qwen3_next_attn(layer)
        out += _qwen3_next_moe(layer)
        out += [(f"{layer}.{n}", "Qwen3NextRMSNorm") for n in _LAYER_NORMS]
    out += [("model.norm", "Qwen3NextRMSNorm"), ("lm_head", "Linear")]
    out += [
        ("mtp", "Qwen3NextMultiTokenPredictor"),
        ("mtp.fc", "Linear"),
        ("mtp.pre_fc_norm_embedding", "Qwen3NextRMSNorm"),
        ("mtp.pre_fc_norm_hidden", "Qwen3NextRMSNorm"),
        ("mtp.layers", "ModuleList"),
        ("mtp.layers.0", "Qwen3NextDecoderLayer"),
        *_qwen3_next_attn("mtp.layers.0"),
        *_qwen3_next_moe("mtp.layers.0"),
        ("mtp.layers.0.input_layernorm", "Qwen3NextRMSNorm"),
        ("mtp.layers.0.post_attention_layernorm", "Qwen3NextRMSNorm"),
        ("mtp.norm", "Qwen3NextRMSNorm"),
    ]
    return out


def _laguna() -> Spec:
    """poolside Laguna: gated attention (``g_proj``, ``q_norm``/``k_norm``), layer 0 dense, then
    MoE with ``shared_experts`` and a router carrying ``e_score_correction_bias``."""
    out: Spec = [
        ("", "LagunaForCausalLM"),
        ("model", "LagunaModel"),
        ("model.embed_tokens", "Embedding"),
        ("model.layers", "ModuleList"),
    ]
    for i in range(2):
        layer = f"model.layers.{i}"
        attn = f"{layer}.self_attn"
        out += [(layer, "LagunaDecoderLayer"), (attn, "LagunaAttention"), *_lins(attn, _QKVO)]
        out += [(f"{attn}.q_norm", "LagunaRMSNorm"), (f"{attn}.k_norm", "LagunaRMSNorm")]
        out += [(f"{attn}.g_proj", "Linear")]
        if i == 0:
            out += [(f"{layer}.mlp", "LagunaMLP"), *_lins(f"{layer}.mlp", _MLP)]
        else:
            out += [
                (f"{layer}.mlp", "LagunaSparseMoeBlock"),
                *_experts(f"{layer}.mlp.experts"),
                (f"{layer}.mlp.gate", "LagunaTopKRouter"),
                (f"{layer}.mlp.shared_experts", "LagunaMLP"),
                *_lins(f"{layer}.mlp.shared_experts", _MLP),
            ]
        out += [(f"{layer}.{n}", "LagunaRMSNorm") for n in _LAYER_NORMS]
    out += [("model.norm", "LagunaRMSNorm"), ("lm_head", "Linear")]
    return out


def _deepseek_v4() -> Spec:
    """DeepSeek-V4 as transformers 5.24 builds it (modeling_deepseek_v4.py; the checkpoint's
    original names ``layers.N.attn.wq_a`` ... are renamed on load, conversion_mapping.py:711):
    layer 0 sliding attention only, layer 1 compressed sparse attention with its compressor
    and indexer; every layer MoE with a router and shared experts. ``o_a_proj`` is a
    ``DeepseekV4GroupedLinear``, an ``nn.Linear`` subclass. The hyper-connection modules
    (``attn_hc``, ``ffn_hc``, ``hc_head``) hold plain parameters, no Linear, and are left
    out; so is ``mtp.*``, which transformers drops on load."""
    out: Spec = [
        ("", "DeepseekV4ForCausalLM"),
        ("model", "DeepseekV4Model"),
        ("model.embed_tokens", "Embedding"),
        ("model.layers", "ModuleList"),
    ]
    for i in range(2):
        layer = f"model.layers.{i}"
        attn = f"{layer}.self_attn"
        out += [(layer, "DeepseekV4DecoderLayer"), (attn, "DeepseekV4Attention")]
        out += [
            (f"{attn}.q_a_proj", "Linear"),
            (f"{attn}.q_a_norm", "DeepseekV4RMSNorm"),
            (f"{attn}.q_b_proj", "Linear"),
            (f"{attn}.kv_proj", "Linear"),
            (f"{attn}.kv_norm", "DeepseekV4RMSNorm"),
            (f"{attn}.o_a_proj", "DeepseekV4GroupedLinear(Linear)"),
            (f"{attn}.o_b_proj", "Linear"),
        ]
        if i == 1:
            c = f"{attn}.compressor"
            x = f"{c}.indexer"
            out += [
                (c, "DeepseekV4CSACompressor"),
                *_lins(c, ("kv_proj", "gate_proj")),
                (f"{c}.kv_norm", "DeepseekV4RMSNorm"),
                (x, "DeepseekV4Indexer"),
                *_lins(x, ("kv_proj", "gate_proj")),
                (f"{x}.kv_norm", "DeepseekV4RMSNorm"),
                (f"{x}.q_b_proj", "Linear"),
                (f"{x}.scorer", "DeepseekV4IndexerScorer"),
                (f"{x}.scorer.weights_proj", "Linear"),
            ]
        out += [
            (f"{layer}.mlp", "DeepseekV4SparseMoeBlock"),
            (f"{layer}.mlp.gate", "DeepseekV4TopKRouter"),
            *_experts(f"{layer}.mlp.experts"),
            (f"{layer}.mlp.shared_experts", "DeepseekV4MLP"),
            *_lins(f"{layer}.mlp.shared_experts", _MLP),
        ]
        out += [(f"{layer}.{n}", "DeepseekV4RMSNorm") for n in _LAYER_NORMS]
    out += [("model.norm", "DeepseekV4RMSNorm"), ("lm_head", "Linear")]
    return out


def _glm5() -> Spec:
    """GLM-5 (``GlmMoeDsaForCausalLM``, transformers 5.24 modeling_glm_moe_dsa.py): DeepSeek-V3's
    MLA and MoE, and in every attention a sparse-attention indexer (``wq_b``, ``wk``,
    ``weights_proj`` Linears and a ``LayerNorm`` ``k_norm``); layer 0 dense, layer 1 MoE."""
    out: Spec = [
        ("", "GlmMoeDsaForCausalLM"),
        ("model", "GlmMoeDsaModel"),
        ("model.embed_tokens", "Embedding"),
        ("model.layers", "ModuleList"),
    ]
    for i in range(2):
        layer = f"model.layers.{i}"
        attn = f"{layer}.self_attn"
        x = f"{attn}.indexer"
        out += [(layer, "GlmMoeDsaDecoderLayer"), (attn, "GlmMoeDsaAttention")]
        out += [
            (f"{attn}.q_a_proj", "Linear"),
            (f"{attn}.q_a_layernorm", "GlmMoeDsaRMSNorm"),
            (f"{attn}.q_b_proj", "Linear"),
            (f"{attn}.kv_a_proj_with_mqa", "Linear"),
            (f"{attn}.kv_a_layernorm", "GlmMoeDsaRMSNorm"),
            (f"{attn}.kv_b_proj", "Linear"),
            (f"{attn}.o_proj", "Linear"),
            (x, "GlmMoeDsaIndexer"),
            *_lins(x, ("wq_b", "wk")),
            (f"{x}.k_norm", "LayerNorm"),
            (f"{x}.weights_proj", "Linear"),
        ]
        if i == 0:
            out += [(f"{layer}.mlp", "GlmMoeDsaMLP"), *_lins(f"{layer}.mlp", _MLP)]
        else:
            out += [
                (f"{layer}.mlp", "GlmMoeDsaMoE"),
                *_experts(f"{layer}.mlp.experts"),
                (f"{layer}.mlp.gate", "GlmMoeDsaTopkRouter"),
                (f"{layer}.mlp.shared_experts", "GlmMoeDsaMLP"),
                *_lins(f"{layer}.mlp.shared_experts", _MLP),
            ]
        out += [(f"{layer}.{n}", "GlmMoeDsaRMSNorm") for n in _LAYER_NORMS]
    out += [("model.norm", "GlmMoeDsaRMSNorm"), ("lm_head", "Linear")]
    return out


TREES: dict[str, Spec] = {
    "llama": _llama_like("Llama"),
    "qwen3": _llama_like("Qwen3", qk_norm=True),
    "qwen3_moe": _llama_like("Qwen3Moe", qk_norm=True, moe=_qwen3_moe_block),
    "deepseek_v3": _deepseek_v3(),
    # Mixtral as its checkpoints name it (block_sparse_moe, experts.E.w1/w2/w3). transformers 5
    # renames on load (".block_sparse_moe." -> ".mlp.", w1/w3 fused into experts.gate_up_proj,
    # conversion_mapping.py:1359) and llm-compressor's linearized experts name their Linears
    # gate_proj/up_proj/down_proj, so at quantization time the producer matches the names of
    # "mixtral_in_memory" instead.
    "mixtral": _mixtral("block_sparse_moe", ("w1", "w2", "w3")),
    "mixtral_in_memory": _mixtral("mlp", _MLP),
    "llava": _llava(),
    "qwen2_vl": _qwen2_vl(),
    "qwen3_next": _qwen3_next(),
    "laguna": _laguna(),
    "deepseek_v4": _deepseek_v4(),
    "glm5": _glm5(),
}
"""Architecture key -> tree. Class names of the transformers modules verified in 5.24.0;
``LinearExperts2D``/``ExpertMLPWithGate`` are llm-compressor's; ``mtp.*`` of ``qwen3_next``
follows vLLM (transformers builds none)."""

TREE_FOR_ARCHITECTURE: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "KimiK25ForConditionalGeneration": "deepseek_v3",  # its text model is DeepSeek-V3 shaped
    "MixtralForCausalLM": "mixtral",
    "LlavaForConditionalGeneration": "llava",
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen3NextForCausalLM": "qwen3_next",
    "LagunaForCausalLM": "laguna",
    "DeepseekV4ForCausalLM": "deepseek_v4",
    "GlmMoeDsaForCausalLM": "glm5",
}
"""``config.json`` ``architectures[0]`` -> the key of the tree that stands for it."""

KV_ATTENTION_CLASSES = frozenset(
    {
        "LlamaAttention",
        "Qwen3Attention",
        "Qwen3MoeAttention",
        "DeepseekV3Attention",
        "MixtralAttention",
        "Qwen2VLAttention",
        "Qwen3NextAttention",
        "LagunaAttention",
        "GlmMoeDsaAttention",
    }
)
"""Decoder attention classes, whose ``forward`` takes the KV cache (encoder attention such as
``CLIPAttention`` and ``VisionAttention`` does not). compressed-tensors only attaches KV-cache
and attention schemes to a module whose class name contains "attention", that has a
``k_proj``/``v_proj``/``qkv_proj``/``kv_b_proj`` child and whose ``forward`` has a
``past_key_value(s)`` parameter."""

# --- building -----------------------------------------------------------------------------

_CLASS = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\((?P<base>[A-Za-z_][A-Za-z0-9_]*)\))?$")
_ROUTER = re.compile(r"(TopKRouter|TopkRouter|Router)$")
_NORM = re.compile(r"(Norm|NormGated)$")


def _torch_module(base: type[torch.nn.Module]) -> torch.nn.Module:
    """An instance of a torch class (or a subclass of it) with the trees' tiny shapes."""
    import torch

    nn = torch.nn
    if issubclass(base, nn.Linear):
        return base(WIDTH, 4, bias=False)
    if issubclass(base, nn.Embedding):
        return base(4, WIDTH)
    if issubclass(base, nn.Conv1d):
        return base(4, 4, 2, groups=4, bias=False)
    if issubclass(base, nn.Conv2d):
        return base(3, 4, 2)
    if issubclass(base, nn.Conv3d):
        return base(3, 4, 2, bias=False)
    if issubclass(base, nn.LayerNorm):
        return base(4)
    return base()


def _forward_past_key_values(
    self: torch.nn.Module, hidden_states: Any, past_key_values: Any = None, **kwargs: Any
) -> Any:
    raise NotImplementedError("an oracle tree is never run")


def _forward_cache(
    self: torch.nn.Module, hidden_states: Any, cache: Any = None, **kwargs: Any
) -> Any:
    raise NotImplementedError("an oracle tree is never run")


_FORWARDS: dict[str, Callable[..., Any]] = {
    "past_key_values": _forward_past_key_values,
    "cache": _forward_cache,
}
_classes: dict[tuple[str, str, str], type[torch.nn.Module]] = {}


def _class(spelled: str, cache_kwarg: CacheKwarg) -> type[torch.nn.Module]:
    """``Linear`` is torch's own class; ``Name(Base)`` a subclass of ``torch.nn.Base`` named
    Name; any other name a subclass of ``torch.nn.Module`` (one class object per spelling)."""
    import torch

    m = _CLASS.match(spelled)
    if m is None:
        raise ValueError(f"not a class name: {spelled!r}")
    name, base_name = m["name"], m["base"]
    if base_name is None:
        own = getattr(torch.nn, name, None)
        if isinstance(own, type) and issubclass(own, torch.nn.Module):
            return own
        base_name = "Module"
    base = getattr(torch.nn, base_name, None)
    if not (isinstance(base, type) and issubclass(base, torch.nn.Module)):
        raise ValueError(f"{spelled!r}: {base_name} is no torch.nn module class")
    key = (name, base_name, cache_kwarg if name in KV_ATTENTION_CLASSES else "")
    cls = _classes.get(key)
    if cls is None:
        body: dict[str, Any] = {"__module__": __name__, "__qualname__": name}
        if name in KV_ATTENTION_CLASSES:
            body["forward"] = _FORWARDS[cache_kwarg]
        cls = _classes[key] = type(name, (base,), body)
    return cls


def _instance(spelled: str, cache_kwarg: CacheKwarg) -> torch.nn.Module:
    import torch

    cls = _class(spelled, cache_kwarg)
    module = _torch_module(cls)
    name = cls.__name__
    if cls.__bases__ == (torch.nn.Module,):  # a transformers module: give it its parameters
        if _ROUTER.search(name):
            module.weight = torch.nn.Parameter(torch.zeros(EXPERTS, WIDTH))
            if name == "DeepseekV3TopkRouter":
                module.register_buffer("e_score_correction_bias", torch.zeros(EXPERTS))
            elif name == "LagunaTopKRouter":
                module.e_score_correction_bias = torch.nn.Parameter(
                    torch.zeros(EXPERTS), requires_grad=False
                )
        elif _NORM.search(name):
            module.weight = torch.nn.Parameter(torch.ones(4))
        elif name.endswith("GatedDeltaNet"):
            module.A_log = torch.nn.Parameter(torch.zeros(2))
            module.dt_bias = torch.nn.Parameter(torch.ones(2))
        elif name == "CLIPVisionEmbeddings":
            module.class_embedding = torch.nn.Parameter(torch.zeros(4))
    return module


def build_tree(
    spec: Sequence[tuple[str, str]] | str, *, attention_cache_kwarg: CacheKwarg = "past_key_values"
) -> torch.nn.Module:
    """Build ``spec`` (a tree, or a key of ``TREES``) on CPU, every class named as given.

    ``Linear``, ``Embedding``, ``Conv1d``/``Conv2d``/``Conv3d``, ``LayerNorm``, ``ModuleList``,
    ``Sequential`` and other ``torch.nn`` names are torch's own classes (``Linear`` is exactly
    ``torch.nn.Linear``); ``Name(Base)`` is a subclass of ``torch.nn.Base`` called Name (say
    ``ReplicatedLinear(Linear)``); any other name is a plain ``nn.Module`` subclass, so a
    ``LlamaRMSNorm`` or a ``Qwen3MoeTopKRouter`` is no Linear. Routers get a 2-D ``weight``,
    norms a 1-D one, as in transformers. A parent missing from ``spec`` is made a bare
    ``nn.Module``. Decoder attention classes (``KV_ATTENTION_CLASSES``) get a ``forward`` whose
    cache parameter is ``attention_cache_kwarg``: ``past_key_values`` as in transformers up to
    5.23, or ``cache`` as transformers 5.24 renamed it (compressed-tensors 0.20.1 then finds no
    attention module to put a KV-cache scheme on).
    """
    import torch

    if isinstance(spec, str):
        spec = TREES[spec]
    root_class = dict(spec).get("", "Model")
    root = _instance(root_class, attention_cache_kwarg)
    for name, spelled in spec:
        if not name:
            continue
        parent_name, _, leaf = name.rpartition(".")
        parent = _ensure(root, parent_name)
        if leaf in parent._modules:
            raise ValueError(f"{name} is listed twice, or after a child of it")
        parent.add_module(leaf, _instance(spelled, attention_cache_kwarg))
    root.train(False)
    for p in root.parameters():
        p.requires_grad_(False)
    assert isinstance(root, torch.nn.Module)
    return root


def _ensure(root: torch.nn.Module, name: str) -> torch.nn.Module:
    import torch

    module = root
    for part in name.split(".") if name else ():
        child = module._modules.get(part)
        if child is None:
            child = torch.nn.Module()
            module.add_module(part, child)
        module = child
    return module


def checkpoint_tensors(spec: Sequence[tuple[str, str]] | str) -> dict[str, tuple[int, ...]]:
    """The tensors a checkpoint of the (unquantized) tree ships: state-dict name -> shape."""
    return {k: tuple(v.shape) for k, v in build_tree(spec).state_dict().items()}


# --- asking the library -------------------------------------------------------------------


@dataclass
class CtRun:
    assignments: dict[str, str | None]
    """Module name (every module of the spec, in spec order) -> the config group whose scheme it
    received, ``KV_CACHE`` for the KV-cache scheme alone, or None when it received none."""
    unmatched_targets: list[str] = field(default_factory=list)
    """Targets the library warned it "could not match" (its own, order-dependent bookkeeping:
    a target is credited only to modules it is the first config target to match)."""


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _collect_unmatched() -> Iterator[list[str]]:
    logger = logging.getLogger("compressed_tensors.utils.match")
    handler = _Collect()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    targets: list[str] = []
    try:
        yield targets
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        for message in handler.messages:
            m = re.match(r"Could not match `(.*)` in instance of ", message, re.DOTALL)
            if m:
                targets.append(m[1])


def _decoder_config() -> Any:
    """The ``model.config`` the library reads for KV-cache and attention schemes."""
    from compressed_tensors.modeling.attention import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        HOOKED_ATTENTION_NAME,
    )
    from transformers import PretrainedConfig

    config = PretrainedConfig()
    for key, value in (
        ("num_attention_heads", 1),
        ("num_key_value_heads", 1),
        ("head_dim", 4),
        ("hidden_size", 4),
    ):
        setattr(config, key, value)
    # The library switches a PreTrainedModel's attention implementation to its hooked one
    # before it attaches an attention scheme; an oracle root is no PreTrainedModel, so it
    # starts switched (the switch changes what a forward pass calls, not who gets a scheme).
    config._attn_implementation = HOOKED_ATTENTION_NAME
    return config


def ct_run(
    tree_spec: Sequence[tuple[str, str]] | str,
    quantization_config: Mapping[str, Any],
    *,
    attention_cache_kwarg: CacheKwarg = "past_key_values",
) -> CtRun:
    """Run the real ``apply_quantization_config`` on a fresh tree; see :class:`CtRun`.

    ``quantization_config`` is the ``quantization_config`` block as a checkpoint's config.json
    has it (groups may be preset names over a target list, e.g. ``{"W4A16": ["Linear"]}``).
    Whatever the library raises (an unknown preset, a scheme it refuses) propagates.
    """
    from compressed_tensors.quantization import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
        QuantizationConfig,
        apply_quantization_config,
    )

    spec = TREES[tree_spec] if isinstance(tree_spec, str) else list(tree_spec)
    config = QuantizationConfig.model_validate(deepcopy(dict(quantization_config)))
    model = build_tree(spec, attention_cache_kwarg=attention_cache_kwarg)
    model.config = _decoder_config()
    with _collect_unmatched() as unmatched:
        apply_quantization_config(model, config, show_progress=False)
    groups = list(config.config_groups.items())
    out: dict[str, str | None] = {}
    for name, _ in spec:
        scheme = getattr(model.get_submodule(name), "quantization_scheme", None)
        out[name] = None if scheme is None else _group_of(name, scheme, groups, config)
    return CtRun(out, unmatched)


def _group_of(name: str, scheme: Any, groups: list[tuple[str, Any]], config: Any) -> str:
    # The library keeps one scheme per target string, the last group's (an OrderedDict
    # overwritten in group order); two groups with equal schemes have equal targets, so the
    # last equal group is the one whose scheme object the library used.
    equal = [group for group, s in groups if s == scheme]
    if equal:
        return equal[-1]
    if (
        config.kv_cache_scheme is not None
        and scheme.weights is None
        and scheme.input_activations == config.kv_cache_scheme
    ):
        return KV_CACHE
    raise AssertionError(f"{name} received a scheme of no config group: {scheme!r}")


def ct_assignments(
    tree_spec: Sequence[tuple[str, str]] | str,
    quantization_config: Mapping[str, Any],
    *,
    attention_cache_kwarg: CacheKwarg = "past_key_values",
) -> dict[str, str | None]:
    """Module name -> the config group compressed-tensors gives it (None: unquantized)."""
    return ct_run(
        tree_spec, quantization_config, attention_cache_kwarg=attention_cache_kwarg
    ).assignments
