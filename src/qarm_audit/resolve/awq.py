"""AWQ membership (``quant_method: awq``), as vLLM's ``AutoAWQConfig.get_quant_method`` decides
it (0.30-0.33):

- a ``LinearBase`` layer (and ``ParallelLMHead`` with ``lm_head: true``) takes the scheme
  unless ``is_layer_skipped(prefix, modules_to_not_convert, match_mode="substring")`` finds an
  entry *inside* its engine name; a fused layer (``qkv_proj``) is skipped by an entry inside
  its own name, else shard by shard, all alike or vLLM's ``ValueError`` ("Detected some but not
  all shards of ... are quantized");
- a ``FusedMoE`` layer takes it unless an entry occurs inside its name;
- without ``modules_to_not_convert`` (absent or empty), ``maybe_update_config`` takes every
  module that ships only F16/BF16/F32 tensors: the checkpoint decides;
- any other layer gets no quant method.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import AwqRules
from ..layers import LayerTree
from ..modules.inventory import FUSED_SHARDS, ModuleInfo
from .packed import LINEAR_KINDS, ListResolver, by_shipped_dtypes, layer_class
from .resolver import EXCLUDED, Membership, Resolution, layer_override

FROM_CHECKPOINT = "modules_to_not_convert (from the checkpoint's dtypes)"


class AwqResolver(ListResolver):
    def __init__(self, rules: AwqRules, modules: Mapping[str, ModuleInfo]) -> None:
        super().__init__(modules)
        self.rules = rules
        if rules.not_convert is not None:
            self.entries: tuple[str, ...] = rules.not_convert
            self.key = "modules_to_not_convert"
        else:
            self.entries = by_shipped_dtypes(modules, quantized=False)
            self.key = FROM_CHECKPOINT

    def _group(self, engine_name: str, info: ModuleInfo) -> Membership | None:
        kind = self._kind(info)
        head = kind == "lm_head" and self.rules.lm_head
        if kind not in LINEAR_KINDS and kind != "experts" and not head:
            return None
        override = layer_override(info)
        if override is not None and not head:
            return override
        entry = self._skipped(engine_name, kind)
        if entry is not None:
            return Membership(EXCLUDED, "substring", entry)
        return Membership(self.rules.scheme.name, "class", layer_class(kind))

    def _inside(self, name: str) -> str | None:
        return next((e for e in self.entries if e in name), None)

    def _skipped(self, engine_name: str, kind: str) -> str | None:
        """vLLM's ``is_layer_skipped`` in substring mode: the entry that skips, or None."""
        proj = engine_name.rpartition(".")[2]
        shards = FUSED_SHARDS.get(proj) if kind != "experts" else None
        own = self._inside(engine_name)
        if own is not None or not shards:
            return own
        found = [self._inside(engine_name.replace(proj, s)) for s in shards]
        if len({f is not None for f in found}) > 1:
            self._shards_disagree(engine_name, shards, [f is not None for f in found])
        return found[0]


def resolve_awq(
    rules: AwqRules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` annotated the modules; these rules read nothing more of it."""
    return AwqResolver(rules, modules).run()
