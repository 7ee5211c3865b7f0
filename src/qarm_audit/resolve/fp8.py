"""Native ``quant_method: fp8`` membership, as vLLM's ``Fp8Config.get_quant_method`` decides it.

Every ``LinearBase`` and MoE layer the engine builds with a quant method takes the one declared
scheme unless ``is_layer_skipped`` finds it in ``ignored_layers`` (match mode ``exact``):

- a fused layer (``qkv_proj``, ``gate_up_proj``) is skipped when its own name is listed, else
  when every shard's name is; some shards but not all is vLLM's ``ValueError`` ("Detected some
  but not all shards of ... are quantized");
- a layer whose name contains ``experts`` (the MoE layer, and a shared expert's projections)
  is skipped when its name occurs *inside* an entry that contains ``experts``;
- any other layer, when its name is listed exactly.

Any other layer (an embedding, ``ParallelLMHead``, a norm) gets no quant method at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import Fp8Rules
from ..findings import finding
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo, engine_layers
from .resolver import (
    EXCLUDED,
    UNLISTED,
    Membership,
    Resolution,
    experts_disagree,
    is_fused_layer,
    layer_override,
)

QUANTIZED_KINDS = frozenset({"linear", "fused", "router", "experts"})
"""Layer kinds vLLM builds as ``LinearBase`` or ``FusedMoE``: the ones ``Fp8Config`` quantizes."""


class Fp8Resolver:
    def __init__(self, rules: Fp8Rules, modules: Mapping[str, ModuleInfo]) -> None:
        self.rules = rules
        self.modules = modules
        self.exact = frozenset(rules.ignored)
        self.experts_entries = [e for e in rules.ignored if "experts" in e]
        self.out = Resolution()

    def run(self) -> Resolution:
        groups = engine_layers(self.modules)
        for engine_name, members in groups.items():
            skipped = self._skipped(engine_name, members)
            for info in members:
                self.out.memberships[info.name] = skipped or self._layer(info)
            mixed = experts_disagree(engine_name, members, self.out.memberships)
            if mixed is not None:
                self.out.findings.append(mixed)
        return self.out

    def _skipped(self, engine_name: str, members: list[ModuleInfo]) -> Membership | None:
        """vLLM's ``is_layer_skipped`` for the layer ``engine_name``."""
        if not self.exact:
            return None
        if is_fused_layer(members):
            if engine_name in self.exact:
                return Membership(EXCLUDED, "exact", engine_name)
            listed = [m for m in members if m.name in self.exact]
            if listed and len(listed) == len(members):
                return Membership(EXCLUDED, "fused", listed[0].name)
            if listed:
                for info in listed:
                    self.out.memberships[info.name] = Membership(EXCLUDED, "exact", info.name)
                self.out.findings.append(
                    finding(
                        "fused-shards-disagree",
                        f"{engine_name}: shards {[m.leaf for m in listed]} are excluded by "
                        f"{self.rules.ignored_key} and "
                        f"{[m.leaf for m in members if m not in listed]} are not",
                        module=engine_name,
                    )
                )
            return None
        if "experts" in engine_name:
            entry = next((e for e in self.experts_entries if engine_name in e), None)
            if entry is not None:
                return Membership(EXCLUDED, "experts", entry)
            return None
        if engine_name in self.exact:
            return Membership(EXCLUDED, "exact", engine_name)
        return None

    def _layer(self, info: ModuleInfo) -> Membership:
        own = self.out.memberships.get(info.name)
        if own is not None:  # a shard listed by itself where its siblings are not
            return own
        override = layer_override(info)
        if override is not None:
            return override
        kind = info.layer_kind or info.kind
        if kind in QUANTIZED_KINDS:
            rule = "FusedMoE" if kind == "experts" else "LinearBase"
            return Membership(self.rules.scheme.name, "class", rule)
        if kind in ("embedding", "lm_head"):
            return Membership(UNLISTED, "not-a-linear", info.layer_class or kind)
        return Membership(UNLISTED, "none")


def resolve_fp8(
    rules: Fp8Rules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` annotated the modules; these rules read nothing more of it."""
    return Fp8Resolver(rules, modules).run()
