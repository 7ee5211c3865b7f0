"""``qarm explain`` for a ``quant_method: bitsandbytes`` declaration: ``is_layer_skipped_bnb``
on the engine layer's name, then the layer's class (see :mod:`qarm_audit.resolve.bitsandbytes`)."""

from __future__ import annotations

from ..declarations import BnbRules
from ..modules.inventory import ModuleInfo
from ..resolve.bitsandbytes import LINEAR_KINDS, bnb_kind, skipped_by
from ..resolve.resolver import UNLISTED, Membership
from .explain_fp8 import Log

KEY = "llm_int8_skip_modules"


def trace_bnb(log: Log, rules: BnbRules, info: ModuleInfo) -> None:
    engine = info.engine_name
    kind = bnb_kind(info)
    scheme = rules.scheme.name
    if kind == "experts":
        log.na(KEY, "a FusedMoE layer: get_quant_method asks no skip rule for it")
        detail = f"FusedMoE: {scheme}"
        log.hit("layer class", "FusedMoE", Membership(scheme, "class", "FusedMoE"), detail)
        return
    if kind in LINEAR_KINDS:
        if not rules.skip_modules:
            log.na(KEY, f"the declaration lists no {KEY}")
        else:
            skipped = skipped_by(engine, rules.skip_modules)
            if skipped is not None:
                what = "a component of" if skipped.how == "component" else "a leading part of"
                detail = f"'{skipped.rule}' is {what} the layer name"
                log.hit(f"{KEY}: {skipped.how}", engine, skipped, detail)
                return
            log.miss(f"{KEY}: component, prefix", engine, "no entry is a part of the name")
        detail = f"LinearBase: {scheme}"
        log.hit("layer class", "LinearBase", Membership(scheme, "class", "LinearBase"), detail)
    elif kind in ("embedding", "lm_head"):
        cls = info.layer_class or kind
        detail = f"{cls} is no LinearBase: no quant method"
        log.hit("layer class", cls, Membership(UNLISTED, "not-a-linear", cls), detail)
