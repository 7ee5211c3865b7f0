"""Which resolver decides each declaration format: one entry per format's rules.

A format plugs in with its rules (:mod:`qarm_audit.declarations.rules`) and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..declarations import (
    AwqRules,
    BnbRules,
    CompressedTensorsRules,
    Declaration,
    Fp8Rules,
    GptqRules,
    ModelOptRules,
    Mxfp4Rules,
)
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo
from .awq import resolve_awq
from .bitsandbytes import resolve_bnb
from .compressed_tensors import resolve_compressed_tensors
from .fp8 import resolve_fp8
from .gptq import resolve_gptq
from .mxfp4 import resolve_mxfp4
from .resolver import (
    UNLISTED,
    Membership,
    Resolution,
    resolve_modelopt,
)

FormatResolver = Callable[[Any, Mapping[str, ModuleInfo], LayerTree | None], Resolution]

RESOLVERS: dict[type, FormatResolver] = {
    ModelOptRules: resolve_modelopt,
    CompressedTensorsRules: resolve_compressed_tensors,
    Fp8Rules: resolve_fp8,
    BnbRules: resolve_bnb,
    GptqRules: resolve_gptq,
    AwqRules: resolve_awq,
    Mxfp4Rules: resolve_mxfp4,
}


def resolve(
    declaration: Declaration, modules: Mapping[str, ModuleInfo], tree: LayerTree | None = None
) -> Resolution:
    """Every module's membership under the declaration's rules; ``tree`` is the layer tree the
    modules were annotated with (None: the generic one). No rules: every module unlisted."""
    rules = declaration.rules
    if rules is None:
        return Resolution(dict.fromkeys(modules, Membership(UNLISTED, "none")))
    return RESOLVERS[type(rules)](rules, modules, tree)
