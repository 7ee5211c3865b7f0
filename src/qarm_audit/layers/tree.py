"""Build the engine's layer tree over the checkpoint's modules.

Each module is told the engine layer it is loaded into: its name (``qkv_proj`` for
``q_proj``, ``experts`` for an expert), the fused shards present, the engine's class and
kind, and whether the layer is built with a quant config at all. With no facts for the
architecture (or none for the engine), generic rules are used and :class:`LayerTree` says so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from operator import attrgetter

from ..modules.inventory import ModuleInfo
from .facts import ArchitectureFacts, EngineFacts, LayerFact, Packing, Rename
from .model_config import ModelConfig

_NORM = re.compile(r"(^|_)(norm|layernorm|ln|ln_f|ln_\d+|rmsnorm)($|_)|norm$")

GENERIC = "generic"


@dataclass(frozen=True)
class LayerTree:
    """Which facts built the tree, for the report and ``qarm explain``."""

    architecture: str
    facts: str
    """``vllm 0.33.0`` or ``generic``."""
    modelled: bool
    cite: str = ""
    has_mapper: bool = False
    """The model class maps checkpoint names (``hf_to_vllm_mapper``): vLLM then also splits
    ModelOpt ``X*`` excludes into ``X`` and ``X.*``."""
    note: str = ""
    rename: Rename | None = None
    """The model's renames, where it has any: what the engine calls a checkpoint layer."""
    pattern_module: str = "re"
    """The module the engine compiles ``re:`` targets with (``regex``: vLLM), whether or not
    the architecture is modelled."""

    def engine_path(self, name: str) -> str:
        """The engine's own name for a checkpoint layer (``model.language_model.layers.0...``
        is ``language_model.model.layers.0...`` in vLLM's Qwen3.5), which the engine matches
        ``re:`` targets and its own mapped entries against."""
        return self.rename.module(name) if self.rename else name


def engine_rename(config: ModelConfig, facts: EngineFacts | None) -> Rename | None:
    """The renames :func:`build_tree` gives the tree: known before the modules are."""
    arch = facts.architectures.get(config.architecture) if facts is not None else None
    return (arch.rename or None) if arch is not None else None


def build_tree(
    modules: Mapping[str, ModuleInfo], config: ModelConfig, facts: EngineFacts | None
) -> LayerTree:
    arch = facts.architectures.get(config.architecture) if facts is not None else None
    if facts is None or arch is None:
        _generic(modules)
        if facts is None:
            return LayerTree(config.architecture, GENERIC, False, has_mapper=True)
        return LayerTree(
            config.architecture,
            GENERIC,
            False,
            has_mapper=True,
            pattern_module=facts.pattern_module,
            note=f"{config.architecture} is not modelled for {facts.label}: generic layer rules "
            "were used (q/k/v and gate/up fused, a MoE router and a shared expert's gate without "
            "the quant config, every other 2-D weight a Linear with it)"
            if config.architecture
            else "",
        )
    _modelled(modules, config, arch, facts)
    return LayerTree(
        config.architecture,
        facts.label,
        True,
        cite=arch.cite,
        has_mapper=arch.has_mapper,
        rename=engine_rename(config, facts),
        pattern_module=facts.pattern_module,
    )


def _generic(modules: Mapping[str, ModuleInfo]) -> None:
    """The rules used where no architecture is modelled: the inventory's fusing and names."""
    routers = _routers(modules)
    for info in modules.values():
        if info.engine_name.endswith(".experts"):
            info.layer_kind = "experts"
        elif info.fused_shards:
            info.layer_kind = "fused"
        elif info.name in routers:
            # engines build a MoE router without a quant config (ReplicatedLinear(...,
            # quant_config=None), or DeepSeek's MoEGate: a bare weight parameter)
            info.layer_kind, info.quant_config = "router", False
        elif info.leaf == "shared_expert_gate" and info.kind == "linear":
            # the shared expert's gate too (Qwen2-MoE, Qwen3-Next, Qwen3.5): a ReplicatedLinear
            # with quant_config=None in vLLM and SGLang, or a torch.nn.Linear in SGLang
            info.layer_kind, info.quant_config = "linear", False
            info.layer_class = "ReplicatedLinear"
        elif info.leaf == "lm_head":
            # both engines build it as ParallelLMHead, a vocabulary embedding, not a LinearBase
            info.layer_kind, info.layer_class = "lm_head", "ParallelLMHead"
        else:
            info.layer_kind = _shape_kind(info)


def _routers(modules: Mapping[str, ModuleInfo]) -> set[str]:
    """``X.gate`` / ``X.router`` beside routed experts ``X.experts.N...``: a MoE router."""
    # over the distinct engine names: a MoE layer's experts share one
    parents = {
        name[: -len(".experts")]
        for name in set(map(_ENGINE_NAME, modules.values()))
        if name.endswith(".experts")
    }
    return {f"{p}.{leaf}" for p in parents for leaf in ("gate", "router")} & modules.keys()


_ENGINE_NAME = attrgetter("engine_name")


def _shape_kind(info: ModuleInfo) -> str:
    """The inventory's kind, except that a name saying "embedding" on a weight that is not a
    2-D table is a convolution (``patch_embedding``) or a container (``embeddings``)."""
    if info.kind != "embedding":
        return info.kind
    weight = info.weight
    if weight is None:
        return "other"
    if len(weight.shape) >= 3:
        return "conv"
    return "embedding" if len(weight.shape) == 2 else "other"


def _modelled(
    modules: Mapping[str, ModuleInfo],
    config: ModelConfig,
    arch: ArchitectureFacts,
    facts: EngineFacts,
) -> None:
    own = _fusing(arch.packings, arch, config)
    nested = [(scope, _fusing(scope.packings, arch, config)) for scope in arch.nested]
    kinds: dict[tuple[str, str, bool, bool, str], tuple[str, str, bool]] = {}
    for info in modules.values():
        info.engine_name, info.fused_shards = info.experts or info.name, ()
    routers = _routers(modules)
    # per engine layer, not per module: a MoE layer's experts share one path
    paths: dict[str, tuple[str, str]] = {}
    for info in modules.values():
        parent, _, leaf = info.name.rpartition(".")
        if info.engine_name.endswith(".experts") and info.engine_name != info.name:
            leaf_for_class = "experts"
        else:
            leaf_for_class = ""
            prefix = f"{parent}." if parent else ""
            fused_shards, shard_to_fused = own
            if nested:
                # a nested model's layers are built while the quant config holds its mapping
                path = arch.rename.module(info.name) if arch.rename else info.name
                fused_shards, shard_to_fused = next(
                    (tables for scope, tables in nested if scope.holds(path)), own
                )
            for fused in shard_to_fused.get(leaf, ()):
                present = tuple(
                    f"{prefix}{s}" for s in fused_shards[fused] if f"{prefix}{s}" in modules
                )
                if len(present) >= 2:
                    info.engine_name = f"{prefix}{fused}"
                    info.fused_shards = present
                    leaf_for_class = fused
                    break
        router = info.name in routers
        known = paths.get(info.engine_name)
        if known is None:
            renamed = arch.rename.module(info.engine_name) if arch.rename else info.engine_name
            known = paths[info.engine_name] = (renamed, _shape_path(renamed))
        engine_path, shape = known
        # the engine's own leaf (DeepSeek-V4's shared_experts.w2 is down_proj, head lm_head)
        leaf_for_class = leaf_for_class or engine_path.rpartition(".")[2]
        key = (leaf_for_class, info.kind, bool(info.fused_shards), router, shape)
        decided = kinds.get(key)
        if decided is None:
            decided = kinds[key] = _classify(leaf_for_class, info, arch, facts, router, engine_path)
        info.layer_kind, info.layer_class, info.quant_config = decided


_Fusing = tuple[dict[str, tuple[str, ...]], dict[str, list[str]]]


def _fusing(packings: tuple[Packing, ...], arch: ArchitectureFacts, config: ModelConfig) -> _Fusing:
    """fused layer -> its shards, and shard -> the fused layers that name it."""
    shard_to_fused: dict[str, list[str]] = {}
    fused_shards: dict[str, tuple[str, ...]] = {}
    for packing in (*packings, *_unquantized_loads(arch)):
        if packing.config and config.get(packing.config) is None:
            continue
        if packing.fused in fused_shards:
            continue
        fused_shards[packing.fused] = packing.shards
        for shard in packing.shards:
            # a shard may belong to several fused layers (DeepSeek-V4's wkv: fused_wqa_wkv in
            # the attention, fused_wkv_wgate in its compressor): the one whose shards are there
            shard_to_fused.setdefault(shard, []).append(packing.fused)
    return fused_shards, shard_to_fused


def _unquantized_loads(arch: ArchitectureFacts) -> tuple[Packing, ...]:
    """The layers ``load_weights`` fuses that the packed mapping does not name, where the
    model builds them without a quant config: whatever the declaration says of their shards,
    they take no quant method (DeepSeek-V3.2 and GLM-5's indexer ``wk_weights_proj``)."""
    return tuple(
        p
        for p in arch.load_fused
        if arch.layers.get(p.fused) and all(v.quant_config == "none" for v in arch.layers[p.fused])
    )


_INDEX = re.compile(r"\.\d+(?=\.|$)")


def _shape_path(path: str) -> str:
    """Layer indices as ``*``: equal for every layer of a stack (the memo key)."""
    return _INDEX.sub(".*", path)


def _classify(
    leaf: str,
    info: ModuleInfo,
    arch: ArchitectureFacts,
    facts: EngineFacts,
    router: bool,
    engine_path: str,
) -> tuple[str, str, bool]:
    """(kind, class, built with a quant config) for one leaf of this architecture."""
    variants = arch.layers.get(leaf, ())
    # the variants built at this place of the tree, where the facts say where
    placed = tuple(v for v in variants if any(fnmatchcase(engine_path, p) for p in v.paths))
    fact = _one(placed or variants)
    if leaf == "experts":
        cls = fact.cls if fact else "FusedMoE"
        return "experts", cls, fact is None or fact.quant_config != "none"
    if info.fused_shards:
        cls = fact.cls if fact else "MergedColumnParallelLinear"
        return "fused", cls, fact is None or fact.quant_config != "none"
    if fact is not None:
        kind = "router" if router else _kind_of_class(fact.cls, leaf, info, facts)
        return kind, fact.cls, fact.quant_config != "none"
    # No fact for this leaf: name and rank decide, as the generic rules do.
    if router:
        return "router", "", True
    if leaf == "lm_head":
        return "lm_head", "ParallelLMHead", True
    shape_kind = _shape_kind(info)
    if shape_kind == "embedding":
        return "embedding", "VocabParallelEmbedding", True
    if shape_kind == "conv":
        return "conv", "", True
    if _NORM.search(leaf):
        return "norm", "RMSNorm", True
    if info.kind == "linear":
        return "linear", "", True
    weight = info.weight
    if weight is not None and len(weight.shape) >= 3:
        return "conv", "", True
    return "other", "", True


def _one(variants: tuple[LayerFact, ...]) -> LayerFact | None:
    """The fact when every variant agrees on what matters (quantized or not), else the first
    variant that keeps the quant config (the engine builds it in the common configuration)."""
    if not variants:
        return None
    if len({v.quant_config == "none" for v in variants}) == 1:
        return variants[0]
    return next(v for v in variants if v.quant_config != "none")


def _kind_of_class(cls: str, leaf: str, info: ModuleInfo, facts: EngineFacts) -> str:
    low = cls.lower()
    if "lmhead" in low:
        return "lm_head"
    if "embedding" in low:
        return "embedding"
    if "norm" in low:
        return "norm"
    if "conv" in low:
        return "conv"
    if "moe" in low:
        return "experts"
    if facts.is_linear(cls) or low.endswith("linear"):
        return "linear"
    return "other" if info.kind != "linear" else "linear"


def mark_transforms(modules: Mapping[str, ModuleInfo], leaves: frozenset[str]) -> None:
    """A compressed-tensors transform saved as ``<layer>.<scheme>_<location>.weight`` is no
    layer: the engine loads it into a submodule of the layer it rotates (vLLM's
    ``HadamardTransform``, registered as ``<scheme>_<location>``), never with a quant method."""
    if not leaves:
        return
    for info in modules.values():
        if info.leaf in leaves and info.operands.keys() == {"weight"}:
            info.layer_kind = "transform"
