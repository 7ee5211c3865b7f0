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
import struct
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
    # 985 791 tensors in 198 shards, 246 168 MIXED_PRECISION entries: the folder benchmark's
    "folder": Shape(layers=80, dense_layers=2, experts=1052, per_shard=4980),
    "folder-half": Shape(layers=80, dense_layers=2, experts=526, per_shard=4980),
    "folder-quick": Shape(layers=8, dense_layers=1, experts=64, per_shard=1000),
    "half": Shape(layers=80, dense_layers=2, experts=536),  # the stress case at half the tensors
    "quick": Shape(layers=8, dense_layers=1, experts=64),
    "quick-half": Shape(layers=8, dense_layers=1, experts=32),
    "tiny": Shape(layers=4, dense_layers=1, experts=8, per_shard=200),
    # unlike modules (each of its own shape), 61 440 of them: 245 763 tensors
    "unlike": Shape(layers=80, dense_layers=0, experts=256, per_shard=4980),
    "unlike-quick": Shape(layers=4, dense_layers=0, experts=32, per_shard=500),
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


def ct_documents(shape: Shape, patterns: int, style: str = "literal") -> dict[str, str]:
    """``style="literal"``: patterns led by their literal prefix (``model\\.layers\\.3\\...``);
    ``"dotstar"``: led by ``.*`` as llm-compressor recipes often write them, so no prefix index
    can narrow them down."""
    nvfp4_args = {
        "num_bits": 4,
        "type": "float",
        "strategy": "tensor_group",
        "group_size": 16,
        "symmetric": True,
        "dynamic": False,
    }
    act = {**nvfp4_args, "dynamic": "local"}
    moe = range(shape.dense_layers, shape.layers)
    if style == "dotstar":
        targets = [rf"re:.*layers\.{n}\.mlp\.experts\.\d+\.(gate|up|down)_proj$" for n in moe]
        ignore = ["lm_head"]
        for n in range(shape.layers):
            ignore.append(rf"re:.*layers\.{n}\.self_attn\..*")
            if n < shape.dense_layers:
                ignore.append(rf"re:.*layers\.{n}\.mlp\.(gate|up|down)_proj$")
            else:
                ignore.append(rf"re:.*layers\.{n}\.mlp\.shared_experts\..*")
                ignore.append(rf"re:.*layers\.{n}\.mlp\.gate$")
        spare = max(0, patterns - len(targets) - len(ignore))
        ignore += [rf"re:.*mtp\.layers\.{k}\..*" for k in range(spare)]
    else:
        targets = [rf"re:model\.layers\.{n}\.mlp\.experts\.\d+\.(gate|up|down)_proj$" for n in moe]
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
    name: str,
    family: str = "modelopt",
    patterns: int = 500,
    index: str = "transformers",
    style: str = "literal",
) -> Checkpoint:
    shape = SHAPES[name]
    specs, listed = tensors(shape, family)
    documents = (
        modelopt_documents(shape, listed, patterns)
        if family == "modelopt"
        else ct_documents(shape, patterns, style)
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


def unlike_tensors(shape: Shape, refused: bool) -> tuple[list[Spec], list[str]]:
    """Expert projections only, each of its own shape (no two modules alike), ModelOpt NVFP4;
    ``refused``: every ``weight_scale`` ships as F32 instead of F8_E4M3, so every module is
    refused, each for a layout of its own."""
    specs: list[Spec] = []
    listed: list[str] = []
    k = 0
    for n in range(shape.layers):
        for e in range(shape.experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                k += 1
                module = f"model.layers.{n}.mlp.experts.{e}.{proj}"
                out, inp = 16 * k, 64
                spec = nvfp4(module, out, inp)
                if refused:
                    spec[1] = (spec[1][0], "F32", spec[1][2])
                specs += spec
                listed.append(module)
    return specs, listed


LIBRARY_ORDER = (
    *("U64", "I64", "F64", "C64", "F32", "U32", "I32", "BF16", "F16", "U16", "I16"),
    *("F8_E8M0", "F8_E4M3", "F8_E5M2", "I8", "U8", "F6_E3M2", "F6_E2M3", "F4", "BOOL"),
)
"""The order the safetensors library writes tensors in: its dtype enum, descending."""
_RANK = {dtype: n for n, dtype in enumerate(LIBRARY_ORDER)}


def safetensors_header(specs: list[Spec]) -> tuple[bytes, int]:
    """(8-byte prefix + header, data bytes) as the safetensors library lays a file out:
    ``__metadata__`` first, tensors by :data:`LIBRARY_ORDER` then name, compact JSON padded
    with spaces to a multiple of 8 bytes (tests/test_fast_json.py holds it to the library)."""
    document: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for tensor_name, dtype, dims in sorted(specs, key=lambda s: (_RANK[s[1]], s[0])):
        numel = 1
        for d in dims:
            numel *= d
        size = numel * DTYPE_BITS[dtype] // 8
        document[tensor_name] = {
            "dtype": dtype,
            "shape": list(dims),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(document, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


def write_folder(
    name: str,
    out: Path,
    family: str = "modelopt",
    patterns: int = 500,
    style: str = "dotstar",
    variant: str = "moe",
    index: str = "transformers",
) -> tuple[int, int]:
    """Write a real checkpoint folder: the declaration, ``model.safetensors.index.json``, and
    one ``.safetensors`` shard per ``per_shard`` tensors in model order, each a real header
    followed by its tensor data as a sparse hole (no disk used). ``variant``: ``moe`` (the
    DeepSeek-like MoE), ``sound`` or ``refused`` (unlike modules, see :func:`unlike_tensors`).
    ``index``: ``transformers`` (``save_pretrained``: indent 2, sorted keys, a final newline)
    or ``huggingface_hub`` (``save_torch_state_dict``: ``json.dump(index, f, indent=2)``, the
    keys in model order). Returns (tensors, shards)."""
    shape = SHAPES[name]
    if variant == "moe":
        specs, listed = tensors(shape, family)
    else:
        specs, listed = unlike_tensors(shape, refused=variant == "refused")
    if family == "modelopt":
        documents = modelopt_documents(shape, listed, patterns)
    else:
        documents = ct_documents(shape, patterns, style)
    out.mkdir(parents=True, exist_ok=True)
    for document, text in documents.items():
        (out / document).write_text(text)
    files = -(-len(specs) // shape.per_shard)
    weight_map: dict[str, str] = {}
    total = 0
    for s in range(files):
        chunk = specs[s * shape.per_shard : (s + 1) * shape.per_shard]
        file = f"model-{s + 1:05d}-of-{files:05d}.safetensors"
        head, data = safetensors_header(chunk)
        with (out / file).open("wb") as handle:
            handle.write(head)
            handle.truncate(len(head) + data)  # a hole: the zeros take no disk
        weight_map.update(dict.fromkeys((spec[0] for spec in chunk), file))
        total += data
    written = {"metadata": {"total_size": total}, "weight_map": weight_map}
    text = (
        json.dumps(written, indent=2, sort_keys=True) + "\n"
        if index == "transformers"
        else json.dumps(written, indent=2)
    )
    (out / "model.safetensors.index.json").write_text(text)
    return len(specs), files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--family", choices=["modelopt", "compressed-tensors"], default="modelopt")
    parser.add_argument("--patterns", type=int, default=500, help="excludes / re: patterns")
    parser.add_argument(
        "--index",
        choices=["transformers", "other", "huggingface_hub"],
        default="transformers",
        help="the index text as transformers writes it (indent 2, sorted), laid out otherwise "
        "(a manifest), or as huggingface_hub writes it (indent 2, model order; a folder)",
    )
    parser.add_argument(
        "--style",
        choices=["literal", "dotstar"],
        default="literal",
        help="compressed-tensors patterns led by a literal prefix, or by '.*'",
    )
    parser.add_argument(
        "--folder",
        choices=["moe", "sound", "refused"],
        help="write a real checkpoint folder (sparse shards) at -o instead of a manifest",
    )
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    if args.folder:
        if args.index == "other":
            parser.error(
                "--index other is for a manifest; a folder takes transformers or huggingface_hub"
            )
        count, files = write_folder(
            args.shape, args.output, args.family, args.patterns, args.style, args.folder, args.index
        )
        print(f"{args.output}: {count} tensors in {files} shards")
        return 0
    if args.index == "huggingface_hub":
        parser.error("--index huggingface_hub is for a folder (--folder)")
    checkpoint = build(args.shape, args.family, args.patterns, args.index, args.style)
    write_manifest(checkpoint, args.output, force=True)
    print(
        f"{args.output}: {sum(len(s.tensors) for s in checkpoint.shards)} tensors in "
        f"{len(checkpoint.shards)} shards"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
