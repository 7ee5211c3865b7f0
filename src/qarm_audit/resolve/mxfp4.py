"""gpt-oss MXFP4 membership (``quant_method: mxfp4``), as vLLM's ``Mxfp4Config.get_quant_method``
decides it (0.30-0.33, ``vllm-project/vllm vllm/model_executor/layers/quantization/mxfp4.py``):

- a routed-experts layer (``RoutedExperts``, the module ``model.layers.N.mlp.experts``) takes
  the MXFP4 scheme (``GptOssMxfp4MoEMethod``, or ``Mxfp4MoEMethod`` for another model type);
- every ``LinearBase`` (q/k/v as ``qkv_proj``, ``o_proj``, a router) gets
  ``UnquantizedLinearMethod``: "MXFP4 linear layer is not implemented";
- any other layer (attention, embedding, ``ParallelLMHead``, norms) gets no quant method.

``modules_to_not_convert`` decides nothing: ``from_config`` reads no key. What transformers'
quantizer does with it (:func:`producer_skip`) is only the producer's side, for the findings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..declarations import Mxfp4Rules
from ..findings import finding
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo
from .packed import LINEAR_KINDS, ListResolver
from .resolver import UNLISTED, Membership, Resolution, layer_override

UNQUANTIZED_LINEAR = "LinearBase (UnquantizedLinearMethod)"
EXPERTS = "RoutedExperts"


class Mxfp4Resolver(ListResolver):
    key = "modules_to_not_convert"

    def __init__(self, rules: Mxfp4Rules, modules: Mapping[str, ModuleInfo]) -> None:
        super().__init__(modules)
        self.rules = rules

    def _group(self, engine_name: str, info: ModuleInfo) -> Membership | None:
        kind = self._kind(info)
        if kind == "experts":
            entry = producer_skip(engine_name, self.rules.not_convert)
            if entry is not None:
                self.out.findings.append(
                    finding(
                        "producer-engine-disagree",
                        f"{engine_name}: transformers' MXFP4 quantizer skips it for "
                        f"modules_to_not_convert entry {entry!r} (should_convert_module), but "
                        "vLLM's Mxfp4Config.from_config reads no key and builds every routed-"
                        "experts layer MXFP4",
                        module=engine_name,
                    )
                )
            return layer_override(info) or Membership(self.rules.scheme.name, "class", EXPERTS)
        if kind in LINEAR_KINDS:
            return layer_override(info) or Membership(UNLISTED, "class", UNQUANTIZED_LINEAR)
        return None


def resolve_mxfp4(
    rules: Mxfp4Rules, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """``tree`` annotated the modules; these rules read nothing more of it."""
    return Mxfp4Resolver(rules, modules).run()


_BOUNDARY = r"(?:(?<=\.)|(?=\.|$))"


def producer_skip(name: str, entries: tuple[str, ...] | None) -> str | None:
    """The ``modules_to_not_convert`` entry for which transformers' ``should_convert_module``
    is False for ``name`` (a regex ``re.match``-ed from the start up to a module boundary, or
    a suffix), or None. transformers 5.24.0 ``quantizers/quantizers_utils.py``; an entry that
    is no valid regex matches as a suffix only (transformers itself would raise)."""
    for key in entries or ():
        if name.endswith(key):
            return key
        try:
            if re.match(rf"(?:{key}){_BOUNDARY}", name):
                return key
        except re.error:
            continue
    return None
