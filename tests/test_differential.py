"""Differential: qarm's producer view against compressed-tensors' own apply_quantization_config.

For each tree (tests/ct_oracle.py: small torch trees shaped as transformers 5 and llm-compressor
build the architectures) and each declaration, every module qarm sees gets the scheme the real
library gives it, or none. Needs the ``oracle`` extra (compressed-tensors and a CPU torch);
skipped without it. Each synthetic case names the rule it holds; removing that rule from
``resolve/producer.py`` turns its case red.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ct_oracle
from qarm_audit.declarations import read_declaration
from qarm_audit.layers import build_tree
from qarm_audit.layers.model_config import ModelConfig
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.resolve.producer import producer_view
from qarm_audit.sources.checkpoint import TensorEntry

pytest.importorskip("compressed_tensors")

REALWORLD = Path(__file__).parent / "data" / "realworld"
PRODUCERS = Path(__file__).parent.parent / "fixtures" / "producers"

FP8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}}
INT8 = {"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}


def _group(targets: list[str], scheme: dict[str, Any] = FP8) -> dict[str, Any]:
    return {**scheme, "targets": targets}


def _ct(groups: dict[str, Any], ignore: list[str] | None = None) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": groups,
        "ignore": ignore or [],
    }


SYNTHETIC: dict[str, tuple[str, dict[str, Any]]] = {
    # a class target reaches lm_head (an nn.Linear in transformers), not routers or norms
    "class-linear": ("qwen3_moe", _ct({"g": _group(["Linear"])})),
    # routers are TopKRouter modules: a regex naming them attaches nothing
    "router-regex": ("deepseek_v3", _ct({"g": _group(["re:.*mlp.*"])})),
    # norms and the linear-attention conv under a broad regex get nothing
    "norms-under-regex": (
        "qwen3_next",
        _ct({"g": _group(["re:.*self_attn.*", "re:.*linear_attn.*"])}),
    ),
    # an exact name beats a regex, whatever the group order
    "exact-before-regex": (
        "llama",
        _ct({"a": _group(["re:.*down_proj"]), "b": _group(["model.layers.0.mlp.down_proj"], INT8)}),
    ),
    # of two regexes, the alphabetically first wins
    "sorted-regexes": (
        "llama",
        _ct({"a": _group(["re:.*mlp.*"]), "b": _group(["re:.*down_proj"], INT8)}),
    ),
    # a regex beats a class target
    "regex-before-class": (
        "llama",
        _ct({"a": _group(["Linear"]), "b": _group(["re:.*o_proj"], INT8)}),
    ),
    # class names are exact and case-sensitive
    "class-case": ("llama", _ct({"g": _group(["linear"])})),
    # ignore takes class names
    "ignore-class": ("llava", _ct({"g": _group(["Linear", "Embedding"])}, ["Embedding"])),
    # an Embedding target reaches nn.Embedding only, not a Conv2d patch_embedding
    "embedding-target": ("llava", _ct({"g": _group(["Embedding"], INT8)})),
    # fused names mean nothing to the producer: re:.*v_proj$ takes v_proj only
    "fused-name": ("llama", _ct({"g": _group(["re:.*v_proj$"])})),
    # the last group listing a target wins it
    "last-group-wins": ("llama", _ct({"a": _group(["Linear"]), "b": _group(["Linear"], INT8)})),
    # DeepSeek-V4: a Linear subclass (o_a_proj) is a Linear, the router and norms are not
    "v4-class-linear": ("deepseek_v4", _ct({"g": _group(["Linear"])}, ["lm_head"])),
    # DeepSeek-V4's compressor and indexer under a regex: their Linears only
    "v4-compressor-regex": ("deepseek_v4", _ct({"g": _group(["re:.*compressor.*"])})),
    # GLM-5's indexer: wk and weights_proj are Linears to the producer, k_norm a LayerNorm
    "glm5-indexer-regex": (
        "glm5",
        _ct({"g": _group(["re:.*indexer.*"]), "h": _group(["Linear"], INT8)}),
    ),
}


def _real(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    block = data.get("quantization_config") or (data.get("text_config") or {}).get(
        "quantization_config"
    )
    return block or data.get("compression_config") or data


REAL: dict[str, tuple[str, Path]] = {
    "kimi-k2.5": ("deepseek_v3", REALWORLD / "aic-kimi-k2.5-nvfp4-named" / "config.json"),
    "laguna": ("laguna", REALWORLD / "aic-poolside-laguna-xs2-fp8" / "config.json"),
    "redhat-deepseek-v4": (
        "deepseek_v4",
        REALWORLD / "aic-redhat-deepseek-v4-flash-nvfp4-fp8" / "config.json",
    ),
    "ct-mixed": (
        "qwen3",
        REALWORLD / "ct-example-mixed-precision-fp8-nvfp4" / "mixed_precision_config.json",
    ),
    "ct-int8": ("llama", REALWORLD / "ct-example-int8-w8a8" / "int8_config.json"),
    "ct-int4": ("llama", REALWORLD / "ct-example-int4-w4a16" / "int4_config.json"),
    "llmc-fakequant": (
        "llava",
        REALWORLD / "llmc-example-fakequant-int8" / "example_quant_config.json",
    ),
    **{
        f"producer-{d.name}": (
            "qwen3_moe"
            if "moe" in d.name
            else "qwen3"
            if "qwen3" in (d / "config.json").read_text().lower()
            else "llama",
            d / "config.json",
        )
        for d in sorted(PRODUCERS.glob("llmcompressor-*"))
    },
}


def _qarm(tree: str, block: dict[str, Any]) -> dict[str, str | None]:
    shapes = ct_oracle.checkpoint_tensors(tree)
    modules = build_inventory(TensorEntry(n, "BF16", s, 0, 0) for n, s in shapes.items())
    build_tree(modules, ModelConfig(), None)
    declaration = read_declaration({"config.json": json.dumps({"quantization_config": block})})
    view = producer_view(declaration, modules)
    assert view is not None
    return {
        n: (None if m.bucket in ("excluded", "unlisted") else m.bucket) for n, m in view.items()
    }


def _library(tree: str, block: dict[str, Any]) -> dict[str, str | None]:
    answers = ct_oracle.ct_assignments(tree, block)
    return {n: (None if a == ct_oracle.KV_CACHE else a) for n, a in answers.items()}


def _compare(tree: str, block: dict[str, Any]) -> None:
    ours, theirs = _qarm(tree, block), _library(tree, block)
    # transformers drops MTP blocks on load: the producer never matched them
    wrong = {
        name: (mine, theirs.get(name))
        for name, mine in ours.items()
        if mine != (None if name.startswith("mtp.") else theirs.get(name))
    }
    assert wrong == {}


@pytest.mark.parametrize("case", sorted(SYNTHETIC))
def test_producer_view_is_compressed_tensors_on_synthetic_rules(case: str) -> None:
    tree, block = SYNTHETIC[case]
    _compare(tree, block)


@pytest.mark.parametrize("case", sorted(REAL))
def test_producer_view_is_compressed_tensors_on_real_declarations(case: str) -> None:
    tree, path = REAL[case]
    _compare(tree, _real(path))
