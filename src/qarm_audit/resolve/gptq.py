"""GPTQ membership (``quant_method: gptq``), as vLLM's ``AutoGPTQConfig.get_quant_method``
decides it (``get_linear_quant_method`` and ``get_moe_quant_method``,
``quantization/utils/gptq_utils.py``, 0.30-0.33):

- ``dynamic`` first: the first pattern (in the declaration's order) that ``re.match``-es the
  layer's engine name decides; a ``-:`` pattern skips the layer (``UnquantizedLinearMethod``),
  any other gives it the pattern's overrides (its own scheme);
- a ``LinearBase`` layer (and ``ParallelLMHead`` with ``lm_head: true``) is quantized where
  ``is_layer_gptq_quantized`` finds it in ``modules_in_block_to_quantize``: an entry *inside*
  its name (a substring), for a fused layer (``qkv_proj``) each shard's name, all alike or
  vLLM's ``ValueError`` ("Detected some but not all shards of ... are quantized"). Without the
  key, ``maybe_update_config`` takes every module that ships a tensor of no float dtype
  (F16/BF16/F32 are float): the checkpoint decides;
- a ``FusedMoE`` layer takes the scheme unless ``dynamic`` skips it
  (``modules_in_block_to_quantize`` is not asked);
- any other layer (an embedding, the head without ``lm_head``, a norm) gets no quant method.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import GptqRules
from ..layers import LayerTree
from ..modules.inventory import FUSED_SHARDS, ModuleInfo
from .matchers import FirstMatch
from .packed import LINEAR_KINDS, ListResolver, by_shipped_dtypes, layer_class
from .regex_module import regex_module_form
from .resolver import EXCLUDED, Membership, Resolution, layer_override

FROM_CHECKPOINT = "modules_in_block_to_quantize (from the checkpoint's dtypes)"


class GptqResolver(ListResolver):
    def __init__(self, rules: GptqRules, modules: Mapping[str, ModuleInfo]) -> None:
        super().__init__(modules)
        self.rules = rules
        self.dynamic = FirstMatch([regex_module_form(p) for p, _ in rules.dynamic], "dynamic")
        if rules.quantize_list is not None:
            self.listed: tuple[str, ...] = rules.quantize_list
            self.key = "modules_in_block_to_quantize"
        else:
            self.listed = by_shipped_dtypes(modules, quantized=True)
            self.key = FROM_CHECKPOINT

    def _dynamic(self, engine_name: str) -> tuple[str, str | None] | None:
        """``(pattern, scheme or None for a skip)`` of the first matching dynamic rule."""
        index = self.dynamic.first(engine_name)
        return None if index is None else self.rules.dynamic[index]

    def _group(self, engine_name: str, info: ModuleInfo) -> Membership | None:
        kind = self._kind(info)
        head = kind == "lm_head" and self.rules.lm_head
        if kind not in LINEAR_KINDS and kind != "experts" and not head:
            return None
        override = layer_override(info)
        if override is not None and not head:
            return override
        rule = self._dynamic(engine_name)
        if rule is not None and rule[1] is None:
            return Membership(EXCLUDED, "dynamic", f"-:{rule[0]}")
        if kind != "experts" and not self._listed(engine_name):
            return Membership(EXCLUDED, "not-listed", self.key)
        if rule is not None and rule[1] is not None:
            return Membership(rule[1], "dynamic", f"+:{rule[0]}")
        return Membership(self.rules.scheme.name, "class", layer_class(kind))

    def _listed(self, engine_name: str) -> bool:
        """vLLM's ``is_layer_gptq_quantized``: an entry inside the name, shard by shard."""
        proj = engine_name.rpartition(".")[2]
        shards = FUSED_SHARDS.get(proj)
        if not shards:
            return any(entry in engine_name for entry in self.listed)
        found = [any(e in engine_name.replace(proj, s) for e in self.listed) for s in shards]
        if len(set(found)) > 1:
            self._shards_disagree(engine_name, shards, found)
        return found[0]


def resolve_gptq(
    rules: GptqRules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` annotated the modules; these rules read nothing more of it."""
    return GptqResolver(rules, modules).run()
