"""Read a checkpoint's quantization declaration once, for the whole checkpoint.

Precedence follows the engines: ``config.json`` ``quantization_config``, then its
``text_config``, then the legacy ``compression_config``, before ``hf_quant_config.json``;
except a MIXED_PRECISION config.json without ``quantized_layers``, which falls through to the
file. A declaration that cannot be read is never taken for "unquantized".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ..errors import DeclarationError
from ..findings import Finding, finding
from ..sources.header import loads_strict
from .declaration import Declaration, KvDeclaration
from .rules import (
    AwqRules,
    BnbRules,
    CompressedTensorsRules,
    FormatRules,
    Fp8Rules,
    GptqRules,
    ModelOptRules,
    Mxfp4Rules,
    OnlineTransform,
)
from .schemes import Scheme, modelopt_scheme

if TYPE_CHECKING:
    from . import compressed_tensors as ct
    from . import modelopt as mo

# Each other format's models are imported by its reader, when a declaration names it: a
# process builds the pydantic models of the formats it reads, not of every format.

__all__ = [
    "AwqRules",
    "BnbRules",
    "CompressedTensorsRules",
    "Declaration",
    "FormatRules",
    "Fp8Rules",
    "GptqRules",
    "KvDeclaration",
    "ModelOptRules",
    "Mxfp4Rules",
    "OnlineTransform",
    "Scheme",
    "read_declaration",
]


@dataclass(frozen=True)
class _Candidate:
    where: str
    block: dict[str, Any]
    kind: str
    """``inline`` (a quantization_config block) or ``file`` (hf_quant_config shape)."""
    config: dict[str, Any] = field(default_factory=dict)
    """The config the block sits in (empty for a file of its own): vLLM's ``hf_config``."""


DECLARATION_CONTAINERS = 1_000_000
"""Most ``[`` and ``{`` a declaration document may hold: a MIXED_PRECISION ``quantized_layers``
of the largest MoE lists about 70 000 modules (one object each)."""


def _load(name: str, text: str) -> Any:
    return loads_strict(text, name, error=DeclarationError, max_containers=DECLARATION_CONTAINERS)


def _candidates(documents: dict[str, str]) -> list[_Candidate]:
    found: list[_Candidate] = []
    config_like: list[tuple[str, dict[str, Any]]] = []
    file_like: list[tuple[str, dict[str, Any]]] = []
    bare: list[tuple[str, dict[str, Any]]] = []
    for name, text in documents.items():
        doc = _load(name, text)
        if not isinstance(doc, dict):
            raise DeclarationError(name, "is not a JSON object")
        if name == "hf_quant_config.json" or (
            isinstance(doc.get("quantization"), dict) and "quant_method" not in doc
        ):
            file_like.append((name, doc))
        elif name == "config.json" or any(
            k in doc
            for k in (
                "quantization_config",
                "compression_config",
                "text_config",
                "architectures",
                "model_type",
            )
        ):
            config_like.append((name, doc))
        else:
            bare.append((name, doc))
    for name, doc in config_like:
        text_config = doc.get("text_config")
        for key, block in (
            ("quantization_config", doc.get("quantization_config")),
            (
                "text_config.quantization_config",
                text_config.get("quantization_config") if isinstance(text_config, dict) else None,
            ),
            ("compression_config", doc.get("compression_config")),
        ):
            if block is not None:
                if not isinstance(block, dict):
                    raise DeclarationError(f"{name}: {key}", "is not a JSON object")
                found.append(_Candidate(f"{name}: {key}", block, "inline", doc))
                break
    found.extend(_Candidate(name, doc, "file") for name, doc in file_like)
    found.extend(
        _Candidate(name, doc, "inline")
        for name, doc in bare
        if any(k in doc for k in ("config_groups", "quant_method", "quant_algo"))
    )
    return found


def _method(candidate: _Candidate) -> str:
    if candidate.kind == "file":
        return "modelopt"
    raw = candidate.block.get("quant_method")
    if raw is None:
        if "config_groups" in candidate.block and "quant_algo" not in candidate.block:
            return "compressed-tensors"
        return "modelopt"
    method = str(raw).lower().replace("_", "-")
    if method.startswith("modelopt"):
        return "modelopt"
    return method


def _validate(model: type[BaseModel], block: dict[str, Any], where: str) -> Any:
    try:
        return model.model_validate(block)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise DeclarationError(where, f"{path}: {first['msg']}") from None


def _extras(model: BaseModel, path: str = "") -> list[str]:
    """Keys a declaration carries that the models do not interpret, as dotted paths."""
    out = [f"{path}{key}" for key in sorted(model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.extend(_extras(value, f"{path}{name}."))
        elif isinstance(value, dict):
            # a map of thousands of layer entries, mostly one shared object: each once
            items = list(value.values())
            distinct = dict(zip(map(id, items), items, strict=True))  # in C
            unknown: set[str] = set()
            for item in distinct.values():
                if isinstance(item, BaseModel):
                    unknown.update(_extras(item, f"{path}{name}[*]."))
            out.extend(sorted(unknown))
    return sorted(set(out))


def _unknown_keys(model: BaseModel, where: str) -> list[Finding]:
    """An ``unknown-keys`` note for the keys of ``where`` that qarm's model does not read."""
    extras = _extras(model)
    if not extras:
        return []
    return [finding("unknown-keys", f"{where} carries {', '.join(extras)}")]


def _modelopt(candidate: _Candidate) -> tuple[mo.Normalized, BaseModel]:
    from . import modelopt as mo

    if candidate.kind == "file":
        parsed_file: mo.HfQuantConfig = _validate(
            mo.HfQuantConfig, candidate.block, candidate.where
        )
        return mo.normalize_file(parsed_file), parsed_file
    parsed: mo.InlineConfig = _validate(mo.InlineConfig, candidate.block, candidate.where)
    try:
        return mo.normalize_inline(parsed), parsed
    except ValueError as exc:  # a config_groups group size that is no positive integer
        raise DeclarationError(candidate.where, str(exc)) from None


_QUANT_ALGO = attrgetter("quant_algo")


def _modelopt_declaration(
    candidate: _Candidate, considered: tuple[str, ...], group_size: int | None = None
) -> Declaration:
    """``group_size`` is the other file's, for a winner that states none (ModelOpt's export
    writes it in hf_quant_config.json only); a disagreement is still reported."""
    from . import modelopt as mo

    norm, model = _modelopt(candidate)
    notes = _unknown_keys(model, candidate.where)
    algo = norm.quant_algo
    producer = norm.producer.name if norm.producer else None
    kv = (
        KvDeclaration(norm.kv_algo, candidate.where, written=mo.kv_written(candidate.block))
        if norm.kv_algo
        else None
    )
    if not algo:
        return Declaration(
            "unreadable",
            candidate.where,
            method="modelopt",
            producer=producer,
            findings=tuple(notes),
            considered=considered,
            kv=kv,
            reason="a ModelOpt declaration without quant_algo",
        )
    if algo != algo.upper():
        notes.append(finding("lowercase-algo", f"quant_algo {algo!r} in {candidate.where}"))
    schemes: dict[str, Scheme] = {}
    layers: dict[str, str] | None = None
    default: Scheme | None = None
    if algo.upper() == "MIXED_PRECISION":
        if not norm.quantized_layers:
            return Declaration(
                "unreadable",
                candidate.where,
                method="modelopt",
                algo=algo,
                producer=producer,
                findings=tuple(notes),
                considered=considered,
                kv=kv,
                reason="MIXED_PRECISION without a quantized_layers map",
            )
        # in C: a MoE map lists hundreds of thousands of modules and a few algorithms
        modules, entries = list(norm.quantized_layers), list(norm.quantized_layers.values())
        algos = list(map(_QUANT_ALGO, entries))
        layers = dict(zip(modules, algos, strict=True))
        for each in dict.fromkeys(algos):
            first = algos.index(each)  # a scheme is made from the first entry of its algorithm
            schemes[each] = modelopt_scheme(each, entries[first].group_size)
            if each != each.upper():
                notes.append(
                    finding(
                        "lowercase-algo",
                        f"quantized_layers entry {modules[first]!r}: {each!r}",
                    )
                )
    else:
        default = modelopt_scheme(algo, norm.group_size or group_size)
        schemes[algo] = default
    rules = ModelOptRules(
        algo=algo, default_scheme=default, layers=layers, excludes=tuple(norm.excludes)
    )
    groups = candidate.block.get("config_groups")
    return Declaration(
        "modelopt",
        candidate.where,
        method="modelopt",
        algo=algo,
        schemes=schemes,
        modelopt=rules,
        kv=kv,
        producer=producer,
        findings=tuple(notes),
        considered=considered,
        form="nested" if isinstance(candidate.block.get("quantization"), dict) else "flat",
        groups_weight_only=isinstance(groups, dict)
        and bool(groups)
        and all(
            isinstance(g, dict) and g.get("input_activations") is None for g in groups.values()
        ),
    )


def _ct_kv(args: ct.QuantArgs | None, raw: dict[str, Any], where: str) -> KvDeclaration | None:
    """``raw``: the ``kv_cache_scheme`` mapping as written, ``args`` as parsed from it."""
    if args is None:
        return None
    label = {("float", 8): "FP8", ("int", 8): "INT8", ("float", 4): "NVFP4"}.get(
        (args.type, args.num_bits), f"{args.type}{args.num_bits}"
    )
    written = tuple((key, raw.get(key)) for key in KV_KEYS_READ)
    return KvDeclaration(
        label, where, args.resolved_strategy, args.symmetric, args.dynamic is not False, written
    )


KV_KEYS_READ = ("num_bits", "type", "strategy", "symmetric")


def _sparsity_targets(config: dict[str, Any] | None) -> tuple[str, ...]:
    targets = (config or {}).get("targets") or ()
    if not isinstance(targets, list):
        return ()
    return tuple(t for t in targets if isinstance(t, str))


def _ct_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import compressed_tensors as ct

    parsed: ct.CompressedTensorsConfig = _validate(
        ct.CompressedTensorsConfig, candidate.block, candidate.where
    )
    notes = _unknown_keys(parsed, candidate.where)
    raw_kv = candidate.block.get("kv_cache_scheme")
    kv = _ct_kv(parsed.kv_cache_scheme, raw_kv if isinstance(raw_kv, dict) else {}, candidate.where)
    sparsity_targets = _sparsity_targets(parsed.sparsity_config)
    if not parsed.config_groups:
        reason = (
            "sparsity only: no config_groups, nothing is quantized"
            if parsed.sparsity_config
            else "no config_groups"
        )
        return Declaration(
            "none",
            candidate.where,
            method="compressed-tensors",
            findings=tuple(notes),
            considered=considered,
            kv=kv,
            reason=reason,
            sparsity_targets=sparsity_targets,
        )
    schemes: dict[str, Scheme] = {}
    targets: dict[str, str] = {}
    groups: list[tuple[str, tuple[str, ...]]] = []
    for name, raw in parsed.config_groups.items():
        group, unknown_preset = ct.group_scheme(name, raw)
        if unknown_preset:
            return Declaration(
                "unreadable",
                candidate.where,
                method="compressed-tensors",
                findings=tuple(notes),
                considered=considered,
                reason=f"group {name!r} is a bare target list naming no known preset",
            )
        schemes[name] = ct.to_scheme(name, group, parsed.format)
        for target in group.targets:
            targets[target] = name
        groups.append((name, tuple(group.targets)))
    rules = CompressedTensorsRules(
        targets=targets, ignore=tuple(parsed.ignore or ()), groups=tuple(groups)
    )
    return Declaration(
        "compressed-tensors",
        candidate.where,
        method="compressed-tensors",
        algo=parsed.format,
        schemes=schemes,
        compressed_tensors=rules,
        sparsity_targets=sparsity_targets,
        online_transforms=ct.online_transforms(candidate.block.get("transform_config")),
        transform_leaves=ct.transform_leaves(candidate.block.get("transform_config")),
        kv=kv,
        findings=tuple(notes),
        considered=considered,
    )


def _one_scheme(
    family: str,
    candidate: _Candidate,
    considered: tuple[str, ...],
    scheme: Scheme,
    findings: list[Finding],
    algo: str | None = None,
    **rules: Any,
) -> Declaration:
    """A format whose whole declaration is one scheme: its method is the family's name, its
    algorithm that too unless given, and ``rules`` its one rules field (``fp8=...``)."""
    return Declaration(
        family,
        candidate.where,
        method=family,
        algo=family if algo is None else algo,
        schemes={scheme.name: scheme},
        findings=tuple(findings),
        considered=considered,
        **rules,
    )


def _fp8_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import fp8 as native_fp8

    parsed: native_fp8.Fp8Config = _validate(native_fp8.Fp8Config, candidate.block, candidate.where)
    notes = _unknown_keys(parsed, candidate.where)
    scheme = native_fp8.to_scheme(parsed)
    key, ignored = parsed.ignored
    rules = Fp8Rules(scheme=scheme, ignored=ignored, ignored_key=key)
    return _one_scheme("fp8", candidate, considered, scheme, notes, fp8=rules)


def _bnb_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import bitsandbytes as bnb

    parsed: bnb.BnbConfig = _validate(bnb.BnbConfig, candidate.block, candidate.where)
    notes = _unknown_keys(parsed, candidate.where)
    scheme = bnb.to_scheme(parsed)
    rules = BnbRules(
        scheme=scheme,
        skip_modules=parsed.skip_modules,
        double_quant=bool(parsed.bnb_4bit_use_double_quant) and not parsed.eight_bit,
        eight_bit=parsed.eight_bit,
    )
    return _one_scheme("bitsandbytes", candidate, considered, scheme, notes, scheme.algo, bnb=rules)


def _gptq_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import gptq

    parsed: gptq.GptqConfig = _validate(gptq.GptqConfig, candidate.block, candidate.where)
    notes = _unknown_keys(parsed, candidate.where)
    scheme = gptq.base_scheme(parsed)
    schemes = {scheme.name: scheme}
    dynamic: list[tuple[str, str | None]] = []
    for pattern, overrides in (parsed.dynamic or {}).items():
        if pattern.startswith("-:"):
            dynamic.append((pattern.removeprefix("-:"), None))
            continue
        override = gptq.override_scheme(parsed, overrides)
        schemes.setdefault(override.name, override)
        dynamic.append((pattern.removeprefix("+:"), override.name))
    rules = GptqRules(
        scheme=scheme,
        lm_head=parsed.lm_head,
        quantize_list=parsed.quantize_list,
        dynamic=tuple(dynamic),
    )
    return Declaration(
        "gptq",
        candidate.where,
        method="gptq",
        algo="gptq",
        schemes=schemes,
        gptq=rules,
        findings=tuple(notes),
        considered=considered,
    )


def _awq_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import awq

    parsed: awq.AwqConfig = _validate(awq.AwqConfig, candidate.block, candidate.where)
    notes = _unknown_keys(parsed, candidate.where) + awq.version_unread(parsed, candidate.where)
    scheme = awq.to_scheme(parsed)
    rules = AwqRules(scheme=scheme, lm_head=parsed.lm_head, not_convert=parsed.not_convert)
    return _one_scheme("awq", candidate, considered, scheme, notes, awq=rules)


def _mxfp4_declaration(candidate: _Candidate, considered: tuple[str, ...]) -> Declaration:
    from . import mxfp4

    parsed: mxfp4.Mxfp4Config = _validate(mxfp4.Mxfp4Config, candidate.block, candidate.where)
    model_type = candidate.config.get("model_type")
    model_type = model_type if isinstance(model_type, str) else ""
    scheme = mxfp4.to_scheme(model_type, mxfp4.moe_dims(candidate.config))
    unread = mxfp4.sizes_unread(candidate.config, candidate.where)
    written = parsed.modules_to_not_convert
    rules = Mxfp4Rules(
        scheme=scheme,
        not_convert=None if written is None else tuple(written),
        model_type=model_type,
    )
    notes = [*_unknown_keys(parsed, candidate.where), *([unread] if unread else [])]
    return _one_scheme("mxfp4", candidate, considered, scheme, notes, mxfp4=rules)


def _declaration_of(
    candidate: _Candidate, considered: tuple[str, ...], group_size: int | None = None
) -> Declaration:
    method = _method(candidate)
    if method == "modelopt":
        return _modelopt_declaration(candidate, considered, group_size)
    reader = _READERS.get(method)
    if reader is not None:
        return reader(candidate, considered)
    return Declaration(
        "unreadable",
        candidate.where,
        method=method,
        considered=considered,
        reason=f"quant_method {method!r}: qarm reads {', '.join(READ_METHODS[:-1])} and "
        f"{READ_METHODS[-1]} declarations only",
    )


_READERS: dict[str, Callable[[_Candidate, tuple[str, ...]], Declaration]] = {
    "compressed-tensors": _ct_declaration,
    "fp8": _fp8_declaration,
    "bitsandbytes": _bnb_declaration,
    "gptq": _gptq_declaration,
    "awq": _awq_declaration,
    "mxfp4": _mxfp4_declaration,
}
"""The reader of each ``quant_method`` qarm reads, but ModelOpt's (which merges two files)."""

READ_METHODS = ("modelopt", *_READERS)


def _group_size_elsewhere(winner: _Candidate, candidates: list[_Candidate]) -> int | None:
    """The group size another ModelOpt declaration states, where the winner states none."""
    if _method(winner) != "modelopt":
        return None
    for other in candidates:
        if other is winner or _method(other) != "modelopt":
            continue
        try:
            size = _modelopt(other)[0].group_size
        except DeclarationError:
            continue  # refused by name when the two are compared (_compare)
        if size is not None:
            return size
    return None


def read_declaration(documents: dict[str, str]) -> Declaration:
    """The one declaration that governs the checkpoint, with every disagreement recorded."""
    candidates = _candidates(documents)
    considered = tuple(c.where for c in candidates)
    if not candidates:
        return Declaration(
            "absent",
            "",
            considered=considered,
            reason="no quantization_config and no hf_quant_config.json",
        )
    winner = candidates[0]
    file_candidates = [c for c in candidates if c.kind == "file"]
    if (
        winner.kind == "inline"
        and _method(winner) == "modelopt"
        and file_candidates
        and str(winner.block.get("quant_algo", "")).upper() == "MIXED_PRECISION"
        and not winner.block.get("quantized_layers")
    ):
        winner = file_candidates[0]
    declaration = _declaration_of(winner, considered, _group_size_elsewhere(winner, candidates))
    extra = [*declaration.findings]
    for other in candidates:
        if other is winner:
            continue
        extra.extend(_compare(winner, other))
    return _with_findings(declaration, extra)


def _with_findings(declaration: Declaration, notes: list[Finding]) -> Declaration:
    from dataclasses import replace

    return replace(declaration, findings=tuple(notes))


def _compare(winner: _Candidate, other: _Candidate) -> list[Finding]:
    """Every way two declarations of one checkpoint disagree."""
    if _method(winner) != _method(other):
        return [
            finding(
                "stale-declaration",
                f"{other.where} declares {_method(other)} beside the winning "
                f"{_method(winner)} declaration in {winner.where}; it is ignored",
            )
        ]
    if _method(winner) != "modelopt":
        return []
    # The other file is read as strictly as the winner (a group size of 0 in it is refused by
    # name): where the winner states no group size, the other one's is used.
    a, _ = _modelopt(winner)
    b, _ = _modelopt(other)
    out: list[Finding] = []

    def differ(what: str, left: object, right: object) -> None:
        if left != right:
            out.append(
                finding(
                    "declaration-disagreement",
                    f"{what}: {winner.where} says {left!r}, {other.where} says {right!r}",
                )
            )

    differ("quant_algo", a.quant_algo, b.quant_algo)
    differ("kv_cache_quant_algo", a.kv_algo, b.kv_algo)
    if a.group_size is not None and b.group_size is not None:  # one silent is not a dispute
        differ("group_size", a.group_size, b.group_size)
    only_a = sorted(set(a.excludes) - set(b.excludes))
    only_b = sorted(set(b.excludes) - set(a.excludes))
    if only_a or only_b:
        out.append(
            finding(
                "declaration-disagreement",
                f"exclude set: {len(only_a)} only in {winner.where} {only_a[:3]}, "
                f"{len(only_b)} only in {other.where} {only_b[:3]}",
            )
        )
    if a.quantized_layers is not None and b.quantized_layers is not None:
        count_a = dict(sorted(Counter(e.quant_algo for e in a.quantized_layers.values()).items()))
        count_b = dict(sorted(Counter(e.quant_algo for e in b.quantized_layers.values()).items()))
        differ("quantized_layers per algorithm", count_a, count_b)
    return out
