"""``qarm explain`` for a gpt-oss ``quant_method: mxfp4`` declaration: the resolver's own
decision for the layer (:mod:`qarm_audit.resolve.mxfp4`): ``modules_to_not_convert`` (which vLLM
does not read, and transformers' quantizer does), then the layer's class."""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import Mxfp4Rules
from ..modules.inventory import ModuleInfo
from ..resolve.mxfp4 import producer_skip, resolve_mxfp4
from .explain_fp8 import Log


def trace_mxfp4(
    log: Log, rules: Mxfp4Rules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    engine = info.engine_name
    decided = resolve_mxfp4(rules, {m.name: m for m in modules.values()}).memberships[info.name]
    key = "modules_to_not_convert"
    if rules.not_convert is None:
        log.na(key, "the declaration lists no modules_to_not_convert")
    else:
        entry = producer_skip(engine, rules.not_convert)
        producer = (
            f"transformers' quantizer skips it for '{entry}'"
            if entry is not None
            else "no entry matches it in transformers' quantizer either"
        )
        log.na(key, f"vLLM's Mxfp4Config.from_config reads no key ({producer})")
    if decided.how == "class":
        log.hit("layer class", decided.rule, decided, f"{decided.rule}: {decided.bucket}")
    elif decided.how == "not-a-linear":
        detail = f"{decided.rule} is no LinearBase and no RoutedExperts: no quant method"
        log.hit("layer class", decided.rule, decided, detail)
