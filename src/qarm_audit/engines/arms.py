"""The declared-versus-executed arm line: for each declared scheme, what an engine would run.

Without a GPU the line does not guess one: each module is decided on every capability of the
standard set, and a row holds for the capabilities that give it the same decision (``sm80-sm90``,
``sm100+``). Routing is the profile's own unless asked otherwise: ``declared`` shows the rules the
declaration's view of each module (its scheme, and the operands that scheme reads), ``probe`` the
shipped view (the spelling and the tensor names).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, contains, not_

from ..check.alike import Alike, group_alike
from ..check.crosscheck import contract
from ..check.spelling import Spelling
from ..declarations import Declaration, Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..modules.operands import OperandKind, classify_operand
from ..report.model import ArmRow, RoutingMove
from ..resolve.resolver import Membership, declared_scheme
from .profile import Profile, View, select, uses_gpu

_NAME = attrgetter("name")

DECIDING_OPERANDS = ("input_scale", "input_global_scale")
"""Operands whose presence moves an arm (static activation scales)."""

STANDARD_GPUS = (80, 89, 90, 100, 120, 121)
"""The capabilities the arm line is decided on when no ``--gpu`` is given."""

NO_ARM = "none"
UNKNOWN_ARM = "unknown"
"""The profile does not model the engine's choice: no prediction, no finding."""

GPU_NAMES = {
    "a100": 80,
    "a10": 86,
    "a10g": 86,
    "rtx3090": 86,
    "l4": 89,
    "l40": 89,
    "l40s": 89,
    "rtx4090": 89,
    "h100": 90,
    "h200": 90,
    "gh200": 90,
    "b200": 100,
    "gb200": 100,
    "b300": 103,
    "gb300": 103,
    "rtx5090": 120,
    "rtxpro6000": 120,
    "gb10": 121,
    "dgxspark": 121,
}


def parse_gpu(text: str) -> int:
    """``sm90``, ``90``, ``9.0`` or a common name (``H100``, ``RTX 5090``) -> 90."""
    key = text.lower().replace(" ", "").replace("-", "").replace("_", "")
    if key in GPU_NAMES:
        return GPU_NAMES[key]
    key = key.removeprefix("sm")
    if "." in key:
        major, _, minor = key.partition(".")
        key = major + minor
    if key.isascii() and key.isdigit() and 70 <= int(key) <= 200:
        return int(key)
    raise ValueError(
        f"unknown GPU {text!r}: give sm80..sm121, or one of {', '.join(sorted(GPU_NAMES))}"
    )


def gpu_label(caps: Sequence[int], standard: Sequence[int] = STANDARD_GPUS) -> str | None:
    """Capabilities of the standard set as ranges: ``sm80-sm90``, ``sm100+``; None for all."""
    chosen = set(caps)
    if chosen >= set(standard):
        return None
    runs: list[tuple[int, int]] = []
    for i, cap in enumerate(standard):
        if cap not in chosen:
            continue
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    parts = []
    for first, last in runs:
        if last == len(standard) - 1 and first != last:
            parts.append(f"sm{standard[first]}+")
        elif first == last:
            parts.append(f"sm{standard[first]}")
        else:
            parts.append(f"sm{standard[first]}-sm{standard[last]}")
    return ", ".join(parts)


@dataclass(frozen=True)
class ArmDecision:
    declared: str
    executed: str
    reason: str
    note: str | None
    log: str | None
    kernel: str | None = None
    error: str | None = None
    drops: tuple[str, ...] = ()
    source: str | None = None


@dataclass(frozen=True)
class Outcome:
    """One decision and the capabilities it holds on."""

    decision: ArmDecision
    caps: tuple[int | None, ...]
    gpu: str | None
    """The row label: ``sm90`` for a given GPU, a range, or None when it holds everywhere."""
    total: bool
    """It holds for the GPU asked about, or for every capability of the standard set."""


def declared_operands(scheme: Scheme | None, shipped: Iterable[str]) -> frozenset[str]:
    """The operands the declaration says a module has: the shipped ones, less every activation
    scale a weight-only scheme does not read, plus those a static scheme requires; for a module
    declared unquantized, only its plain parameters."""
    names = {n for n in shipped if n not in DECIDING_OPERANDS}
    if scheme is None:
        return frozenset(n for n in names if classify_operand(n) is OperandKind.PLAIN)
    spec = contract(scheme)
    if spec is not None:
        names |= {op.name for op in spec if op.name in DECIDING_OPERANDS and op.required}
    elif scheme.static_activations:
        names.add("input_scale")
    return frozenset(names)


_NVFP4_ENTRY: dict[int, tuple[Mapping[str, str], bool]] = {}


def _has_nvfp4_entry(layers: Mapping[str, str]) -> bool:
    """Whether a MIXED_PRECISION map lists an NVFP4 or W4A16_NVFP4 layer (SGLang upper-cases
    before it asks); remembered per map, which every module of an audit shares."""
    hit = _NVFP4_ENTRY.get(id(layers))
    if hit is None or hit[0] is not layers:
        found = not {a.upper() for a in set(layers.values())}.isdisjoint(("NVFP4", "W4A16_NVFP4"))
        _NVFP4_ENTRY.clear()
        hit = _NVFP4_ENTRY[id(layers)] = (layers, found)
    return hit[1]


def make_view(
    declaration: Declaration,
    scheme: Scheme | None,
    *,
    routing: str,
    module: str,
    shipped: Spelling | None,
    operands: Iterable[str],
) -> View:
    layers = declaration.modelopt.layers if declaration.modelopt is not None else None
    mixed = layers is not None
    mixed_nvfp4 = layers is not None and _has_nvfp4_entry(layers)
    names = frozenset(operands)
    if routing == "probe":
        family = shipped.family if shipped is not None else (scheme.family if scheme else "none")
        seen = names
    else:
        family = scheme.family if scheme else "none"
        seen = declared_operands(scheme, names)
    return View(
        declared_family=scheme.family if scheme else "unquantized",
        declared_algo=scheme.algo if scheme else "",
        declared_arm=scheme.declared_arm if scheme else "unquantized",
        declared_strategy=(scheme.weight_strategy or "") if scheme else "",
        declared_activation=scheme.activation_words if scheme else "none",
        declared_format=(scheme.format or "") if scheme else "",
        config_format=declaration.config_format,
        declared_group_size=(scheme.group_size or 0) if scheme else 0,
        declared_symmetric=scheme.weight_symmetric if scheme else True,
        declared_actorder=scheme is not None and scheme.actorder is not None,
        producer=scheme.producer if scheme else (declaration.method or ""),
        mixed=mixed and scheme is not None,
        mixed_nvfp4=mixed_nvfp4 and scheme is not None,
        declaration_form=declaration.form,
        declaration_file=declaration.source.split(":", 1)[0],
        groups_weight_only=declaration.groups_weight_only,
        module=module,
        shipped=family,
        operands=seen,
    )


@dataclass
class Decider:
    """Decides views under one profile and environment, on one GPU or the standard set."""

    profile: Profile
    env: dict[str, str]
    gpu: int | None
    _cache: dict[tuple[object, ...], ArmDecision] = field(default_factory=dict)
    _outcomes: dict[tuple[object, ...], list[Outcome]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.caps: tuple[int | None, ...] = (
            (self.gpu,)
            if self.gpu is not None or not uses_gpu(self.profile)
            else tuple(STANDARD_GPUS)
        )
        self._contains = sorted({s for r in self.profile.rules for s in r.module_contains or ()})
        self._named = frozenset(
            op for r in self.profile.rules for op in (*r.operands_present, *r.operands_absent)
        )
        """The operands some rule names: a view's others cannot change a decision."""

    @property
    def splits(self) -> bool:
        """Whether module names can tell modules alike apart (``module_contains`` rules)."""
        return bool(self._contains)

    def split_by_marks(self, members: list[ModuleInfo]) -> list[list[ModuleInfo]]:
        """``members`` in chunks of equal :meth:`marks`, each in the order given."""
        if not self._contains:
            return [members]
        names = list(map(_NAME, members))
        # a string no name holds is not in them joined either: one search each rules most out
        joined = "\n".join(names)
        held = [s for s in self._contains if s in joined]
        if not held:
            return [members]
        # column by column in C: whether each name holds each string
        columns = [list(map(contains, names, repeat(s))) for s in held]
        if len(columns) == 1:  # two chunks at most, each taken in C
            column = columns[0]
            if column.count(True) in (0, len(column)):
                return [members]
            holding = list(compress(members, column))
            lacking = list(compress(members, map(not_, column)))
            return [holding, lacking] if column[0] else [lacking, holding]
        marks = list(zip(*columns, strict=True))
        if len(set(marks)) == 1:
            return [members]
        chunks: dict[tuple[bool, ...], list[ModuleInfo]] = {}
        for info, mark in zip(members, marks, strict=True):
            chunks.setdefault(mark, []).append(info)
        return list(chunks.values())

    def marks(self, module: str) -> tuple[bool, ...]:
        """Which of the profile's ``module_contains`` strings the name holds."""
        return tuple(s in module for s in self._contains)

    def key(self, view: View) -> tuple[object, ...]:
        """What the rules can see of the view, as a plain tuple: every field but the module
        name (seen only through the module_contains marks) and the operands no rule names."""
        return (
            view.declared_family,
            view.declared_algo,
            view.declared_arm,
            view.declared_strategy,
            view.declared_activation,
            view.declared_format,
            view.config_format,
            view.declared_group_size,
            view.declared_symmetric,
            view.declared_actorder,
            view.producer,
            view.mixed,
            view.declaration_form,
            view.groups_weight_only,
            view.shipped,
            view.operands & self._named,
            self.marks(view.module),
        )

    def decide(self, view: View, cap: int | None) -> ArmDecision:
        key = (*self.key(view), cap)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._decide(view, cap)
        return hit

    def _decide(self, view: View, cap: int | None) -> ArmDecision:
        rule = select(self.profile, view, self.env, cap)
        if rule is None:
            return ArmDecision(
                view.declared_arm,
                NO_ARM,
                f"no rule of profile {self.profile.name} applies",
                None,
                None,
            )
        return ArmDecision(
            view.declared_arm,
            rule.arm,
            rule.reason,
            rule.note,
            rule.log,
            kernel=rule.kernel,
            error=rule.error,
            drops=tuple(rule.drops),
            source=rule.source,
        )

    def outcomes(self, view: View) -> list[Outcome]:
        """Every distinct decision for ``view`` with the capabilities it holds on (the same
        list for views the rules cannot tell apart)."""
        key = self.key(view)
        hit = self._outcomes.get(key)
        if hit is None:
            hit = self._outcomes[key] = self._outcomes_of(view)
        return hit

    def _outcomes_of(self, view: View) -> list[Outcome]:
        by: dict[ArmDecision, list[int | None]] = {}
        for cap in self.caps:
            by.setdefault(self.decide(view, cap), []).append(cap)
        out = []
        for decision, caps in by.items():
            if self.gpu is not None:
                label: str | None = f"sm{self.gpu}"
            elif len(self.caps) == 1:
                label = None
            else:
                label = gpu_label([c for c in caps if c is not None])
            out.append(Outcome(decision, tuple(caps), label, self.gpu is not None or label is None))
        return out

    def order(self, label: str | None) -> int:
        """Sort key of a row label: rows for every GPU first, then by lowest capability."""
        if label is None:
            return -1
        first = label.split(",")[0].strip().removeprefix("sm").rstrip("+").split("-")[0]
        return int(first) if first.isdigit() else 0


def _error_text(decision: ArmDecision, algo: str, gpu: str | None) -> str:
    if not decision.error:
        return ""
    bare = (gpu or "").removeprefix("sm")
    capability = bare if bare.isdigit() else gpu or "<capability>"
    text = decision.error.replace("{algo}", algo).replace("{gpu}", capability)
    return f'; the engine raises: "{text}"'


def _shipping(operand: str, chunks: Sequence[list[ModuleInfo]]) -> int:
    """Members that ship ``operand``; a chunk's members share one layout, so its first tells."""
    return sum(len(chunk) for chunk in chunks if operand in chunk[0].operands)


def _drop_note(decision: ArmDecision, chunks: Sequence[list[ModuleInfo]]) -> str:
    total = sum(map(len, chunks))
    notes = []
    for operand in decision.drops:
        count = _shipping(operand, chunks)
        if count:
            notes.append(f"{operand} shipped on {count}/{total} but not read on this arm")
    return "".join(f"; {n}" for n in notes)


def arm_rows(
    profile: Profile,
    env: dict[str, str],
    gpu: int | None,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    spellings: Mapping[str, Spelling],
    refused: frozenset[str] = frozenset(),
    routing: str | None = None,
    alike: Sequence[Alike] | None = None,
) -> tuple[list[ArmRow], list[Finding]]:
    """One row per (scheme, declared arm, executed arm, GPUs); refusals where no arm exists.

    A module already refused for what it ships is not refused again for having no arm. With no
    tensor names at all (a declaration alone), a profile that routes by the declaration still
    gives one row per declared scheme, on the operands the scheme requires. ``alike`` is
    :func:`~.alike.group_alike` of the same modules, when the caller has it already.
    """
    routing = routing or profile.routing
    decider = Decider(profile, env, gpu)
    if not modules:
        if routing != "declared":
            return [], []
        return _declaration_rows(decider, declaration)
    if alike is None:
        alike = group_alike(modules, memberships, spellings)
    # Each value: chunks of modules alike (one layout each), in module order of their first.
    groups: dict[tuple[str, ArmDecision, str | None], list[list[ModuleInfo]]] = {}
    findings: list[Finding] = []
    views: dict[tuple[object, ...], View] = {}
    for group in alike:
        membership, spelling = group.membership, group.spelling
        if not membership.declared_quantized or spelling is None:
            continue
        if group.example.kind != "linear":
            continue
        for members in decider.split_by_marks(group.members):
            first = members[0]
            # modules unlike in layout are mostly alike to the rules: one view for those
            shape = (
                membership.bucket,
                spelling.family,
                frozenset(first.operands),
                decider.marks(first.name),
            )
            view = views.get(shape)
            if view is None:
                view = views[shape] = make_view(
                    declaration,
                    declared_scheme(declaration, membership),
                    routing=routing,
                    module=first.name,
                    shipped=spelling,
                    operands=first.operands,
                )
            for outcome in decider.outcomes(view):
                decision = outcome.decision
                groups.setdefault((membership.bucket, decision, outcome.gpu), []).append(members)
                if decision.executed != "none" or not outcome.total:
                    continue
                where = f" on {outcome.gpu}" if outcome.gpu else ""
                findings.extend(
                    finding(
                        "no-arm",
                        f"{info.name} is declared {membership.bucket} ({decision.declared}); "
                        f"engine profile {profile.label} has no arm for it{where}: "
                        f"{decision.reason}"
                        + _error_text(decision, view.declared_algo, outcome.gpu),
                        module=info.name,
                        tensor=info.weight.name if info.weight else "",
                    )
                    for info in members
                    if info.name not in refused
                )
    rows = []
    position: dict[str, int] = {}
    for (scheme_name, decision, label), chunks in sorted(
        groups.items(), key=lambda kv: (kv[0][0], decider.order(kv[0][2]), kv[0][1].executed)
    ):
        total = sum(map(len, chunks))
        coverage = {}
        for operand in DECIDING_OPERANDS:
            count = _shipping(operand, chunks)
            if count:
                coverage[operand] = f"{count}/{total}"
        rows.append(
            ArmRow(
                scheme=scheme_name,
                modules=total,
                declared=decision.declared,
                executed=decision.executed,
                reason=decision.reason + _drop_note(decision, chunks),
                note=decision.note,
                log=decision.log,
                operands=coverage,
                gpu=label,
                kernel=decision.kernel,
                source=decision.source,
            )
        )
        first_name = chunks[0][0].name
        if decider.splits and len(chunks) > 1:
            # a split group's chunks need not come in module order; find the row's first
            position = position or _order_of(modules, groups.values())
            first_name = min((chunk[0].name for chunk in chunks), key=position.__getitem__)
        findings.extend(
            _row_findings(profile, decider, scheme_name, decision, label, first_name, total)
        )
    return rows, findings


def _order_of(modules: Collection[str], rows: Iterable[list[list[ModuleInfo]]]) -> dict[str, int]:
    """The first module of each chunk of every row of several chunks, numbered in module
    order: the order of a few hundred names, found in C among a quarter million (``modules``
    is gone through twice, so it is a collection, not an iterator)."""
    firsts = {chunk[0].name for chunks in rows if len(chunks) > 1 for chunk in chunks}
    return {name: i for i, name in enumerate(compress(modules, map(firsts.__contains__, modules)))}


def _row_findings(
    profile: Profile,
    decider: Decider,
    scheme: str,
    decision: ArmDecision,
    label: str | None,
    first: str = "",
    modules: int = 0,
) -> list[Finding]:
    """``first``: the row's first module in checkpoint order; ``modules``: how many (0 for a
    declaration alone)."""
    where = f" on {label}" if label else ""
    count = f"{modules} modules" if modules else "the declaration alone"
    if decision.executed == "none" and decider.gpu is None and label is not None:
        return [
            finding(
                "no-arm-on-some-gpus",
                f"{scheme}: engine profile {profile.label} has no arm for {decision.declared} "
                f"on {label} ({count}): {decision.reason}"
                + _error_text(decision, scheme, label)
                + "; give --gpu to decide",
                module=first,
            )
        ]
    # Without a GPU, what holds on part of the range only is a note: a warning is for what
    # goes wrong on the GPU asked about, or on every GPU.
    partial = decider.gpu is None and label is not None
    if decision.executed == UNKNOWN_ARM:
        # not modelled: a clean verdict must not stand for what qarm cannot predict
        codes = ("arm-unknown-on-some-gpus", "arm-unknown")
        said = (
            f"what {profile.label} executes for {decision.declared}{where} ({count}) is not "
            f"modelled ({decision.reason}); nothing vouches that it loads"
        )
    elif decision.executed not in ("none", decision.declared):
        codes = ("arm-differs-on-some-gpus", "declared-arm-differs")
        said = (
            f"declared {decision.declared} -> executed {decision.executed} on {count} under "
            f"{profile.label}{where} ({decision.reason})"
        )
    else:
        return []
    tail = "; give --gpu to decide" if partial else ""
    return [finding(codes[0] if partial else codes[1], f"{scheme}: {said}{tail}", module=first)]


def _declaration_rows(
    decider: Decider, declaration: Declaration
) -> tuple[list[ArmRow], list[Finding]]:
    """A declaration with no tensors: one row per scheme, on the operands it requires."""
    rows: list[ArmRow] = []
    findings: list[Finding] = []
    profile = decider.profile
    for name, scheme in sorted(declaration.schemes.items()):
        spec = contract(scheme) or ()
        required = [op.name for op in spec if op.required] or ["weight"]
        view = make_view(
            declaration, scheme, routing="declared", module="", shipped=None, operands=required
        )
        outcomes = sorted(decider.outcomes(view), key=lambda o: decider.order(o.gpu))
        for outcome in outcomes:
            decision = outcome.decision
            dropped = [op for op in decision.drops if op in view.operands]
            reason = (
                "declaration only: "
                + decision.reason
                + "".join(f"; {op} (declared static) is not read on this arm" for op in dropped)
            )
            rows.append(
                ArmRow(
                    scheme=name,
                    modules=0,
                    declared=decision.declared,
                    executed=decision.executed,
                    reason=reason,
                    note=decision.note,
                    log=decision.log,
                    gpu=outcome.gpu,
                    kernel=decision.kernel,
                    source=decision.source,
                )
            )
            if decision.executed == "none" and outcome.total:
                where = f" on {outcome.gpu}" if outcome.gpu else ""
                findings.append(
                    finding(
                        "no-arm",
                        f"{name} is declared ({decision.declared}); engine profile "
                        f"{profile.label} has no arm for it{where}: {decision.reason}"
                        + _error_text(decision, scheme.algo, outcome.gpu),
                    )
                )
            else:
                findings.extend(_row_findings(profile, decider, name, decision, outcome.gpu))
    return rows, findings


def routing_moves(
    profile: Profile,
    env: dict[str, str],
    gpu: int | None,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    spellings: Mapping[str, Spelling],
) -> list[RoutingMove]:
    """Every linear module whose arm differs between the profile's own routing and the other,
    grouped by (from arm, to arm) and where on the GPU range the move happens."""
    own = profile.routing
    other = "probe" if own == "declared" else "declared"
    decider = Decider(profile, env, gpu)
    moved: dict[tuple[str, str], dict[str, list[int | None]]] = {}
    for name, info in modules.items():
        spelling = spellings.get(name)
        if spelling is None or info.kind != "linear":
            continue
        scheme = declared_scheme(declaration, memberships[name])
        views = [
            make_view(
                declaration,
                scheme,
                routing=routing,
                module=name,
                shipped=spelling,
                operands=info.operands,
            )
            for routing in (own, other)
        ]
        for cap in decider.caps:
            a = decider.decide(views[0], cap).executed
            b = decider.decide(views[1], cap).executed
            if a != b:
                moved.setdefault((a, b), {}).setdefault(name, []).append(cap)
    out: dict[tuple[str, str, str | None], list[str]] = {}
    for (a, b), per_module in moved.items():
        for name, caps in per_module.items():
            label = (
                f"sm{gpu}"
                if gpu is not None
                else None
                if len(decider.caps) == 1
                else gpu_label([c for c in caps if c is not None])
            )
            out.setdefault((a, b, label), []).append(name)
    return [
        RoutingMove(
            from_arm=a,
            to_arm=b,
            from_routing=own,
            to_routing=other,
            gpu=label,
            modules=len(names),
            module_names=sorted(names),
        )
        for (a, b, label), names in sorted(
            out.items(), key=lambda kv: (kv[0][0], kv[0][1], decider.order(kv[0][2]))
        )
    ]
