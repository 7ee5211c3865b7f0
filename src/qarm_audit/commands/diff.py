"""``qarm diff A B``: what differs between two checkpoints, always said from A's point of view.

"added" means in B and not in A, "removed" in A and not in B, and ``x -> y`` is A's value then
B's. Only headers and declarations are compared (no tensor bytes): names, dtypes, shapes, which
shard holds each name, each module's resolved declaration, and the declaration's keys.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from ..declarations import Declaration, read_declaration
from ..engines.profile import Profile
from ..modules.operands import split_name
from ..report.diff_model import (
    ConfigChange,
    DiffReport,
    LayoutDiff,
    ModuleChange,
    ModuleMove,
    NameMove,
    ShardCount,
    ShardFlow,
    SideInfo,
    TensorChange,
)
from ..report.group import plural
from ..report.model import Report
from ..resolve.resolver import EXCLUDED, UNLISTED
from ..sources import Checkpoint, open_source
from .audit import DEFAULT_ENGINE, audit

ABSENT = "(absent)"


def diff(
    a: str | Checkpoint,
    b: str | Checkpoint,
    *,
    engine: str | Profile = DEFAULT_ENGINE,
    env: Mapping[str, str] | None = None,
    gpu: str | None = None,
    require_pinned: bool = False,
) -> DiffReport:
    """Compare two checkpoints (folders, manifests, ``owner/name@sha`` or loaded Checkpoints)."""
    left = a if isinstance(a, Checkpoint) else open_source(a, require_pinned=require_pinned)
    right = b if isinstance(b, Checkpoint) else open_source(b, require_pinned=require_pinned)
    report_a = audit(left, engine=engine, env=env, gpu=gpu)
    report_b = audit(right, engine=engine, env=env, gpu=gpu)
    decl_a = read_declaration(left.documents)
    decl_b = read_declaration(right.documents)
    return compare(left, right, report_a, report_b, decl_a, decl_b)


def compare(
    left: Checkpoint,
    right: Checkpoint,
    report_a: Report,
    report_b: Report,
    decl_a: Declaration,
    decl_b: Declaration,
) -> DiffReport:
    """The diff of two checkpoints already read and audited."""
    entries_a = {e.name: (e, s.file) for s in left.shards for e in s.tensors}
    entries_b = {e.name: (e, s.file) for s in right.shards for e in s.tensors}
    only_a = sorted(entries_a.keys() - entries_b.keys())
    only_b = sorted(entries_b.keys() - entries_a.keys())
    common = sorted(entries_a.keys() & entries_b.keys())
    changed = [
        TensorChange(
            name=name,
            a_dtype=ea.dtype,
            a_shape=list(ea.shape),
            b_dtype=eb.dtype,
            b_shape=list(eb.shape),
        )
        for name in common
        for ea, eb in [(entries_a[name][0], entries_b[name][0])]
        if (ea.dtype, ea.shape) != (eb.dtype, eb.shape)
    ]
    layout = _layout(left, right, {n: entries_a[n][1] for n in common}, entries_b, only_b)
    modules = _module_changes(report_a, report_b)
    moves = _moves(modules, report_a, report_b)
    config = _config(decl_a, decl_b)
    documents = sorted(
        name
        for name in left.documents.keys() | right.documents.keys()
        if left.documents.get(name) != right.documents.get(name)
    )
    identical = not (only_a or only_b or changed or modules or config) and layout.identical
    by_a = _by_operand(only_a)
    by_b = _by_operand(only_b)
    report = DiffReport(
        identical=identical,
        summary="",
        a=_side(report_a),
        b=_side(report_b),
        only_a=only_a,
        only_b=only_b,
        only_a_by_operand=by_a,
        only_b_by_operand=by_b,
        changed=changed,
        layout=layout,
        modules=modules,
        module_moves=moves,
        config=config,
        documents=documents,
    )
    return report.model_copy(update={"summary": summary_line(report)})


def _side(report: Report) -> SideInfo:
    decl = report.declaration
    src = report.source
    return SideInfo(
        location=src.location,
        kind=src.kind,
        repo=src.repo,
        revision=src.revision,
        tensors=report.totals.tensors,
        modules=report.totals.modules,
        shards=report.totals.shards,
        declared=f"{decl.algo or decl.family} ({decl.family}) via {decl.source or 'nothing'}",
        verdict=report.verdict,
        refusals=len(report.refusals),
        warnings=len(report.warnings),
        arms=[r.line() for r in report.arms],
    )


def _by_operand(names: Iterable[str]) -> dict[str, int]:
    counts = Counter(split_name(n)[1] for n in names)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# --- layout ------------------------------------------------------------------------------------


def _prefix(names: list[str]) -> str:
    if not names:
        return ""
    parts = [n.split(".")[:-1] for n in names]
    first = parts[0]
    length = len(first)
    for other in parts[1:]:
        length = min(length, len(other))
        for i in range(length):
            if other[i] != first[i]:
                length = i
                break
    return ".".join(first[:length])


def _counts(checkpoint: Checkpoint) -> list[ShardCount]:
    return [
        ShardCount(file=s.file, names=len(s.tensors), prefix=_prefix([e.name for e in s.tensors]))
        for s in checkpoint.shards
    ]


def _label(shard: ShardCount) -> str:
    under = f", all under {shard.prefix}." if shard.prefix else ""
    return f"{shard.file} ({shard.names} names{under})"


def _layout(
    left: Checkpoint,
    right: Checkpoint,
    file_a: Mapping[str, str],
    entries_b: Mapping[str, tuple[object, str]],
    only_b: list[str],
) -> LayoutDiff:
    a_shards, b_shards = _counts(left), _counts(right)
    flows: Counter[tuple[str, str]] = Counter()
    moved = []
    for name, fa in file_a.items():
        fb = entries_b[name][1]
        flows[(fa, fb)] += 1
        if fa != fb:
            moved.append(NameMove(name=name, a_file=fa, b_file=fb))
    identical = not moved and [s.file for s in a_shards] == [s.file for s in b_shards]
    by_a: dict[str, Counter[str]] = defaultdict(Counter)
    into: dict[str, set[str]] = defaultdict(set)
    for (fa, fb), n in flows.items():
        by_a[fa][fb] += n
        into[fb].add(fa)
    lines: list[str] = []
    if not identical:
        lines.append(
            f"A: {plural(len(a_shards), 'shard')} "
            f"({' + '.join(str(s.names) for s in a_shards) or '0'} names); "
            f"B: {plural(len(b_shards), 'shard')} "
            f"({' + '.join(str(s.names) for s in b_shards) or '0'} names)"
        )
        short = {s.file: s for s in b_shards}
        for shard in a_shards:
            dests = by_a.get(shard.file)
            label = f"A's {_label(shard)}"
            if not dests:
                lines.append(f"{label}: no name of it is in B")
                continue
            kept = sum(dests.values())
            dropped = (
                f" ({shard.names - kept} of its names are not in B)" if kept < shard.names else ""
            )
            if len(dests) == 1:
                (dest,) = dests
                others = sorted(into[dest] - {shard.file})
                if others:
                    lines.append(
                        f"{label} merged into {dest}, together with names from "
                        f"{', '.join(others)}{dropped}"
                    )
                elif dest != shard.file:
                    lines.append(f"{label} renamed {dest}{dropped}")
                elif dropped:
                    lines.append(f"{label} kept{dropped}")
                continue
            parts = ", ".join(f"{f} ({n})" for f, n in sorted(dests.items()))
            lines.append(f"{label} split across {parts}{dropped}")
        new_names: dict[str, list[str]] = defaultdict(list)
        for name in only_b:
            new_names[entries_b[name][1]].append(name)
        for shard in b_shards:
            names = new_names.get(shard.file, [])
            if shard.file not in into:
                lines.append(f"B's {_label(shard)} is new: every name in it is only in B")
            elif names:
                what = ", ".join(f"{n} {op}" for op, n in _by_operand(names).items())
                lines.append(f"B's {short[shard.file].file} also holds {what} only in B")
    return LayoutDiff(
        identical=identical,
        a_shards=a_shards,
        b_shards=b_shards,
        flows=[ShardFlow(a_file=fa, b_file=fb, names=n) for (fa, fb), n in sorted(flows.items())],
        moved=moved,
        lines=lines,
    )


# --- declarations ------------------------------------------------------------------------------


def _quantized(bucket: str) -> bool:
    return bucket not in (EXCLUDED, UNLISTED)


def _change(a: tuple[str, str, str], b: tuple[str, str, str]) -> str:
    ba, bb = a[0], b[0]
    if ba == bb:
        return "provenance"
    if EXCLUDED in (ba, bb):
        return "excluded in A only" if ba == EXCLUDED else "excluded in B only"
    if _quantized(ba) and _quantized(bb):
        return "relabelled"
    return "quantized in A only" if _quantized(ba) else "quantized in B only"


def _module_changes(report_a: Report, report_b: Report) -> list[ModuleChange]:
    rows_a = {m["module"]: (m["bucket"], m["how"], m["rule"]) for m in report_a.modules}
    rows_b = {m["module"]: (m["bucket"], m["how"], m["rule"]) for m in report_b.modules}
    none = (ABSENT, "", "")
    out = []
    for module in sorted(rows_a.keys() | rows_b.keys()):
        a, b = rows_a.get(module), rows_b.get(module)
        if a == b:
            continue
        change = "only in B" if a is None else "only in A" if b is None else _change(a, b)
        a, b = a or none, b or none
        out.append(
            ModuleChange(
                module=module,
                change=change,
                a_bucket=a[0],
                a_how=a[1],
                a_rule=a[2],
                b_bucket=b[0],
                b_how=b[1],
                b_rule=b[2],
            )
        )
    return out


def _moves(changes: list[ModuleChange], report_a: Report, report_b: Report) -> list[ModuleMove]:
    arms_a = {s.name: s.declared_arm for s in report_a.declaration.schemes}
    arms_b = {s.name: s.declared_arm for s in report_b.declaration.schemes}
    groups: dict[tuple[str, str, str, str, str], list[str]] = defaultdict(list)
    for c in changes:
        hows = (c.a_how, c.b_how) if c.change == "provenance" else ("", "")
        groups[(c.change, c.a_bucket, c.b_bucket, *hows)].append(c.module)
    return [
        ModuleMove(
            change=change,
            a_bucket=a,
            b_bucket=b,
            a_how=a_how,
            b_how=b_how,
            modules=len(members),
            a_arm=arms_a.get(a, ""),
            b_arm=arms_b.get(b, ""),
            example=members[0],
        )
        for (change, a, b, a_how, b_how), members in sorted(
            groups.items(), key=lambda kv: (-len(kv[1]), kv[0])
        )
    ]


def _keys(declaration: Declaration) -> dict[str, str | frozenset[str]]:
    """The declaration's keys a diff compares; sets where order carries no meaning."""
    mo, ct, rules = declaration.modelopt, declaration.compressed_tensors, declaration.rules
    sizes = sorted({s.group_size for s in declaration.schemes.values() if s.group_size})
    keys: dict[str, str | frozenset[str]] = {
        "family": declaration.family,
        "declared in": declaration.source or "nothing",
        "quant_method": declaration.method or "none",
        "quant_algo": declaration.algo or "none",
        "producer": declaration.producer or "none",
        "kv_cache": declaration.kv.algo if declaration.kv else "none",
        "group_size": ", ".join(str(g) for g in sizes) or "none",
        "schemes": frozenset(f"{s.name} ({s.declared_arm})" for s in declaration.schemes.values()),
        "exclude": frozenset(rules.excludes_declared() if rules is not None else ()),
    }
    if mo is not None and mo.layers is not None:
        counts = Counter(mo.layers.values())
        keys["quantized_layers"] = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if ct is not None:
        keys["targets"] = frozenset(f"{t} -> {g}" for t, g in ct.targets.items())
    return keys


def _config(decl_a: Declaration, decl_b: Declaration) -> list[ConfigChange]:
    keys_a, keys_b = _keys(decl_a), _keys(decl_b)
    out = []
    for key in [*keys_a, *(k for k in keys_b if k not in keys_a)]:
        a, b = keys_a.get(key), keys_b.get(key)
        if a == b:
            continue
        if isinstance(a, frozenset) or isinstance(b, frozenset):
            set_a = a if isinstance(a, frozenset) else frozenset()
            set_b = b if isinstance(b, frozenset) else frozenset()
            out.append(
                ConfigChange(
                    key=key,
                    a=f"{len(set_a)} entries",
                    b=f"{len(set_b)} entries",
                    only_a=sorted(set_a - set_b),
                    only_b=sorted(set_b - set_a),
                )
            )
        else:
            out.append(ConfigChange(key=key, a=a or "none", b=b or "none"))
    return out


# --- the one line -------------------------------------------------------------------------------

SUMMARY_GROUPS = 3
"""Groups named in the summary line before the rest are counted."""


def _named(counts: Mapping[str, int], what: str) -> str:
    items = list(counts.items())
    shown = ", ".join(f"{n} {op}" for op, n in items[:SUMMARY_GROUPS])
    rest = sum(n for _, n in items[SUMMARY_GROUPS:])
    return f"{shown}{f' and {rest} other names' if rest else ''} {what}"


def _move_phrase(move: ModuleMove) -> str:
    n = f"{move.modules} module{'s' if move.modules != 1 else ''}"
    if move.change == "relabelled":
        return f"{n} relabelled {move.a_bucket} -> {move.b_bucket}"
    if move.change == "provenance":
        return f"{n} {move.a_bucket} by another rule ({move.a_how} -> {move.b_how})"
    return f"{n} {move.change} ({move.a_bucket} -> {move.b_bucket})"


def summary_line(report: DiffReport) -> str:
    layout = report.layout
    if report.identical:
        return (
            f"B = A: identical names, dtypes, shapes, declarations and layout "
            f"({plural(report.a.tensors, 'name')} in {plural(report.a.shards, 'shard')})"
        )
    lead = "B = A"
    if not layout.identical:
        a_n, b_n = len(layout.a_shards), len(layout.b_shards)
        lead += (
            f" re-split ({a_n} -> {b_n} shards)"
            if a_n != b_n
            else f" re-split ({len(layout.moved)} names in another shard)"
        )
    parts = []
    if report.only_b:
        parts.append(_named(report.only_b_by_operand, "added"))
    if report.only_a:
        parts.append(_named(report.only_a_by_operand, "removed"))
    moves = [m for m in report.module_moves if not m.change.startswith("only in")]
    parts += [_move_phrase(m) for m in moves[:SUMMARY_GROUPS]]
    if len(moves) > SUMMARY_GROUPS:
        rest = sum(m.modules for m in moves[SUMMARY_GROUPS:])
        parts.append(f"{rest} other module changes")
    for c in report.config:
        if c.key in ("schemes", "quantized_layers", "declared in"):
            continue  # said by the module moves, or not a change of meaning
        if c.only_a or c.only_b:
            parts.append(f"{c.key} +{len(c.only_b)} -{len(c.only_a)}")
        else:
            parts.append(f"{c.key} {c.a} -> {c.b}")
    n = len(report.changed)
    parts.append(f"{n} dtype or shape disagreement{'s' if n != 1 else ''}")
    return f"{lead}: {', '.join(parts)}"
