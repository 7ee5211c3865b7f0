"""From tensor names to modules: which operands each module ships, and what kind of module it is."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .operands import KV_OPERANDS, QUANT_OPERANDS, WEIGHT_NAMES, split_name
from .sources.checkpoint import TensorEntry

FUSED_SHARDS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}
"""Engine-side fused modules and the checkpoint modules they are loaded from."""

SHARD_TO_FUSED = {shard: fused for fused, shards in FUSED_SHARDS.items() for shard in shards}

_EMBEDDING = re.compile(
    r"(^|_)(embed|embeds|embedding|embeddings|wte|wpe|tok_embeddings)$|^embed_|_embed$"
)
_EXPERT = re.compile(r"^(?P<experts>.*\.experts)\.\d+\.[^.]+$")


@dataclass
class ModuleInfo:
    name: str
    operands: dict[str, TensorEntry] = field(default_factory=dict)
    kind: str = "other"
    """``linear``, ``embedding`` or ``other`` (norms, convolutions, containers)."""
    engine_name: str = ""
    """The module the engine builds for it: ``qkv_proj`` for ``q_proj``, ``experts`` for experts."""
    fused_shards: tuple[str, ...] = ()
    """For a shard of a fused module: every shard of that module present in the checkpoint."""

    @property
    def weight(self) -> TensorEntry | None:
        for name in WEIGHT_NAMES:
            if name in self.operands:
                return self.operands[name]
        return None

    @property
    def leaf(self) -> str:
        return self.name.rpartition(".")[2]


def infer_kind(module: str, operands: dict[str, TensorEntry]) -> str:
    """The module's class, as far as names and ranks tell: quantization operands imply a Linear."""
    leaf = module.rpartition(".")[2]
    if _EMBEDDING.search(leaf):
        return "embedding"
    if any(op in QUANT_OPERANDS for op in operands):
        return "linear"
    weight = operands.get("weight")
    if weight is None:
        return "other"
    rank = len(weight.shape)
    if rank == 2 or (rank == 3 and ".experts" in module):
        return "linear"
    return "other"


def build_inventory(tensors: Iterable[TensorEntry]) -> dict[str, ModuleInfo]:
    """Group tensors by module; KV scales stay attached to the module that ships them."""
    modules: dict[str, ModuleInfo] = {}
    for entry in tensors:
        module, operand = split_name(entry.name)
        info = modules.get(module)
        if info is None:
            info = modules[module] = ModuleInfo(module)
        info.operands[operand] = entry
    for info in modules.values():
        plain = {k: v for k, v in info.operands.items() if k not in KV_OPERANDS}
        info.kind = infer_kind(info.name, plain) if plain else "other"
    assign_engine_names(modules)
    return modules


def assign_engine_names(modules: dict[str, ModuleInfo]) -> None:
    """Name each module as the engine does: fused shards and routed experts share one module."""
    for info in modules.values():
        info.engine_name = info.name
        expert = _EXPERT.match(info.name)
        if expert:
            info.engine_name = expert["experts"]
            continue
        parent, _, leaf = info.name.rpartition(".")
        fused = SHARD_TO_FUSED.get(leaf)
        if fused is None:
            continue
        prefix = f"{parent}." if parent else ""
        present = tuple(f"{prefix}{s}" for s in FUSED_SHARDS[fused] if f"{prefix}{s}" in modules)
        if len(present) >= 2:
            info.engine_name = f"{prefix}{fused}"
            info.fused_shards = present
