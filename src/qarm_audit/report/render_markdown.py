"""GitHub-flavoured markdown for a PR description: verdict, buckets, arm line, refusals.

Deterministic: no timestamps, no absolute paths beyond what the user typed.
"""

from __future__ import annotations

from .escape import md_code, md_html, md_text
from .group import EXAMPLES, Group, group_findings, module_cell, plural
from .model import FindingRow, IgnoredRow, ProbeInfo, Report

VERDICT = {
    "refused": "❌ **refused**",
    "warnings": "⚠️ **passes with warnings**",
    "clean": "✅ **clean**",
}


def source_label(report: Report) -> str:
    src = report.source
    if src.repo:
        return f"{src.repo}@{src.revision}" if src.revision else src.repo
    return src.location


def verdict_line(report: Report) -> str:
    ignored = f", {len(report.ignored)} ignored" if report.ignored else ""
    counts = (
        f"{plural(len(report.refusals), 'refusal')}, {plural(len(report.warnings), 'warning')}"
        f"{ignored}, {plural(report.totals.tensors, 'tensor')} in "
        f"{plural(report.totals.shards, 'shard')}"
    )
    decl = report.declaration
    declared = decl.algo or decl.family
    via = decl.source or "nothing"
    return f"{source_label(report)}: {report.verdict} ({counts}); declared {declared} via {via}"


def render_markdown(report: Report, *, scheme_map: bool = False) -> str:
    """The report as GitHub-flavoured markdown; ``scheme_map`` adds the ``--map`` grid.

    Every string from the checkpoint, the declaration, the engine profile, the command line or
    a server goes through :mod:`.escape`: it cannot end a table row, open HTML or a code span."""
    decl = report.declaration
    engine = report.engine
    out = [f"### qarm audit: {md_code(source_label(report), table=False)}", ""]
    out.append(
        f"{VERDICT[report.verdict]}: {plural(len(report.refusals), 'refusal')}, "
        f"{plural(len(report.warnings), 'warning')}"
        + (f" ({plural(len(report.ignored), 'finding')} ignored)" if report.ignored else "")
        + f". Declared **{md_text(decl.algo or decl.family)}** "
        f"({md_text(decl.family)}) via {md_code(decl.source or 'no declaration', table=False)}; "
        f"engine profile {md_code(engine.name, table=False)}"
        + (f" {md_text(engine.version)}" if engine.version else "")
        + f" (routing by {md_text(engine.routing)})"
        + (
            f" ({md_text(', '.join(f'{k}={v}' for k, v in engine.env.items()))})"
            if engine.env
            else ""
        )
        + (f", GPU {md_text(engine.gpu)}" if engine.gpu else "")
        + "."
    )
    if decl.reason:
        out += ["", f"> {md_text(decl.reason)}"]
    out += ["", *_declared(report)]
    out += [
        "",
        "| scheme | tensors | modules | membership | description |",
        "|---|---:|---:|---|---|",
    ]
    for b in report.buckets:
        membership = ", ".join(f"{k} {v}" for k, v in b.membership.items())
        out.append(
            f"| {md_code(b.scheme)} | {b.tensors} | {b.modules} | {md_text(membership)} | "
            f"{md_text(b.description)} |"
        )
    out.append(f"| **total** | **{report.totals.tensors}** | **{report.totals.modules}** | | |")
    if scheme_map:
        from .render_map import render_map_markdown

        out += ["", "<details><summary>Scheme map</summary>", ""]
        out += [*render_map_markdown(report), "", "</details>"]
    if report.arms:
        differ = sum(a.declared != a.executed for a in report.arms)
        out += [
            "",
            f"<details><summary>Arms (declared vs executed): {plural(len(report.arms), 'row')}"
            f", {differ} differ</summary>",
            "",
        ]
        out += [
            f"- {md_text(a.line())}: {md_text(a.reason)}"
            + (f" _Note: {md_text(a.note)}_" if a.note else "")
            + (f"\n  - engine log: {md_code(a.log, table=False)}" if a.log else "")
            for a in report.arms
        ]
        out += ["", "</details>"]
    if report.routing_moves is not None:
        out += ["", *_moves(report)]
    for title, rows in (
        ("Refusals", report.refusals),
        ("Warnings", report.warnings),
        ("Notes", report.notes),
    ):
        if rows:
            out += ["", *_findings(title, rows)]
    if report.ignored:
        out += ["", *_ignored(report.ignored)]
    if report.probe is not None:
        out += ["", *_probe(report.probe)]
    if report.integrity is not None:
        integ = report.integrity
        out += ["", "<details><summary>Integrity</summary>", "", md_text(integ.verification), ""]
        if integ.index:
            out.append(f"- index: {md_text(integ.index)}")
        out += [f"- {md_text(c)}" for c in integ.checks]
        hashes = [s for s in integ.shards if s.remote_sha256]
        out += [
            f"- {md_text(s.file)}: sha256 {md_text(s.remote_sha256 or '')} "
            "(reported by the remote, not computed)"
            for s in hashes
        ]
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


def _moves(report: Report) -> list[str]:
    """``--routing both``: the modules whose arm moves between the two routings."""
    moves = report.routing_moves or []
    if not moves:
        return ["**Routing moves**: none; every module runs the same arm under both routings."]
    first = moves[0]
    out = [
        f"**Routing moves** (routing by {first.from_routing} -> by {first.to_routing}):",
        "",
        "| from arm | to arm | GPUs | modules |",
        "|---|---|---|---:|",
    ]
    out += [
        f"| {md_text(m.from_arm)} | {md_text(m.to_arm)} | {md_text(m.gpu or 'all')} | {m.modules} |"
        for m in moves
    ]
    for m in moves:
        out += [
            "",
            f"<details><summary>{md_html(m.from_arm)} -> {md_html(m.to_arm)}"
            f"{' on ' + md_html(m.gpu) if m.gpu else ''} ({m.modules} modules)</summary>",
            "",
            *[f"- {md_code(name, table=False)}" for name in m.module_names],
            "",
            "</details>",
        ]
    return out


def _declared(report: Report) -> list[str]:
    """What the declaration says, before any tensor: schemes, rule counts, KV cache."""
    decl = report.declaration
    rules = md_text(", ".join(f"{k} {v}" for k, v in decl.rules.items()))
    out = ["**Declared** " + (f"({rules})" if rules else "") + ":", ""]
    per = decl.layers_per_scheme
    for scheme in decl.schemes:
        count = f" on {per[scheme.name]} listed modules" if scheme.name in per else ""
        out.append(f"- {md_code(scheme.name, table=False)}: {md_text(scheme.description)}{count}")
    if decl.kv_cache is not None:
        out.append(
            f"- KV cache: {md_text(decl.kv_cache.algo)} "
            f"({decl.kv_cache.scales_shipped} scales shipped)"
        )
    if not decl.schemes and decl.kv_cache is None:
        out.append("- nothing")
    for title, items in (
        ("excludes", decl.excludes),
        ("targets", [f"{t} -> {g}" for t, g in decl.targets.items()]),
    ):
        if items:
            out += [
                "",
                f"<details><summary>{title} ({len(items)})</summary>",
                "",
                *[f"- {md_code(i, table=False)}" for i in items],
                "",
                "</details>",
            ]
    return out


def _findings(title: str, rows: list[FindingRow]) -> list[str]:
    """One row per cause (see :mod:`.group`): the count and the first modules; under the
    table, every module of each grouped row, folded."""
    groups = group_findings(rows)
    out = [
        f"<details{' open' if title == 'Refusals' else ''}><summary>{title} ({len(rows)})"
        "</summary>",
        "",
        "| code | module | tensor | message |",
        "|---|---|---|---|",
    ]
    shown: dict[str, int] = {}
    hidden: dict[str, int] = {}
    listed: list[Group] = []
    for g in groups:
        shown[g.code] = shown.get(g.code, 0) + 1
        if shown[g.code] > PER_CODE:
            hidden[g.code] = hidden.get(g.code, 0) + len(g.rows)
            continue
        out.append(
            f"| {md_code(g.code)} | {_module_md(g)} | {md_code(g.tensor)} | {md_text(g.message)} |"
        )
        if len(g.rows) > EXAMPLES:
            listed.append(g)
    out += [
        f"| {md_code(code)} | … | | {plural(count, 'more finding')} (every row is in the JSON) |"
        for code, count in hidden.items()
    ]
    for g in listed:
        out += [
            "",
            f"<details><summary>{md_html(g.code)}: all {len(g.rows)} modules, from "
            f"{md_html(g.modules[0])}</summary>",
            "",
            *[f"- {md_code(name, table=False)}" for name in g.modules],
            "",
            "</details>",
        ]
    out += ["", "</details>"]
    return out


def _module_md(group: Group) -> str:
    if len(group.rows) == 1:
        row = group.first
        rest = module_cell(group)[len(row.module) :].strip()
        return (md_code(row.module) + (f" {md_text(rest)}" if rest else "")) if row.module else ""
    names = ", ".join(md_code(m) for m in group.modules[:EXAMPLES])
    more = ", …" if len(group.rows) > EXAMPLES else ""
    return f"{len(group.rows)} modules: {names}{more}"


PER_CODE = 25
"""Rows (causes) of one finding code a PR description shows; a MoE can refuse a hundred
thousand, most of them grouped."""


def render_markdown_error(source: str, problem: str) -> str:
    """A source that could not be audited, as the job summary shows it beside the others."""
    return (
        f"### qarm audit: {md_code(source, table=False)}\n\n"
        f"🛑 **could not audit**: {md_text(problem)}\n"
    )


def _ignored(rows: list[IgnoredRow]) -> list[str]:
    out = [
        f"<details><summary>Ignored ({len(rows)})</summary>",
        "",
        "| code | severity | module | tensor | message | reason | ignored by |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [
        f"| {md_code(r.code)} | {md_text(r.severity)} | {md_code(r.module)} | "
        f"{md_code(r.tensor)} | {md_text(r.message)} | {md_text(r.reason)} | "
        f"{md_code(r.origin)} |"
        for r in rows
    ]
    out += ["", "</details>"]
    return out


def probe_line(probe: ProbeInfo) -> str:
    """One sentence: what ``--probe-scalars`` read, or why it read nothing."""
    if not probe.available:
        return (
            f"scalar probe: nothing read ({probe.reason}); "
            f"{probe.candidates} scale tensors not checked"
        )
    skipped = probe.candidates - probe.tensors_read
    return (
        f"scalar probe: {probe.tensors_read} scale tensors read, {probe.bytes_read} bytes "
        f"(at most {probe.bound} elements each), {probe.flagged} flagged"
        + (f", {skipped} not read (see JSON)" if skipped else "")
    )


def _probe(probe: ProbeInfo) -> list[str]:
    out = [f"**Scalar probe**: {md_text(probe_line(probe).removeprefix('scalar probe: '))}."]
    flagged = [r for r in probe.scalars if r.status in ("zero", "negative", "nonfinite")]
    if flagged:
        out += ["", "| tensor | dtype | shape | values |", "|---|---|---|---|"]
        out += [
            f"| {md_code(r.tensor)} | {md_text(r.dtype)} | {md_text(str(r.shape))} | "
            f"{md_text(', '.join(r.values))} |"
            for r in flagged
        ]
    return out
