"""Record the tensor names and shapes that ``transformers`` saves for tiny models of many
architectures, with the config.json it writes beside them.

Each case builds a model from a small config of its architecture (dense, MoE with dense first
layers, interleaved attention kinds, Mamba and linear-attention hybrids, vision-language), saves
it with ``save_pretrained`` and reads the names and shapes back with the safetensors library.
Nothing of qarm's is used: the output is what the library wrote. ``tests/test_architectures.py``
audits the layouts, so that a check of completeness or of the layer tree that would refuse a
layout a real model has goes red.

    pip install torch==2.13.0 'transformers==5.25.*'
    python scripts/derive_architecture_layouts.py           # write
    python scripts/derive_architecture_layouts.py --check   # compare with the file
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "transformers-layouts.json"
FORMAT = "qarm-transformers-layouts/1"

# A tiny text config; each case states what its architecture needs beside it.
T: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    vocab_size=256,
    max_position_embeddings=512,
    tie_word_embeddings=False,
    pad_token_id=0,
)
MOE = dict(moe_intermediate_size=32, num_experts_per_tok=2, shared_expert_intermediate_size=32)
MLA = dict(
    kv_lora_rank=16,
    q_lora_rank=32,
    qk_rope_head_dim=8,
    qk_nope_head_dim=16,
    v_head_dim=16,
    head_dim=8,
)
MAMBA = dict(
    mamba_n_heads=4,
    mamba_d_head=32,
    mamba_n_groups=1,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_chunk_size=32,
)
VIS: dict[str, Any] = dict(
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=2,
    num_hidden_layers=2,
    image_size=28,
    patch_size=14,
    depth=2,
    embed_dim=32,
    num_heads=2,
)
FA, LA, SW = "full_attention", "linear_attention", "sliding_attention"

C: list[tuple[str, str, dict[str, Any], str]] = []
"""(case, model_type, config values, head): ``causal``, or ``i2t`` for image-text-to-text."""


def t(**values: Any) -> dict[str, Any]:
    return {**T, **values}


def L(*kinds: str) -> list[str]:
    return list(kinds)


def case(name: str, model_type: str, values: dict[str, Any], head: str = "causal") -> None:
    C.append((name, model_type, values, head))


# --- dense
case("llama", "llama", t(num_hidden_layers=4))
case("mistral", "mistral", t(num_hidden_layers=4))
case("qwen2", "qwen2", t(num_hidden_layers=4))
case("qwen3", "qwen3", t(num_hidden_layers=4))
case("glm4", "glm4", t(num_hidden_layers=4))
case("glm", "glm", t(num_hidden_layers=4))
case("gemma2", "gemma2", t(num_hidden_layers=4))
case("gemma3_text", "gemma3_text", t(num_hidden_layers=6, sliding_window_pattern=6))
case("gemma3_text_2kinds", "gemma3_text", t(num_hidden_layers=4, layer_types=L(SW, FA, SW, FA)))
case("phi3", "phi3", t(num_hidden_layers=4))
case("olmo2", "olmo2", t(num_hidden_layers=4))
case("olmo3", "olmo3", t(num_hidden_layers=4))
case("cohere2", "cohere2", t(num_hidden_layers=4))
case("starcoder2", "starcoder2", t(num_hidden_layers=4))
case("smollm3", "smollm3", t(num_hidden_layers=4, no_rope_layer_interval=2))
case("exaone4", "exaone4", t(num_hidden_layers=4, sliding_window_pattern=4))
case("apertus", "apertus", t(num_hidden_layers=4))
case("ernie4_5", "ernie4_5", t(num_hidden_layers=4))
case("hunyuan_v1_dense", "hunyuan_v1_dense", t(num_hidden_layers=4))
case("seed_oss", "seed_oss", t(num_hidden_layers=4))
case("granite", "granite", t(num_hidden_layers=4))
case("ministral", "ministral", t(num_hidden_layers=4))
case(
    "falcon",
    "falcon",
    dict(
        {k: v for k, v in T.items() if k != "head_dim"},
        num_hidden_layers=4,
        new_decoder_architecture=True,
        num_kv_heads=1,
    ),
)
case("gpt_neox", "gpt_neox", t(num_hidden_layers=4))
case("phi", "phi", t(num_hidden_layers=4))
case("stablelm", "stablelm", t(num_hidden_layers=4))
case("gpt2", "gpt2", dict(n_embd=64, n_layer=4, n_head=2, vocab_size=256, n_positions=128))
# --- MoE
case("mixtral", "mixtral", t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2))
case("qwen2_moe", "qwen2_moe", t(num_hidden_layers=4, num_experts=4, **MOE))
case(
    "qwen2_moe_mlp_only_0",
    "qwen2_moe",
    t(num_hidden_layers=4, num_experts=4, mlp_only_layers=[0], **MOE),
)
case(
    "qwen2_moe_sparse_step2",
    "qwen2_moe",
    t(num_hidden_layers=4, num_experts=4, decoder_sparse_step=2, **MOE),
)
case("qwen3_moe", "qwen3_moe", t(num_hidden_layers=4, num_experts=4, **MOE))
case(
    "qwen3_moe_mlp_only_0",
    "qwen3_moe",
    t(num_hidden_layers=4, num_experts=4, mlp_only_layers=[0], **MOE),
)
case(
    "qwen3_next",
    "qwen3_next",
    t(
        num_hidden_layers=4,
        num_experts=4,
        layer_types=L(LA, FA, LA, FA),
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        **MOE,
    ),
)
case(
    "qwen3_next_one_full",
    "qwen3_next",
    t(
        num_hidden_layers=4,
        num_experts=4,
        layer_types=L(LA, LA, LA, FA),
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        **MOE,
    ),
)
case(
    "qwen3_next_mlp_only_0",
    "qwen3_next",
    t(
        num_hidden_layers=4,
        num_experts=4,
        layer_types=L(LA, FA, LA, FA),
        mlp_only_layers=[0],
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        **MOE,
    ),
)
case(
    "qwen3_5_moe_text",
    "qwen3_5_moe_text",
    t(
        num_hidden_layers=4,
        num_experts=4,
        layer_types=L(LA, LA, LA, FA),
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        **MOE,
    ),
)
case(
    "deepseek_v2",
    "deepseek_v2",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "deepseek_v2_k2",
    "deepseek_v2",
    t(
        num_hidden_layers=5,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=2,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "deepseek_v3_k1",
    "deepseek_v3",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "deepseek_v3_k2",
    "deepseek_v3",
    t(
        num_hidden_layers=5,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=2,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "deepseek_v3_noq_lora",
    "deepseek_v3",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **{**MLA, "q_lora_rank": None},
    ),
)
case(
    "glm4_moe_k1",
    "glm4_moe",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
    ),
)
case(
    "glm4_moe_k2",
    "glm4_moe",
    t(
        num_hidden_layers=5,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=2,
        n_group=1,
        topk_group=1,
        **MOE,
    ),
)
case(
    "glm4_moe_lite",
    "glm4_moe_lite",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "dots1_k1",
    "dots1",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
    ),
)
case(
    "ernie4_5_moe",
    "ernie4_5_moe",
    t(
        num_hidden_layers=4,
        moe_num_experts=4,
        moe_num_shared_experts=1,
        moe_layer_start_index=1,
        moe_k=2,
        **MOE,
    ),
)
case(
    "ernie4_5_moe_interval2",
    "ernie4_5_moe",
    t(
        num_hidden_layers=5,
        moe_num_experts=4,
        moe_num_shared_experts=1,
        moe_layer_start_index=0,
        moe_layer_interval=2,
        moe_k=2,
        **MOE,
    ),
)
case("hunyuan_v1_moe", "hunyuan_v1_moe", t(num_hidden_layers=4, num_experts=4, moe_topk=2, **MOE))
case("olmoe", "olmoe", t(num_hidden_layers=4, num_experts=4, **MOE))
case("phimoe", "phimoe", t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2))
case("granitemoe", "granitemoe", t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2))
case(
    "granitemoeshared",
    "granitemoeshared",
    t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=32),
)
case("gpt_oss", "gpt_oss", t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2))
case(
    "minimax_one_full",
    "minimax",
    t(
        num_hidden_layers=4,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=L(LA, LA, LA, FA),
    ),
)
case(
    "minimax_2each",
    "minimax",
    t(
        num_hidden_layers=4,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=L(LA, FA, LA, FA),
    ),
)
case("minimax_m2", "minimax_m2", t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2))
case(
    "llama4_text_interleave2",
    "llama4_text",
    t(
        num_hidden_layers=4,
        num_local_experts=4,
        intermediate_size_mlp=128,
        interleave_moe_layer_step=2,
    ),
)
case(
    "llama4_text_one_dense",
    "llama4_text",
    t(num_hidden_layers=4, num_local_experts=4, intermediate_size_mlp=128, moe_layers=[1, 2, 3]),
)
case(
    "longcat_flash",
    "longcat_flash",
    dict(
        T,
        num_layers=2,
        num_hidden_layers=2,
        n_routed_experts=4,
        zero_expert_num=2,
        expert_ffn_hidden_size=32,
        ffn_hidden_size=128,
        moe_topk=2,
        **{**MLA},
    ),
)
case(
    "cohere2_moe", "cohere2_moe", t(num_hidden_layers=4, num_experts=4, num_local_experts=4, **MOE)
)
case(
    "lfm2_moe",
    "lfm2_moe",
    t(
        num_hidden_layers=4,
        num_experts=4,
        num_dense_layers=1,
        layer_types=["conv", FA, "conv", FA],
        **MOE,
    ),
)
case("lfm2", "lfm2", t(num_hidden_layers=4, layer_types=["conv", FA, "conv", "conv"]))
case("afmoe", "afmoe", t(num_hidden_layers=4, num_experts=4, num_dense_layers=1, **MOE))
case(
    "dbrx",
    "dbrx",
    dict(
        d_model=64,
        n_heads=2,
        n_layers=4,
        vocab_size=256,
        max_seq_len=128,
        attn_config=dict(kv_n_heads=1, rope_theta=10000.0),
        ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2),
    ),
)
case(
    "jetmoe",
    "jetmoe",
    t(num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, kv_channels=32),
)
# --- hybrids
case(
    "jamba",
    "jamba",
    t(
        num_hidden_layers=4,
        num_experts=4,
        num_experts_per_tok=2,
        attn_layer_period=2,
        attn_layer_offset=1,
        expert_layer_period=2,
        expert_layer_offset=1,
        mamba_d_state=8,
        mamba_dt_rank=8,
        mamba_expand=2,
        use_mamba_kernels=False,
    ),
)
case(
    "jamba_one_attn",
    "jamba",
    t(
        num_hidden_layers=4,
        num_experts=4,
        num_experts_per_tok=2,
        attn_layer_period=4,
        attn_layer_offset=3,
        expert_layer_period=4,
        expert_layer_offset=1,
        mamba_d_state=8,
        mamba_dt_rank=8,
        mamba_expand=2,
        use_mamba_kernels=False,
    ),
)
case("bamba", "bamba", t(num_hidden_layers=4, attn_layer_indices=[1, 3], **MAMBA))
case("bamba_one_attn", "bamba", t(num_hidden_layers=4, attn_layer_indices=[3], **MAMBA))
case("falcon_h1", "falcon_h1", t(num_hidden_layers=4, mamba_d_ssm=128, **MAMBA))
case(
    "nemotron_h",
    "nemotron_h",
    t(
        num_hidden_layers=6,
        hybrid_override_pattern="M-M*-*",
        n_groups=1,
        mamba_num_heads=4,
        mamba_head_dim=16,
        ssm_state_size=16,
        chunk_size=32,
    ),
)
case(
    "nemotron_h_moe",
    "nemotron_h",
    t(
        num_hidden_layers=6,
        hybrid_override_pattern="MEM*EM",
        n_groups=1,
        mamba_num_heads=4,
        mamba_head_dim=16,
        ssm_state_size=16,
        chunk_size=32,
        n_routed_experts=4,
        n_shared_experts=1,
        moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=32,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
    ),
)
case(
    "granitemoehybrid",
    "granitemoehybrid",
    t(
        num_hidden_layers=4,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=["mamba", "attention", "mamba", "attention"],
        shared_intermediate_size=32,
        **MAMBA,
    ),
)
case(
    "granitemoehybrid_one_attn",
    "granitemoehybrid",
    t(
        num_hidden_layers=4,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=["mamba", "mamba", "mamba", "attention"],
        shared_intermediate_size=32,
        **MAMBA,
    ),
)
case(
    "granitemoehybrid_dense",
    "granitemoehybrid",
    t(
        num_hidden_layers=4,
        num_local_experts=0,
        layer_types=["mamba", "attention", "mamba", "mamba"],
        shared_intermediate_size=128,
        **MAMBA,
    ),
)
case(
    "zamba2",
    "zamba2",
    t(
        num_hidden_layers=6,
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "mamba", "mamba"],
        mamba_d_state=16,
        mamba_headdim=16,
        mamba_ngroups=1,
        n_mamba_heads=8,
        num_mem_blocks=1,
        use_mem_rope=False,
    ),
)
case(
    "zamba",
    "zamba",
    t(
        num_hidden_layers=6,
        attn_layer_period=3,
        attn_layer_offset=2,
        mamba_d_state=8,
        mamba_dt_rank=8,
        n_mamba_heads=2,
        use_mamba_kernels=False,
    ),
)
case(
    "gemma3n_text",
    "gemma3n_text",
    t(
        num_hidden_layers=4,
        num_kv_shared_layers=2,
        layer_types=L(SW, FA, SW, FA),
        vocab_size_per_layer_input=256,
        hidden_size_per_layer_input=16,
        altup_num_inputs=2,
        laurel_rank=8,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0],
        intermediate_size=[128] * 4,
    ),
)
case(
    "gemma3n_text_kvshared1",
    "gemma3n_text",
    t(
        num_hidden_layers=4,
        num_kv_shared_layers=1,
        layer_types=L(SW, FA, SW, FA),
        vocab_size_per_layer_input=256,
        hidden_size_per_layer_input=16,
        altup_num_inputs=2,
        laurel_rank=8,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0],
        intermediate_size=[128] * 4,
    ),
)
case(
    "kimi_linear",
    "kimi_linear",
    t(
        num_hidden_layers=4,
        num_experts=4,
        first_k_dense_replace=1,
        **MOE,
        **MLA,
        linear_attn_config=dict(
            kda_layers=[1, 2, 3],
            full_attn_layers=[4],
            head_dim=16,
            num_heads=2,
            short_conv_kernel_size=4,
        ),
    ),
)
case("olmo_hybrid", "olmo_hybrid", t(num_hidden_layers=4))
# --- multimodal
case(
    "gemma3_mm",
    "gemma3",
    dict(
        text_config=t(num_hidden_layers=6),
        vision_config=dict(VIS, image_size=56),
        mm_tokens_per_image=4,
    ),
    "i2t",
)
case(
    "llama4_mm",
    "llama4",
    dict(
        text_config=t(
            num_hidden_layers=4,
            num_local_experts=4,
            intermediate_size_mlp=128,
            interleave_moe_layer_step=2,
        ),
        vision_config=dict(
            VIS,
            vision_output_dim=64,
            projector_input_dim=64,
            projector_output_dim=64,
            rope_theta=10000,
        ),
    ),
    "i2t",
)
case(
    "mllama_one_cross",
    "mllama",
    dict(
        text_config=t(num_hidden_layers=5, cross_attention_layers=[3]),
        vision_config=dict(
            VIS,
            num_global_layers=2,
            intermediate_layers_indices=[0],
            vision_output_dim=96,
            image_size=28,
            max_num_tiles=4,
        ),
    ),
    "i2t",
)
case(
    "mllama_two_cross",
    "mllama",
    dict(
        text_config=t(num_hidden_layers=6, cross_attention_layers=[1, 4]),
        vision_config=dict(
            VIS,
            num_global_layers=2,
            intermediate_layers_indices=[0],
            vision_output_dim=96,
            image_size=28,
            max_num_tiles=4,
        ),
    ),
    "i2t",
)
case(
    "qwen2_vl",
    "qwen2_vl",
    dict(
        text_config=t(num_hidden_layers=4, rope_scaling=None),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2),
    ),
    "i2t",
)
case(
    "qwen2_5_vl",
    "qwen2_5_vl",
    dict(
        text_config=t(num_hidden_layers=4),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            out_hidden_size=64,
            num_heads=2,
            intermediate_size=64,
            fullatt_block_indexes=[1],
        ),
    ),
    "i2t",
)
case(
    "qwen3_vl",
    "qwen3_vl",
    dict(
        text_config=t(num_hidden_layers=4),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            out_hidden_size=64,
            num_heads=2,
            intermediate_size=64,
            deepstack_visual_indexes=[0],
        ),
    ),
    "i2t",
)
case(
    "qwen3_vl_moe",
    "qwen3_vl_moe",
    dict(
        text_config=t(num_hidden_layers=4, num_experts=4, **MOE),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            out_hidden_size=64,
            num_heads=2,
            intermediate_size=64,
            deepstack_visual_indexes=[0],
        ),
    ),
    "i2t",
)
case(
    "llava",
    "llava",
    dict(
        text_config=dict(t(num_hidden_layers=4), model_type="llama"),
        vision_config=dict(VIS, model_type="clip_vision_model", image_size=28),
        vision_feature_layer=-1,
    ),
    "i2t",
)
case(
    "internvl",
    "internvl",
    dict(
        text_config=dict(t(num_hidden_layers=4), model_type="qwen2"),
        vision_config=dict(VIS, image_size=[28, 28], patch_size=[14, 14]),
    ),
    "i2t",
)
case(
    "glm4v_moe",
    "glm4v_moe",
    dict(
        text_config=t(
            num_hidden_layers=4,
            n_routed_experts=4,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
            **MOE,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, out_hidden_size=64, num_heads=2, intermediate_size=64
        ),
    ),
    "i2t",
)
case(
    "mistral3",
    "mistral3",
    dict(
        text_config=dict(t(num_hidden_layers=4), model_type="mistral"),
        vision_config=dict(VIS, model_type="pixtral", head_dim=16, image_size=28),
    ),
    "i2t",
)

# --- more (second batch)
G4 = dict(
    vocab_size_per_layer_input=256,
    hidden_size_per_layer_input=16,
    global_head_dim=32,
    sliding_window=16,
)
case(
    "gemma4_text",
    "gemma4_text",
    t(num_hidden_layers=6, layer_types=L(SW, SW, FA, SW, SW, FA), **G4),
)
case(
    "gemma4_text_keqv_2full",
    "gemma4_text",
    t(
        num_hidden_layers=6,
        layer_types=L(SW, SW, FA, SW, SW, FA),
        attention_k_eq_v=True,
        num_global_key_value_heads=1,
        **G4,
    ),
)
case(
    "gemma4_text_keqv_1full",
    "gemma4_text",
    t(
        num_hidden_layers=4,
        layer_types=L(SW, SW, SW, FA),
        attention_k_eq_v=True,
        num_global_key_value_heads=1,
        **G4,
    ),
)
case(
    "gemma4_text_kvshared2",
    "gemma4_text",
    t(num_hidden_layers=6, layer_types=L(SW, FA, SW, FA, SW, FA), num_kv_shared_layers=2, **G4),
)
case(
    "gemma4_text_kvshared1",
    "gemma4_text",
    t(num_hidden_layers=6, layer_types=L(SW, FA, SW, FA, SW, FA), num_kv_shared_layers=1, **G4),
)
case(
    "gemma4_text_kvshared3",
    "gemma4_text",
    t(num_hidden_layers=6, layer_types=L(SW, FA, SW, SW, FA, SW), num_kv_shared_layers=3, **G4),
)
case(
    "gemma4_text_moe",
    "gemma4_text",
    t(
        num_hidden_layers=6,
        layer_types=L(SW, SW, FA, SW, SW, FA),
        enable_moe_block=True,
        num_experts=4,
        top_k_experts=2,
        moe_intermediate_size=32,
        **G4,
    ),
)
case(
    "qwen3_5_text_one_full",
    "qwen3_5_text",
    t(
        num_hidden_layers=4,
        layer_types=L(LA, LA, LA, FA),
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
    ),
)
case(
    "qwen3_5_mm",
    "qwen3_5",
    dict(
        text_config=t(
            num_hidden_layers=4,
            layer_types=L(LA, FA, LA, FA),
            linear_num_value_heads=2,
            linear_num_key_heads=1,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, out_hidden_size=64, num_heads=2, intermediate_size=64
        ),
    ),
    "i2t",
)
case(
    "qwen3_5_moe_mm",
    "qwen3_5_moe",
    dict(
        text_config=t(
            num_hidden_layers=4,
            layer_types=L(LA, FA, LA, FA),
            num_experts=4,
            linear_num_value_heads=2,
            linear_num_key_heads=1,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            **MOE,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, out_hidden_size=64, num_heads=2, intermediate_size=64
        ),
    ),
    "i2t",
)
DSA = dict(index_topk=4, index_head_dim=16, index_n_heads=2)
case(
    "deepseek_v32_k1",
    "deepseek_v32",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
        **DSA,
    ),
)
case(
    "glm_moe_dsa_all_full",
    "glm_moe_dsa",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        index_topk_pattern="FFFF",
        **MOE,
        **MLA,
        **DSA,
    ),
)
case(
    "glm_moe_dsa_one_shared",
    "glm_moe_dsa",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        index_topk_pattern="FFFS",
        **MOE,
        **MLA,
        **DSA,
    ),
)
case(
    "glm_moe_dsa_2each",
    "glm_moe_dsa",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        index_topk_pattern="FSFS",
        **MOE,
        **MLA,
        **DSA,
    ),
)
case(
    "glm_moe_dsa_one_full_after0",
    "glm_moe_dsa",
    t(
        num_hidden_layers=5,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        index_topk_pattern="FSSSF",
        **MOE,
        **MLA,
        **DSA,
    ),
)
case(
    "mistral4",
    "mistral4",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        n_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
        **MLA,
    ),
)
case(
    "exaone_moe",
    "exaone_moe",
    t(
        num_hidden_layers=4,
        num_experts=4,
        num_shared_experts=1,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        **MOE,
    ),
)
case(
    "mimo_v2_flash",
    "mimo_v2_flash",
    t(
        num_hidden_layers=4,
        n_routed_experts=4,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        layer_types=L(FA, SW, SW, FA),
        v_head_dim=32,
        n_group=1,
        topk_group=1,
        **MOE,
    ),
)
case(
    "hy_v3",
    "hy_v3",
    t(
        num_hidden_layers=4,
        num_experts=4,
        num_shared_experts=1,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        **MOE,
    ),
)
case(
    "laguna",
    "laguna",
    t(
        num_hidden_layers=4,
        num_experts=4,
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        layer_types=L(FA, SW, SW, SW),
        num_attention_heads_per_layer=[2, 4, 4, 4],
        **MOE,
    ),
)
S37V = dict(
    VIS,
    num_hidden_layers=2,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
)
case(
    "step3p7",
    "step3p7",
    dict(
        text_config=t(
            num_hidden_layers=4,
            num_local_experts=4,
            n_routed_experts=4,
            share_expert_dim=32,
            mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
            layer_types=L(FA, SW, SW, FA),
            **MOE,
        ),
        vision_config=S37V,
    ),
    "i2t",
)
case(
    "step3p7_mtp",
    "step3p7",
    dict(
        text_config=t(
            num_hidden_layers=4,
            num_local_experts=4,
            n_routed_experts=4,
            share_expert_dim=32,
            num_nextn_predict_layers=1,
            **MOE,
        ),
        vision_config=S37V,
    ),
    "i2t",
)
case("minicpm3", "minicpm3", t(num_hidden_layers=4, **MLA))
case(
    "ministral3_mm",
    "mistral3",
    dict(
        text_config=dict(t(num_hidden_layers=4), model_type="ministral3"),
        vision_config=dict(VIS, model_type="pixtral", head_dim=16, image_size=28),
    ),
    "i2t",
)
case(
    "kimi_k25",
    "kimi_k25",
    dict(
        text_config=dict(
            t(
                num_hidden_layers=4,
                n_routed_experts=4,
                n_shared_experts=1,
                first_k_dense_replace=1,
                n_group=1,
                topk_group=1,
                **MOE,
                **MLA,
            ),
            model_type="deepseek_v3",
        )
    ),
    "i2t",
)
case("hunyuan_vl", "hunyuan_vl", dict(text_config=t(num_hidden_layers=4)), "i2t")
case(
    "recurrent_gemma",
    "recurrent_gemma",
    t(
        num_hidden_layers=4,
        lru_width=64,
        attention_window_size=16,
        block_types=["recurrent", "recurrent", "attention"],
    ),
)
case(
    "recurrent_gemma_2each",
    "recurrent_gemma",
    t(
        num_hidden_layers=4,
        lru_width=64,
        attention_window_size=16,
        block_types=["recurrent", "attention"],
    ),
)
case(
    "bailing_hybrid",
    "bailing_hybrid",
    t(num_hidden_layers=4, num_experts=4, first_k_dense_replace=1, **MOE),
)
case("flex_olmo", "flex_olmo", t(num_hidden_layers=4, num_experts=4, **MOE))
case(
    "qwen3_omni_moe_thinker_text",
    "qwen3_moe",
    t(num_hidden_layers=4, num_experts=4, decoder_sparse_step=2, **MOE),
)


def build(model_type: str, values: dict[str, Any], head: str) -> Any:
    """The model transformers builds for this config: its causal-LM class, else its
    image-text-to-text class (``head == "i2t"``), else the base model."""
    import torch
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto as auto

    config = AutoConfig.for_model(model_type, **values)
    kind = type(config)
    if head == "causal" and kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING:
        cls = auto.MODEL_FOR_CAUSAL_LM_MAPPING[kind]
    elif kind in auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        cls = auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING[kind]
    elif kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING:
        cls = auto.MODEL_FOR_CAUSAL_LM_MAPPING[kind]
    else:
        cls = auto.MODEL_MAPPING[kind]
    torch.manual_seed(0)
    return cls._from_config(config)


def saved(model: Any) -> tuple[list[list[Any]], dict[str, Any]]:
    """(name, shape) of every tensor ``save_pretrained`` wrote, and its config.json."""
    from safetensors import safe_open

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder, safe_serialization=True)
        config = json.loads((Path(folder) / "config.json").read_text())
        tensors: dict[str, list[int]] = {}
        for file in sorted(os.listdir(folder)):
            if file.endswith(".safetensors"):
                with safe_open(os.path.join(folder, file), "pt") as handle:
                    for name in handle.keys():  # noqa: SIM118 (a safe_open handle)
                        tensors[name] = list(handle.get_slice(name).get_shape())
    # transformers records its own version; the file records it once, at the top
    config.pop("transformers_version", None)
    return [[name, tensors[name]] for name in sorted(tensors)], config


def derive() -> dict[str, Any]:
    import safetensors
    import torch
    import transformers

    warnings.filterwarnings("ignore")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    cases: dict[str, Any] = {}
    for name, model_type, values, head in C:
        model = build(model_type, values, head)
        tensors, config = saved(model)
        cases[name] = {"class": type(model).__name__, "config": config, "tensors": tensors}
        print(f"{name}: {type(model).__name__}, {len(tensors)} tensors", file=sys.stderr)
    return {
        "format": FORMAT,
        "derived_by": "scripts/derive_architecture_layouts.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
        "cases": cases,
    }


def render(document: dict[str, Any]) -> str:
    """One case per line: the file stays reviewable as a diff, and small."""
    head = {k: v for k, v in document.items() if k != "cases"}
    lines = [json.dumps(head, sort_keys=True)[:-1] + ', "cases": {']
    items = sorted(document["cases"].items())
    for i, (name, case) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"{json.dumps(name)}: {json.dumps(case, sort_keys=True)}{comma}")
    lines.append("}}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file, write nothing")
    args = parser.parse_args()
    text = render(derive())
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} differs from what this transformers writes")
            return 1
        print(f"{OUT.relative_to(ROOT)} is what this transformers writes")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
