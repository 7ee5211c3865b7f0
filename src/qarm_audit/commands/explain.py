"""``qarm explain SOURCE NAME``: every rule tried for one module, and the one that decided.

:func:`trace` re-runs the resolver's strategies for ONE module, in the resolver's order, and
records each attempt: ``decided`` (the first that matched: the resolver's answer),
``shadowed`` (would also match, but an earlier rule decided), ``miss``, ``split`` (a fused
module whose shards are excluded unevenly) or ``n/a`` (does not apply to this module). It
reuses the resolver's own pattern sets and first-child scan; a test checks that its decision
is ``resolve()``'s for every module of every fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..check.spelling import spell
from ..declarations import (
    AwqRules,
    BnbRules,
    CompressedTensorsRules,
    Declaration,
    Fp8Rules,
    GptqRules,
    ModelOptRules,
    Mxfp4Rules,
    read_declaration,
)
from ..engines.profile import Profile, load_profile, resolve_env
from ..errors import UsageError
from ..layers import LayerTree
from ..modules.inventory import ModuleInfo, build_inventory
from ..modules.operands import QUANT_OPERANDS, classify_operand, split_name
from ..report.explain_model import (
    Attempt,
    Explanation,
    ModuleExplanation,
    OperandRow,
)
from ..report.model import ArmRow
from ..resolve.compressed_tensors import CompressedTensorsResolver
from ..resolve.resolver import (
    EXCLUDED,
    INHERITED,
    UNLISTED,
    Membership,
    _Excludes,
    _language_model_aliases,
    _ModelOpt,
    engine_class,
    layer_override,
)
from ..sources import Checkpoint, open_source
from .audit import DEFAULT_ENGINE, audit_in_parts
from .closest import closest_names
from .explain_bnb import trace_bnb
from .explain_fp8 import trace_fp8
from .explain_gptq import trace_awq, trace_gptq
from .explain_mxfp4 import trace_mxfp4

DECIDED, SHADOWED, MISS, SPLIT, NA = "decided", "shadowed", "miss", "split", "n/a"


def _q(text: str) -> str:
    """A name or pattern quoted as written (``repr`` would double a regex's backslashes)."""
    return f"'{text}'"


class NameNotFoundError(UsageError):
    """The name is no module, tensor or engine module of the checkpoint."""

    def __init__(self, where: str, problem: str, suggestions: list[str]) -> None:
        super().__init__(where, problem)
        self.suggestions = suggestions


# --- the trace -----------------------------------------------------------------------------


class _Log:
    """Attempts in order; the first match decides, later matches are shadowed."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self.decision: Membership | None = None

    def hit(self, step: str, tried: str, membership: Membership, detail: str) -> None:
        outcome = DECIDED if self.decision is None else SHADOWED
        if self.decision is None:
            self.decision = membership
        self.attempts.append(
            Attempt(
                step=step, tried=tried, outcome=outcome, detail=detail, bucket=membership.bucket
            )
        )

    def miss(self, step: str, tried: str, detail: str = "no match") -> None:
        self.attempts.append(Attempt(step=step, tried=tried, outcome=MISS, detail=detail))

    def na(self, step: str, detail: str) -> None:
        self.attempts.append(Attempt(step=step, tried="", outcome=NA, detail=detail))

    def split(self, step: str, tried: str, detail: str) -> None:
        self.attempts.append(Attempt(step=step, tried=tried, outcome=SPLIT, detail=detail))

    def overrule(self, step: str, tried: str, membership: Membership, detail: str) -> None:
        """The engine's layer decides after all: what the rules decided is shadowed."""
        self.attempts = [
            a.model_copy(update={"outcome": SHADOWED}) if a.outcome == DECIDED else a
            for a in self.attempts
        ]
        self.attempts.append(
            Attempt(
                step=step, tried=tried, outcome=DECIDED, detail=detail, bucket=membership.bucket
            )
        )
        self.decision = membership


def trace(
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    name: str,
    tree: LayerTree | None = None,
) -> tuple[list[Attempt], Membership]:
    """Every resolution rule tried for module ``name``, and the membership that decided.

    Pure: the declaration and the inventory (annotated by ``tree``) in, attempts out.
    """
    info = modules[name]
    log = _Log()
    rules = declaration.rules
    if rules is not None:
        _TRACERS[type(rules)](log, rules, modules, info, tree)
    else:
        reason = f": {declaration.reason}" if declaration.reason else ""
        log.hit(
            "declaration",
            name,
            Membership(UNLISTED, "none"),
            f"no quantization rules were read ({declaration.family}{reason})",
        )
    decision = log.decision
    if decision is None:
        decision = Membership(UNLISTED, "none")
        log.hit("no rule matched", name, decision, "unlisted: unquantized")
    override = (
        layer_override(info)
        if decision.declared_quantized and decision.how not in INHERITED
        else None
    )
    if override is not None and log.decision is not None:
        what = (
            "is built without a quant config"
            if override.how == "no-quant-config"
            else "takes no quant method (engines quantize Linear and MoE layers only)"
        )
        log.overrule(
            "engine layer",
            f"{info.engine_name} ({override.rule})",
            override,
            f"the engine's {override.rule} {what}: unquantized whatever the declaration says",
        )
        decision = override
    return log.attempts, decision


def _members(modules: Mapping[str, ModuleInfo], info: ModuleInfo) -> list[ModuleInfo]:
    return [m for m in modules.values() if m.engine_name == info.engine_name]


def _fused(engine: str, members: list[ModuleInfo]) -> bool:
    return len(members) > 1 and bool(members[0].fused_shards)


def _entry(written: str, matched: str) -> str:
    return f"entry {_q(written)}" + (f" (as {_q(matched)})" if written != matched else "")


Tracer = Callable[[_Log, Any, Mapping[str, ModuleInfo], ModuleInfo, LayerTree | None], None]

_TRACERS: dict[type, Tracer] = {
    ModelOptRules: lambda log, rules, modules, info, tree: _trace_modelopt(
        log, rules, modules, info, tree is None or tree.has_mapper
    ),
    CompressedTensorsRules: lambda log, rules, modules, info, _: _trace_compressed_tensors(
        log, rules, modules, info
    ),
    Fp8Rules: lambda log, rules, modules, info, _: trace_fp8(log, rules, modules, info),
    BnbRules: lambda log, rules, _, info, __: trace_bnb(log, rules, info),
    GptqRules: lambda log, rules, modules, info, _: trace_gptq(log, rules, modules, info),
    AwqRules: lambda log, rules, modules, info, _: trace_awq(log, rules, modules, info),
    Mxfp4Rules: lambda log, rules, modules, info, _: trace_mxfp4(log, rules, modules, info),
}
"""Each declaration format's step-by-step trace of one module (as :mod:`qarm_audit.resolve`
registers each format's resolver)."""


def _trace_modelopt(
    log: _Log,
    rules: ModelOptRules,
    modules: Mapping[str, ModuleInfo],
    info: ModuleInfo,
    split_star: bool = True,
) -> None:
    engine = info.engine_name
    members = _members(modules, info)
    on = f" on the engine's name {engine}" if engine != info.name else ""
    if not rules.excludes:
        log.na("exclude_modules", "the declaration lists no exclude_modules / ignore entries")
    else:
        ex = _Excludes(rules.excludes, split_star)
        if engine in ex.exact:
            written = ex.origin[engine]
            how = "exact" if written == engine else "wildcard"
            log.hit(
                "exclude: exact",
                engine,
                Membership(EXCLUDED, how, written),
                _entry(written, engine) + on,
            )
        else:
            log.miss("exclude: exact", engine)
        if ".experts" in engine:
            entry = next((e for e in ex.experts if engine in e), None)
            if entry is not None:
                log.hit(
                    "exclude: experts",
                    engine,
                    Membership(EXCLUDED, "exact", entry),
                    f"entry {_q(entry)} names an expert of {engine}",
                )
            else:
                log.miss("exclude: experts", engine, "no entry names one of its experts")
        else:
            log.na("exclude: experts", "not a routed-experts module")
        if ex.wildcard.patterns:
            wildcard = ex.wildcard.first(engine)
            if wildcard is not None:
                log.hit(
                    "exclude: wildcard",
                    engine,
                    Membership(EXCLUDED, "wildcard", wildcard),
                    f"pattern {_q(wildcard)} matches the whole name (fnmatch: * crosses dots)",
                )
            else:
                log.miss("exclude: wildcard", engine)
        else:
            log.na("exclude: wildcard", "no wildcard entries")
        stripped = engine.removeprefix("language_model.")
        substring = ex.substring.first(engine) or (
            ex.substring.first(stripped) if stripped != engine else None
        )
        if substring is not None:
            written = ex.origin.get(substring, substring)
            log.hit(
                "exclude: substring",
                engine,
                Membership(EXCLUDED, "substring", written),
                f"{_q(substring)} occurs inside the name (vLLM's legacy raw-substring stage)",
            )
        elif ex.everything:
            log.hit(
                "exclude: substring",
                engine,
                Membership(EXCLUDED, "substring", ""),
                "the empty entry '' occurs inside every name (vLLM's raw-substring stage)",
            )
        else:
            log.miss("exclude: substring", engine)
        if _fused(engine, members):
            listed = [m for m in members if m.name in ex.exact]
            if listed and len(listed) == len(members):
                log.hit(
                    "exclude: fused shards",
                    ", ".join(m.name for m in members),
                    Membership(EXCLUDED, "exact", listed[0].name),
                    f"every shard of {engine} is listed",
                )
            elif listed:
                log.split(
                    "exclude: fused shards",
                    ", ".join(m.name for m in members),
                    f"{[m.leaf for m in listed]} listed and "
                    f"{[m.leaf for m in members if m not in listed]} not: not excluded, and "
                    "fused-shards-disagree is refused",
                )
            else:
                log.miss("exclude: fused shards", ", ".join(m.name for m in members))
        else:
            log.na("exclude: fused shards", "not a shard of a fused module")
    if rules.layers is None:
        default = rules.default_scheme
        if default is None:
            log.na("class: Linear", "no default scheme")
        elif info.kind == "linear":
            log.hit(
                "class: Linear",
                info.name,
                Membership(default.name, "class", "Linear"),
                f"quant_algo {rules.algo} applies to every Linear not excluded",
            )
        else:
            log.miss("class: Linear", info.name, f"a module of kind {info.kind!r} is no Linear")
        return
    layers = rules.layers
    resolver = _ModelOpt(rules, modules, split_star)
    aliases = list(dict.fromkeys(_language_model_aliases(info.name)))
    exact = next((c for c in aliases if c in layers), None)
    if exact is not None:
        log.hit(
            "quantized_layers: exact",
            ", ".join(aliases),
            Membership(layers[exact], "exact", exact),
            f"entry {_q(exact)} -> {layers[exact]}",
        )
    else:
        log.miss("quantized_layers: exact", ", ".join(aliases))
    step = "quantized_layers: experts" if engine.endswith(".experts") else "quantized_layers: fused"
    if engine != info.name:
        engine_aliases = list(dict.fromkeys(_language_model_aliases(engine)))
        key = next((c for c in engine_aliases if c in layers), None)
        if key is not None:
            how = "experts" if engine.endswith(".experts") else "fused"
            log.hit(
                step,
                ", ".join(engine_aliases),
                Membership(layers[key], how, key),
                f"entry {_q(key)} names the engine module -> {layers[key]}",
            )
        else:
            log.miss(step, ", ".join(engine_aliases))
    else:
        log.na("quantized_layers: fused", "not a fused shard or routed expert")
    prefix_hit = False
    for candidate in aliases:
        key = resolver._first_child(candidate)
        if key is not None:
            children = [k for k in layers if k.startswith(candidate + ".")]
            algos = sorted({layers[k] for k in children})
            disagree = f"; its listed children declare {algos}" if len(algos) > 1 else ""
            log.hit(
                "quantized_layers: prefix",
                candidate + ".",
                Membership(layers[key], "prefix", key),
                f"first listed child {_q(key)} (of {len(children)} listed under it, in map order) "
                f"-> {layers[key]}{disagree}",
            )
            prefix_hit = True
            break
    if not prefix_hit:
        log.miss("quantized_layers: prefix", ", ".join(a + "." for a in aliases), "no listed child")
    if engine.endswith(".experts"):
        parent = engine[: -len(".experts")]
        key = resolver._first_child(parent)
        if key is not None:
            log.hit(
                "quantized_layers: experts-parent",
                parent + ".",
                Membership(layers[key], "experts-parent", key),
                f"first listed child {_q(key)} of the experts' parent -> {layers[key]}",
            )
        else:
            log.miss("quantized_layers: experts-parent", parent + ".", "no listed child")
    else:
        log.na("quantized_layers: experts-parent", "not a routed-experts module")
    if len(members) < 2 or (log.decision is not None and log.decision.bucket == EXCLUDED):
        return
    # vLLM looks a fused or experts layer up once, by its own name (resolver._mixed_layer)
    decided = _ModelOpt(rules, {m.name: m for m in members}, split_star).run().memberships
    once = decided[info.name]
    if once.how in ("fused", "experts", "experts-parent") and once != log.decision:
        what = "experts layer" if engine.endswith(".experts") else "fused layer"
        log.overrule(
            f"quantized_layers: {what}",
            engine,
            once,
            f"vLLM looks the {what} up once for all {len(members)} of its modules: "
            f"{once.bucket} (entry {_q(once.rule)})",
        )


def _trace_compressed_tensors(
    log: _Log, rules: CompressedTensorsRules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    _trace_ct_rules(log, rules, modules, info)
    members = _members(modules, info)
    if not _fused(info.engine_name, members):
        return
    # vLLM decides a fused layer once (see compressed_tensors.CompressedTensorsResolver._fused)
    group = {m.name: m for m in members}
    decided = CompressedTensorsResolver(rules, group).run().memberships[info.name]
    if log.decision is not None and decided != log.decision:
        log.overrule(
            "fused layer",
            info.engine_name,
            decided,
            f"vLLM resolves the fused layer once for every shard: {decided.bucket} "
            f"({decided.how}{' ' + _q(decided.rule) if decided.rule else ''})",
        )


def _trace_ct_rules(
    log: _Log, rules: CompressedTensorsRules, modules: Mapping[str, ModuleInfo], info: ModuleInfo
) -> None:
    ct = CompressedTensorsResolver(rules, modules)
    engine = info.engine_name
    names = [engine, info.name] if _fused(engine, _members(modules, info)) else [info.name]
    if len(names) == 1:
        log.na("ignore (fused module)", "not a shard of a fused module")
    for name in names:
        scope = " (fused module)" if name != info.name else ""
        if not rules.ignore:
            log.na(f"ignore{scope}", "the declaration lists no ignore entries")
            continue
        if name in ct.ignore_exact:
            log.hit(
                f"ignore: exact{scope}",
                name,
                Membership(EXCLUDED, "exact", name),
                f"entry {_q(name)}",
            )
        else:
            log.miss(f"ignore: exact{scope}", name)
        i = ct.ignore_regex.first(name)
        if i is not None:
            pattern = "re:" + ct.ignore_regex_src[i]
            log.hit(
                f"ignore: regex{scope}",
                name,
                Membership(EXCLUDED, "regex", pattern),
                f"{_q(pattern)} re.match-es the name (start-anchored)",
            )
        elif ct.ignore_regex_src:
            log.miss(f"ignore: regex{scope}", name)
        else:
            log.na(f"ignore: regex{scope}", "no re: ignore entries")
    if len(names) > 1:
        whole = ct.target_of_name(engine)
        if whole is not None:
            log.hit(
                "targets (fused module)",
                engine,
                whole,
                f"target {_q(whole.rule)} names the fused layer itself: every shard takes "
                f"group {whole.bucket}",
            )
        else:
            log.miss("targets (fused module)", engine)
    exact = ct.target_exact.get(info.name)
    j = ct.target_regex.first(info.name)
    regex = ct.regex_targets[j][0] if j is not None else None
    for how, index in (("exact", exact), ("regex", regex)):
        if index is None:
            log.miss(f"targets: {how}", info.name)
    # the earliest target in declaration order wins, whether exact or regex
    hits = sorted(
        (index, how) for how, index in (("exact", exact), ("regex", regex)) if index is not None
    )
    for index, how in hits:
        target = ct.targets[index]
        group = rules.targets[target]
        later = f" (declared after target #{hits[0][0]})" if index != hits[0][0] else ""
        log.hit(
            f"targets: {how}",
            info.name,
            Membership(group, how, target),
            f"target #{index} {_q(target)} of group {group}{later}",
        )
    cls = engine_class(info)
    if cls is None:
        log.miss("targets: class", info.name, f"a {info.kind} module has no class a target names")
        return
    for index, target in enumerate(ct.targets):
        if not target.startswith("re:") and "." not in target and target.lower() in cls:
            group = rules.targets[target]
            log.hit(
                "targets: class",
                f"{info.name} (class {cls})",
                Membership(group, "class", target),
                f"target #{index} {_q(target)} names the module's class -> group {group}",
            )
            return
    log.miss("targets: class", info.name, f"no class target names a {cls}")


# --- explain ---------------------------------------------------------------------------------


def _lookup(modules: Mapping[str, ModuleInfo], name: str) -> tuple[str, list[str], str | None]:
    """(what matched, module names, tensor) for a module, tensor or engine-module name."""
    if name in modules:
        return "module", [name], None
    module, operand = split_name(name)
    if module in modules and operand in modules[module].operands:
        return "tensor", [module], name
    members = sorted(m.name for m in modules.values() if m.engine_name == name)
    if members:
        return "engine module", members, None
    return "", [], None


def _not_found(
    checkpoint: Checkpoint, declaration: Declaration, modules: Mapping[str, ModuleInfo], name: str
) -> NameNotFoundError:
    suggestions = closest_names(modules, name)
    declared = ""
    mo, ct = declaration.modelopt, declaration.compressed_tensors
    if (mo is not None and (name in (mo.layers or {}) or name in mo.excludes)) or (
        ct is not None and (name in ct.targets or name in ct.ignore)
    ):
        declared = "; the declaration names it, and no tensor of it is shipped"
    closest = f"; closest: {', '.join(suggestions)}" if suggestions else "; nothing close"
    where = checkpoint.origin.location
    return NameNotFoundError(
        where, f"no module or tensor named {_q(name)}{declared}{closest}", suggestions
    )


def _operands(info: ModuleInfo, shard_of: Mapping[str, str]) -> list[OperandRow]:
    return [
        OperandRow(
            operand=operand,
            tensor=entry.name,
            dtype=entry.dtype,
            shape=list(entry.shape),
            shard=shard_of.get(entry.name, ""),
            kind=classify_operand(operand).value,
            family=QUANT_OPERANDS.get(operand, ""),
        )
        for operand, entry in sorted(info.operands.items())
    ]


def explain(
    source: str | Checkpoint,
    name: str,
    *,
    engine: str | Profile = DEFAULT_ENGINE,
    env: Mapping[str, str] | None = None,
    gpu: str | None = None,
    require_pinned: bool = False,
) -> Explanation:
    """Explain how ``name`` (a module, a tensor, or a fused/experts engine module) resolves.

    Raises :class:`NameNotFoundError` (exit 2) with the closest names when nothing matches.
    """
    from ..engines.arms import arm_rows, parse_gpu

    profile = engine if isinstance(engine, Profile) else load_profile(engine)
    settings = resolve_env(profile, dict(env or {}))
    try:
        capability = parse_gpu(gpu) if gpu else None
    except ValueError as exc:
        raise UsageError("--gpu", str(exc)) from None
    checkpoint = (
        source
        if isinstance(source, Checkpoint)
        else open_source(source, require_pinned=require_pinned)
    )
    declaration = read_declaration(checkpoint.documents)
    modules = build_inventory([e for s in checkpoint.shards for e in s.tensors])
    matched, names, tensor = _lookup(modules, name)
    if not names:  # before the audit: an unknown name needs none
        raise _not_found(checkpoint, declaration, modules, name)
    # the audit goes on from what the lookup built, and hands back what it builds after that
    audited = audit_in_parts(
        checkpoint, engine=profile, env=settings, gpu=gpu, declaration=declaration, modules=modules
    )
    report, tree = audited.report, audited.tree
    memberships, spellings = audited.memberships, audited.spellings
    shard_of = {e.name: s.file for s in checkpoint.shards for e in s.tensors}
    rows = [*report.refusals, *report.warnings, *report.notes]
    out = []
    for module in names:
        info = modules[module]
        attempts, decided = trace(declaration, modules, module, tree)
        membership = memberships[module]
        scheme = (
            declaration.schemes.get(membership.bucket) if membership.declared_quantized else None
        )
        spelling = spellings.get(module) or spell(info)
        own = {module, info.engine_name}
        findings = [
            r
            for r in rows
            if r.code != "declared-arm-differs"  # per scheme, not per module: see the arm rows
            and (r.module in own or r.tensor.startswith(module + "."))
        ]
        arms: list[ArmRow] = []
        arm_note = None
        if info.kind != "linear":
            arm_note = f"not a Linear ({info.kind}): engines route Linear modules only"
        elif not membership.declared_quantized:
            arm_note = f"{membership.bucket}: the engine loads it unquantized"
        elif module not in spellings:
            arm_note = "it ships only KV-cache scales"
        else:
            arms, _ = arm_rows(
                profile,
                settings,
                capability,
                declaration,
                {module: info},
                {module: membership},
                {module: spellings[module]},
            )
        verdict = (
            "refused"
            if any(r.severity == "refusal" for r in findings)
            else "warnings"
            if any(r.severity == "warning" for r in findings)
            else "clean"
        )
        out.append(
            ModuleExplanation(
                module=module,
                engine_name=info.engine_name,
                kind=info.kind,
                fused_shards=list(info.fused_shards),
                layer_kind=info.layer_kind,
                layer_class=info.layer_class,
                quant_config=info.quant_config,
                layer_tree=tree.facts,
                bucket=membership.bucket,
                how=membership.how,
                rule=membership.rule,
                scheme=scheme.describe() if scheme else None,
                attempts=attempts if decided == membership else _disagree(attempts, membership),
                operands=_operands(info, shard_of),
                shipped=spelling.family,
                shipped_detail=spelling.detail,
                verdict=verdict,
                findings=findings,
                arms=arms,
                arm_note=arm_note,
            )
        )
    decl = report.declaration
    return Explanation(
        query=name,
        matched=matched,
        tensor=tensor,
        source=report.source,
        declaration=f"{decl.algo or decl.family} ({decl.family}) via {decl.source or 'nothing'}",
        engine=report.engine,
        modules=out,
    )


def _disagree(attempts: list[Attempt], membership: Membership) -> list[Attempt]:
    """Never expected (a test holds the trace to the resolver); say so rather than mislead."""
    return [
        *attempts,
        Attempt(
            step="resolver",
            tried="",
            outcome=DECIDED,
            detail=f"the resolver decided {membership.bucket} ({membership.how} "
            f"{_q(membership.rule)}); the trace above disagrees: please report this",
            bucket=membership.bucket,
        ),
    ]
