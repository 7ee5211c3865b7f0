"""``qarm explain`` for a native ``quant_method: fp8`` declaration: vLLM's ``is_layer_skipped``
stages, then the layer's class (see :mod:`qarm_audit.resolve.fp8`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..declarations import Fp8Rules
from ..modules.inventory import ModuleInfo
from ..resolve.fp8 import QUANTIZED_KINDS
from ..resolve.resolver import EXCLUDED, UNLISTED, Membership


class Log(Protocol):
    def hit(self, step: str, tried: str, membership: Membership, detail: str) -> None: ...
    def miss(self, step: str, tried: str, detail: str = ...) -> None: ...
    def na(self, step: str, detail: str) -> None: ...
    def split(self, step: str, tried: str, detail: str) -> None: ...


def trace_fp8(
    log: Log, rules: Fp8Rules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    engine = info.engine_name
    members = [m for m in modules.values() if m.engine_name == engine]
    key = rules.ignored_key
    if not rules.ignored:
        log.na(key, f"the declaration lists no {key} (nor modules_to_not_convert)")
    elif len(members) > 1 and members[0].fused_shards:
        listed = [m for m in members if m.name in rules.ignored]
        if engine in rules.ignored:
            log.hit(f"{key}: fused name", engine, Membership(EXCLUDED, "exact", engine), "listed")
        elif listed and len(listed) == len(members):
            log.hit(
                f"{key}: every shard",
                engine,
                Membership(EXCLUDED, "fused", listed[0].name),
                f"all {len(members)} shards listed",
            )
        elif listed:
            log.split(
                f"{key}: shards",
                engine,
                f"{[m.leaf for m in listed]} listed, "
                f"{[m.leaf for m in members if m not in listed]} not: vLLM raises",
            )
            if info in listed:
                log.hit(f"{key}: exact", info.name, Membership(EXCLUDED, "exact", info.name), "")
        else:
            log.miss(f"{key}: fused name and shards", engine)
    elif "experts" in engine:
        entry = next((e for e in rules.ignored if "experts" in e and engine in e), None)
        if entry is not None:
            detail = f"{engine} occurs inside the entry '{entry}'"
            log.hit(f"{key}: experts", engine, Membership(EXCLUDED, "experts", entry), detail)
        else:
            log.miss(f"{key}: experts", engine, "inside no entry that contains 'experts'")
    elif engine in rules.ignored:
        log.hit(f"{key}: exact", engine, Membership(EXCLUDED, "exact", engine), "listed")
    else:
        log.miss(f"{key}: exact", engine)
    kind = info.layer_kind or info.kind
    if kind in QUANTIZED_KINDS:
        rule = "FusedMoE" if kind == "experts" else "LinearBase"
        scheme = rules.scheme.name
        log.hit("layer class", rule, Membership(scheme, "class", rule), f"{rule}: {scheme}")
    elif kind in ("embedding", "lm_head"):
        cls = info.layer_class or kind
        detail = f"{cls} is no LinearBase: no quant method"
        log.hit("layer class", cls, Membership(UNLISTED, "not-a-linear", cls), detail)
