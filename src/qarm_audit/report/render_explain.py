"""``qarm explain`` in three formats: markdown, JSON, and the terminal (rich)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.table import Table

from .escape import md_code, md_text, term, term_line

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


def _source(explanation: Explanation) -> str:
    src = explanation.source
    if src.repo:
        return f"{src.repo}@{src.revision}" if src.revision else src.repo
    return src.location


Escape = Callable[[str], str]


def _plain(text: str) -> str:
    return text


def _md_code(text: str) -> str:
    return md_code(text, table=False)


def _engine(explanation: Explanation, code: Escape = _plain, text: Escape = _plain) -> str:
    """The engine profile in words; ``code`` and ``text`` escape its name and the rest."""
    engine = explanation.engine
    env = ", ".join(f"{k}={v}" for k, v in engine.env.items())
    return (
        f"engine profile {code(engine.name)} ({text(engine.routing)} routing"
        + (f"; {text(env)}" if env else "")
        + (f"; GPU {text(engine.gpu)}" if engine.gpu else "")
        + ")"
    )


def _decided(m: ModuleExplanation) -> str:
    rule = f" '{m.rule}'" if m.rule else ""
    return f"{m.bucket} ({m.how}{rule})"


def _matched(explanation: Explanation, code: Escape = _plain) -> str:
    """What the query matched; ``code`` writes each name."""
    if explanation.matched == "tensor":
        return (
            f"the tensor {code(explanation.tensor or '')} of module "
            f"{code(explanation.modules[0].module)}"
        )
    if explanation.matched == "engine module":
        names = ", ".join(code(m.module) for m in explanation.modules)
        return f"the engine module {code(explanation.query)}, loaded from {names}"
    return f"the module {code(explanation.query)}"


def render_explain_markdown(explanation: Explanation) -> str:
    out = [
        f"### qarm explain: {_md_code(explanation.query)} in {_md_code(_source(explanation))}",
        "",
    ]
    out.append(
        f"Matched {_matched(explanation, _md_code)}. Declared "
        f"{md_text(explanation.declaration)}; {_engine(explanation, _md_code, md_text)}."
    )
    for m in explanation.modules:
        out += [
            "",
            f"#### {_md_code(m.module)} -> **{md_text(_decided(m))}** {VERDICT[m.verdict]}",
            "",
        ]
        engine = (
            f"; the engine loads it as {_md_code(m.engine_name)}"
            if m.engine_name != m.module
            else ""
        )
        shards = f" (shards: {md_text(', '.join(m.fused_shards))})" if m.fused_shards else ""
        out.append(f"- kind: {md_text(m.kind)}{engine}{shards}")
        out.append(f"- engine layer: {md_text(_layer(m))}")
        out.append(f"- scheme: {md_text(m.scheme or 'none: ' + m.bucket)}")
        out.append(f"- shipped: {md_text(m.shipped)} ({md_text(m.shipped_detail)})")
        out += ["", "| outcome | rule | tried | detail |", "|---|---|---|---|"]
        for a in m.attempts:
            mark = f"**{MARK[a.outcome]}**" if a.outcome == "decided" else MARK[a.outcome]
            tried = md_code(a.tried) if a.tried else ""
            out.append(f"| {mark} | {md_text(a.step)} | {tried} | {md_text(a.detail)} |")
        out += [
            "",
            "| operand | tensor | dtype | shape | shard | family |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            f"| {md_code(o.operand)} | {md_code(o.tensor)} | {md_text(o.dtype)} | "
            f"{md_text(str(o.shape))} | {md_text(o.shard)} | {md_text(o.family or o.kind)} |"
            for o in m.operands
        ]
        out.append("")
        if m.arms:
            out += [f"- arm: {md_text(r.line())}: {md_text(r.reason)}" for r in m.arms]
        else:
            out.append(f"- arm: none ({md_text(m.arm_note or 'no rule applies')})")
        if m.findings:
            out += ["", "| severity | code | tensor | message |", "|---|---|---|---|"]
            out += [
                f"| {md_text(r.severity)} | {md_code(r.code)} | {md_code(r.tensor)} | "
                f"{md_text(r.message)} |"
                for r in m.findings
            ]
        else:
            out.append("- findings: none")
    return "\n".join(out) + "\n"


def render_explain_table(explanation: Explanation, console: Console) -> None:
    console.print(_renderable(explanation), crop=False)


def _renderable(explanation: Explanation) -> RenderableType:
    parts: list[RenderableType] = [
        term_line(
            f"{explanation.query}: matched {_matched(explanation)}; declared "
            f"{explanation.declaration}; {_engine(explanation)}",
            style="bold",
        )
    ]
    for m in explanation.modules:
        style = {"refused": "bold red", "warnings": "bold yellow", "clean": "bold green"}[m.verdict]
        parts.append(term_line(f"{m.module} -> {_decided(m)} [{m.verdict}]", style=style))
        engine = f", loaded as {m.engine_name}" if m.engine_name != m.module else ""
        parts.append(
            term_line(
                f"  {m.kind}{engine}; scheme {m.scheme or 'none'}; "
                f"shipped {m.shipped} ({m.shipped_detail})"
            )
        )
        parts.append(term_line(f"  engine layer: {_layer(m)}"))
        rules = Table(title="Rules tried", title_justify="left")
        for column in ("outcome", "rule", "tried", "detail"):
            rules.add_column(column, overflow="fold")
        for a in m.attempts:
            rules.add_row(
                MARK[a.outcome], term(a.step), term(a.tried), term(a.detail), style=STYLE[a.outcome]
            )
        parts.append(rules)
        operands = Table(title="Operands shipped", title_justify="left")
        for column in ("operand", "dtype", "shape", "shard", "family"):
            operands.add_column(column, overflow="fold")
        for o in m.operands:
            operands.add_row(
                term(o.operand),
                term(o.dtype),
                str(o.shape),
                term(o.shard),
                term(o.family or o.kind),
            )
        parts.append(operands)
        if m.arms:
            parts.extend(term_line(f"  arm {r.line()}: {r.reason}") for r in m.arms)
        else:
            parts.append(term_line(f"  arm: none ({m.arm_note or 'no rule applies'})", style="dim"))
        parts.extend(
            term_line(
                f"  {r.severity} {r.code}: {r.message}",
                style="red" if r.severity == "refusal" else "yellow",
            )
            for r in m.findings
        )
    return Group(*parts)


def _layer(m: ModuleExplanation) -> str:
    """``fused QKVParallelLinear, with the quant config (vllm 0.33.0)``."""
    kind = m.layer_kind or m.kind
    cls = f" {m.layer_class}" if m.layer_class else ""
    config = "with the quant config" if m.quant_config else "built without a quant config"
    tree = f" ({m.layer_tree})" if m.layer_tree else ""
    return f"{kind}{cls}, {config}{tree}"
