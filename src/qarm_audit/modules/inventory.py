"""From tensor names to modules: which operands each module ships, and what kind of module it is."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from operator import itemgetter

from ..errors import IntegrityError
from ..sources.checkpoint import ShardHeader, TensorEntry
from .operands import BNB_MODULE_TAILS, BNB_SUFFIXES, KV_OPERANDS, QUANT_OPERANDS, WEIGHT_NAMES

FUSED_SHARDS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}
"""Engine-side fused modules and the checkpoint modules they are loaded from."""

SHARD_TO_FUSED = {shard: fused for fused, shards in FUSED_SHARDS.items() for shard in shards}

_EMBEDDING = re.compile(
    r"(^|_)(embed|embeds|embedding|embeddings|wte|wpe|tok_embeddings)$|^embed_|_embed$"
)


def experts_layer(name: str) -> str | None:
    r"""``X.experts`` for a module ``X.experts.<digits>.<leaf>``: what
    ``^(?P<experts>.*\.experts)\.\d+\.[^.]+$`` takes from the name, by string operations
    rather than a regex per module (``\d`` is a decimal digit of any script, as
    ``str.isdecimal`` says; ``.`` crosses no line break). It depends on the name only through
    its parent (:func:`experts_of_parent`) and whether its leaf is empty."""
    if ".experts." not in name:
        return None
    parent, _, leaf = name.rpartition(".")
    return experts_of_parent(parent) if leaf else None


def experts_layers(names: Iterable[str]) -> list[str]:
    """:func:`experts_layer` of each name, ``""`` for None, worked out once per parent (an
    expert's projections share one)."""
    by_parent: dict[str, str] = {}
    out = []
    for name in names:
        parent, _, leaf = name.rpartition(".")
        experts = by_parent.get(parent)
        if experts is None:
            experts = by_parent[parent] = experts_of_parent(parent) or ""
        out.append(experts if leaf else "")
    return out


def experts_of_parent(parent: str) -> str | None:
    """``X.experts`` for the parent ``X.experts.<digits>`` of a module, else None."""
    experts, _, number = parent.rpartition(".")
    if number.isdecimal() and experts.endswith(".experts") and "\n" not in experts:
        return experts
    return None


@dataclass(slots=True)
class ModuleInfo:
    name: str
    operands: dict[str, TensorEntry] = field(default_factory=dict)
    kind: str = "other"
    """``linear``, ``embedding`` or ``other`` (norms, convolutions, containers)."""
    engine_name: str = ""
    """The module the engine builds for it: ``qkv_proj`` for ``q_proj``, ``experts`` for experts."""
    experts: str = ""
    """``X.experts`` for a routed expert ``X.experts.<n>.<leaf>`` (:func:`experts_layer` of its
    name), else ``""``; set with the engine name, so the layer tree need not split every name
    again."""
    fused_shards: tuple[str, ...] = ()
    """For a shard of a fused module: every shard of that module present in the checkpoint."""
    layer_kind: str = ""
    """The engine layer's kind (``linear``, ``fused``, ``lm_head``, ``router``, ``norm``,
    ``embedding``, ``conv``, ``experts``, ``other``); set by the layer tree."""
    layer_class: str = ""
    """The engine's class for the layer (``QKVParallelLinear``), or ``""`` where not known."""
    quant_config: bool = True
    """False for a layer the engine builds without a quant config: never quantized."""
    layout: int = 0
    """Equal, and above 0, for modules alike but for their names: the same (operand, dtype,
    shape) in the same order (a MoE's experts), so every later pass can decide once per layout.
    A number rather than the tuple, because a tuple's hash is computed again on every lookup.
    0 for a module built outside :func:`build_inventory`; :func:`layout_key` covers both."""

    @property
    def weight(self) -> TensorEntry | None:
        for name in WEIGHT_NAMES:
            if name in self.operands:
                return self.operands[name]
        return None

    @property
    def leaf(self) -> str:
        return self.name.rpartition(".")[2]


@cache
def _is_embedding(leaf: str) -> bool:
    return _EMBEDDING.search(leaf) is not None


def infer_kind(module: str, operands: dict[str, TensorEntry]) -> str:
    """The module's class, as far as names and ranks tell: quantization operands imply a Linear."""
    if _is_embedding(module.rpartition(".")[2]):
        return "embedding"
    if not QUANT_OPERANDS.keys().isdisjoint(operands):
        return "linear"
    weight = operands.get("weight")
    if weight is None:
        return "other"
    rank = len(weight.shape)
    if rank == 2 or (rank == 3 and ".experts" in module):
        return "linear"
    return "other"


Layout = tuple[tuple[str, ...], tuple[tuple[str, tuple[int, ...]], ...]]


def layout_of(operands: dict[str, TensorEntry]) -> Layout:
    """Operand names in shipped order, and each one's (dtype, shape); built in C."""
    return tuple(operands), tuple(map(_DTYPE_SHAPE, operands.values()))


_DTYPE_SHAPE = itemgetter(1, 2)


def layout_key(info: ModuleInfo) -> object:
    """A key equal for modules alike but for their names: the layout number, or the layout."""
    return info.layout or layout_of(info.operands)


def build_inventory(tensors: Iterable[TensorEntry]) -> dict[str, ModuleInfo]:
    """Group tensors by module; KV scales stay attached to the module that ships them."""
    entries = list(tensors)
    # a name that splits as another does is found (and named) by the slower loop
    table: dict[str, dict[str, TensorEntry]] = defaultdict(dict)
    # one string per distinct operand name, not one per tensor (see header.py's dtypes)
    spelled: dict[str, str] = {}
    for entry in entries:
        module, _, operand = entry[0].rpartition(".")
        table[module][spelled.setdefault(operand, operand)] = entry
    if sum(map(len, table.values())) != len(entries):
        table = _table_naming_the_clash(entries)
    # a module is joined only when all its operands are bitsandbytes' parts: with none of
    # those among the operand names, no module name need be looked at
    joinable = not _BNB_PARTS.isdisjoint(spelled)
    dotted = [module for module in table if module.endswith(BNB_MODULE_TAILS)] if joinable else []
    if dotted:
        _join_dotted_operands(table, dotted)
    modules = _module_infos(table, {}, {})
    assign_engine_names(modules)
    return modules


def _module_infos(
    table: Mapping[str, dict[str, TensorEntry]],
    layouts: dict[tuple[object, ...], int],
    kinds: dict[tuple[int, str, bool], str],
) -> dict[str, ModuleInfo]:
    """Each module of ``table`` with its layout and kind, numbering layouts on from those in
    ``layouts`` and taking kinds known in ``kinds`` (both added to)."""
    modules: dict[str, ModuleInfo] = {}
    for module, operands in table.items():
        # flat: one tuple to build and hash per module (operand names, then (dtype, shape)s)
        flat = (*operands, *map(_DTYPE_SHAPE, operands.values()))
        layout = layouts.get(flat)
        if layout is None:
            layout = layouts[flat] = len(layouts) + 1
        # a module's kind depends on its name only through its leaf and ".experts"
        key = (layout, module.rpartition(".")[2], ".experts" in module)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = _kind(module, operands)
        modules[module] = ModuleInfo(module, operands, kind, layout=layout)
    return modules


class ShardInventory:
    """:func:`build_inventory` worked out shard by shard, as each header arrives (in any
    order), then joined in the checkpoint's order of shards: the per-tensor work is done while
    later headers are still being read.

    :meth:`inventory` gives what :func:`build_inventory` gives for the same shards' tensors,
    but for the numbers of the layouts (equal for modules alike, as there), or None where it
    cannot be joined so and :func:`build_inventory` is to be run: a shard it was not given, two
    names that split alike (that function names the clash), bitsandbytes' parts (joined
    across modules there). A module whose tensors lie in several shards is joined. Taken once:
    the modules it gives are the audit's to change."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[object, ...], int] = {}
        self._kinds: dict[tuple[int, str, bool], str] = {}
        self._spelled: dict[str, str] = {}
        # by the shard's identity (the checkpoint holds the very headers given here), each held
        # with its part, so that no other object takes its id meanwhile
        self._parts: dict[int, tuple[ShardHeader, dict[str, ModuleInfo] | None]] = {}
        self._taken = False

    def add(self, shard: ShardHeader) -> None:
        table: dict[str, dict[str, TensorEntry]] = defaultdict(dict)
        spelled = self._spelled
        for entry in shard.tensors:
            module, _, operand = entry[0].rpartition(".")
            table[module][spelled.setdefault(operand, operand)] = entry
        split_alike = sum(map(len, table.values())) != len(shard.tensors)
        infos = None if split_alike else _module_infos(table, self._layouts, self._kinds)
        if infos is not None:
            _name_experts(infos)
        self._parts[id(shard)] = (shard, infos)

    def inventory(self, shards: Sequence[ShardHeader]) -> dict[str, ModuleInfo] | None:
        """The modules of ``shards`` (in this order), or None (see the class)."""
        if self._taken or not _BNB_PARTS.isdisjoint(self._spelled):
            return None
        self._taken = True
        modules: dict[str, ModuleInfo] = {}
        for shard in shards:
            _, infos = self._parts.get(id(shard), (shard, None))
            if infos is None:
                return None
            across = modules.keys() & infos.keys()
            joined: dict[str, ModuleInfo] = {}
            for name in across:
                before, after = modules[name].operands, infos[name].operands
                operands = {**before, **after}
                if len(operands) != len(before) + len(after):
                    return None  # one name twice, or two that split alike
                joined.update(_module_infos({name: operands}, self._layouts, self._kinds))
            _name_experts(joined)
            # a module met before keeps its place, as it does in build_inventory
            modules.update(infos)
            modules.update(joined)
        _name_fused(modules)
        return modules


def _table_naming_the_clash(entries: list[TensorEntry]) -> dict[str, dict[str, TensorEntry]]:
    table: dict[str, dict[str, TensorEntry]] = {}
    for entry in entries:
        module, _, operand = entry.name.rpartition(".")
        operands = table.get(module)
        if operands is None:
            operands = table[module] = {}
        elif operand in operands:
            # distinct names can split alike ("a" and ".a"); losing one would go unaudited
            raise IntegrityError(
                entry.name,
                f"splits into module {module!r} and operand {operand!r}, as "
                f"{operands[operand].name!r} does; the two cannot be told apart",
            )
        operands[operand] = entry
    return table


def _join_dotted_operands(table: dict[str, dict[str, TensorEntry]], dotted: list[str]) -> None:
    """``<m>.weight`` holding only bitsandbytes' ``absmax``, ``quant_map`` ... (and
    ``<m>.weight.quant_state`` its ``bitsandbytes__nf4``) is no module: its tensors are
    operands ``weight.absmax`` ... of ``<m>``. A ``.weight`` module holding anything else is
    left as it is."""
    for module in dotted:
        tail = "weight.quant_state" if module.endswith(".weight.quant_state") else "weight"
        operands = table[module]
        if not operands.keys() <= BNB_SUFFIXES[tail]:
            continue
        parent = table.setdefault(module[: -len(tail) - 1], {})
        for operand, entry in operands.items():
            parent[f"{tail}.{operand}"] = entry
        del table[module]


_BNB_PARTS = frozenset().union(*BNB_SUFFIXES.values())


def _kind(module: str, operands: dict[str, TensorEntry]) -> str:
    if KV_OPERANDS.isdisjoint(operands):
        return infer_kind(module, operands)
    plain = {k: v for k, v in operands.items() if k not in KV_OPERANDS}
    return infer_kind(module, plain) if plain else "other"


def engine_layers(modules: Mapping[str, ModuleInfo]) -> dict[str, list[ModuleInfo]]:
    """The modules of each engine layer (a fused layer's shards, an experts layer's experts),
    in inventory order."""
    layers: dict[str, list[ModuleInfo]] = {}
    for info in modules.values():
        layers.setdefault(info.engine_name, []).append(info)
    return layers


def assign_engine_names(modules: dict[str, ModuleInfo]) -> None:
    """Name each module as the engine does: fused shards and routed experts share one module."""
    _name_experts(modules)
    _name_fused(modules)


def _name_experts(modules: Mapping[str, ModuleInfo]) -> None:
    """A routed expert is named by its experts layer, any other module by its own name: what
    the name alone tells (so a shard's modules are named as the shard is read)."""
    for info, experts in zip(modules.values(), experts_layers(modules), strict=True):
        info.experts = experts
        info.engine_name = experts or info.name


def _name_fused(modules: Mapping[str, ModuleInfo]) -> None:
    """The shards of a fused module present (two at least) named by the fused module."""
    for info in modules.values():
        if info.experts:
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
