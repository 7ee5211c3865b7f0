"""Coverage-guided fuzzing of everything qarm parses from a checkpoint, and of the audit behind it.

Any input must parse (and audit) or raise a named QarmError; anything else is a crash.

Raw targets (0-3) feed the fuzzer's bytes straight to one parser: header, index, declaration,
manifest. Structured targets (4-7) build *valid-looking* input from the bytes with
FuzzedDataProvider, so that most inputs get past the JSON layer and reach what follows:

4. a safetensors header built from tensors (names from a model-shaped pool, every dtype, small
   shapes), laid out contiguously and then optionally perturbed (offsets, prefix, padding);
5. a whole audit: tensors in one or two shards, an index, and a ModelOpt or compressed-tensors
   declaration from pools of real algorithms, targets, excludes and ``re:`` patterns, audited
   under a built-in engine profile and rendered as JSON and markdown;
6. a manifest rendered from such a checkpoint, then byte-mutated, then parsed;
7. an index from pools of tensor and shard names (hostile spellings included).

    python fuzz/fuzz_inputs.py -atheris_runs=20000          # bounded (as in CI)
    python fuzz/fuzz_inputs.py -max_total_time=600 corpus/  # a longer campaign
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any

import atheris

with atheris.instrument_imports(include=["qarm_audit"]):
    from qarm_audit import audit
    from qarm_audit.declarations import read_declaration
    from qarm_audit.errors import QarmError
    from qarm_audit.report import render_json, render_markdown
    from qarm_audit.sources import Checkpoint, Origin, render_manifest
    from qarm_audit.sources.header import DTYPE_BITS, length_prefix, parse_header
    from qarm_audit.sources.index import parse_index
    from qarm_audit.sources.manifest import parse_manifest

DTYPES = sorted(DTYPE_BITS)
MODULES = [
    "model.layers.0.self_attn.q_proj",
    "model.layers.0.self_attn.k_proj",
    "model.layers.0.self_attn.v_proj",
    "model.layers.0.self_attn.o_proj",
    "model.layers.0.mlp.gate_proj",
    "model.layers.0.mlp.up_proj",
    "model.layers.0.mlp.down_proj",
    "model.layers.1.mlp.experts.0.gate_proj",
    "model.layers.1.mlp.experts.0.up_proj",
    "model.layers.1.mlp.experts.1.down_proj",
    "model.layers.1.mlp.gate",
    "model.layers.0.self_attn",
    "language_model.model.layers.0.mlp.down_proj",
    "model.language_model.layers.0.mlp.down_proj",
    "model.embed_tokens",
    "model.norm",
    "lm_head",
]
OPERANDS = [
    "weight",
    "weight_scale",
    "weight_scale_2",
    "input_scale",
    "weight_packed",
    "weight_global_scale",
    "input_global_scale",
    "weight_scale_inv",
    "weight_zero_point",
    "weight_shape",
    "k_scale",
    "v_scale",
    "qweight",
    "scales",
    "qzeros",
    "g_idx",
    "bias",
    "pre_quant_scale",
    "weight_bogus_scale",
]
DIMS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 2**31, 2**52 - 1]
"""Small real dimensions, and two whose products overflow 64 bits in a few dimensions."""
MODELOPT_ALGOS = [
    "FP8",
    "NVFP4",
    "MIXED_PRECISION",
    "W4A16_AWQ",
    "W4A8_AWQ",
    "INT8_SQ",
    "MXFP8",
    "MXFP4",
    "NVFP4_AWQ",
    "FP8_PB_WO",
    "FP8_PER_CHANNEL_PER_TOKEN",
    "W4A16_NVFP4",
    "bogus",
]
KV_ALGOS = [None, "FP8", "NVFP4", "INT8", "bogus"]
PATTERNS = [
    "lm_head",
    "*mlp*",
    "model.layers.0*",
    "*.experts.*",
    "model.layers.1.mlp.gate",
    "self_attn",
    "re:.*q_proj",
    "re:.*mlp\\.(gate|up)_proj$",
    "re:model\\.layers\\.\\d+\\.mlp\\.experts\\.\\d+\\..*",
    "re:[",
    "re:(a+)+b",
    "Linear",
    "Embedding",
    "language_model.model.layers.0.mlp",
    "",
]
CT_TYPES = ["float", "int", "bogus"]
CT_STRATEGIES = [None, "tensor", "channel", "group", "tensor_group", "block", "token", "bogus"]
CT_FORMATS = [
    None,
    "float-quantized",
    "nvfp4-pack-quantized",
    "pack-quantized",
    "int-quantized",
    "naive-quantized",
    "mxfp4-pack-quantized",
    "sparse-bitmask",
    "marlin-24",
    "dense",
]
SHARD_NAMES = [
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors",
    "./model.safetensors",
    "../model.safetensors",
    "/abs/model.safetensors",
    "sub/model.safetensors",
    "model.bin",
    "a\\b.safetensors",
    "",
]
ENGINES = ["vllm", "sglang", "name-probe"]
GPUS = [None, "sm80", "sm90", "sm100", "sm120"]


def _pick(fdp: Any, pool: list[Any]) -> Any:
    return pool[fdp.ConsumeIntInRange(0, len(pool) - 1)]


def _name(fdp: Any) -> str:
    if fdp.ConsumeIntInRange(0, 15) == 0:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 24))
    return f"{_pick(fdp, MODULES)}.{_pick(fdp, OPERANDS)}"


def _tensors(fdp: Any, limit: int = 24) -> dict[str, tuple[str, list[int]]]:
    out: dict[str, tuple[str, list[int]]] = {}
    for _ in range(fdp.ConsumeIntInRange(0, limit)):
        shape = [_pick(fdp, DIMS) for _ in range(fdp.ConsumeIntInRange(0, 3))]
        out[_name(fdp)] = (_pick(fdp, DTYPES), shape)
    return out


def _nbytes(dtype: str, shape: list[int]) -> int:
    numel = 1
    for dim in shape:
        numel *= dim
    return numel * DTYPE_BITS[dtype] // 8


def _header_bytes(fdp: Any, tensors: dict[str, tuple[str, list[int]]]) -> tuple[bytes, int]:
    """An 8-byte prefix and a header for ``tensors``, perturbed now and then; and the file size."""
    header: dict[str, Any] = {}
    cursor = 0
    for name, (dtype, shape) in tensors.items():
        n = _nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [cursor, cursor + n]}
        cursor += n
    if fdp.ConsumeBool():
        header["__metadata__"] = {"format": "pt"}
    mutate = fdp.ConsumeIntInRange(0, 7)
    if mutate == 1 and header:
        victim = next(iter(header.values()))
        if isinstance(victim, dict) and "data_offsets" in victim:
            victim["data_offsets"][fdp.ConsumeIntInRange(0, 1)] += fdp.ConsumeIntInRange(-3, 3)
    elif mutate == 2 and header:
        victim = next(iter(header.values()))
        if isinstance(victim, dict):
            victim.pop(_pick(fdp, ["dtype", "shape", "data_offsets"]), None)
    body = json.dumps(header).encode() + b" " * fdp.ConsumeIntInRange(0, 8)
    length = len(body) + (fdp.ConsumeIntInRange(-4, 4) if mutate == 3 else 0)
    data = cursor + (fdp.ConsumeIntInRange(-4, 4) if mutate == 4 else 0)
    raw = struct.pack("<Q", max(length, 0)) + body
    return raw, len(raw) + max(data, 0)


def _modelopt(fdp: Any) -> dict[str, str]:
    algo = _pick(fdp, MODELOPT_ALGOS)
    block: dict[str, Any] = {"quant_algo": algo, "kv_cache_quant_algo": _pick(fdp, KV_ALGOS)}
    if fdp.ConsumeBool():
        block["group_size"] = _pick(fdp, [16, 32, 128, 0, -1])
    if fdp.ConsumeBool():
        block["exclude_modules"] = [
            _pick(fdp, PATTERNS) for _ in range(fdp.ConsumeIntInRange(0, 4))
        ]
    if algo == "MIXED_PRECISION" or fdp.ConsumeIntInRange(0, 7) == 0:
        block["quantized_layers"] = {
            _pick(fdp, MODULES): {"quant_algo": _pick(fdp, MODELOPT_ALGOS)}
            for _ in range(fdp.ConsumeIntInRange(0, 6))
        }
    form = fdp.ConsumeIntInRange(0, 2)
    if form == 0:
        doc = {"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": block}
        return {"hf_quant_config.json": json.dumps(doc), "config.json": '{"model_type": "llama"}'}
    if form == 1:
        inline = {"quant_method": "modelopt", **block}
        if "exclude_modules" in inline and fdp.ConsumeBool():
            inline["ignore"] = inline.pop("exclude_modules")
    else:
        inline = {"quant_method": "modelopt", "quantization": block}
    return {"config.json": json.dumps({"model_type": "llama", "quantization_config": inline})}


def _args(fdp: Any) -> dict[str, Any] | None:
    if fdp.ConsumeIntInRange(0, 3) == 0:
        return None
    args: dict[str, Any] = {
        "num_bits": _pick(fdp, [4, 8, 16, 3]),
        "type": _pick(fdp, CT_TYPES),
        "symmetric": fdp.ConsumeBool(),
        "dynamic": _pick(fdp, [False, True, "local"]),
    }
    strategy = _pick(fdp, CT_STRATEGIES)
    if strategy is not None:
        args["strategy"] = strategy
    if fdp.ConsumeBool():
        args["group_size"] = _pick(fdp, [16, 32, 128, -1])
    if strategy == "block" and fdp.ConsumeBool():
        args["block_structure"] = [128, 128]
    return args


def _compressed(fdp: Any) -> dict[str, str]:
    groups: dict[str, Any] = {}
    for g in range(fdp.ConsumeIntInRange(0, 3)):
        group: dict[str, Any] = {
            "targets": [_pick(fdp, PATTERNS) for _ in range(fdp.ConsumeIntInRange(0, 3))],
            "weights": _args(fdp),
            "input_activations": _args(fdp),
        }
        fmt = _pick(fdp, CT_FORMATS)
        if fmt is not None:
            group["format"] = fmt
        groups[f"group_{g}"] = group
    config: dict[str, Any] = {
        "quant_method": "compressed-tensors",
        "config_groups": groups,
        "ignore": [_pick(fdp, PATTERNS) for _ in range(fdp.ConsumeIntInRange(0, 3))],
    }
    fmt = _pick(fdp, CT_FORMATS)
    if fmt is not None:
        config["format"] = fmt
    if fdp.ConsumeBool():
        kv = _args(fdp)
        if kv is not None:
            config["kv_cache_scheme"] = kv
    return {"config.json": json.dumps({"model_type": "llama", "quantization_config": config})}


def _checkpoint(fdp: Any) -> Checkpoint:
    """One or two shards of model-shaped tensors (parsed from real header bytes), an index, and a
    declaration of either family."""
    tensors = _tensors(fdp)
    names = list(tensors)
    two = len(names) > 1 and fdp.ConsumeBool()
    cut = fdp.ConsumeIntInRange(1, len(names) - 1) if two else len(names)
    parts = (
        {SHARD_NAMES[0]: names[:cut], SHARD_NAMES[1]: names[cut:]}
        if two
        else {SHARD_NAMES[2]: names}
    )
    shards = []
    for file, chosen in parts.items():
        raw, size = _header_bytes(fdp, {n: tensors[n] for n in chosen})
        length = length_prefix(raw[:8], where=file, size=size)
        shards.append(parse_header(raw[8 : 8 + length], file=file, size=size, header_length=length))
    index_text = None
    if two or fdp.ConsumeIntInRange(0, 3) == 0:
        weight_map = {name: file for file, chosen in parts.items() for name in chosen}
        if weight_map and fdp.ConsumeIntInRange(0, 3) == 0:
            weight_map[_name(fdp)] = _pick(fdp, SHARD_NAMES[:3])
        index_text = json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
    kind = fdp.ConsumeIntInRange(0, 3)
    documents = (
        _modelopt(fdp)
        if kind < 2
        else _compressed(fdp)
        if kind == 2
        else {"config.json": '{"model_type": "llama"}'}
    )
    return Checkpoint(
        origin=Origin("manifest", "fuzz"),
        documents=documents,
        index_text=index_text,
        shards=tuple(shards),
    )


def _raw(kind: int, payload: bytes) -> None:
    if kind == 0:
        size = len(payload)
        length = length_prefix(payload[:8], where="fuzz", size=size)
        parse_header(payload[8 : 8 + length], file="fuzz", size=size, header_length=length)
    elif kind == 1:
        parse_index(payload.decode("utf-8", "replace"))
    elif kind == 2:
        read_declaration({"config.json": payload.decode("utf-8", "replace")})
    else:
        parse_manifest(payload.decode("utf-8", "replace"), "fuzz")


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = fdp.ConsumeIntInRange(0, 7)
    try:
        if kind < 4:
            _raw(kind, fdp.ConsumeBytes(fdp.remaining_bytes()))
        elif kind == 4:
            raw, size = _header_bytes(fdp, _tensors(fdp))
            length = length_prefix(raw[:8], where="fuzz", size=size)
            parse_header(raw[8 : 8 + length], file="fuzz", size=size, header_length=length)
        elif kind == 5:
            checkpoint = _checkpoint(fdp)
            report = audit(
                checkpoint,
                engine=_pick(fdp, ENGINES),
                gpu=_pick(fdp, GPUS),
                env={"W4A4": "1"} if fdp.ConsumeBool() else {},
            )
            render_json(report)
            render_markdown(report)
        elif kind == 6:
            text = bytearray(render_manifest(_checkpoint(fdp)).encode())
            for _ in range(fdp.ConsumeIntInRange(0, 3)):
                if text:
                    text[fdp.ConsumeIntInRange(0, len(text) - 1)] = fdp.ConsumeIntInRange(0, 127)
            parse_manifest(text.decode("utf-8", "replace"), "fuzz")
        else:
            count = fdp.ConsumeIntInRange(0, 6)
            weight_map = {_name(fdp): _pick(fdp, SHARD_NAMES) for _ in range(count)}
            total = _pick(fdp, [0, 12, -1, 1.5, 2.0, "12", None])
            parse_index(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    except QarmError:
        pass


SEEDS = [
    b"\x00"
    + struct.pack("<Q", 60)
    + b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}    '
    + b"\x00" * 8,
    b"\x01" + b'{"weight_map": {"a": "model-00001-of-00001.safetensors"}}',
    b"\x02" + b'{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}',
    b"\x03" + b'{"format": "qarm-manifest/2", "documents": {}, "index": null, "shards": []}',
    *(bytes([k]) + bytes(range(7, 250, 3)) for k in (4, 5, 6, 7)),
]


def main() -> None:
    """With no corpus folder given, start from the seeds in a temporary folder."""
    argv = list(sys.argv)
    if not any(not arg.startswith("-") for arg in argv[1:]):
        import tempfile
        from pathlib import Path

        corpus = Path(tempfile.mkdtemp(prefix="qarm-fuzz-"))
        for i, seed in enumerate(SEEDS):
            (corpus / f"seed-{i}").write_bytes(seed)
        argv.append(str(corpus))
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
