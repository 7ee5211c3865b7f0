"""What the engine makes of a declared KV cache: whether it takes the declared form as its
KV-cache dtype, whether its quant config builds the KV-cache method that loads the shipped
scales, and the checks it raises for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..declarations import Declaration, KvDeclaration
from ..findings import Finding, finding
from ..layers.facts import ArchitectureFacts, EngineFacts
from ..layers.model_config import ModelConfig
from .entries import (
    SCALES_OF_ONE,
    KvDtypeError,
    KvDtypeFromGpu,
    KvError,
    KvScalesDropped,
    KvTaken,
    KvUnbuilt,
    cite,
)
from .profile import Profile


@dataclass(frozen=True)
class KvFate:
    """The engine's reading of a declared KV cache."""

    not_taken: KvTaken | None = None
    """The profile's entry where the engine does not take the declared form as a KV-cache
    dtype."""
    unbuilt: KvUnbuilt | None = None
    """The profile's entry where its quant config builds no KV-cache method for it."""
    dropped: KvScalesDropped | None = None
    """The profile's entry where its weight loader maps the shipped scales away from the
    model's attention layers."""
    by_gpu: KvDtypeFromGpu | None = None
    """The profile's entry where the engine sets this model's KV-cache dtype from the GPU,
    and this GPU takes an unquantized one."""
    gpu: int | None = None
    refused: KvDtypeError | None = None
    """The profile's entry where the engine refuses, at start, the KV-cache dtype it takes from
    the declaration for this model: nothing is loaded, and no other KV finding applies."""

    @property
    def ignored(self) -> bool:
        """The KV cache is the model's dtype (with ``--kv-cache-dtype auto``)."""
        return self.not_taken is not None or self.by_gpu is not None or self.methodless

    @property
    def methodless(self) -> bool:
        """An unbuilt or dropped entry leaves the KV cache in the model's dtype by itself: the
        engine takes its KV-cache dtype from the reading that builds no method."""
        return any(
            cause is not None and not cause.dtype_from_declaration
            for cause in (self.unbuilt, self.dropped)
        )

    @property
    def scales_loaded(self) -> bool:
        """The shipped k/v scales are loaded (so one that cannot be fails the load)."""
        return (
            self.refused is None
            and self.unbuilt is None
            and self.dropped is None
            and (self.not_taken is None or self.not_taken.scales_loaded)
        )


def kv_fate(
    profile: Profile,
    declaration: Declaration,
    model_config: ModelConfig | None = None,
    gpu: int | None = None,
) -> KvFate:
    config = model_config or ModelConfig()
    return KvFate(
        kv_not_taken(profile, declaration),
        kv_unbuilt(profile, declaration),
        kv_dropped(profile, declaration, config, gpu),
        kv_dtype_by_gpu(profile, declaration, config, gpu),
        gpu,
        kv_dtype_refused(profile, declaration, config),
    )


def kv_dtype_refused(
    profile: Profile, declaration: Declaration, model_config: ModelConfig
) -> KvDtypeError | None:
    """The profile's entry where the engine refuses, for this model, the KV-cache dtype it
    takes from the declaration, else None."""
    kv = declaration.kv
    if kv is None:
        return None
    for error in profile.kv_dtype_errors:
        if (
            (declaration.method or "") in error.producer
            and kv.algo.upper() in error.kv_algo
            and error.holds_for(model_config)
        ):
            return error
    return None


def kv_dtype_by_gpu(
    profile: Profile, declaration: Declaration, model_config: ModelConfig, gpu: int | None
) -> KvDtypeFromGpu | None:
    """The profile's entry where the engine sets this model's KV-cache dtype from the GPU and
    the GPU (given or detected) takes bfloat16; None where no GPU is known."""
    if declaration.kv is None or gpu is None:
        return None
    for entry in profile.kv_dtype_from_gpu:
        sinks = entry.bfloat16_key is not None and bool(model_config.get(entry.bfloat16_key))
        if entry.holds_for(model_config) and (gpu < entry.quantized_from or sinks):
            return entry
    return None


def kv_dropped(
    profile: Profile, declaration: Declaration, model_config: ModelConfig, gpu: int | None = None
) -> KvScalesDropped | None:
    """The profile's entry where the engine's loader maps this model's KV scales away from its
    attention layers, else None."""
    if declaration.kv is None:
        return None
    for dropped in profile.kv_scales_dropped:
        if (
            (declaration.method or "") in dropped.producer
            and dropped.holds_for(model_config)
            and (dropped.gpu_max is None or gpu is None or gpu <= dropped.gpu_max)
        ):
            return dropped
    return None


def kv_not_taken(profile: Profile, declaration: Declaration) -> KvTaken | None:
    """The profile's entry for the declared KV cache's producer where the engine does not take
    the declared form, else None."""
    kv = declaration.kv
    if kv is None:
        return None
    for taken in profile.kv_taken:
        if (declaration.method or "") in taken.producer and not _kv_taken(taken, kv):
            return taken
    return None


def _kv_taken(taken: KvTaken, kv: KvDeclaration) -> bool:
    return (
        kv.algo.upper() in {algo.upper() for algo in taken.algo}
        and (kv.strategy or "") in taken.strategy
        and kv.symmetric == taken.symmetric
        and kv.dynamic == taken.dynamic
    )


def kv_unbuilt(profile: Profile, declaration: Declaration) -> KvUnbuilt | None:
    """The profile's entry where the engine's quant config builds no KV-cache method for the
    declared KV cache, else None."""
    kv = declaration.kv
    if kv is None:
        return None
    written = dict(kv.written)
    for unbuilt in profile.kv_unbuilt:
        if (
            (declaration.method or "") in unbuilt.producer
            and (declaration.algo or "").upper() in unbuilt.algo
            and declaration.form in unbuilt.declaration_form
            and "kv_cache_scheme" in written
            and not _method_built(unbuilt, written)
        ):
            return unbuilt
    return None


def _method_built(unbuilt: KvUnbuilt, written: Mapping[str, Any]) -> bool:
    if written["kv_cache_scheme"] == "mapping":
        pair = [written.get("type"), written.get("num_bits")]
        return unbuilt.mapping_builds is None or pair in unbuilt.mapping_builds
    return unbuilt.otherwise_algo_key and bool(written.get("kv_cache_quant_algo"))


def kv_cache_ignored(profile: Profile, declaration: Declaration, fate: KvFate) -> list[Finding]:
    """``kv-cache-ignored`` where the engine's KV cache is the model's dtype whatever the
    declaration says: its dtype mapping does not take the declared form, or its quant config
    reads no KV algorithm from it (where the dtype comes from that same reading)."""
    kv = declaration.kv
    if kv is None or not fate.ignored or fate.refused is not None:
        return []
    said = f"{kv.where} declares a KV cache of {_kv_said(kv, declaration)}; {profile.label} "
    unbuilt, dropped, taken = fate.unbuilt, fate.dropped, fate.not_taken
    cause = unbuilt or dropped
    built = f"; it {cause.note}{cite(cause.source)}" if cause is not None else ""
    by_gpu = fate.by_gpu
    if taken is None and not fate.methodless and by_gpu is not None:
        text = (
            f"{by_gpu.note}: on sm{fate.gpu} with --kv-cache-dtype auto the KV cache is "
            f"bfloat16{cite(by_gpu.source)}{built}"
        )
    elif taken is None and unbuilt is not None:
        text = (
            f"{unbuilt.note}, and takes its KV-cache dtype from that same reading: with "
            f"--kv-cache-dtype auto the KV cache is the model's dtype{cite(unbuilt.source)}"
        )
    elif taken is None:
        assert dropped is not None
        text = (
            f"{dropped.note}: with --kv-cache-dtype auto the KV cache is the model's dtype"
            f"{cite(dropped.source)}"
        )
    else:
        scales = f"; {taken.scales_note}" if taken.scales_loaded and taken.scales_note else ""
        text = f"{taken.note.replace('{algo}', kv.algo)}{cite(taken.source)}{built or scales}"
    return [finding("kv-cache-ignored", said + text)]


def kv_scales_unloaded(
    profile: Profile, declaration: Declaration, fate: KvFate, shipped: int
) -> list[Finding]:
    """``kv-scales-unloaded`` where the engine takes the declared KV cache as its KV-cache
    dtype, does not load the shipped k/v scales (it builds no KV-cache method for them, or its
    loader maps them away), and some are shipped."""
    kv = declaration.kv
    cause = fate.unbuilt or fate.dropped
    if kv is None or cause is None or fate.ignored or fate.refused is not None or not shipped:
        return []
    effect = cause.effect if isinstance(cause, KvScalesDropped) else SCALES_OF_ONE
    return [
        finding(
            "kv-scales-unloaded",
            f"{kv.where} declares a KV cache of {_kv_said(kv, declaration)} for "
            f"{declaration.algo} and {shipped} k/v scales are shipped; {profile.label} "
            f"{cause.note}, while it still sets its KV-cache dtype from the declaration: "
            f"{effect}{cite(cause.source)}",
        )
    ]


def kv_cache_refusals(
    profile: Profile, declaration: Declaration, facts: EngineFacts | None, architecture: str
) -> list[Finding]:
    """``engine-refuses-declaration`` for the first of the profile's KV-cache checks that the
    declared KV cache fails, where the model builds a layer the checks run for."""
    kv = declaration.kv
    if kv is None:
        return []
    arch = facts.architectures.get(architecture) if facts is not None else None
    written = dict(kv.written)
    for error in profile.kv_errors:
        if (declaration.method or "") not in error.producer:
            continue
        if facts is not None and arch is not None and not _builds(facts, arch, error.layer_class):
            continue
        if _read(error, written) in error.accepts:
            continue
        strategy = written.get("strategy")
        text = error.text.format_map(
            {
                **{key: written.get(key) for key in ("num_bits", "type", "strategy", "symmetric")},
                "strategy_enum": f"QuantizationStrategy.{str(strategy).upper()}",
            }
        )
        return [
            finding(
                "engine-refuses-declaration",
                f"{kv.where} declares a KV cache of {_kv_said(kv, declaration)}; "
                f'{profile.label} refuses it {error.stage}: "{text}"{cite(error.source)}',
            )
        ]
    return []


def kv_dtype_refusals(profile: Profile, declaration: Declaration, fate: KvFate) -> list[Finding]:
    """``engine-refuses-declaration`` where the engine refuses, for this model, the KV-cache
    dtype it takes from the declaration."""
    kv, error = declaration.kv, fate.refused
    if kv is None or error is None:
        return []
    return [
        finding(
            "engine-refuses-declaration",
            f"{kv.where} declares a KV cache of {_kv_said(kv, declaration)}; {profile.label} "
            f'refuses it {error.stage}: "{error.text}"{cite(error.source)}',
        )
    ]


def _read(error: KvError, written: Mapping[str, Any]) -> Any:
    if error.reads == "type_bits":
        return [written.get("type"), written.get("num_bits")]
    if error.reads == "symmetric":
        return bool(written.get("symmetric"))  # as Python tests it: ``if not is_symmetric``
    return written.get(error.reads)


def _builds(facts: EngineFacts, arch: ArchitectureFacts, layer_class: str) -> bool:
    """Whether the model surely builds, with its quant config, a layer of ``layer_class``: at
    some path every class the facts know for it is one (DeepSeek's attention is MLA or not by
    the engine's settings, and its MLA layer takes no KV-cache method)."""
    by_path: dict[tuple[str, ...], list[bool]] = {}
    for fact in arch.layers.get("attn", ()):
        sure = fact.quant_config == "passed" and facts.is_subclass(fact.cls, layer_class)
        by_path.setdefault(fact.paths, []).append(sure)
    return any(all(sure) for sure in by_path.values())


def _kv_said(kv: KvDeclaration, declaration: Declaration) -> str:
    if declaration.method == "modelopt" or (kv.strategy is None and not kv.written):
        return kv.algo  # a ModelOpt algorithm names nothing more
    said = f"{kv.algo}, strategy {kv.strategy or 'unstated'}"
    said += ", symmetric" if kv.symmetric else ", asymmetric"
    return said + (", dynamic" if kv.dynamic else ", static")
