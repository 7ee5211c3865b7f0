"""How the engine builds and loads layers where the layer rules alone say otherwise: the
profile's ``unquantized_layers`` (built without a quant config in these models, where the engine
has no layer facts) and ``dequantized_on_load`` (an FP8 weight the loader dequantizes into a
layer built without one)."""

from __future__ import annotations

from collections.abc import Mapping

from ..findings import Finding, finding
from ..layers.model_config import ModelConfig
from ..modules.inventory import ModuleInfo
from .entries import DequantizedOnLoad, cite
from .profile import Profile


def mark_unquantized_layers(
    profile: Profile, modules: Mapping[str, ModuleInfo], model_config: ModelConfig
) -> None:
    """Build each module an ``unquantized_layers`` entry names without a quant config, as the
    engine does (the resolver then keeps it unquantized whatever the declaration says)."""
    entries = [e for e in profile.unquantized_layers if e.holds_for(model_config)]
    if not entries:
        return
    suffixes = {f".{entry.module}": entry for entry in entries}
    for info in modules.values():
        for suffix, entry in suffixes.items():
            if info.name.endswith(suffix):
                info.quant_config, info.layer_class = False, entry.layer_class


def dequantized_on_load(
    profile: Profile,
    modules: Mapping[str, ModuleInfo],
    model_config: ModelConfig,
    refusals: list[Finding],
) -> list[Finding]:
    """``refusals`` less the ``unquantized-ships-quantized`` of each module whose shipped FP8
    weight the engine's loader dequantizes (a ``dequantized_on_load`` entry), with a
    ``dequantized-on-load`` note for it instead."""
    entries = [e for e in profile.dequantized_on_load if e.holds_for(model_config)]
    if not entries:
        return refusals
    kept: list[Finding] = []
    for found in refusals:
        info = modules.get(found.module) if found.code == "unquantized-ships-quantized" else None
        entry = next((e for e in entries if info is not None and _taken(e, info)), None)
        if entry is None:
            kept.append(found)
            continue
        kept.append(
            finding(
                "dequantized-on-load",
                f"{found.module} ships an {entry.weight_dtype} weight; {profile.label} "
                f"{entry.note}{cite(entry.source)}",
                module=found.module,
            )
        )
    return kept


def _taken(entry: DequantizedOnLoad, info: ModuleInfo) -> bool:
    """The module is the entry's and ships a weight of its dtype beside scales only, each of
    at least one dimension: the loader buffers every ``scale_operands`` name as the scale (a
    0-dim one fails its shape arithmetic), and any other operand has no parameter."""
    if not info.name.endswith(f".{entry.module}"):
        return False
    weight = info.operands.get("weight")
    scales = set(info.operands) - {"weight"}
    return (
        weight is not None
        and weight.dtype == entry.weight_dtype
        and bool(scales)
        and scales <= set(entry.scale_operands)
        and all(len(info.operands[scale].shape) >= 1 for scale in scales)
    )
