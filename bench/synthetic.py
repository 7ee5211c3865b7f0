"""Synthetic frontier-MoE checkpoints (header-only) for scale benchmarks, generated on demand.

    python bench/synthetic.py deepseek -o /tmp/ds.manifest.json.gz       # ~250k tensors
    python bench/synthetic.py kimi -o /tmp/kimi.manifest.json.gz         # ~400k tensors
    python bench/synthetic.py stress -o /tmp/stress.manifest.json.gz     # ~1M tensors
    python bench/synthetic.py deepseek --family compressed-tensors -o ...

Shapes: DeepSeek-V3 style (61 layers, the first 3 dense, 256 routed experts + 1 shared, 3
projections each, ModelOpt NVFP4 with 4 tensors per projection), Kimi-K2 style (384 experts), and
a 1M-tensor stress case. ModelOpt variant: MIXED_PRECISION with one ``quantized_layers`` entry per
expert projection plus wildcard excludes; compressed-tensors variant: 100+ ``re:`` targets and
ignores.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from qarm_audit.sources.checkpoint import (
    Checkpoint,
    Origin,
    ShardHeader,
    TensorEntry,
)
from qarm_audit.sources.header import DTYPE_BITS
from qarm_audit.sources.manifest import write_manifest


@dataclass(frozen=True)
class Shape:
    layers: int
    dense_layers: int
    experts: int
    hidden: int = 7168
    moe_inter: int = 2048
    inter: int = 18432
    per_shard: int = 6000


SHAPES = {
    "deepseek": Shape(layers=61, dense_layers=3, experts=320),
    "kimi": Shape(layers=61, dense_layers=1, experts=512),
    "stress": Shape(layers=80, dense_layers=2, experts=1072),
    "half": Shape(layers=80, dense_layers=2, experts=536),  # the stress case at half the tensors
    "quick": Shape(layers=8, dense_layers=1, experts=64),
    "quick-half": Shape(layers=8, dense_layers=1, experts=32),
    "tiny": Shape(layers=4, dense_layers=1, experts=8, per_shard=200),
}

Spec = tuple[str, str, tuple[int, ...]]
ATTN = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")


def nvfp4(module: str, out: int, inp: int) -> list[Spec]:
    return [
        (f"{module}.weight", "U8", (out, inp // 2)),
        (f"{module}.weight_scale", "F8_E4M3", (out, inp // 16)),
        (f"{module}.weight_scale_2", "F32", ()),
        (f"{module}.input_scale", "F32", ()),
    ]


def packed(module: str, out: int, inp: int) -> list[Spec]:
    return [
        (f"{module}.weight_packed", "U8", (out, inp // 2)),
        (f"{module}.weight_scale", "F8_E4M3", (out, inp // 16)),
        (f"{module}.weight_global_scale", "F32", (1,)),
        (f"{module}.input_global_scale", "F32", (1,)),
    ]


def tensors(shape: Shape, family: str) -> tuple[list[Spec], list[str]]:
    """All tensors, and the quantized expert projection modules in declaration order."""
    quant = nvfp4 if family == "modelopt" else packed
    specs: list[Spec] = [
        ("model.embed_tokens.weight", "BF16", (129280, shape.hidden)),
        ("model.norm.weight", "BF16", (shape.hidden,)),
        ("lm_head.weight", "BF16", (129280, shape.hidden)),
    ]
    listed: list[str] = []
    h = shape.hidden
    for n in range(shape.layers):
        p = f"model.layers.{n}"
        specs += [
            (f"{p}.input_layernorm.weight", "BF16", (h,)),
            (f"{p}.post_attention_layernorm.weight", "BF16", (h,)),
            (f"{p}.self_attn.q_a_layernorm.weight", "BF16", (1536,)),
            (f"{p}.self_attn.kv_a_layernorm.weight", "BF16", (512,)),
        ]
        for proj in ATTN:
            specs.append((f"{p}.self_attn.{proj}.weight", "BF16", (h, h)))
        if n < shape.dense_layers:
            for proj, out, inp in (
                ("gate_proj", shape.inter, h),
                ("up_proj", shape.inter, h),
                ("down_proj", h, shape.inter),
            ):
                specs.append((f"{p}.mlp.{proj}.weight", "BF16", (out, inp)))
            continue
        specs += [
            (f"{p}.mlp.gate.weight", "BF16", (shape.experts, h)),
            (f"{p}.mlp.gate.e_score_correction_bias", "F32", (shape.experts,)),
        ]
        for proj, out, inp in (
            ("gate_proj", shape.moe_inter, h),
            ("up_proj", shape.moe_inter, h),
            ("down_proj", h, shape.moe_inter),
        ):
            specs.append((f"{p}.mlp.shared_experts.{proj}.weight", "BF16", (out, inp)))
        for e in range(shape.experts):
            for proj, out, inp in (
                ("gate_proj", shape.moe_inter, h),
                ("up_proj", shape.moe_inter, h),
                ("down_proj", h, shape.moe_inter),
            ):
                module = f"{p}.mlp.experts.{e}.{proj}"
                specs += quant(module, out, inp)
                listed.append(module)
    return specs, listed


def modelopt_documents(shape: Shape, listed: list[str], wildcards: int) -> dict[str, str]:
    excludes = ["lm_head", "model.embed_tokens"]
    for n in range(shape.layers):
        excludes.append(f"model.layers.{n}.self_attn*")
        excludes.append(f"model.layers.{n}.mlp.shared_experts*")
        excludes.append(f"model.layers.{n}.mlp.gate")
    excludes += [f"model.layers.{n}.mlp.gate_proj" for n in range(shape.dense_layers)]
    excludes += [f"model.layers.{n}.mlp.up_proj" for n in range(shape.dense_layers)]
    excludes += [f"model.layers.{n}.mlp.down_proj" for n in range(shape.dense_layers)]
    excludes += [f"mtp.layers.{k}*" for k in range(max(0, wildcards - len(excludes)))]
    layers = {m: {"quant_algo": "NVFP4", "group_size": 16} for m in listed}
    quantization = {
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": None,
        "quantized_layers": layers,
        "exclude_modules": excludes,
    }
    return {
        "hf_quant_config.json": json.dumps(
            {"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": quantization},
            indent=1,
        )
        + "\n"
    }


def ct_documents(shape: Shape, patterns: int) -> dict[str, str]:
    nvfp4_args = {
        "num_bits": 4,
        "type": "float",
        "strategy": "tensor_group",
        "group_size": 16,
        "symmetric": True,
        "dynamic": False,
    }
    act = {**nvfp4_args, "dynamic": "local"}
    targets = [
        rf"re:model\.layers\.{n}\.mlp\.experts\.\d+\.(gate|up|down)_proj$"
        for n in range(shape.dense_layers, shape.layers)
    ]
    ignore = ["lm_head"] + [
        rf"re:model\.layers\.{n}\.(self_attn|mlp\.shared_experts|mlp\.gate$).*"
        for n in range(shape.layers)
    ]
    spare = max(0, patterns - len(targets) - len(ignore))
    ignore += [rf"re:mtp\.layers\.{k}\..*" for k in range(spare)]
    groups = {
        "group_0": {
            "targets": targets,
            "weights": nvfp4_args,
            "input_activations": act,
            "format": "nvfp4-pack-quantized",
        }
    }
    config = {
        "model_type": "deepseek_v3",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": groups,
            "ignore": ignore,
            "quantization_status": "compressed",
        },
    }
    return {"config.json": json.dumps(config, indent=1) + "\n"}


def build(
    name: str, family: str = "modelopt", patterns: int = 500, index: str = "transformers"
) -> Checkpoint:
    shape = SHAPES[name]
    specs, listed = tensors(shape, family)
    documents = (
        modelopt_documents(shape, listed, patterns)
        if family == "modelopt"
        else ct_documents(shape, patterns)
    )
    shards: list[ShardHeader] = []
    files = -(-len(specs) // shape.per_shard)
    weight_map: dict[str, str] = {}
    for s in range(files):
        chunk = specs[s * shape.per_shard : (s + 1) * shape.per_shard]
        file = f"model-{s + 1:05d}-of-{files:05d}.safetensors"
        entries, offset = [], 0
        for tensor_name, dtype, dims in chunk:
            numel = 1
            for d in dims:
                numel *= d
            size = numel * DTYPE_BITS[dtype] // 8
            entries.append(TensorEntry(tensor_name, dtype, dims, offset, offset + size))
            weight_map[tensor_name] = file
            offset += size
        header_length = 90 * len(entries)
        shards.append(
            ShardHeader(
                file=file,
                size=8 + header_length + offset,
                header_length=header_length,
                metadata={"format": "pt"},
                tensors=tuple(entries),
            )
        )
    total = sum(s.data_length for s in shards)
    document = {"metadata": {"total_size": total}, "weight_map": weight_map}
    if index == "transformers":  # a manifest then stores the index as a rule over the headers
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    else:  # as some other writer lays it out: a manifest keeps the text verbatim
        text = json.dumps(document, indent=1)
    return Checkpoint(
        origin=Origin("manifest", name), documents=documents, index_text=text, shards=tuple(shards)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--family", choices=["modelopt", "compressed-tensors"], default="modelopt")
    parser.add_argument("--patterns", type=int, default=500, help="excludes / re: patterns")
    parser.add_argument(
        "--index",
        choices=["transformers", "other"],
        default="transformers",
        help="the index text as transformers writes it (indent 2, sorted), or laid out otherwise",
    )
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    checkpoint = build(args.shape, args.family, args.patterns, args.index)
    write_manifest(checkpoint, args.output, force=True)
    print(
        f"{args.output}: {sum(len(s.tensors) for s in checkpoint.shards)} tensors in "
        f"{len(checkpoint.shards)} shards"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
