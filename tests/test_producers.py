"""Checkpoints written by the real producers: genuine ones audit clean, planted defects are named.

The corpus in fixtures/producers/ was written by nvidia-modelopt 0.47.0, llm-compressor 0.14.0.1
and compressed-tensors 0.19.0's ModelOpt-NVFP4 converter (see its README). A defect is planted by
rewriting the genuine checkpoint's header and bytes with the safetensors library.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import serialize_file
from safetensors._safetensors_rust import TensorSpec

from conftest import LIBRARY_DTYPES, REPO
from qarm_audit import audit
from qarm_audit.sources import open_source

CORPUS = REPO / "fixtures" / "producers"
GENUINE = sorted(p for p in CORPUS.iterdir() if p.is_dir())

NO_ARM_IN_NAME_PROBE = {
    # The seed's engine loads per-tensor static FP8 and ModelOpt NVFP4 only; everything else is
    # refused there by name (no-arm), which is the profile speaking, not the checkpoint.
    "llmcompressor-fp8-block",
    "llmcompressor-fp8-dynamic",
    "llmcompressor-mixed-fp8attn-w4a16mlp",
    "llmcompressor-mxfp4",
    "llmcompressor-mxfp4a16",
    "llmcompressor-moe-mxfp4a16",
    "llmcompressor-mxfp8",
    "llmcompressor-w4a16",
    "llmcompressor-w4afp8",
    "llmcompressor-w4a8-int",
    "llmcompressor-w8a16",
    "llmcompressor-w4a16-asym",
    "llmcompressor-quip-w4a16",
    "llmcompressor-moe-quip-w4a16",
    "llmcompressor-moe-w4a16",
    "llmcompressor-moe-fp8attn-w4a16experts",
    "llmcompressor-moe-w8a8-int8",
    "llmcompressor-moe-experts-mxfp4a16",
    "llmcompressor-moe-mxfp8",
    "llmcompressor-moe-w4afp8",
    "llmcompressor-w8a8-int8",
    "modelopt-fp8-blockwise-wo",
    "modelopt-fp8-pcpt",
    "modelopt-int4-awq",
    "modelopt-int8-sq",
    "modelopt-mxfp4",
    "modelopt-mxfp8",
    "gptqmodel-awq-w4g32-llama",
    "gptqmodel-gptq-w4-channel-llama",
    "gptqmodel-gptq-w4g32-actorder-llama",
    "gptqmodel-gptq-w4g32-dynamic-llama",
    "gptqmodel-gptq-w4g32-llama",
    "gptqmodel-gptq-w8g64-llama",
    "transformers-bnb-fp4-llama",
    "transformers-bnb-int8-llama",
    "transformers-bnb-nf4-dq-llama",
    "transformers-bnb-nf4-llama",
    "transformers-bnb-nf4-skip-llama",
}
REFUSED_OF_THEIR_OWN = {
    # transformers 5 leaves the fused Qwen3-MoE experts BF16 under bitsandbytes (test_bitsandbytes)
    "transformers-bnb-nf4-qwen3moe": {"no-arm", "quantized-ships-unquantized"},
}


def test_corpus_is_present() -> None:
    assert len(GENUINE) >= 28


@pytest.mark.parametrize("folder", GENUINE, ids=lambda p: p.name)
def test_genuine_checkpoint_has_no_refusal_of_its_own(folder: Path) -> None:
    report = audit(str(folder), engine="name-probe")
    codes = {r.code for r in report.refusals}
    if folder.name in REFUSED_OF_THEIR_OWN:
        assert codes == REFUSED_OF_THEIR_OWN[folder.name], report.refusals
    elif folder.name in NO_ARM_IN_NAME_PROBE:
        assert codes == {"no-arm"}, report.refusals
    else:
        assert codes == set(), report.refusals
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    assert {b.scheme: b.tensors for b in report.buckets}["unclassified"] == 0


def test_converted_checkpoint_keeps_a_stale_modelopt_file() -> None:
    report = audit(str(CORPUS / "ctconvert-modelopt-nvfp4"), engine="name-probe")
    assert report.declaration.family == "compressed-tensors"
    assert "stale-declaration" in [w.code for w in report.warnings]


def test_kv_scale_names_differ_between_producers_and_both_are_kv_cache() -> None:
    for name, suffix in (
        ("modelopt-fp8-fp8kv", "self_attn.k_proj.k_scale"),
        ("llmcompressor-fp8-kv", "self_attn.k_scale"),
    ):
        report = audit(str(CORPUS / name), engine="name-probe")
        names = [t.name for s in open_source(str(CORPUS / name)).shards for t in s.tensors]
        assert any(n.endswith(suffix) for n in names)
        assert {b.scheme: b.tensors for b in report.buckets}["kv_cache"] == 4
        assert report.refusals == []


# --- planting defects --------------------------------------------------------------------

Tensors = dict[str, tuple[str, tuple[int, ...], bytes]]


def read_tensors(folder: Path) -> dict[str, Tensors]:
    """Every shard's tensors with their raw bytes."""
    checkpoint = open_source(str(folder))
    out: dict[str, Tensors] = {}
    for shard in checkpoint.shards:
        raw = (folder / shard.file).read_bytes()
        base = 8 + shard.header_length
        out[shard.file] = {
            t.name: (t.dtype, t.shape, raw[base + t.begin : base + t.end]) for t in shard.tensors
        }
    return out


def write_tensors(folder: Path, shards: dict[str, Tensors]) -> None:
    keep = []
    for file, tensors in shards.items():
        specs = {}
        for name, (dtype, shape, data) in tensors.items():
            buffer = np.frombuffer(bytearray(data) or bytearray(1), dtype=np.uint8)
            keep.append(buffer)
            specs[name] = TensorSpec(
                dtype=LIBRARY_DTYPES[dtype],
                shape=tuple(shape),
                data_ptr=buffer.ctypes.data,
                data_len=len(data),
            )
        serialize_file(specs, str(folder / file), metadata=None)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        document = json.loads(index.read_text())
        document["weight_map"] = {n: f for f, t in shards.items() for n in t}
        index.write_text(json.dumps(document, indent=2))


def plant(tmp_path: Path, name: str, edit: Callable[[Tensors], None]) -> Path:
    folder = tmp_path / name
    shutil.copytree(CORPUS / name, folder)
    shards = read_tensors(folder)
    merged: Tensors = {k: v for t in shards.values() for k, v in t.items()}
    owner = {k: f for f, t in shards.items() for k in t}
    edit(merged)
    first = next(iter(shards))
    write_tensors(
        folder, {f: {k: v for k, v in merged.items() if owner.get(k, first) == f} for f in shards}
    )
    return folder


def zeros(dtype: str, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...], bytes]:
    from qarm_audit.sources.header import DTYPE_BITS

    numel = int(np.prod(shape)) if shape else 1
    return dtype, shape, bytes(numel * DTYPE_BITS[dtype] // 8)


def drop(tensors: Tensors, module: str) -> None:
    for key in [k for k in tensors if k.startswith(module + ".")]:
        del tensors[key]


def refusals(folder: Path | str, engine: str = "name-probe", **options: Any) -> dict[str, set[str]]:
    """Each refusal code and the modules it names; ``options`` go to :func:`audit`."""
    out: dict[str, set[str]] = {}
    for r in audit(str(folder), engine=engine, **options).refusals:
        out.setdefault(r.code, set()).add(r.module)
    return out


def buckets(folder: Path | str, engine: str = "name-probe") -> dict[str, tuple[int, int]]:
    """(tensors, modules) of every bucket that holds a tensor; the buckets sum to the totals."""
    report = audit(str(folder), engine=engine)
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    assert sum(b.modules for b in report.buckets) == report.totals.modules
    return {b.scheme: (b.tensors, b.modules) for b in report.buckets if b.tensors}


NV = "modelopt-nvfp4"
DOWN = "model.layers.1.mlp.down_proj"


def test_planted_fp8_spelling_on_a_declared_nvfp4_module(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        out, packed = t[f"{DOWN}.weight"][1]
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("F8_E4M3", (out, packed * 2))
        t[f"{DOWN}.weight_scale"] = zeros("F32", ())
        t[f"{DOWN}.input_scale"] = zeros("F32", ())

    assert refusals(plant(tmp_path, NV, edit)) == {"spelling-mismatch": {DOWN}}


def test_planted_scale_on_the_excluded_lm_head(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t["lm_head.input_scale"] = zeros("F32", ())

    assert refusals(plant(tmp_path, NV, edit)) == {"unquantized-ships-quantized": {"lm_head"}}


def test_planted_plain_weight_on_a_declared_nvfp4_module(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        out, packed = t[f"{DOWN}.weight"][1]
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (out, packed * 2))

    assert refusals(plant(tmp_path, NV, edit)) == {"quantized-ships-unquantized": {DOWN}}


def test_planted_unclassified_operand(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight_scale_3"] = zeros("F32", ())

    assert refusals(plant(tmp_path, NV, edit)) == {"unclassified-operand": {DOWN}}


UNKNOWN = "it is no operand qarm knows"
STRAYS = [
    (NV, "weight_scale_inv", "F32", "it belongs to the block-inv family"),
    (NV, "weight_global_scale", "F32", "it belongs to the ct-global family"),
    (NV, "mystery_scale", "F32", UNKNOWN),
    (NV, "smooth_factor", "BF16", UNKNOWN),
    ("modelopt-fp8", "weight_zero_point", "I8", "it belongs to the zero-point family"),
    ("modelopt-fp8", "weight_g_idx", "I32", "it belongs to the g-idx family"),
    ("llmcompressor-nvfp4", "weight_scale_2", "F32", "it belongs to the modelopt-global family"),
    ("llmcompressor-nvfp4", "input_scale", "F32", "it belongs to the activation family"),
]


@pytest.mark.parametrize(("folder", "operand", "dtype", "family"), STRAYS)
def test_planted_stray_beside_a_complete_operand_set(
    tmp_path: Path, folder: str, operand: str, dtype: str, family: str
) -> None:
    """The refusal names the tensor, what the scheme writes instead, and the family the stray
    belongs to (or that it belongs to none)."""

    def edit(t: Tensors) -> None:
        t[f"{DOWN}.{operand}"] = zeros(dtype, ())

    planted = plant(tmp_path, folder, edit)
    assert refusals(planted, engine="vllm") == {"operand-unexpected": {DOWN}}
    (refusal,) = audit(str(planted), engine="vllm").refusals
    assert refusal.tensor == f"{DOWN}.{operand}"
    assert refusal.message.startswith(f"{DOWN}.{operand} ({dtype} []) is no operand of ")
    assert "weight" in refusal.message.split("writes it (", 1)[1]  # what it writes instead
    assert refusal.message.endswith(f"; {family}")


def test_planted_missing_input_scale_on_w4a4(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.input_scale"]

    assert refusals(plant(tmp_path, NV, edit)) == {"operand-missing": {DOWN}}


def test_planted_scale_dtype_and_shape(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight_scale_2"] = zeros("BF16", ())
        gate = "model.layers.0.mlp.gate_proj"
        out, cols = t[f"{gate}.weight_scale"][1]
        t[f"{gate}.weight_scale"] = zeros("F8_E4M3", (out, cols // 2))

    assert refusals(plant(tmp_path, NV, edit)) == {
        "operand-dtype": {DOWN},
        "operand-shape": {"model.layers.0.mlp.gate_proj"},
    }


def test_planted_awq_triple_on_a_declared_fp8_module(tmp_path: Path) -> None:
    o_proj = "model.layers.0.self_attn.o_proj"

    def edit(t: Tensors) -> None:
        drop(t, o_proj)
        t[f"{o_proj}.qweight"] = zeros("I32", (16, 128))
        t[f"{o_proj}.qzeros"] = zeros("I32", (1, 16))
        t[f"{o_proj}.scales"] = zeros("F16", (1, 128))

    assert refusals(plant(tmp_path, "modelopt-fp8", edit)) == {"spelling-mismatch": {o_proj}}


def test_planted_missing_module_of_a_mixed_map(tmp_path: Path) -> None:
    folder = "modelopt-mixed-fp8attn-nvfp4mlp"
    layers = json.loads((CORPUS / folder / "hf_quant_config.json").read_text())
    module = next(iter(layers["quantization"]["quantized_layers"]))

    def edit(t: Tensors) -> None:
        drop(t, module)

    found = refusals(plant(tmp_path, folder, edit))
    assert found["declared-module-missing"] == {module}


def test_planted_fused_disagreement_in_a_mixed_map(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(CORPUS / "modelopt-mixed-fp8attn-nvfp4mlp", folder)
    for name in ("hf_quant_config.json", "config.json"):
        document = json.loads((folder / name).read_text())
        block = document.get("quantization") or document.get("quantization_config")
        layers = block.get("quantized_layers")
        if layers:
            layers["model.layers.0.self_attn.k_proj"] = {"quant_algo": "NVFP4", "group_size": 16}
            (folder / name).write_text(json.dumps(document))
    found = refusals(folder)
    assert "model.layers.0.self_attn.qkv_proj" in found["fused-shards-disagree"]


def test_planted_compressed_tensors_global_scale_missing(tmp_path: Path) -> None:
    gate = "model.layers.0.mlp.gate_proj"

    def edit(t: Tensors) -> None:
        del t[f"{gate}.weight_global_scale"]

    assert refusals(plant(tmp_path, "llmcompressor-nvfp4", edit)) == {"operand-missing": {gate}}


def test_planted_index_header_disagreement(tmp_path: Path) -> None:

    folder = tmp_path / "sharded"
    shutil.copytree(CORPUS / "modelopt-nvfp4-sharded", folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = (
        "model-00004-of-00004.safetensors"
        if not index["weight_map"][name].endswith("4.safetensors")
        else "model-00001-of-00004.safetensors"
    )
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    report = audit(str(folder))
    # lm_head.weight, the last shard's only tensor, is moved: that shard is named no more, and
    # the index's total_size no longer matches the shards it names
    assert {r.code for r in report.refusals} == {"index-disagrees", "index-total-size"}
    messages = [r.message for r in report.refusals if r.code == "index-disagrees"]
    assert any("not in the header of the shard they name" in m for m in messages)
    assert any("model-00004-of-00004.safetensors sits beside" in m for m in messages)
