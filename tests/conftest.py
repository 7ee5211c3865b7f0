"""Shared helpers: real safetensors files written by the safetensors library, and the CLI runner."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from safetensors import serialize_file
from safetensors._safetensors_rust import TensorSpec

from qarm_audit.check.completeness import EXPERT_COUNTS
from qarm_audit.cli import cli
from qarm_audit.sources.header import DTYPE_BITS

LIBRARY_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "C64": "complex64",
}

Tensors = Mapping[str, tuple[Any, ...]]
"""name -> (safetensors dtype, shape) or (dtype, shape, data): ``data`` is the tensor's bytes
(``bytes``, or a numpy array whose raw bytes are written, e.g. ``f32(0.5)``); zeros without it."""


def f32(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


def f16(*values: float) -> bytes:
    return np.array(values, dtype="<f2").tobytes()


def bf16(*values: float) -> bytes:
    """Round to nearest even, as a BF16 writer does."""
    bits = np.array(values, dtype="<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: Tensors, metadata: dict[str, str] | None = None) -> None:
    """A real file written by the safetensors library, any dtype (F8 included): zero-filled, or
    holding the bytes given as a spec's third element."""
    keep: list[np.ndarray] = []
    specs = {}
    for name, (dtype, shape, *data) in tensors.items():
        numel = int(np.prod(shape)) if shape else 1
        buffer = np.zeros(max(numel * DTYPE_BITS[dtype] // 8, 1), dtype=np.uint8)
        if data:
            raw = data[0] if isinstance(data[0], bytes) else np.asarray(data[0]).tobytes()
            assert len(raw) == numel * DTYPE_BITS[dtype] // 8, (name, len(raw))
            buffer[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        keep.append(buffer)
        specs[name] = TensorSpec(
            dtype=LIBRARY_DTYPES[dtype],
            shape=tuple(shape),
            data_ptr=buffer.ctypes.data,
            data_len=numel * DTYPE_BITS[dtype] // 8,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    serialize_file(specs, str(path), metadata=metadata)


def write_checkpoint(
    root: Path,
    shards: Mapping[str, Tensors],
    documents: Mapping[str, Any] | None = None,
    *,
    index: bool | None = None,
) -> Path:
    """A checkpoint folder; documents given as dicts are written as JSON, strings verbatim."""
    root.mkdir(parents=True, exist_ok=True)
    for name, doc in (documents or {}).items():
        text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
        (root / name).write_text(text)
    for file, tensors in shards.items():
        write_safetensors(root / file, tensors)
    if index if index is not None else len(shards) > 1:
        weight_map = {name: file for file, tensors in shards.items() for name in tensors}
        total = sum(
            (int(np.prod(shape)) if shape else 1) * DTYPE_BITS[dtype] // 8
            for tensors in shards.values()
            for dtype, shape, *_ in tensors.values()
        )
        (root / "model.safetensors.index.json").write_text(
            json.dumps(
                {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
                indent=2,
            )
        )
    return root


# --- small models in each producer's spelling ---------------------------------------------

H, INTER = 64, 128


def fp8_modelopt(module: str, out: int = H, inp: int = H, input_scale: bool = True) -> Tensors:
    t = {f"{module}.weight": ("F8_E4M3", (out, inp)), f"{module}.weight_scale": ("F32", ())}
    if input_scale:
        t[f"{module}.input_scale"] = ("F32", ())
    return t


def nvfp4_modelopt(module: str, out: int = H, inp: int = H, input_scale: bool = False) -> Tensors:
    t = {
        f"{module}.weight": ("U8", (out, inp // 2)),
        f"{module}.weight_scale": ("F8_E4M3", (out, inp // 16)),
        f"{module}.weight_scale_2": ("F32", ()),
    }
    if input_scale:
        t[f"{module}.input_scale"] = ("F32", ())
    return t


def plain(module: str, *shape: int) -> Tensors:
    return {f"{module}.weight": ("BF16", shape)}


PROJ = {
    "q_proj": (H, H),
    "k_proj": (H, H),
    "v_proj": (H, H),
    "o_proj": (H, H),
    "gate_proj": (INTER, H),
    "up_proj": (INTER, H),
    "down_proj": (H, INTER),
}


def llama(layers: int = 2, spell: Any = None, *, lm_head: Tensors | None = None) -> dict[str, Any]:
    """A tiny Llama-shaped tensor set; ``spell(module, out, in)`` writes each projection."""
    spell = spell or (lambda m, o, i: plain(m, o, i))
    t: dict[str, Any] = {
        "model.embed_tokens.weight": ("BF16", (256, H)),
        "model.norm.weight": ("BF16", (H,)),
    }
    for n in range(layers):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", (H,))
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", (H,))
        for proj, (out, inp) in PROJ.items():
            group = "self_attn" if proj in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            t.update(spell(f"{p}.{group}.{proj}", out, inp))
    t.update(lm_head if lm_head is not None else plain("lm_head", 256, H))
    return t


def modelopt_file(
    algo: str,
    excludes: list[str] | None = None,
    kv: str | None = None,
    layers: dict[str, Any] | None = None,
    group_size: int | None = 16,
) -> dict[str, Any]:
    q: dict[str, Any] = {"quant_algo": algo, "kv_cache_quant_algo": kv}
    if group_size is not None and "FP4" in algo:
        q["group_size"] = group_size
    if excludes is not None:
        q["exclude_modules"] = excludes
    if layers is not None:
        q["quantized_layers"] = layers
    return {"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": q}


CT_FP8 = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
"""compressed-tensors' FP8 per-tensor weights, as llm-compressor writes them."""


def ct_fp8_llama(
    root: Path,
    *,
    groups: dict[str, Any] | None = None,
    tensors: Tensors | None = None,
    config: dict[str, Any] | None = None,
    **block: Any,
) -> Path:
    """A tiny Llama with compressed-tensors FP8 weights on every Linear but lm_head
    (``group_0``), written to ``root``: ``groups`` are added to (or replace) ``group_0``,
    ``tensors`` to the Llama's, ``config`` to config.json's keys, ``block`` to the
    quantization_config's."""
    group_0 = {"targets": ["Linear"], "weights": CT_FP8, "format": "float-quantized"}
    quantization = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": group_0, **(groups or {})},
        "ignore": ["lm_head"],
        **block,
    }
    shipped = {**llama(2, lambda m, o, i: fp8_modelopt(m, o, i, input_scale=False))}
    shipped.update(tensors or {})
    document = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], **(config or {})}
    documents = {"config.json": {**document, "quantization_config": quantization}}
    return write_checkpoint(root, {"model.safetensors": shipped}, documents)


def sized(config: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """A real checkpoint's config.json trimmed to the small model a test writes: its
    ``num_hidden_layers`` and routed-expert counts (those it states, at the top or in
    ``text_config``) become what ``names`` ship, so that the audit does not refuse the test's
    model for the layers and experts it leaves out."""
    written = list(names)
    counts = {"num_hidden_layers": _highest(written, "layers") + 1}
    experts = _highest(written, "experts") + 1
    counts.update(dict.fromkeys(EXPERT_COUNTS, experts) if experts else {})
    out = {**config}
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = {**out["text_config"]}
    for part in (out, out.get("text_config")):
        if isinstance(part, dict):
            part.update({k: v for k, v in counts.items() if type(part.get(k)) is int})
    return out


def _highest(names: list[str], container: str) -> int:
    found = [int(m[1]) for n in names for m in re.finditer(rf"\b{container}\.([0-9]+)\b", n)]
    return max(found, default=-1)


@pytest.fixture
def run() -> Iterator[Any]:
    """``run("audit", path, ...)`` -> click Result with stdout and stderr apart."""
    runner = CliRunner()

    def invoke(*args: str | Path) -> Result:
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    yield invoke


@pytest.fixture(autouse=True)
def _quiet_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("QARM_DEBUG", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    # the machine's GPU and installed engines never reach a test unless it asks for them
    monkeypatch.setenv("QARM_GPU", "none")
    monkeypatch.setenv("QARM_DETECT_ENGINE", "0")


REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "fixtures" / "manifests"
REALWORLD = Path(__file__).resolve().parent / "data" / "realworld"
