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
from ..findings import finding
from ..modules.inventory import FUSED_SHARDS, ModuleInfo
from .gptq import FLOAT_DTYPES, LINEAR_KINDS
from .resolver import EXCLUDED, UNLISTED, Membership, Resolution, experts_disagree, layer_override

FROM_CHECKPOINT = "modules_to_not_convert (from the checkpoint's dtypes)"


class AwqResolver:
    def __init__(self, rules: AwqRules, modules: Mapping[str, ModuleInfo]) -> None:
        self.rules = rules
        if rules.not_convert is not None:
            self.entries: tuple[str, ...] = rules.not_convert
            self.key = "modules_to_not_convert"
        else:
            self.entries = tuple(
                sorted(
                    name
                    for name, info in modules.items()
                    if all(e.dtype in FLOAT_DTYPES for e in info.operands.values())
                )
            )
            self.key = FROM_CHECKPOINT
        self.modules = modules
        self.out = Resolution()

    def run(self) -> Resolution:
        groups: dict[str, list[ModuleInfo]] = {}
        for info in self.modules.values():
            groups.setdefault(info.engine_name, []).append(info)
        for engine_name, members in groups.items():
            decided = self._group(engine_name, members[0])
            for info in members:
                self.out.memberships[info.name] = decided or self._plain(info)
            mixed = experts_disagree(engine_name, members, self.out.memberships)
            if mixed is not None:
                self.out.findings.append(mixed)
        return self.out

    def _kind(self, info: ModuleInfo) -> str:
        kind = info.layer_kind or info.kind
        if kind == "linear" and not info.layer_class and info.leaf == "lm_head":
            return "lm_head"
        return kind

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
        what = {"experts": "FusedMoE", "lm_head": "ParallelLMHead (lm_head)"}.get(
            kind, "LinearBase"
        )
        return Membership(self.rules.scheme.name, "class", what)

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
            self.out.findings.append(
                finding(
                    "fused-shards-disagree",
                    f"{engine_name}: shards "
                    f"{[s for s, f in zip(shards, found, strict=True) if f is not None]} are in "
                    f"{self.key} and "
                    f"{[s for s, f in zip(shards, found, strict=True) if f is None]} are not; "
                    f"vLLM raises: Detected some but not all shards of {engine_name} are "
                    "quantized. All shards of fused layers to have the same precision.",
                    module=engine_name,
                )
            )
        return found[0]

    def _plain(self, info: ModuleInfo) -> Membership:
        kind = self._kind(info)
        if kind in ("embedding", "lm_head"):
            return Membership(UNLISTED, "not-a-linear", info.layer_class or kind)
        return layer_override(info) or Membership(UNLISTED, "none")


def resolve_awq(rules: AwqRules, modules: Mapping[str, ModuleInfo]) -> Resolution:
    return AwqResolver(rules, modules).run()
