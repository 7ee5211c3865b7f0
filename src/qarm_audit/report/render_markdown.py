"""GitHub-flavoured markdown for a PR description: verdict, buckets, arm line, refusals.

Deterministic: no timestamps, no absolute paths beyond what the user typed.
"""

from __future__ import annotations

from .model import FindingRow, IgnoredRow, ProbeInfo, Report

VERDICT = {
    "refused": "❌ **refused**",
    "warnings": "⚠️ **passes with warnings**",
    "clean": "✅ **clean**",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def source_label(report: Report) -> str:
    src = report.source
    if src.repo:
        return f"{src.repo}@{src.revision}" if src.revision else src.repo
    return src.location


def verdict_line(report: Report) -> str:
    ignored = f", {len(report.ignored)} ignored" if report.ignored else ""
    counts = (
        f"{len(report.refusals)} refusals, {len(report.warnings)} warnings{ignored}, "
        f"{report.totals.tensors} tensors in {report.totals.shards} shards"
    )
    decl = report.declaration
    declared = decl.algo or decl.family
    via = decl.source or "nothing"
    return f"{source_label(report)}: {report.verdict} ({counts}); declared {declared} via {via}"


def render_markdown(report: Report, *, scheme_map: bool = False) -> str:
    """The report as GitHub-flavoured markdown; ``scheme_map`` adds the ``--map`` grid."""
    decl = report.declaration
    out = [f"### qarm audit: `{_cell(source_label(report))}`", ""]
    out.append(
        f"{VERDICT[report.verdict]}: {len(report.refusals)} refusals, "
        f"{len(report.warnings)} warnings"
        + (f" ({len(report.ignored)} findings ignored)" if report.ignored else "")
        + f". Declared **{_cell(decl.algo or decl.family)}** "
        f"({decl.family}) via `{_cell(decl.source or 'no declaration')}`; engine "
        f"profile `{report.engine.name}`"
        + (f" {report.engine.version}" if report.engine.version else "")
        + f" (routing by {report.engine.routing})"
        + (
            f" ({', '.join(f'{k}={v}' for k, v in report.engine.env.items())})"
            if report.engine.env
            else ""
        )
        + (f", GPU {report.engine.gpu}" if report.engine.gpu else "")
        + "."
    )
    if decl.reason:
        out += ["", f"> {_cell(decl.reason)}"]
    out += ["", *_declared(report)]
    out += [
        "",
        "| scheme | tensors | modules | membership | description |",
        "|---|---:|---:|---|---|",
    ]
    for b in report.buckets:
        membership = ", ".join(f"{k} {v}" for k, v in b.membership.items())
        out.append(
            f"| `{_cell(b.scheme)}` | {b.tensors} | {b.modules} | {membership} | "
            f"{_cell(b.description)} |"
        )
    out.append(f"| **total** | **{report.totals.tensors}** | **{report.totals.modules}** | | |")
    if scheme_map:
        from .render_map import render_map_markdown

        out += ["", *render_map_markdown(report)]
    if report.arms:
        out += ["", "**Arms** (declared vs executed):", ""]
        out += [
            f"- {_cell(a.line())}: {_cell(a.reason)}"
            + (f" _Note: {_cell(a.note)}_" if a.note else "")
            + (f"\n  - engine log: `{_cell(a.log)}`" if a.log else "")
            for a in report.arms
        ]
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
        out += ["", "<details><summary>Integrity</summary>", "", f"{_cell(integ.verification)}", ""]
        if integ.index:
            out.append(f"- index: {_cell(integ.index)}")
        out += [f"- {_cell(c)}" for c in integ.checks]
        hashes = [s for s in integ.shards if s.remote_sha256]
        out += [
            f"- {s.file}: sha256 {s.remote_sha256} (reported by the remote, not computed)"
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
        f"| {_cell(m.from_arm)} | {_cell(m.to_arm)} | {_cell(m.gpu or 'all')} | {m.modules} |"
        for m in moves
    ]
    for m in moves:
        out += [
            "",
            f"<details><summary>{_cell(m.from_arm)} -> {_cell(m.to_arm)}"
            f"{' on ' + _cell(m.gpu) if m.gpu else ''} ({m.modules} modules)</summary>",
            "",
            *[f"- `{_cell(name)}`" for name in m.module_names],
            "",
            "</details>",
        ]
    return out


def _declared(report: Report) -> list[str]:
    """What the declaration says, before any tensor: schemes, rule counts, KV cache."""
    decl = report.declaration
    rules = ", ".join(f"{k} {v}" for k, v in decl.rules.items())
    out = ["**Declared** " + (f"({rules})" if rules else "") + ":", ""]
    per = decl.layers_per_scheme
    for scheme in decl.schemes:
        count = f" on {per[scheme.name]} listed modules" if scheme.name in per else ""
        out.append(f"- `{_cell(scheme.name)}`: {_cell(scheme.description)}{count}")
    if decl.kv_cache is not None:
        out.append(
            f"- KV cache: {decl.kv_cache.algo} ({decl.kv_cache.scales_shipped} scales shipped)"
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
                *[f"- `{_cell(i)}`" for i in items],
                "",
                "</details>",
            ]
    return out


def _findings(title: str, rows: list[FindingRow]) -> list[str]:
    out = [
        f"<details{' open' if title == 'Refusals' else ''}><summary>{title} ({len(rows)})"
        "</summary>",
        "",
        "| code | module | tensor | message |",
        "|---|---|---|---|",
    ]
    shown: dict[str, int] = {}
    for r in rows:
        shown[r.code] = shown.get(r.code, 0) + 1
        if shown[r.code] <= PER_CODE:
            out.append(
                f"| `{r.code}` | `{_cell(r.module)}` | `{_cell(r.tensor)}` | {_cell(r.message)} |"
            )
    for code, count in shown.items():
        if count > PER_CODE:
            out.append(f"| `{code}` | … | | {count - PER_CODE} more (every row is in the JSON) |")
    out += ["", "</details>"]
    return out


PER_CODE = 25
"""Rows of one finding code a PR description shows; a MoE can refuse a hundred thousand."""


def _ignored(rows: list[IgnoredRow]) -> list[str]:
    out = [
        f"<details><summary>Ignored ({len(rows)})</summary>",
        "",
        "| code | severity | module | tensor | message | reason | ignored by |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [
        f"| `{r.code}` | {r.severity} | `{_cell(r.module)}` | `{_cell(r.tensor)}` | "
        f"{_cell(r.message)} | {_cell(r.reason)} | `{_cell(r.origin)}` |"
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
    out = [f"**Scalar probe**: {_cell(probe_line(probe).removeprefix('scalar probe: '))}."]
    flagged = [r for r in probe.scalars if r.status in ("zero", "negative", "nonfinite")]
    if flagged:
        out += ["", "| tensor | dtype | shape | values |", "|---|---|---|---|"]
        out += [
            f"| `{_cell(r.tensor)}` | {r.dtype} | {r.shape} | {_cell(', '.join(r.values))} |"
            for r in flagged
        ]
    return out
