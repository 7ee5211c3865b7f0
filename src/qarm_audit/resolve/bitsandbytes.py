"""bitsandbytes membership (``quant_method: bitsandbytes``), as SGLang's
``BitsAndBytesConfig.get_quant_method`` decides it (vLLM 0.30-0.33 have no bitsandbytes method).

- a ``LinearBase`` layer (a linear, a fused ``qkv_proj`` / ``gate_up_proj``, a router built
  with the quant config) takes the one declared scheme unless ``is_layer_skipped_bnb`` finds
  its name in ``llm_int8_skip_modules``: an entry equal to one dot-separated component of the
  layer's name (``down_proj`` skips ``model.layers.0.mlp.down_proj``), or to a leading run of
  components (``model.layers.0`` skips every layer under it). The name is the engine's: a fused
  layer is ``qkv_proj``, so ``q_proj`` alone skips nothing;
- a ``FusedMoE`` layer always takes it: that branch asks no skip rule;
- any other layer (an embedding, ``ParallelLMHead``, a norm) gets no quant method.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import BnbRules
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo, engine_layers
from .resolver import EXCLUDED, UNLISTED, Membership, Resolution, experts_disagree, layer_override

LINEAR_KINDS = frozenset({"linear", "fused", "router"})
"""Layer kinds the engine builds as ``LinearBase``."""


def skipped_by(name: str, skip_modules: tuple[str, ...]) -> Membership | None:
    """``is_layer_skipped_bnb(prefix, llm_int8_skip_modules)`` for the layer ``name``: the
    entry that skips it and how, or None."""
    if not skip_modules:
        return None
    components = name.split(".")
    entry = next((e for e in skip_modules if e in components), None)
    if entry is not None:
        return Membership(EXCLUDED, "component", entry)
    prefixes = {".".join(components[: i + 1]) for i in range(len(components))}
    entry = next((e for e in skip_modules if e in prefixes), None)
    if entry is not None:
        return Membership(EXCLUDED, "prefix", entry)
    return None


def resolve_bnb(
    rules: BnbRules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` annotated the modules; these rules read nothing more of it."""
    out = Resolution()
    groups = engine_layers(modules)
    scheme = rules.scheme.name
    for engine_name, members in groups.items():
        for info in members:
            out.memberships[info.name] = _layer(info, engine_name, rules, scheme)
        mixed = experts_disagree(engine_name, members, out.memberships)
        if mixed is not None:
            out.findings.append(mixed)
    return out


def bnb_kind(info: ModuleInfo) -> str:
    """The layer's kind as the engine sees it; with no layer tree a head is still
    ``ParallelLMHead``, no ``LinearBase``."""
    kind = info.layer_kind or info.kind
    if kind == "linear" and not info.layer_class and info.leaf == "lm_head":
        return "lm_head"
    return kind


def _layer(info: ModuleInfo, engine_name: str, rules: BnbRules, scheme: str) -> Membership:
    kind = bnb_kind(info)
    skipped = skipped_by(engine_name, rules.skip_modules) if kind in LINEAR_KINDS else None
    if skipped is not None:
        return skipped
    override = layer_override(info)
    if override is not None:
        return override
    if kind == "experts":
        return Membership(scheme, "class", "FusedMoE")
    if kind in LINEAR_KINDS:
        return Membership(scheme, "class", "LinearBase")
    if kind in ("embedding", "lm_head"):
        return Membership(UNLISTED, "not-a-linear", info.layer_class or kind)
    return Membership(UNLISTED, "none")
