"""The engine view on vLLM's own layer tree (layers/facts/vllm-0.33.0.json, read from the
release's source by scripts/derive_engine_layers.py): one case per class of layer the engine
builds differently from the checkpoint's names. Each goes red when its rule is removed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import sized, write_checkpoint
from qarm_audit import audit
from qarm_audit.declarations import read_declaration
from qarm_audit.layers import build_tree
from qarm_audit.layers.facts import load_facts
from qarm_audit.layers.model_config import ModelConfig
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.resolve import resolve
from qarm_audit.resolve.resolver import Resolution
from qarm_audit.sources.checkpoint import TensorEntry

REALWORLD = Path(__file__).parent / "data" / "realworld"
FACTS = load_facts("vllm-0.33.0")
FP8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}


def _entries(names: list[str]) -> list[TensorEntry]:
    return [TensorEntry(f"{n}.weight", "BF16", (16, 16), 0, 0) for n in names]


def _resolve(
    arch: str, document: str, text: str, names: list[str], **config: Any
) -> tuple[Resolution, dict[str, Any]]:
    modules = build_inventory(_entries(names))
    model = ModelConfig((arch,), "", tuple(sorted(config.items())))
    tree = build_tree(modules, model, FACTS)
    assert tree.modelled, arch
    return resolve(read_declaration({document: text}), modules, tree), modules


def _ct(targets: list[str], ignore: list[str] | None = None) -> str:
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"g": {**FP8, "targets": targets}},
        "ignore": ignore or [],
    }
    return json.dumps({"quantization_config": block})


def _modelopt(excludes: list[str]) -> str:
    return json.dumps({"quantization": {"quant_algo": "FP8", "exclude_modules": excludes}})


MLA = [
    f"model.layers.3.self_attn.{p}"
    for p in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
]
MOE = [
    "model.layers.3.mlp.gate",
    *[f"model.layers.3.mlp.experts.{e}.{p}" for e in (0, 1) for p in ("gate_proj", "down_proj")],
]


def test_deepseek_mla_fuses_q_a_and_kv_a_when_q_lora_rank_is_set() -> None:
    excludes = ["model.layers.3.self_attn.kv_a_proj_with_mqa"]
    r, modules = _resolve(
        "DeepseekV3ForCausalLM", "hf_quant_config.json", _modelopt(excludes), MLA, q_lora_rank=8
    )
    assert modules[MLA[0]].engine_name == "model.layers.3.self_attn.fused_qkv_a_proj"
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]
    # without q_lora_rank there is no such fused layer, and nothing to disagree
    r, modules = _resolve("DeepseekV3ForCausalLM", "hf_quant_config.json", _modelopt(excludes), MLA)
    assert modules[MLA[0]].engine_name == MLA[0]
    assert r.findings == []


def test_the_real_r1_exclude_list_splits_fused_qkv_a_proj() -> None:
    text = (REALWORLD / "trtllm-deepseek-r1-nvfp4" / "hf_quant_config.json").read_text()
    r, _ = _resolve("DeepseekV3ForCausalLM", "hf_quant_config.json", text, MLA, q_lora_rank=8)
    assert {f.code for f in r.findings} == {"fused-shards-disagree"}


def test_a_router_built_without_a_quant_config_is_never_quantized() -> None:
    r, modules = _resolve("DeepseekV3ForCausalLM", "config.json", _ct(["Linear"]), MOE)
    assert (modules[MOE[0]].layer_class, modules[MOE[0]].quant_config) == ("GateLinear", False)
    assert r.memberships[MOE[0]].how == "no-quant-config"
    assert r.memberships[MOE[1]].bucket == "g"


def test_qwen3_moe_builds_its_router_with_the_quant_config() -> None:
    names = [n.replace("layers.3", "layers.0") for n in MOE]
    r, modules = _resolve("Qwen3MoeForCausalLM", "config.json", _ct(["Linear"]), names)
    assert modules[names[0]].quant_config
    assert r.memberships[names[0]].bucket == "g"


def test_a_linear_class_target_does_not_reach_parallel_lm_head() -> None:
    names = ["model.layers.0.mlp.down_proj", "lm_head"]
    r, modules = _resolve("LlamaForCausalLM", "config.json", _ct(["Linear"]), names)
    assert modules["lm_head"].layer_class == "ParallelLMHead"
    assert r.memberships["lm_head"].bucket == "unlisted"
    assert r.memberships[names[0]].bucket == "g"


def test_a_regex_reaching_a_norm_leaves_it_unquantized() -> None:
    names = ["model.layers.0.self_attn.q_norm", "model.layers.0.self_attn.o_proj"]
    tensors = [
        TensorEntry(f"{names[0]}.weight", "BF16", (16,), 0, 0),
        TensorEntry(f"{names[1]}.weight", "BF16", (16, 16), 0, 0),
    ]
    modules = build_inventory(tensors)
    tree = build_tree(modules, ModelConfig(("Qwen3ForCausalLM",)), FACTS)
    r = resolve(read_declaration({"config.json": _ct(["re:.*self_attn.*"])}), modules, tree)
    assert (r.memberships[names[0]].bucket, r.memberships[names[0]].how) == (
        "unlisted",
        "not-a-linear",
    )
    assert r.memberships[names[1]].bucket == "g"


def test_star_entries_are_split_only_for_models_with_a_mapper() -> None:
    names = ["model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj"]
    # Llama has a mapper: "mlp.gate*" also stands for "mlp.gate", found inside gate_up_proj
    r, _ = _resolve("LlamaForCausalLM", "hf_quant_config.json", _modelopt(["mlp.gate*"]), names)
    assert r.memberships[names[0]].bucket == "excluded"
    # DeepSeek-V3 has none: the entry is only a wildcard over the whole name
    r, _ = _resolve(
        "DeepseekV3ForCausalLM", "hf_quant_config.json", _modelopt(["mlp.gate*"]), names
    )
    assert r.memberships[names[0]].bucket == "FP8"


def test_an_empty_exclude_entry_excludes_everything() -> None:
    names = ["model.layers.0.mlp.down_proj"]
    r, _ = _resolve("LlamaForCausalLM", "hf_quant_config.json", _modelopt([""]), names)
    assert (r.memberships[names[0]].bucket, r.memberships[names[0]].how) == (
        "excluded",
        "substring",
    )


def test_an_unmodelled_architecture_says_so(tmp_path: Path) -> None:
    folder = write_checkpoint(
        tmp_path / "ckpt",
        {"model.safetensors": {"model.layers.0.mlp.down_proj.weight": ("BF16", (16, 16))}},
        {"config.json": {"architectures": ["NoSuchModelForCausalLM"]}},
    )
    report = audit(str(folder))
    assert report.layer_tree is not None and not report.layer_tree.modelled
    assert [n.code for n in report.notes] == ["architecture-not-modelled"]
    report = audit(str(folder), engine="name-probe")  # a profile with no layer tree: generic
    assert report.layer_tree is not None and report.layer_tree.facts == "generic"
    assert report.notes == []


def test_the_kimi_ignore_list_no_longer_refuses_every_router(tmp_path: Path) -> None:
    config = json.loads((REALWORLD / "aic-kimi-k2.5-nvfp4-named" / "config.json").read_text())
    router = "language_model.model.layers.1.mlp.gate"
    tensors = {  # layer 0 is Kimi's one dense layer: no router
        f"{router}.weight": ("BF16", (16, 16)),
        "language_model.model.layers.0.input_layernorm.weight": ("BF16", (16,)),
    }
    folder = write_checkpoint(
        tmp_path / "kimi", {"model.safetensors": tensors}, {"config.json": sized(config, tensors)}
    )
    report = audit(str(folder))
    assert report.layer_tree is not None and report.layer_tree.modelled
    assert [r.code for r in report.refusals] == []


def test_the_mapper_keeps_the_models_order_and_applies_it_as_vllm_does() -> None:
    """qwen2_vl.py lists ``model.visual.`` before the catch-all ``model.``; WeightsMapper tries
    them in that order and applies each that matches, so a vision name becomes ``visual.``."""
    arch = load_facts("vllm-0.33.0").architectures["Qwen2VLForConditionalGeneration"]
    assert [old for old, _ in arch.rename.prefix] == [
        "model.language_model.",
        "model.visual.",
        "lm_head.",
        "model.",
    ]
    assert arch.rename.module("model.visual.blocks.0.attn.qkv") == "visual.blocks.0.attn.qkv"
    assert arch.rename.module("model.layers.0.mlp.down_proj") == (
        "language_model.model.layers.0.mlp.down_proj"
    )
    v4 = load_facts("vllm-0.33.0").architectures["DeepseekV4ForCausalLM"].rename
    assert v4.module("head") == "lm_head"
    assert (
        v4.module("layers.3.ffn.shared_experts.w2") == "model.layers.3.ffn.shared_experts.down_proj"
    )


def test_a_nested_language_model_gives_the_quant_config_its_packed_mapping() -> None:
    """Qwen2-VL's model class has an empty packed mapping (``SupportsLoRA``'s); its language
    model, ``Qwen2ForCausalLM``, adds ``qkv_proj`` and ``gate_up_proj`` to the quant config
    before its layers are built, so they fuse there and nowhere else. Kimi-K2.5's DeepSeek
    language model adds ``fused_qkv_a_proj`` to the dict the config holds (``q_lora_rank`` is
    in ``text_config``)."""
    lm = "model.language_model.layers.0"
    names = [f"{lm}.self_attn.{p}_proj" for p in "qkv"] + [
        f"{lm}.mlp.gate_proj",
        f"{lm}.mlp.up_proj",
        "model.visual.blocks.0.attn.qkv",
    ]
    r, modules = _resolve(
        "Qwen2VLForConditionalGeneration",
        "config.json",
        _ct(["Linear"], [f"{lm}.self_attn.k_proj"]),
        names,
    )
    assert modules[names[0]].engine_name == f"{lm}.self_attn.qkv_proj"
    assert modules[names[3]].engine_name == f"{lm}.mlp.gate_up_proj"
    assert modules[names[5]].engine_name == names[5]
    assert [(f.code, f.module) for f in r.findings] == [
        ("fused-shards-disagree", f"{lm}.self_attn.qkv_proj")
    ]
    kimi = [
        f"language_model.model.layers.0.self_attn.{p}" for p in ("q_a_proj", "kv_a_proj_with_mqa")
    ]
    r, modules = _resolve(
        "KimiK25ForConditionalGeneration",
        "hf_quant_config.json",
        _modelopt([kimi[1]]),
        kimi,
        q_lora_rank=1536,
    )
    assert (
        modules[kimi[0]].engine_name == "language_model.model.layers.0.self_attn.fused_qkv_a_proj"
    )
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]


def test_mixed_keys_in_the_engines_naming_name_their_layers() -> None:
    """vLLM maps ``quantized_layers`` keys and its layer names through the model's mapper
    alike, so a key written in vLLM's own naming (Qwen3.5's ``language_model.lm_head`` for
    the checkpoint's ``lm_head``, ``visual.`` for ``model.visual.``) names the layer, and is
    not a declared module that is missing, also where an exclude decides the layer."""
    names = ["lm_head", "model.visual.blocks.0.attn.proj", "model.visual.blocks.0.mlp.linear_fc1"]
    quantization = {
        "quant_algo": "MIXED_PRECISION",
        "exclude_modules": ["model.visual.blocks.0.mlp*"],
        "quantized_layers": {
            "language_model.lm_head": {"quant_algo": "FP8"},
            "visual.blocks.0.attn.proj": {"quant_algo": "NVFP4"},
            "visual.blocks.0.mlp.linear_fc1": {"quant_algo": "NVFP4"},
        },
    }
    text = json.dumps({"quantization": quantization})
    r, _ = _resolve("Qwen3_5ForConditionalGeneration", "hf_quant_config.json", text, names)
    assert [(r.memberships[n].bucket, r.memberships[n].rule) for n in names] == [
        ("FP8", "language_model.lm_head"),
        ("NVFP4", "visual.blocks.0.attn.proj"),
        ("excluded", "model.visual.blocks.0.mlp*"),
    ]
    assert r.unmatched == []
