"""Render the rule tables and the release matrix of docs/engines.md from the shipped profiles.

    python scripts/engine_docs.py           # rewrite the generated parts of docs/engines.md
    python scripts/engine_docs.py --check   # exit 1 if they are stale (tests/test_engines.py)

Each generated part sits between ``<!-- generated: NAME -->`` and ``<!-- /generated: NAME -->``;
the text around them is written by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from qarm_audit.engines.entries import LoadError
from qarm_audit.engines.profile import (
    BUILTIN,
    Profile,
    Rule,
    _release_facts,
    load_profile,
    modelled_releases,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "engines.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _list(values: list[str]) -> str:
    return "/".join(values)


def when(rule: Rule) -> str:
    """The rule's conditions, in words."""
    parts: list[str] = []
    if rule.producer:
        parts.append(f"producer {_list(rule.producer)}")
    if rule.declaration_form:
        parts.append(f"declaration_form {_list(rule.declaration_form)}")
    if rule.declaration_file:
        parts.append(f"declared in {_list(rule.declaration_file)}")
    case = " (as written)" if rule.case_sensitive else ""
    if rule.declared_algo:
        parts.append(f"declared_algo {_list(rule.declared_algo)}{case}")
    if rule.declared_algo_contains:
        parts.append(f"algo contains {_list(rule.declared_algo_contains)}{case}")
    if rule.declared_algo_not:
        parts.append(f"algo not {_list(rule.declared_algo_not)}{case}")
    if rule.declared_family:
        parts.append(f"declared_family {_list(rule.declared_family)}")
    if rule.declared_arm:
        parts.append(f"declared_arm {_list(rule.declared_arm)}")
    if rule.declared_strategy:
        parts.append(f"declared_strategy {_list(rule.declared_strategy)}")
    if rule.declared_format:
        parts.append(f"format {_list(rule.declared_format)}")
    if rule.config_format:
        parts.append(f"config format {_list(rule.config_format)}")
    if rule.declared_group_size:
        parts.append(f"group size {_list([str(g) for g in rule.declared_group_size])}")
    if rule.declared_symmetric is not None:
        parts.append("symmetric" if rule.declared_symmetric else "asymmetric")
    if rule.declared_actorder is not None:
        parts.append("actorder" if rule.declared_actorder else "no actorder")
    if rule.declared_activation:
        parts.append(f"activations {_list(rule.declared_activation)}")
    if rule.mixed is not None:
        parts.append("MIXED" if rule.mixed else "not MIXED")
    if rule.mixed_nvfp4 is not None:
        parts.append("map has an NVFP4 entry" if rule.mixed_nvfp4 else "map has no NVFP4 entry")
    if rule.groups_weight_only is not None:
        parts.append(
            "all groups weight-only" if rule.groups_weight_only else "groups quantize activations"
        )
    if rule.module_contains:
        parts.append(f"module_contains {_list(rule.module_contains)}")
    if rule.shipped:
        parts.append(f"shipped {_list(rule.shipped)}")
    parts += [f"ships {op}" for op in rule.operands_present]
    parts += [f"lacks {op}" for op in rule.operands_absent]
    for key, value in rule.env.items():
        shown = value if isinstance(value, str) else "\\|".join(value)
        parts.append(f"{key}={shown}")
    for key, value in rule.env_not.items():
        shown = value if isinstance(value, str) else "\\|".join(value)
        parts.append(f"{key} not {shown}")
    if rule.gpu_min is not None and rule.gpu_max is not None:
        parts.append(
            f"sm{rule.gpu_min}"
            if rule.gpu_min == rule.gpu_max
            else f"sm{rule.gpu_min}-sm{rule.gpu_max}"
        )
    elif rule.gpu_min is not None:
        parts.append(f"sm{rule.gpu_min}+")
    elif rule.gpu_max is not None:
        parts.append(f"up to sm{rule.gpu_max}")
    return ", ".join(parts) or "anything else"


def rules_table(profile: Profile) -> str:
    lines = [
        "| # | when | arm | reason | engine says | source |",
        "|---:|---|---|---|---|---|",
    ]
    for i, rule in enumerate(profile.rules, 1):
        arm = f"`{rule.arm}`" + (f" ({rule.kernel})" if rule.kernel else "")
        says = (
            f'raises: "{rule.error}"' if rule.error else f'logs: "{rule.log}"' if rule.log else ""
        )
        source = f"`{rule.source}`" if rule.source else "—"
        lines.append(
            f"| {i} | {_cell(when(rule))} | {_cell(arm)} | {_cell(rule.reason)} | "
            f"{_cell(says)} | {source} |"
        )
    if profile.load_errors:
        lines += [
            "",
            "| refusal | declaration | cause | when | engine says | source |",
            "|---|---|---|---|---|---|",
        ]
        for quote in profile.load_errors:
            says = f'raises: "{quote.text}"' if quote.text else f"{quote.note}"
            lines.append(
                f"| `{quote.code}` | {_list(quote.producer or ['any'])} | {quote.cause or 'any'} | "
                f"{_cell(_quote_when(quote))} | {_cell(says)} | `{quote.source}` |"
            )
    return "\n".join(lines)


def _quote_when(quote: LoadError) -> str:
    """The matchers beyond code, producer and cause that pick a load error, in words."""
    parts = []
    if quote.family:
        parts.append(f"family {_list(quote.family)}")
    if quote.says:
        parts.append(f'the finding says "{quote.says}"')
    if quote.quantized is not None:
        parts.append("a quantization declared" if quote.quantized else "nothing quantized")
    return "; ".join(parts) or "any"


def matrix(name: str) -> str:
    """Which rules hold on which release (rules every release has are left out)."""
    releases = modelled_releases(name)
    profiles = {r: load_profile(f"{name}=={r}") for r in releases}
    pins = {r: ", ".join(_release_facts(name, r).get("requires", [])) or "—" for r in releases}
    head = "| release | commit cited | rules | kernel libraries pinned |\n|---|---|---:|---|\n"
    head += "\n".join(
        f"| {p.label} | `{p.commit}` | {len(p.rules)} | {_cell(pins[r])} |"
        for r, p in profiles.items()
    )
    keys: dict[tuple[str, str | None, str], set[str]] = {}
    for release, profile in profiles.items():
        for rule in profile.rules:
            reason = rule.reason.replace(f"v{release}", "v{release}")
            keys.setdefault((rule.arm, rule.kernel, reason), set()).add(release)
    differ = [(k, v) for k, v in keys.items() if len(v) != len(releases)]
    if not differ:
        return head
    columns = " | ".join(f"v{r}" for r in releases)
    lines = ["", f"| arm | reason | {columns} |", "|---|---|" + "---|" * len(releases)]
    for (arm, kernel, reason), has in differ:
        marks = " | ".join("yes" if r in has else "—" for r in releases)
        shown = f"`{arm}`" + (f" ({kernel})" if kernel else "")
        lines.append(f"| {_cell(shown)} | {_cell(reason)} | {marks} |")
    return head + "\n" + "\n".join(lines)


def parts() -> dict[str, str]:
    out = {}
    for name in BUILTIN:
        out[f"rules:{name}"] = rules_table(load_profile(name))
        if modelled_releases(name):
            out[f"matrix:{name}"] = matrix(name)
    return out


def render(text: str) -> str:
    for key, body in parts().items():
        name = re.escape(key)
        pattern = re.compile(
            rf"(<!-- generated: {name} -->\n)(?:.*?\n)?(<!-- /generated: {name} -->)", re.S
        )
        hit = pattern.search(text)
        if hit is None:
            raise SystemExit(f"engine_docs: docs/engines.md has no generated part {key!r}")
        text = text[: hit.start()] + hit.group(1) + body + "\n" + hit.group(2) + text[hit.end() :]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    old = DOC.read_text("utf-8")
    new = render(old)
    if args.check:
        return 0 if new == old else 1
    DOC.write_text(new, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
