"""The terminal view: rich tables of buckets, arms and findings.

Every cell and line is a rich ``Text`` (:func:`.escape.term`): a name holding rich markup or a
control character is shown as written, never read as markup or sent to the terminal.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .escape import term, term_dotted, term_line
from .group import group_findings, module_cell, plural
from .model import FindingRow, Report

STYLE = {"refused": "bold red", "warnings": "bold yellow", "clean": "bold green"}
MAX_ROWS = 40


def render_table(report: Report, console: Console, *, scheme_map: bool = False) -> None:
    """Print the report; ``scheme_map`` adds the ``--map`` grid after the buckets. The layout
    follows ``console.width`` (the terminal's, or ``COLUMNS``: see :func:`.output.table_width`)."""
    console.print(_renderable(report, scheme_map, console.width), crop=False)


def _findings(title: str, rows: list[FindingRow], style: str, width: int) -> Table:
    """One row per cause (see :mod:`.group`); module names wrap after a dot."""
    groups = group_findings(rows)
    module_width = max(20, (width - 30) // 3)
    table = Table(title=Text(f"{title} ({len(rows)})"), title_justify="left", title_style=style)
    table.add_column("code", overflow="fold")
    table.add_column("module", overflow="fold", max_width=module_width)
    table.add_column("message", overflow="fold")
    for g in groups[:MAX_ROWS]:
        table.add_row(term(g.code), term_dotted(module_cell(g), module_width), term(g.message))
    if len(groups) > MAX_ROWS:
        left = sum(len(g.rows) for g in groups[MAX_ROWS:])
        table.add_row("…", f"{plural(left, 'more finding')} (see --format json)", "")
    return table


def _moves(report: Report) -> RenderableType:
    moves = report.routing_moves or []
    if not moves:
        return Text("routing moves: none; every module runs the same arm under both routings")
    table = Table(
        title=term(f"Routing moves (by {moves[0].from_routing} -> by {moves[0].to_routing})"),
        title_justify="left",
    )
    for column in ("from arm", "to arm", "GPUs", "modules", "first modules"):
        table.add_column(column, overflow="fold")
    for m in moves:
        shown = ", ".join(m.module_names[:3]) + (" …" if m.modules > 3 else "")
        table.add_row(
            term(m.from_arm), term(m.to_arm), term(m.gpu or "all"), str(m.modules), term(shown)
        )
    return table


def _renderable(report: Report, scheme_map: bool = False, width: int = 120) -> RenderableType:
    from .render_markdown import verdict_line

    parts: list[RenderableType] = [term_line(verdict_line(report), style=STYLE[report.verdict])]
    if report.declaration.reason:
        parts.append(term_line(report.declaration.reason, style="italic"))
    decl = report.declaration
    rules = ", ".join(f"{k} {v}" for k, v in decl.rules.items())
    declared = Table(
        title=term(f"Declared ({rules})" if rules else "Declared"), title_justify="left"
    )
    for column in ("scheme", "arm", "description"):
        declared.add_column(column)
    for scheme in decl.schemes:
        declared.add_row(term(scheme.name), term(scheme.declared_arm), term(scheme.description))
    if decl.kv_cache is not None:
        declared.add_row(
            "KV cache", term(decl.kv_cache.algo), f"{decl.kv_cache.scales_shipped} scales shipped"
        )
    if declared.row_count:
        parts.append(declared)
    buckets = Table(title="Buckets", title_justify="left")
    for column, justify in (
        ("scheme", "left"),
        ("tensors", "right"),
        ("modules", "right"),
        ("membership", "left"),
        ("description", "left"),
    ):
        buckets.add_column(column, justify=justify)  # type: ignore[arg-type]
    for b in report.buckets:
        buckets.add_row(
            term(b.scheme),
            str(b.tensors),
            str(b.modules),
            term(", ".join(f"{k} {v}" for k, v in b.membership.items())),
            term(b.description),
        )
    buckets.add_row(
        "total", str(report.totals.tensors), str(report.totals.modules), "", "", style="bold"
    )
    parts.append(buckets)
    if scheme_map:
        from .render_map import map_renderable

        parts.append(map_renderable(report))
    for a in report.arms:
        style = (
            "green"
            if a.declared == a.executed
            else "red"
            if a.executed == "none"
            else "dim"
            if a.executed == "unknown"
            else "yellow"
        )
        parts.append(term_line(f"arm {a.line()}: {a.reason}", style=style))
        if a.note:
            parts.append(term_line(f"  note: {a.note}", style="italic"))
    if report.routing_moves is not None:
        parts.append(_moves(report))
    for title, rows, style in (
        ("Refusals", report.refusals, "red"),
        ("Warnings", report.warnings, "yellow"),
        ("Notes", report.notes, "dim"),
    ):
        if not rows:
            continue
        parts.append(_findings(title, rows, style, width))
    if report.ignored:
        ignored = Table(
            title=Text(f"Ignored ({len(report.ignored)})"), title_justify="left", title_style="dim"
        )
        for column in ("code", "module", "reason", "ignored by"):
            ignored.add_column(column, overflow="fold")
        for i in report.ignored[:MAX_ROWS]:
            ignored.add_row(term(i.code), term(i.module), term(i.reason), term(i.origin))
        if len(report.ignored) > MAX_ROWS:
            ignored.add_row(
                "…", f"{len(report.ignored) - MAX_ROWS} more (see --format json)", "", ""
            )
        parts.append(ignored)
    if report.probe is not None:
        from .render_markdown import probe_line

        parts.append(
            term_line(probe_line(report.probe), style="red" if report.probe.flagged else "dim")
        )
        flagged = [s for s in report.probe.scalars if s.status in ("zero", "negative", "nonfinite")]
        parts.extend(
            term_line(f"  {r.status}: {r.tensor} = {', '.join(r.values)}", style="red")
            for r in flagged[:MAX_ROWS]
        )
    if report.integrity is not None:
        parts.append(
            term_line(
                f"integrity: {report.integrity.index or 'single file'}; "
                f"{plural(len(report.integrity.shards), 'shard')} verified semantically "
                "(not a content hash)",
                style="dim",
            )
        )
    parts.append(term_line(verdict_line(report), style=STYLE[report.verdict]))
    return Group(*parts)
