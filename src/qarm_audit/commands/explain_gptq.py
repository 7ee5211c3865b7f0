"""``qarm explain`` for ``quant_method: gptq`` and ``quant_method: awq`` declarations: the
resolver's own decision for the layer (:mod:`qarm_audit.resolve.gptq`,
:mod:`qarm_audit.resolve.awq`), step by step: ``dynamic``, then the module list, then the
layer's class."""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import AwqRules, GptqRules
from ..modules.inventory import ModuleInfo
from ..resolve.awq import resolve_awq
from ..resolve.gptq import resolve_gptq
from ..resolve.resolver import Membership
from .explain_fp8 import Log


def trace_gptq(
    log: Log, rules: GptqRules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    engine = info.engine_name
    decided = resolve_gptq(rules, {m.name: m for m in modules.values()}).memberships[info.name]
    if decided.how == "dynamic":
        what = "skips it" if decided.rule.startswith("-:") else f"overrides it: {decided.bucket}"
        log.hit("dynamic", engine, decided, f"'{decided.rule[2:]}' re.match-es the name and {what}")
        return
    if rules.dynamic and decided.how in ("class", "not-listed"):
        log.miss("dynamic", engine, "no pattern re.match-es the layer name")
    elif not rules.dynamic:
        log.na("dynamic", "the declaration has no dynamic rules")
    key = "modules_in_block_to_quantize"
    if decided.how == "not-listed":
        log.hit(key, engine, decided, f"no entry of {decided.rule} occurs inside the name")
        return
    if decided.how == "class":
        log.miss(key, engine, "an entry occurs inside the name: quantized")
    _layer(log, engine, decided)


def trace_awq(
    log: Log, rules: AwqRules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    engine = info.engine_name
    decided = resolve_awq(rules, {m.name: m for m in modules.values()}).memberships[info.name]
    key = "modules_to_not_convert"
    if decided.how == "substring":
        log.hit(f"{key}: substring", engine, decided, f"'{decided.rule}' occurs inside the name")
        return
    if decided.how == "class":
        log.miss(f"{key}: substring", engine, "no entry occurs inside the name")
    _layer(log, engine, decided)


def _layer(log: Log, engine: str, decided: Membership) -> None:
    if decided.how == "not-a-linear":
        detail = (
            f"{decided.rule} is no LinearBase (a head only with lm_head: true): no quant method"
        )
    else:
        detail = f"{decided.rule}: {decided.bucket}"
    log.hit("layer class", decided.rule or engine, decided, detail)
