"""What the engine's default attention backend does with shipped KV scales: a backend that
writes the FP8 KV cache without a scale and multiplies the attention logits by the loaded
``k_scale`` as it reads, so a shipped scale other than 1.0 changes the attention itself."""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import Declaration
from ..findings import Finding, finding
from ..layers.model_config import ModelConfig
from ..modules.inventory import ModuleInfo
from ..report.model import ProbeInfo
from .entries import KvScaleOnLogits, cite
from .profile import Profile


def kv_scale_on_logits(
    profile: Profile,
    declaration: Declaration,
    model_config: ModelConfig,
    gpu: int | None,
    modules: Mapping[str, ModuleInfo],
    probe: ProbeInfo | None,
) -> list[Finding]:
    """``kv-scale-on-logits`` where the probe read a shipped ``k_scale`` the backend applies to
    the logits and it is not 1.0; ``kv-scale-on-logits-unread`` where such scales are shipped
    and their values were not read. Nothing where every one read is 1.0, or no GPU is known."""
    entry = _entry(profile, declaration, model_config, gpu)
    if entry is None:
        return []
    suffix = f".{entry.module}"
    shipped = sorted(
        info.operands["k_scale"].name
        for info in modules.values()
        if info.name.endswith(suffix) and "k_scale" in info.operands
    )
    if not shipped:
        return []
    values = _probed(probe, shipped)
    kv = declaration.kv
    assert kv is not None  # _entry holds only for a declared KV cache
    said = (
        f"{kv.where} declares a KV cache of {kv.algo} and {len(shipped)} k_scale tensors are "
        f"shipped as <layer>.{entry.module}.k_scale; {profile.label} on sm{gpu} {entry.note}"
        f"{cite(entry.source)}"
    )
    if values is None:
        return [
            finding(
                "kv-scale-on-logits-unread",
                f"{said}: any of them other than 1.0 scales the attention logits of its layer; "
                "their values were not read (--probe-scalars reads them)",
            )
        ]
    off = [(name, value) for name, value in values.items() if value != 1.0]
    if not off:
        return []
    name, value = off[0]
    return [
        finding(
            "kv-scale-on-logits",
            f"{said}: {len(off)} of them are not 1.0 (e.g. {name} = {value!r}), so the "
            "attention logits of those layers are multiplied by it",
            tensor=name,
        )
    ]


def _entry(
    profile: Profile, declaration: Declaration, model_config: ModelConfig, gpu: int | None
) -> KvScaleOnLogits | None:
    if declaration.kv is None or gpu is None:
        return None
    for entry in profile.kv_scale_on_logits:
        if (
            (declaration.method or "") in entry.producer
            and entry.holds_for(model_config)
            and gpu >= entry.gpu_min
            and (entry.gpu_max is None or gpu <= entry.gpu_max)
            and (entry.kv_algo is None or declaration.kv.algo.upper() in entry.kv_algo)
        ):
            return entry
    return None


def _probed(probe: ProbeInfo | None, names: list[str]) -> dict[str, float] | None:
    """Each name's value where the probe read every one as a single number; else None (not
    probed, a manifest, a scale not read or of more than one element)."""
    if probe is None or not probe.available:
        return None
    rows = {row.tensor: row for row in probe.scalars}
    values: dict[str, float] = {}
    for name in names:
        row = rows.get(name)
        if row is None or row.status in ("skipped", "not-read") or len(row.values) != 1:
            return None
        values[name] = float(row.values[0])
    return values
