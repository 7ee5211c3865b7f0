"""``qarm explain`` in three formats: markdown, JSON, and the terminal (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from .explain_model import Explanation, ModuleExplanation

MARK = {
    "decided": "→ decided",
    "shadowed": "shadowed",
    "miss": "miss",
    "split": "split",
    "n/a": "n/a",
}
VERDICT = {"refused": "❌ refused", "warnings": "⚠️ warnings", "clean": "✅ clean"}
STYLE = {"decided": "bold green", "shadowed": "yellow", "split": "red", "miss": "", "n/a": "dim"}


def render_explain_json(explanation: Explanation) -> str:
    return explanation.model_dump_json(indent=2) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _source(explanation: Explanation) -> str:
    src = explanation.source
    if src.repo:
        return f"{src.repo}@{src.revision}" if src.revision else src.repo
    return src.location


def _engine(explanation: Explanation) -> str:
    engine = explanation.engine
    env = ", ".join(f"{k}={v}" for k, v in engine.env.items())
    return (
        f"engine profile `{engine.name}` ({engine.routing} routing"
        + (f"; {env}" if env else "")
        + (f"; GPU {engine.gpu}" if engine.gpu else "")
        + ")"
    )


def _decided(m: ModuleExplanation) -> str:
    rule = f" '{m.rule}'" if m.rule else ""
    return f"{m.bucket} ({m.how}{rule})"


def _matched(explanation: Explanation) -> str:
    if explanation.matched == "tensor":
        return f"the tensor `{explanation.tensor}` of module `{explanation.modules[0].module}`"
    if explanation.matched == "engine module":
        names = ", ".join(f"`{m.module}`" for m in explanation.modules)
        return f"the engine module `{explanation.query}`, loaded from {names}"
    return f"the module `{explanation.query}`"


def render_explain_markdown(explanation: Explanation) -> str:
    out = [f"### qarm explain: `{_cell(explanation.query)}` in `{_cell(_source(explanation))}`", ""]
    out.append(
        f"Matched {_matched(explanation)}. Declared {_cell(explanation.declaration)}; "
        f"{_engine(explanation)}."
    )
    for m in explanation.modules:
        out += [
            "",
            f"#### `{_cell(m.module)}` -> **{_cell(_decided(m))}** {VERDICT[m.verdict]}",
            "",
        ]
        engine = f"; the engine loads it as `{m.engine_name}`" if m.engine_name != m.module else ""
        shards = f" (shards: {', '.join(m.fused_shards)})" if m.fused_shards else ""
        out.append(f"- kind: {m.kind}{engine}{shards}")
        out.append(f"- scheme: {_cell(m.scheme or 'none: ' + m.bucket)}")
        out.append(f"- shipped: {m.shipped} ({_cell(m.shipped_detail)})")
        out += ["", "| outcome | rule | tried | detail |", "|---|---|---|---|"]
        for a in m.attempts:
            mark = f"**{MARK[a.outcome]}**" if a.outcome == "decided" else MARK[a.outcome]
            tried = f"`{_cell(a.tried)}`" if a.tried else ""
            out.append(f"| {mark} | {_cell(a.step)} | {tried} | {_cell(a.detail)} |")
        out += [
            "",
            "| operand | tensor | dtype | shape | shard | family |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| `{o.operand}` | `{_cell(o.tensor)}` | {o.dtype} | {o.shape} | {_cell(o.shard)} | "
            f"{o.family or o.kind} |"
            for o in m.operands
        ]
        out.append("")
        if m.arms:
            out += [f"- arm: {_cell(r.line())}: {_cell(r.reason)}" for r in m.arms]
        else:
            out.append(f"- arm: none ({_cell(m.arm_note or 'no rule applies')})")
        if m.findings:
            out += ["", "| severity | code | tensor | message |", "|---|---|---|---|"]
            out += [
                f"| {r.severity} | `{r.code}` | `{_cell(r.tensor)}` | {_cell(r.message)} |"
                for r in m.findings
            ]
        else:
            out.append("- findings: none")
    return "\n".join(out) + "\n"


def render_explain_table(explanation: Explanation, console: Console) -> None:
    console.print(_renderable(explanation))


def _renderable(explanation: Explanation) -> RenderableType:
    parts: list[RenderableType] = [
        Text(
            f"{explanation.query}: matched {_matched(explanation).replace('`', '')}; declared "
            f"{explanation.declaration}; {_engine(explanation).replace('`', '')}",
            style="bold",
        )
    ]
    for m in explanation.modules:
        style = {"refused": "bold red", "warnings": "bold yellow", "clean": "bold green"}[m.verdict]
        parts.append(Text(f"{m.module} -> {_decided(m)} [{m.verdict}]", style=style))
        engine = f", loaded as {m.engine_name}" if m.engine_name != m.module else ""
        parts.append(
            Text(
                f"  {m.kind}{engine}; scheme {m.scheme or 'none'}; "
                f"shipped {m.shipped} ({m.shipped_detail})"
            )
        )
        rules = Table(title="Rules tried", title_justify="left")
        for column in ("outcome", "rule", "tried", "detail"):
            rules.add_column(column, overflow="fold")
        for a in m.attempts:
            rules.add_row(MARK[a.outcome], a.step, a.tried, a.detail, style=STYLE[a.outcome])
        parts.append(rules)
        operands = Table(title="Operands shipped", title_justify="left")
        for column in ("operand", "dtype", "shape", "shard", "family"):
            operands.add_column(column, overflow="fold")
        for o in m.operands:
            operands.add_row(o.operand, o.dtype, str(o.shape), o.shard, o.family or o.kind)
        parts.append(operands)
        if m.arms:
            parts.extend(Text(f"  arm {r.line()}: {r.reason}") for r in m.arms)
        else:
            parts.append(Text(f"  arm: none ({m.arm_note or 'no rule applies'})", style="dim"))
        parts.extend(
            Text(
                f"  {r.severity} {r.code}: {r.message}",
                style="red" if r.severity == "refusal" else "yellow",
            )
            for r in m.findings
        )
    return Group(*parts)
