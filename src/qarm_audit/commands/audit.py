"""The audit: sources -> declarations -> modules -> resolve -> check -> engines -> report."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from math import prod
from operator import attrgetter
from typing import TYPE_CHECKING

from ..check.alike import Alike, group_alike
from ..check.biases import unbuilt_bias_warnings
from ..check.blocks import block_refusals
from ..check.completeness import completeness_refusals
from ..check.crosscheck import check_all, uncontracted
from ..check.kv_scales import LOAD_FAILS_KV, kv_heads_of, kv_scale_findings
from ..check.probe import probe_scalars as probe_values
from ..check.spelling import Spelling
from ..declarations import Declaration, read_declaration
from ..engines.arms import arm_rows, parse_gpu, routing_moves
from ..engines.built_layers import dequantized_on_load, mark_unquantized_layers
from ..engines.detect import EngineChoice, detect_gpu, engine_notes, select_engine
from ..engines.kv_backend import kv_scale_on_logits
from ..engines.kv_cache import (
    kv_cache_ignored,
    kv_cache_refusals,
    kv_dtype_refusals,
    kv_fate,
    kv_scales_unloaded,
)
from ..engines.load_errors import quote_load_errors
from ..engines.profile import ROUTINGS, Profile, resolve_env
from ..engines.refusals import (
    declaration_refusals,
    group_skipped_warnings,
    layer_refusals,
    loader_drops,
    skipped_groups,
    transforms_unapplied,
)
from ..errors import UsageError
from ..findings import Finding, Severity, finding
from ..layers import (
    LayerTree,
    build_tree,
    engine_rename,
    layer_facts,
    mark_transforms,
    read_model_config,
    tree_findings,
)
from ..modules.inventory import ModuleInfo, build_inventory
from ..modules.operands import MXFP4_BLOCKS, WEIGHT_NAMES, OperandKind, classify_operand
from ..report.model import (
    Bucket,
    DeclarationInfo,
    EngineInfo,
    FindingRow,
    KvInfo,
    LayerTreeInfo,
    ModuleRow,
    ProbeInfo,
    Report,
    SchemeInfo,
    SourceInfo,
    Totals,
)
from ..report.policy import IgnoreRule, apply_ignores
from ..resolve import resolve
from ..resolve.matching_ahead import MatchingAhead, pattern_lists
from ..resolve.producer import disagreements
from ..resolve.resolver import EXCLUDED, UNLISTED, Membership
from ..runtime import collector_paused, held
from ..sources import Checkpoint, open_source, run_settled
from ..sources.integrity import check_integrity
from ..sources.unread import SIDE_DECLARATIONS, side_declarations
from .ahead import AuditAhead
from .findings_aside import FindingsAside
from .unread import unread_findings

if TYPE_CHECKING:
    from ..sources.hub import HubObserver

KV_CACHE = "kv_cache"
UNCLASSIFIED = "unclassified"
SPECIAL_BUCKETS = (EXCLUDED, UNLISTED, KV_CACHE, UNCLASSIFIED)

DEFAULT_ENGINE = "vllm"
ROUTING_CHOICES = (*ROUTINGS, "both")


def audit(
    source: str | Checkpoint,
    *,
    engine: str | Profile = DEFAULT_ENGINE,
    env: Mapping[str, str] | None = None,
    gpu: str | None = None,
    require_pinned: bool = False,
    observer: HubObserver | None = None,
    probe_scalars: bool = False,
    routing: str | None = None,
    ignores: Sequence[IgnoreRule] = (),
) -> Report:
    """Audit a checkpoint (a path, a manifest, ``owner/name@sha``, or a loaded Checkpoint).

    ``engine`` is a built-in profile (``vllm``, ``vllm==0.32.0``; a bare name takes the
    installed release when it is modelled, else the newest), a ``.toml`` path, or a Profile.
    Without ``gpu``, the machine's GPU is used when one is detected (``engines/detect.py``;
    ``QARM_GPU=none`` turns that off).

    ``routing`` is ``declared``, ``probe`` or ``both`` (the profile's own routing for the arm
    line, plus every module whose arm moves under the other); None takes the profile's own.

    Only headers are read, unless ``probe_scalars``: then the scalar scale tensors are read too
    (at most :data:`~qarm_audit.probe.BOUND` elements each) and judged by value.

    ``observer`` hears about a Hub read (revision resolved, headers arriving); see ``hub.py``.

    ``ignores`` move the findings they match to ``Report.ignored`` (see ``policy.py``); a rule
    that matches nothing adds an ``ignore-unmatched`` note.
    """
    audited = audit_in_parts(
        source,
        engine=engine,
        env=env,
        gpu=gpu,
        require_pinned=require_pinned,
        observer=observer,
        probe_scalars=probe_scalars,
        routing=routing,
    )
    return apply_ignores(audited.report, ignores)


@dataclass(frozen=True)
class Audited:
    """A report, and what the audit built to write it, for a caller that looks further into
    some of its modules (explain) without building it all again."""

    report: Report
    declaration: Declaration
    modules: dict[str, ModuleInfo]
    tree: LayerTree
    memberships: Mapping[str, Membership]
    spellings: Mapping[str, Spelling]


def audit_in_parts(
    source: str | Checkpoint,
    *,
    engine: str | Profile = DEFAULT_ENGINE,
    env: Mapping[str, str] | None = None,
    gpu: str | None = None,
    require_pinned: bool = False,
    observer: HubObserver | None = None,
    probe_scalars: bool = False,
    routing: str | None = None,
    declaration: Declaration | None = None,
    modules: dict[str, ModuleInfo] | None = None,
) -> Audited:
    """:func:`audit` without ignore rules, and the parts it built. ``declaration`` and
    ``modules``, where the caller has them already, are :func:`read_declaration` and
    :func:`build_inventory` of this checkpoint's documents and tensors; they are used as given."""
    profile, choice = (
        (engine, EngineChoice()) if isinstance(engine, Profile) else select_engine(engine)
    )
    settings = resolve_env(profile, dict(env or {}))
    if routing is not None and routing not in ROUTING_CHOICES:
        raise UsageError("--routing", f"{routing!r}: give one of {', '.join(ROUTING_CHOICES)}")
    machine = engine_notes(profile, choice)
    gpu_from, option = ("given", "--gpu") if gpu else ("", "--gpu")
    if not gpu:
        gpu, via = detect_gpu()
        if gpu:
            gpu_from, option = "detected", via
            machine.append(
                finding("gpu-detected", f"GPU {gpu} detected ({via}); --gpu overrides it")
            )
    try:
        capability = parse_gpu(gpu) if gpu else None
    except ValueError as exc:
        raise UsageError(option, str(exc)) from None
    info = EngineInfo(
        name=profile.name,
        version=profile.version,
        routing="",
        env=settings,
        gpu=gpu or None,
        gpu_from=gpu_from,
        installed=choice.installed,
        release_from=choice.release_from,
    )
    # a declaration or modules given are used as given: not worked out ahead
    ahead = (
        AuditAhead(declaration=declaration is None, modules=modules is None)
        if declaration is None or modules is None
        else None
    )
    with collector_paused():
        try:
            checkpoint = (
                source
                if isinstance(source, Checkpoint)
                else open_source(
                    source,
                    require_pinned=require_pinned,
                    observer=observer,
                    prove_aside=True,
                    ahead=ahead,
                )
            )
            return run_settled(
                checkpoint,
                lambda read: _audit(
                    read,
                    profile,
                    info,
                    capability,
                    probe_scalars,
                    routing,
                    machine,
                    declaration,
                    modules,
                    ahead,
                ),
            )
        finally:
            if ahead is not None:
                ahead.close()


def _audit(
    checkpoint: Checkpoint,
    profile: Profile,
    engine: EngineInfo,
    gpu: int | None,
    probe_scalars: bool = False,
    routing: str | None = None,
    machine: Sequence[Finding] = (),
    declaration: Declaration | None = None,
    modules: dict[str, ModuleInfo] | None = None,
    ahead: AuditAhead | None = None,
) -> Audited:
    env = engine.env
    integrity, findings = check_integrity(checkpoint)
    findings.extend(machine)
    if declaration is None:
        declaration = (
            ahead.declaration(checkpoint.documents)
            if ahead is not None
            else read_declaration(checkpoint.documents)
        )
    findings.extend(declaration.findings)
    findings.extend(_declaration_refusals(declaration, checkpoint))
    # the engine's view: without the config groups it drops before reading the others
    skipped = skipped_groups(profile, declaration)
    findings.extend(group_skipped_warnings(profile, declaration, skipped))
    engine_declaration = declaration
    if skipped and declaration.compressed_tensors is not None:
        kept = declaration.compressed_tensors.without_groups(frozenset(skipped))
        schemes = {k: v for k, v in declaration.schemes.items() if k not in skipped}
        engine_declaration = replace(declaration, compressed_tensors=kept, schemes=schemes)
    findings.extend(declaration_refusals(profile, engine_declaration))
    findings.extend(unread_findings(checkpoint))
    tensor_count = sum(len(shard.tensors) for shard in checkpoint.shards)
    facts = layer_facts(profile)
    model_config = read_model_config(checkpoint.documents)
    pattern_module = facts.pattern_module if facts is not None else "re"
    rename = engine_rename(model_config, facts)
    given = modules is not None  # used as given, and their names not matched aside
    if modules is None and ahead is not None:
        modules = ahead.modules(checkpoint.shards)
    if modules is None:
        modules = build_inventory(chain.from_iterable(s.tensors for s in checkpoint.shards))
    # the re: entries tried on the module names, half of them aside, while the tree is built
    lists = pattern_lists(declaration, engine_declaration, pattern_module) if not given else []
    matching = MatchingAhead(
        lists, list(modules) if lists else [], rename.module if rename is not None else None
    )
    try:
        tree = build_tree(modules, model_config, facts)
        mark_unquantized_layers(profile, modules, model_config)
        mark_transforms(modules, declaration.transform_leaves)
        findings.extend(transforms_unapplied(profile, declaration, modules))
        findings.extend(kv_cache_refusals(profile, declaration, facts, model_config.architecture))
        findings.extend(tree_findings(tree))
        findings.extend(unbuilt_bias_warnings(modules, model_config))
        # worked out here while a copy matches the names, else in the copy below
        complete = matching.forked
        if complete:
            findings.extend(completeness_refusals(modules, model_config))
        matching.take()
    finally:
        matching.close()
    # the producer's view (and the completeness check) worked out aside while this resolves
    later = FindingsAside(declaration, modules, model_config, profile.label, complete=complete)
    try:
        resolution = resolve(engine_declaration, modules, tree)
        memberships = resolution.memberships
        findings.extend(resolution.findings)
        alike = group_alike(modules, memberships)  # a MoE's experts are decided once per group
        spellings, refusals = check_all(declaration, modules, memberships, alike)
        refusals = dequantized_on_load(profile, modules, model_config, refusals)
        findings.extend(refusals)
        findings.extend(uncontracted(declaration, alike))
        findings.extend(block_refusals(declaration, modules, memberships))
        if checkpoint.has_weights:
            findings.extend(
                finding(
                    "declared-module-missing",
                    f"{key} is listed in the declaration and no tensor of it is shipped",
                    module=key,
                )
                for key in resolution.unmatched
            )
        refused = frozenset(f.module for f in refusals)
        arm_routing = profile.routing if routing in (None, "both") else routing
        arms, arm_findings = arm_rows(
            profile,
            env,
            gpu,
            declaration,
            modules,
            memberships,
            spellings,
            refused,
            arm_routing,
            alike=alike,
        )
        findings.extend(arm_findings)
        findings.extend(layer_refusals(profile, declaration, modules, memberships))
        findings.extend(
            loader_drops(profile, declaration, modules, memberships, model_config.architecture)
        )
        # the rows need no finding: written while the copy works
        module_rows = _module_rows(modules, memberships, spellings)
        producer, completeness = later.take()
    finally:
        later.close()
    findings.extend(completeness)
    if producer.unreadable is not None:
        findings.append(producer.unreadable)
    per_module = producer.per_module()
    if per_module is not None:
        findings.extend(
            disagreements(
                per_module,
                memberships,
                modules,
                "transformers" if declaration.bnb is not None else "compressed-tensors",
                profile.label,
            )
        )
    moves = (
        routing_moves(profile, env, gpu, declaration, modules, memberships, spellings)
        if routing == "both"
        else None
    )
    kv_shipped = sum(_operand_split(g.example)[0] * len(g.members) for g in alike)
    fate = kv_fate(profile, declaration, model_config, gpu)
    findings.extend(kv_dtype_refusals(profile, declaration, fate))
    findings.extend(kv_cache_ignored(profile, declaration, fate))
    if not fate.ignored and fate.refused is None:
        findings.extend(_kv_findings(declaration, kv_shipped, checkpoint.has_weights))
    # a KV cache quantized without a KV-cache method: the shipped scales are never loaded
    findings.extend(kv_scales_unloaded(profile, declaration, fate, kv_shipped))
    # an ignored KV cache is the model's dtype: only a scale that fails the load still matters,
    # where the engine loads the scales at all
    if fate.scales_loaded:
        kv_heads = kv_heads_of(dict(model_config.values))
        scale_findings = kv_scale_findings(
            declaration, modules, profile.kv_scales_filled_in, kv_heads
        )
        findings.extend(f for f in scale_findings if not fate.ignored or f.code in LOAD_FAILS_KV)
    findings.extend(_input_scale_notes(declaration, alike))
    # the engine's own words, for every finding it has them for (KV scales included)
    findings = quote_load_errors(profile, declaration, modules, memberships, findings)
    probe: ProbeInfo | None = None
    if probe_scalars:
        probe, probe_findings = probe_values(checkpoint, modules)
        findings.extend(probe_findings)
    # after the probe: what a shipped k_scale does to the logits depends on its value
    findings.extend(kv_scale_on_logits(profile, declaration, model_config, gpu, modules, probe))
    buckets = _buckets(declaration, alike, tensor_count)
    # the message breaks ties: a set has no order of its own (string hashes vary per process)
    rows = sorted(
        set(findings), key=lambda f: (-f.severity.rank, f.code, f.module, f.tensor, f.message)
    )
    by_severity: dict[Severity, list[FindingRow]] = defaultdict(list)
    for f in rows:
        by_severity[f.severity].append(
            FindingRow(
                code=f.code,
                severity=f.severity.value,
                module=f.module,
                tensor=f.tensor,
                message=f.message,
            )
        )
    verdict = (
        "refused"
        if by_severity[Severity.REFUSAL]
        else "warnings"
        if by_severity[Severity.WARNING]
        else "clean"
    )
    # freed at the process's end, not here, when it ends without teardown (the CLI)
    held(checkpoint, modules, tree, resolution, alike, spellings)
    origin = checkpoint.origin
    # Built from typed parts (every nested model validated where it was made); not validating
    # the whole again saves a pass over every module row. Tests validate the JSON it renders.
    report = Report.model_construct(
        verdict=verdict,
        source=SourceInfo(
            kind=origin.kind, location=origin.location, repo=origin.repo, revision=origin.revision
        ),
        declaration=_declaration_info(declaration, kv_shipped),
        engine=engine.model_copy(update={"routing": arm_routing}),
        totals=Totals(tensors=tensor_count, modules=len(modules), shards=len(checkpoint.shards)),
        buckets=buckets,
        arms=arms,
        routing_moves=moves,
        refusals=by_severity[Severity.REFUSAL],
        warnings=by_severity[Severity.WARNING],
        notes=by_severity[Severity.INFO],
        integrity=integrity,
        modules=module_rows,
        probe=probe,
        layer_tree=LayerTreeInfo(
            architecture=tree.architecture,
            facts=tree.facts,
            modelled=tree.modelled,
            cite=tree.cite,
        ),
    )
    return Audited(report, declaration, modules, tree, memberships, spellings)


def _module_rows(
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    spellings: Mapping[str, Spelling],
) -> list[ModuleRow]:
    """One row per module, sorted (validated once, with the report)."""
    names = sorted(modules)
    # each column looked up in C, then unpacked: a MoE report holds a quarter million rows
    resolved = list(map(memberships.__getitem__, names))
    counts = list(map(len, map(_OPERANDS, map(modules.__getitem__, names))))
    return [
        {
            "module": name,
            "bucket": bucket,
            "how": how,
            "rule": rule,
            "tensors": count,
            "shipped": spelling.family if spelling is not None else "kv-only",
        }
        for name, (bucket, how, rule), count, spelling in zip(
            names,
            resolved,
            counts,
            map(spellings.get, names),
            strict=True,
        )
    ]


_OPERANDS = attrgetter("operands")


def _declaration_refusals(declaration: Declaration, checkpoint: Checkpoint) -> list[Finding]:
    if declaration.family == "unreadable":
        return [
            finding(
                "declaration-unreadable",
                f"{declaration.source}: {declaration.reason}; nothing was resolved and "
                "the checkpoint is not treated as unquantized",
            )
        ]
    if declaration.family == "absent" and not checkpoint.has_weights:
        names = ", ".join(sorted(checkpoint.documents)) or "the source"
        return [finding("declaration-unreadable", f"{names} holds no quantization declaration")]
    if declaration.family == "absent":
        return [
            finding(
                "side-declaration-unread",
                f"{name} sits beside config.json, which declares no quantization: vLLM reads "
                f"{name} only when started with --quantization "
                f"{' or '.join(SIDE_DECLARATIONS[name])}, transformers never; this audit "
                "follows config.json, as an engine started without that option does",
                tensor=name,
            )
            for name in side_declarations(checkpoint)
        ]
    return []


def _kv_findings(declaration: Declaration, shipped: int, has_weights: bool) -> list[Finding]:
    if not has_weights:
        return []
    if declaration.kv is not None and shipped == 0:
        return [
            finding(
                "kv-scales-missing",
                f"{declaration.kv.where} declares a {declaration.kv.algo} KV cache and no "
                "k_scale/v_scale is shipped; engines fall back to a scale of 1.0 or fail",
            )
        ]
    if declaration.kv is None and shipped:
        return [
            finding(
                "kv-scales-undeclared",
                f"{shipped} KV-cache scales are shipped and no quantized KV cache is "
                "declared; they are counted in the kv_cache bucket only",
            )
        ]
    return []


def _input_scale_notes(declaration: Declaration, alike: Sequence[Alike]) -> list[Finding]:
    counts: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    for group in alike:
        info = group.example
        scheme = declaration.schemes.get(group.membership.bucket)
        if scheme is None or not scheme.weight_only or info.kind != "linear":
            continue
        totals[scheme.name] += len(group.members)
        if "input_scale" in info.operands or "input_global_scale" in info.operands:
            counts[scheme.name] += len(group.members)
    return [
        finding(
            "input-scale-unread",
            f"{scheme}: declared weight-only, and {count}/{totals[scheme]} modules ship an "
            "input scale that a weight-only arm does not read",
        )
        for scheme, count in sorted(counts.items())
    ]


def _operand_split(info: ModuleInfo) -> tuple[int, int, int]:
    """(KV scales, unclassified, the rest) among one module's operand names."""
    kinds = [classify_operand(op) for op in info.operands]
    kv = kinds.count(OperandKind.KV)
    unclassified = kinds.count(OperandKind.UNCLASSIFIED)
    return kv, unclassified, len(kinds) - kv - unclassified


def _parameters(info: ModuleInfo, spelling: Spelling | None, bits: int | None) -> int:
    """Parameters a module holds, counted as model cards count them: scales are not
    parameters, and packed weights count every value they pack (NVFP4 U8: two per byte;
    pack-quantized I32 and AWQ/GPTQ ``qweight``: 32 / bits per word, eight where no bits are
    declared)."""
    total = 0
    family = spelling.family if spelling else "none"
    for operand, entry in info.operands.items():
        if operand in WEIGHT_NAMES:
            factor = 1
            if entry.dtype == "U8" and family in ("nvfp4", "mxfp4", "awq"):
                factor = 2
            elif entry.dtype == "I32" and operand in ("weight_packed", "qweight"):
                factor = 32 // (bits or 4)
            elif operand == "qweight":
                factor = 8
            total += prod(entry.shape) * factor
        elif operand in MXFP4_BLOCKS:
            total += prod(entry.shape) * 2  # two E2M1 values a byte
        elif classify_operand(operand) is OperandKind.PLAIN:
            total += prod(entry.shape)
    return total


def _buckets(declaration: Declaration, alike: Sequence[Alike], total: int) -> list[Bucket]:
    """Tensors, modules and parameters per bucket, counted per group of modules alike."""
    tensors: Counter[str] = Counter()
    members: Counter[str] = Counter()
    parameters: Counter[str] = Counter()
    how: dict[str, Counter[str]] = defaultdict(Counter)
    for group in alike:
        info, n = group.example, len(group.members)
        kv, unclassified, rest = _operand_split(info)
        if rest:
            bucket = group.membership.bucket
            tensors[bucket] += rest * n
            members[bucket] += n
            how[bucket][group.membership.how] += n
            scheme = declaration.schemes.get(bucket)
            bits = scheme.weight_bits if scheme else None
            parameters[bucket] += _parameters(info, group.spelling, bits) * n
        if kv:
            tensors[KV_CACHE] += kv * n
            members[KV_CACHE] += n
        if unclassified:
            tensors[UNCLASSIFIED] += unclassified * n
            members[UNCLASSIFIED] += n
    counted = sum(tensors.values())
    if counted != total:
        raise AssertionError(f"buckets hold {counted} tensors of {total}")
    order = [*declaration.schemes, *SPECIAL_BUCKETS]
    descriptions = {name: scheme.describe() for name, scheme in declaration.schemes.items()}
    descriptions.update(
        {
            EXCLUDED: "declared unquantized by an exclude or ignore rule",
            UNLISTED: "matched by no rule: unquantized",
            KV_CACHE: "k/v (and q) cache scales",
            UNCLASSIFIED: "quantization-looking operands of no known family",
        }
    )
    extra = sorted(set(tensors) - set(order))
    return [
        Bucket(
            scheme=name,
            description=descriptions.get(name, ""),
            tensors=tensors[name],
            modules=members[name],
            membership=dict(sorted(how[name].items())),
            parameters=parameters[name],
        )
        for name in [*order, *extra]
        if name in (UNLISTED, KV_CACHE, UNCLASSIFIED)
        or tensors[name]
        or name in declaration.schemes
    ]


def _declaration_info(declaration: Declaration, kv_shipped: int) -> DeclarationInfo:
    rules = declaration.rules
    per_scheme: dict[str, int] = {}
    targets: dict[str, str] = {}
    if declaration.modelopt is not None and declaration.modelopt.layers is not None:
        per_scheme = dict(sorted(Counter(declaration.modelopt.layers.values()).items()))
    if declaration.compressed_tensors is not None:
        targets = dict(declaration.compressed_tensors.targets)
    return DeclarationInfo(
        family=declaration.family,
        source=declaration.source,
        method=declaration.method,
        algo=declaration.algo,
        producer=declaration.producer,
        schemes=[
            SchemeInfo(
                name=s.name, description=s.describe(), declared_arm=s.declared_arm, family=s.family
            )
            for s in declaration.schemes.values()
        ],
        rules=rules.rule_counts() if rules is not None else {},
        layers_per_scheme=per_scheme,
        excludes=list(rules.excludes_declared()) if rules is not None else [],
        targets=targets,
        kv_cache=KvInfo(
            algo=declaration.kv.algo, where=declaration.kv.where, scales_shipped=kv_shipped
        )
        if declaration.kv
        else None,
        considered=list(declaration.considered),
        reason=declaration.reason,
    )
