"""What GPTQ and AWQ resolve alike: vLLM decides each engine layer once (a ``LinearBase``, the
head, a ``FusedMoE``) by a list of name substrings, shard by shard for a fused layer, and a
layer it gives no quant method stays unquantized. The lists mean opposite things (GPTQ's
names what is quantized, AWQ's what is not); each format's resolver says which."""

from __future__ import annotations

from collections.abc import Mapping

from ..findings import finding
from ..modules.inventory import ModuleInfo, engine_layers
from .resolver import UNLISTED, Membership, Resolution, experts_disagree, layer_override

LINEAR_KINDS = frozenset({"linear", "fused", "router"})
"""Layer kinds the engine builds as ``LinearBase``."""
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32"})
"""``maybe_update_config``'s ``unquant_dtypes``: a module shipping only these is not quantized."""


def by_shipped_dtypes(modules: Mapping[str, ModuleInfo], *, quantized: bool) -> tuple[str, ...]:
    """Module names, sorted, that ship a tensor of no float dtype (``quantized``) or only float
    tensors: the list vLLM takes from the checkpoint where the declaration gives none."""
    return tuple(
        sorted(
            name
            for name, info in modules.items()
            if quantized != all(e.dtype in FLOAT_DTYPES for e in info.operands.values())
        )
    )


class ListResolver:
    """One decision per engine layer (:meth:`_group`), else each module as unquantized."""

    key: str
    """Where the list came from, as findings name it."""

    def __init__(self, modules: Mapping[str, ModuleInfo]) -> None:
        self.modules = modules
        self.out = Resolution()

    def run(self) -> Resolution:
        groups = engine_layers(self.modules)
        for engine_name, members in groups.items():
            decided = self._group(engine_name, members[0])
            for info in members:
                self.out.memberships[info.name] = decided or self._plain(info)
            mixed = experts_disagree(engine_name, members, self.out.memberships)
            if mixed is not None:
                self.out.findings.append(mixed)
        return self.out

    def _group(self, engine_name: str, info: ModuleInfo) -> Membership | None:
        raise NotImplementedError

    def _kind(self, info: ModuleInfo) -> str:
        kind = info.layer_kind or info.kind
        if kind == "linear" and not info.layer_class and info.leaf == "lm_head":
            return "lm_head"
        return kind

    def _plain(self, info: ModuleInfo) -> Membership:
        kind = self._kind(info)
        if kind in ("embedding", "lm_head"):
            return Membership(UNLISTED, "not-a-linear", info.layer_class or kind)
        return layer_override(info) or Membership(UNLISTED, "none")

    def _shards_disagree(
        self, engine_name: str, shards: tuple[str, ...], inside: list[bool]
    ) -> None:
        """vLLM's ValueError for a fused layer some of whose shards the list names."""
        self.out.findings.append(
            finding(
                "fused-shards-disagree",
                f"{engine_name}: shards "
                f"{[s for s, q in zip(shards, inside, strict=True) if q]} are in "
                f"{self.key} and {[s for s, q in zip(shards, inside, strict=True) if not q]} "
                "are not; vLLM raises: Detected some but not all shards of "
                f"{engine_name} are quantized. All shards of fused layers to have the "
                "same precision.",
                module=engine_name,
            )
        )


def layer_class(kind: str) -> str:
    """The vLLM class a quantized layer of this kind is, as memberships name it."""
    return {"experts": "FusedMoE", "lm_head": "ParallelLMHead (lm_head)"}.get(kind, "LinearBase")
