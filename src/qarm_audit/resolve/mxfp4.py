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
from ..errors import PatternError
from ..findings import finding
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo
from .matchers import MAX_PATTERN_LENGTH, FirstMatch
from .packed import LINEAR_KINDS, ListResolver
from .regex_plan import looks_past_its_match
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
_WHERE = "modules_to_not_convert"


def producer_skip(name: str, entries: tuple[str, ...] | None) -> str | None:
    """The ``modules_to_not_convert`` entry for which transformers' ``should_convert_module``
    is False for ``name`` (a regex ``re.match``-ed from the start up to a module boundary, or
    a suffix), or None. transformers 5.24.0 ``quantizers/quantizers_utils.py``; an entry that
    is no valid regex matches as a suffix only (transformers itself would raise). Matched as
    every declared pattern is (``matchers.py``): by re2 where it has the exact answer, by
    Python's ``re`` only where that cannot backtrack without end, else refused by name
    (:class:`~qarm_audit.errors.PatternError`)."""
    for key in entries or ():
        if name.endswith(key) or _skips(key, name):
            return key
    return None


def _skips(key: str, name: str) -> bool:
    r"""``re.match(rf"(?:{key}){_BOUNDARY}", name)``, without running Python's ``re`` where it
    could backtrack without end. The boundary holds where the match ends before a dot or at
    the end (a pattern re2 runs: ``(?:key)(?:\.|$)``) or just after a dot: where ``key``
    looks at nothing past its match, whether it matches up to a place depends on the name up
    to there alone, so that is ``(?:key)\Z`` on the name cut after each of its dots."""
    if len(key) > MAX_PATTERN_LENGTH:
        raise PatternError(_WHERE, f"entry of {len(key)} characters is above the cap")
    whole = rf"(?:{key}){_BOUNDARY}"
    try:
        re.compile(whole)
    except (re.error, OverflowError, ValueError, RecursionError):
        return False  # no valid regex: a suffix only
    if looks_past_its_match(key):
        return FirstMatch([whole], _WHERE).first(name) is not None
    if FirstMatch([rf"(?:{key})(?:\.|$)"], _WHERE).first(name) is not None:
        return True
    cut = FirstMatch([rf"(?:{key})\Z"], _WHERE)
    dots = (place for place, char in enumerate(name) if char == ".")
    return any(cut.first(name[: place + 1]) is not None for place in dots)
