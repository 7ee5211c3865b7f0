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

if TYPE_CHECKING:
    from .diff_model import DiffReport, SideInfo, TensorChange

EXAMPLES = 40
"""Rows of a grouped table shown before the rest are counted (JSON keeps every one)."""


def render_diff_json(report: DiffReport) -> str:
    return report.model_dump_json(indent=2) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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


def _sides(report: DiffReport, sep: str = "\n") -> list[tuple[str, str, str]]:
    a, b = report.a, report.b
    rows = [
        ("source", _label(a), _label(b)),
        ("tensors", str(a.tensors), str(b.tensors)),
        ("modules", str(a.modules), str(b.modules)),
        ("shards", str(a.shards), str(b.shards)),
        ("declared", a.declared, b.declared),
        ("audit", _verdict(a), _verdict(b)),
    ]
    if a.arms or b.arms:
        rows.append(("arms", sep.join(a.arms) or "none", sep.join(b.arms) or "none"))
    return rows


def _names(report: DiffReport) -> list[tuple[str, int, int, str]]:
    """(operand, only in A, only in B, example) by operand."""
    example: dict[str, str] = {}
    for name in [*report.only_a, *report.only_b]:
        example.setdefault(name.rpartition(".")[2], name)
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
        key = (r.name.rpartition(".")[2], ", ".join(kinds))
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
    out = [f"### qarm diff: `{_cell(_label(a))}` (A) vs `{_cell(_label(b))}` (B)", ""]
    out += [f"{mark} **{_cell(report.summary)}**", ""]
    out += ["| | A | B |", "|---|---|---|"]
    out += [f"| {k} | {_cell(x)} | {_cell(y)} |" for k, x, y in _sides(report, "<br>")]
    out += [
        "",
        f"**Names**: {len(report.only_a)} only in A, {len(report.only_b)} only in B, "
        f"{len(report.changed)} in both with another dtype or shape.",
    ]
    names = _names(report)
    if names:
        out += ["", "| operand | only in A | only in B | example |", "|---|---:|---:|---|"]
        out += [f"| `{op}` | {x} | {y} | `{_cell(e)}` |" for op, x, y, e in names[:EXAMPLES]]
        if len(names) > EXAMPLES:
            out.append(f"| … {len(names) - EXAMPLES} more operands | | | see `--format json` |")
    changed = _changed(report.changed)
    if changed:
        out += ["", "| operand | change | tensors | example |", "|---|---|---:|---|"]
        out += [
            f"| `{op}` | {_cell(kind)} | {n} | `{_cell(e)}` |"
            for op, kind, n, e in changed[:EXAMPLES]
        ]
    out += ["", f"**Declarations**: {len(report.modules)} modules resolve differently."]
    if report.module_moves:
        out += ["", "| change | A | B | modules | example |", "|---|---|---|---:|---|"]
        for m in report.module_moves[:EXAMPLES]:
            a_cell = _bucket(m.a_bucket, m.a_arm) + (f", {m.a_how}" if m.a_how else "")
            b_cell = _bucket(m.b_bucket, m.b_arm) + (f", {m.b_how}" if m.b_how else "")
            out.append(
                f"| {m.change} | `{_cell(a_cell)}` | `{_cell(b_cell)}` | {m.modules} | "
                f"`{_cell(m.example)}` |"
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
            out.append(f"| {c.key} | {_cell(a_cell)} | {_cell(b_cell)} |")
    layout = report.layout
    out += ["", f"**Layout**: {'same shards' if layout.identical else 'differs'}."]
    if layout.lines:
        out += ["", *[f"- {_cell(line)}" for line in layout.lines[:EXAMPLES]]]
        if len(layout.lines) > EXAMPLES:
            out.append(f"- … {len(layout.lines) - EXAMPLES} more lines (see `--format json`)")
    if report.documents:
        out += [
            "",
            f"Documents whose text differs: {', '.join(f'`{d}`' for d in report.documents)}.",
        ]
    return "\n".join(out) + "\n"


def render_diff_table(report: DiffReport, console: Console) -> None:
    console.print(_renderable(report))


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _renderable(report: DiffReport) -> RenderableType:
    style = "bold green" if report.identical else "bold yellow"
    parts: list[RenderableType] = [Text(report.summary, style=style)]
    sides = _table("Checkpoints", "", "A", "B")
    for row in _sides(report):
        sides.add_row(*row)
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
            table.add_row(op, str(x), str(y), e)
        if len(names) > EXAMPLES:
            table.add_row("…", "", "", f"{len(names) - EXAMPLES} more (see --format json)")
        parts.append(table)
    changed = _changed(report.changed)
    parts.append(Text(f"{len(report.changed)} names in both with another dtype or shape"))
    if changed:
        table = _table("dtype or shape", "operand", "change", "tensors", "example")
        for op, kind, n, e in changed[:EXAMPLES]:
            table.add_row(op, kind, str(n), e)
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
                m.change,
                _bucket(m.a_bucket, m.a_arm) + (f", {m.a_how}" if m.a_how else ""),
                _bucket(m.b_bucket, m.b_arm) + (f", {m.b_how}" if m.b_how else ""),
                str(m.modules),
                m.example,
            )
        parts.append(table)
    if report.config:
        table = _table("Declaration keys", "key", "A", "B")
        for c in report.config:
            a_cell, b_cell = c.a, c.b
            if c.only_a or c.only_b:
                a_cell += f"; only in A: {', '.join(c.only_a) or 'none'}"
                b_cell += f"; only in B: {', '.join(c.only_b) or 'none'}"
            table.add_row(c.key, a_cell, b_cell)
        parts.append(table)
    layout = report.layout
    parts.append(Text(f"layout: {'same shards' if layout.identical else 'differs'}"))
    parts.extend(Text(f"  {line}") for line in layout.lines[:EXAMPLES])
    if len(layout.lines) > EXAMPLES:
        parts.append(Text(f"  … {len(layout.lines) - EXAMPLES} more (see --format json)"))
    if report.documents:
        parts.append(Text(f"documents whose text differs: {', '.join(report.documents)}"))
    return Group(*parts)
