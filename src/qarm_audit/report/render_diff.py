"""``qarm diff`` in three formats: markdown for a PR, JSON (every row), the terminal (rich).

Markdown and the terminal group and count (by operand, by scheme move, by shard); JSON keeps
every name. All three are deterministic: the report's lists are sorted when it is built.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..modules.operands import split_name
from .escape import md_code, md_text, term, term_line

if TYPE_CHECKING:
    from .diff_model import DiffReport, SideInfo, TensorChange

EXAMPLES = 40
"""Rows of a grouped table shown before the rest are counted (JSON keeps every one)."""


def render_diff_json(report: DiffReport) -> str:
    return report.model_dump_json(indent=2) + "\n"


def _label(side: SideInfo) -> str:
    if side.repo:
        return f"{side.repo}@{side.revision}" if side.revision else side.repo
    return side.location


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _verdict(side: SideInfo) -> str:
    return (
        f"{side.verdict} ({_plural(side.refusals, 'refusal')}, {_plural(side.warnings, 'warning')})"
    )


def _sides_lines(report: DiffReport) -> list[tuple[str, list[str], list[str]]]:
    """(row, A's lines, B's lines): every value is one line, except the arms (one per arm)."""
    a, b = report.a, report.b
    rows = [
        ("source", [_label(a)], [_label(b)]),
        ("tensors", [str(a.tensors)], [str(b.tensors)]),
        ("modules", [str(a.modules)], [str(b.modules)]),
        ("shards", [str(a.shards)], [str(b.shards)]),
        ("declared", [a.declared], [b.declared]),
        ("audit", [_verdict(a)], [_verdict(b)]),
    ]
    if a.arms or b.arms:
        rows.append(("arms", list(a.arms) or ["none"], list(b.arms) or ["none"]))
    return rows


def _names(report: DiffReport) -> list[tuple[str, int, int, str]]:
    """(operand, only in A, only in B, example) by operand."""
    example: dict[str, str] = {}
    for name in [*report.only_a, *report.only_b]:
        example.setdefault(split_name(name)[1], name)
    operands = sorted(
        set(report.only_a_by_operand) | set(report.only_b_by_operand),
        key=lambda op: (
            -(report.only_a_by_operand.get(op, 0) + report.only_b_by_operand.get(op, 0)),
            op,
        ),
    )
    return [
        (
            op,
            report.only_a_by_operand.get(op, 0),
            report.only_b_by_operand.get(op, 0),
            example[op],
        )
        for op in operands
    ]


def _shape(dtype: str, shape: list[int]) -> str:
    return f"{dtype} {shape}"


def _changed(rows: list[TensorChange]) -> list[tuple[str, str, int, str]]:
    """(operand, what changed, count, example), grouped by operand and kind of change."""
    groups: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], TensorChange] = {}
    for r in rows:
        kinds = []
        if r.a_dtype != r.b_dtype:
            kinds.append(f"dtype {r.a_dtype} -> {r.b_dtype}")
        if r.a_shape != r.b_shape:
            kinds.append("shape")
        key = (split_name(r.name)[1], ", ".join(kinds))
        groups[key] += 1
        example.setdefault(key, r)
    out = []
    for (op, kind), n in sorted(groups.items(), key=lambda kv: (-kv[1], kv[0])):
        r = example[(op, kind)]
        shown = f"{r.name}: {_shape(r.a_dtype, r.a_shape)} -> {_shape(r.b_dtype, r.b_shape)}"
        out.append((op, kind, n, shown))
    return out


def _bucket(name: str, arm: str) -> str:
    return f"{name} ({arm})" if arm else name


def render_diff_markdown(report: DiffReport) -> str:
    a, b = report.a, report.b
    mark = "✅" if report.identical else "↔️"
    out = [
        f"### qarm diff: {md_code(_label(a), table=False)} (A) vs "
        f"{md_code(_label(b), table=False)} (B)",
        "",
    ]
    out += [f"{mark} **{md_text(report.summary)}**", ""]
    out += ["| | A | B |", "|---|---|---|"]
    out += [
        f"| {k} | {'<br>'.join(map(md_text, a_lines))} | {'<br>'.join(map(md_text, b_lines))} |"
        for k, a_lines, b_lines in _sides_lines(report)
    ]
    out += [
        "",
        f"**Names**: {len(report.only_a)} only in A, {len(report.only_b)} only in B, "
        f"{len(report.changed)} in both with another dtype or shape.",
    ]
    names = _names(report)
    if names:
        out += ["", "| operand | only in A | only in B | example |", "|---|---:|---:|---|"]
        out += [f"| {md_code(op)} | {x} | {y} | {md_code(e)} |" for op, x, y, e in names[:EXAMPLES]]
        if len(names) > EXAMPLES:
            out.append(f"| … {len(names) - EXAMPLES} more operands | | | see `--format json` |")
    changed = _changed(report.changed)
    if changed:
        out += ["", "| operand | change | tensors | example |", "|---|---|---:|---|"]
        out += [
            f"| {md_code(op)} | {md_text(kind)} | {n} | {md_code(e)} |"
            for op, kind, n, e in changed[:EXAMPLES]
        ]
    out += ["", f"**Declarations**: {len(report.modules)} modules resolve differently."]
    if report.module_moves:
        out += ["", "| change | A | B | modules | example |", "|---|---|---|---:|---|"]
        for m in report.module_moves[:EXAMPLES]:
            a_cell = _bucket(m.a_bucket, m.a_arm) + (f", {m.a_how}" if m.a_how else "")
            b_cell = _bucket(m.b_bucket, m.b_arm) + (f", {m.b_how}" if m.b_how else "")
            out.append(
                f"| {md_text(m.change)} | {md_code(a_cell)} | {md_code(b_cell)} | {m.modules} | "
                f"{md_code(m.example)} |"
            )
        if len(report.module_moves) > EXAMPLES:
            out.append(f"| … {len(report.module_moves) - EXAMPLES} more groups | | | | |")
    if report.config:
        out += ["", "**Declaration keys**:", "", "| key | A | B |", "|---|---|---|"]
        for c in report.config:
            a_cell, b_cell = c.a, c.b
            if c.only_a or c.only_b:
                a_cell += f"; only in A: {', '.join(c.only_a) or 'none'}"
                b_cell += f"; only in B: {', '.join(c.only_b) or 'none'}"
            out.append(f"| {md_text(c.key)} | {md_text(a_cell)} | {md_text(b_cell)} |")
    layout = report.layout
    out += ["", f"**Layout**: {'same shards' if layout.identical else 'differs'}."]
    if layout.lines:
        out += ["", *[f"- {md_text(line)}" for line in layout.lines[:EXAMPLES]]]
        if len(layout.lines) > EXAMPLES:
            out.append(f"- … {len(layout.lines) - EXAMPLES} more lines (see `--format json`)")
    if report.documents:
        out += [
            "",
            "Documents whose text differs: "
            f"{', '.join(md_code(d, table=False) for d in report.documents)}.",
        ]
    return "\n".join(out) + "\n"


def render_diff_table(report: DiffReport, console: Console) -> None:
    console.print(_renderable(report), crop=False)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=term(title), title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _renderable(report: DiffReport) -> RenderableType:
    style = "bold green" if report.identical else "bold yellow"
    parts: list[RenderableType] = [term_line(report.summary, style=style)]
    sides = _table("Checkpoints", "", "A", "B")
    for key, a_lines, b_lines in _sides_lines(report):
        sides.add_row(key, Text("\n").join(map(term, a_lines)), Text("\n").join(map(term, b_lines)))
    parts.append(sides)
    names = _names(report)
    if names:
        table = _table(
            f"Names ({len(report.only_a)} only in A, {len(report.only_b)} only in B)",
            "operand",
            "only in A",
            "only in B",
            "example",
        )
        for op, x, y, e in names[:EXAMPLES]:
            table.add_row(term(op), str(x), str(y), term(e))
        if len(names) > EXAMPLES:
            table.add_row("…", "", "", f"{len(names) - EXAMPLES} more (see --format json)")
        parts.append(table)
    changed = _changed(report.changed)
    parts.append(Text(f"{len(report.changed)} names in both with another dtype or shape"))
    if changed:
        table = _table("dtype or shape", "operand", "change", "tensors", "example")
        for op, kind, n, e in changed[:EXAMPLES]:
            table.add_row(term(op), term(kind), str(n), term(e))
        parts.append(table)
    if report.module_moves:
        table = _table(
            f"Declarations ({len(report.modules)} modules resolve differently)",
            "change",
            "A",
            "B",
            "modules",
            "example",
        )
        for m in report.module_moves[:EXAMPLES]:
            table.add_row(
                term(m.change),
                term(_bucket(m.a_bucket, m.a_arm) + (f", {m.a_how}" if m.a_how else "")),
                term(_bucket(m.b_bucket, m.b_arm) + (f", {m.b_how}" if m.b_how else "")),
                str(m.modules),
                term(m.example),
            )
        parts.append(table)
    if report.config:
        table = _table("Declaration keys", "key", "A", "B")
        for c in report.config:
            a_cell, b_cell = c.a, c.b
            if c.only_a or c.only_b:
                a_cell += f"; only in A: {', '.join(c.only_a) or 'none'}"
                b_cell += f"; only in B: {', '.join(c.only_b) or 'none'}"
            table.add_row(term(c.key), term(a_cell), term(b_cell))
        parts.append(table)
    layout = report.layout
    parts.append(Text(f"layout: {'same shards' if layout.identical else 'differs'}"))
    parts.extend(term_line(f"  {line}") for line in layout.lines[:EXAMPLES])
    if len(layout.lines) > EXAMPLES:
        parts.append(Text(f"  … {len(layout.lines) - EXAMPLES} more (see --format json)"))
    if report.documents:
        parts.append(term_line(f"documents whose text differs: {', '.join(report.documents)}"))
    return Group(*parts)
