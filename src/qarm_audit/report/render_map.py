"""The scheme map (``qarm audit --map``): one letter per module, layers by projection kind.

Built from ``Report.modules`` alone (the bucket each module resolved to). Rows are the indices
of the main layer stack (``...layers.N``), columns the projection kinds under it (``q_proj``,
``o_proj``, ``gate_proj``, ...). Routed experts (``experts.E.proj``) get one cell per projection
that summarises every expert of the layer: the letter when all agree, ``*`` with a footnote
naming the odd ones out otherwise. Consecutive layers with the same cells share a row
(``3-60``). Modules outside the stack (``lm_head``, embeddings, ``mtp.*``, ``visual.*``) are
summarised per group after the grid. Norms are left out: they are never quantized.

So a reviewer sees at a glance that the first dense layers stay BF16, the MTP layer is excluded,
or one expert of one layer is off.
"""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.text import Text

from .escape import md_fence, visible
from .model import Report

ABSENT = "."
UNLISTED = "-"
EXCLUDED = "x"
MIXED = "*"
"""Cell marks besides the schemes' letters."""

MAX_FOOTNOTES = 24
MAX_ODD = 6
"""Odd ones out named per footnote or trailing group before ``and N more``."""

_STACK = re.compile(r"^(?P<stack>.+?)\.(?P<index>\d+)\.(?P<rest>.+)$", re.DOTALL)
_EXPERT = re.compile(r"^(?:(?P<head>.*)\.)?experts\.(?P<expert>\d+)\.(?P<tail>.+)$", re.DOTALL)
_GENERIC = {"model", "language_model", "transformer", "text_model", "decoder", "backbone"}
_PROJ_ORDER = [
    "q_a_proj",
    "q_b_proj",
    "kv_a_proj_with_mqa",
    "kv_b_proj",
    "q_proj",
    "k_proj",
    "v_proj",
    "qkv_proj",
    "qkv",
    "in_proj_qkv",
    "in_proj_qkvz",
    "in_proj_z",
    "in_proj_ba",
    "in_proj_a",
    "in_proj_b",
    "in_proj",
    "out_proj",
    "o_proj",
    "proj",
    "gate",
    "router",
    "shared_expert_gate",
    "gate_proj",
    "w1",
    "up_proj",
    "w3",
    "gate_up_proj",
    "down_proj",
    "w2",
]
_ABBREVIATIONS = {
    "shared_experts": "shared",
    "shared_expert": "shared",
    "kv_a_proj_with_mqa": "kv_a",
    "block_sparse_moe": "moe",
}


@dataclass(frozen=True)
class LegendEntry:
    letter: str
    bucket: str
    """The bucket (scheme name, ``excluded``, ``unlisted``) or, for marks, what the mark means."""
    description: str
    modules: int


@dataclass(frozen=True)
class Column:
    key: str
    """The module path under the layer, ``experts.E`` dropped for routed experts."""
    group: str
    """The header over a run of columns: the parent's last component (``self_attn``, ``mlp``,
    ``shared``, ``experts``); empty for a module right under the layer."""
    label: str
    """The leaf, ``_proj`` dropped where that keeps the group's leaves apart."""
    experts: bool

    @property
    def name(self) -> str:
        return f"{self.group}.{self.label}" if self.group else self.label


@dataclass(frozen=True)
class MapRow:
    layers: str
    """``7``, or ``3-60`` for consecutive layers with the same cells."""
    cells: tuple[str, ...]


@dataclass(frozen=True)
class OtherGroup:
    label: str
    """``lm_head``, ``model.visual.*``, ``mtp.*``: the modules outside the layer stack."""
    modules: int
    letters: tuple[tuple[str, int], ...]
    """Letters by count, most common first."""
    odd: tuple[str, ...]
    """Modules that differ from the group's most common letter."""


@dataclass(frozen=True)
class SchemeMap:
    stack: str | None
    """The layer stack's prefix (``model.layers``); None when no module is under one."""
    layers: int
    columns: tuple[Column, ...]
    rows: tuple[MapRow, ...]
    footnotes: tuple[str, ...]
    others: tuple[OtherGroup, ...]
    legend: tuple[LegendEntry, ...]
    notes: tuple[str, ...] = ()


def _skipped(module: str) -> bool:
    return "norm" in module.rsplit(".", 1)[-1].lower()


def _letters(report: Report, buckets: Iterable[str]) -> dict[str, str]:
    """One character per bucket: ``x`` excluded, ``-`` unlisted, a scheme's initial otherwise."""
    letters = {"excluded": EXCLUDED, "unlisted": UNLISTED}
    taken = set(letters.values()) | {ABSENT, MIXED}
    declared = [s.name for s in report.declaration.schemes]
    names = [*declared, *sorted(set(buckets) - set(declared) - set(letters))]
    common = ""
    if len(names) > 1:
        common = names[0]
        for name in names[1:]:
            while not name.startswith(common):
                common = common[:-1]
    for name in names:
        own = [c.upper() for c in name[len(common) :] + name if c.isalnum()]
        for candidate in [*own, *string.ascii_uppercase, *string.digits]:
            if candidate not in taken:
                letters[name] = candidate
                taken.add(candidate)
                break
        else:  # pragma: no cover - more than 60 schemes
            letters[name] = "?"
    return letters


def _short(component: str) -> str:
    if component in _ABBREVIATIONS:
        return _ABBREVIATIONS[component]
    kept = [part for part in component.split("_") if part != "proj"]
    return "_".join(kept) or component


def _columns(keys: Sequence[str], experts: set[str]) -> list[Column]:
    """Group headers from the parents' last components, leaf labels without ``_proj``."""
    parents = {k: k.rsplit(".", 1)[0] if "." in k else "" for k in keys}
    names = {p: _short(p.rsplit(".", 1)[-1]) if p else "" for p in set(parents.values())}
    if len(set(names.values())) != len(names):
        names = {p: p for p in names}
    leaves: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        leaves[parents[key]].append(key.rsplit(".", 1)[-1])
    columns = []
    for key in keys:
        leaf = key.rsplit(".", 1)[-1]
        siblings = leaves[parents[key]]
        short = _short(leaf)
        unique = sum(_short(other) == short for other in siblings) == 1
        columns.append(
            Column(
                key=key,
                group=names[parents[key]],
                label=short if unique else leaf,
                experts=key in experts,
            )
        )
    return columns


def _rank(key: str) -> tuple[int, str, int, str, int, str]:
    parts = key.split(".")
    head = parts[0] if len(parts) > 1 else ""
    group = 0 if "attn" in key.split(".")[0] or "attention" in key.split(".")[0] else 1
    routed = 1 if "experts" in parts else 0
    leaf = parts[-1]
    order = _PROJ_ORDER.index(leaf) if leaf in _PROJ_ORDER else len(_PROJ_ORDER)
    return (group, head, routed, ".".join(parts[:-1]), order, key)


def _ranges(numbers: Iterable[int]) -> str:
    ordered = sorted(set(numbers))
    spans: list[str] = []
    start = prev = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(spans)


def _group_label(module: str) -> str:
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part not in _GENERIC:
            return module if i == len(parts) - 1 else ".".join(parts[: i + 1]) + ".*"
    return module


def build_map(report: Report) -> SchemeMap:
    """The scheme map of a report: see the module docstring."""
    modules = [(m["module"], m["bucket"]) for m in report.modules if not _skipped(m["module"])]
    letters = _letters(report, {bucket for _, bucket in modules})
    stacks: Counter[str] = Counter()
    for name, _ in modules:
        match = _STACK.match(name)
        if match and not match["stack"].endswith("experts"):
            stacks[match["stack"]] += 1
    stack = (
        max(stacks, key=lambda s: (s.rsplit(".", 1)[-1] == "layers", stacks[s], s))
        if stacks
        else None
    )

    plain: dict[tuple[int, str], str] = {}
    routed: dict[tuple[int, str], dict[int, str]] = defaultdict(dict)
    experts_keys: set[str] = set()
    others: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name, bucket in modules:
        letter = letters[bucket]
        match = _STACK.match(name)
        if stack is None or match is None or match["stack"] != stack:
            others[_group_label(name)].append((name, letter))
            continue
        layer, rest = int(match["index"]), match["rest"]
        expert = _EXPERT.match(rest)
        if expert:
            key = ".".join(p for p in (expert["head"], "experts", expert["tail"]) if p)
            experts_keys.add(key)
            routed[(layer, key)][int(expert["expert"])] = letter
        else:
            plain[(layer, rest)] = letter

    keys = sorted({k for _, k in plain} | experts_keys, key=_rank)
    columns = tuple(_columns(keys, experts_keys))
    layers = sorted({layer for layer, _ in plain} | {layer for layer, _ in routed})
    raw_rows: list[tuple[int, tuple[str, ...]]] = []
    footnotes: list[str] = []
    for layer in layers:
        cells = []
        for column in columns:
            if not column.experts:
                cells.append(plain.get((layer, column.key), ABSENT))
                continue
            by_expert = routed.get((layer, column.key))
            if not by_expert:
                cells.append(ABSENT)
                continue
            counts = Counter(by_expert.values())
            if len(counts) == 1:
                cells.append(next(iter(counts)))
                continue
            cells.append(MIXED)
            common = counts.most_common(1)[0][0]
            odd = "; ".join(
                f"{letter} on expert{'s' if n > 1 else ''} "
                + _ranges(e for e, v in by_expert.items() if v == letter)
                for letter, n in sorted(counts.items())
                if letter != common
            )
            footnotes.append(
                f"layer {layer} {column.name}: {common} on {counts[common]} of "
                f"{len(by_expert)} experts; {odd}"
            )
        raw_rows.append((layer, tuple(cells)))

    rows: list[MapRow] = []
    start = 0
    for i in range(1, len(raw_rows) + 1):
        first_layer, same = raw_rows[start]
        if (
            i < len(raw_rows)
            and raw_rows[i][1] == same
            and raw_rows[i][0] == raw_rows[i - 1][0] + 1
            and MIXED not in same
        ):
            continue
        last_layer = raw_rows[i - 1][0]
        span = str(first_layer) if first_layer == last_layer else f"{first_layer}-{last_layer}"
        rows.append(MapRow(layers=span, cells=same))
        start = i

    groups = []
    for label in sorted(others):
        members = others[label]
        counts = Counter(letter for _, letter in members)
        common = counts.most_common(1)[0][0]
        groups.append(
            OtherGroup(
                label=label,
                modules=len(members),
                letters=tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
                odd=tuple(name for name, letter in members if letter != common),
            )
        )

    used = Counter(letters[bucket] for _, bucket in modules)
    arms = {s.name: s.declared_arm for s in report.declaration.schemes}
    legend = [
        LegendEntry(
            letter=letter,
            bucket=bucket,
            description=(
                f"declared {arms[bucket]}"
                if bucket in arms
                else "declared unquantized by an exclude or ignore rule"
                if bucket == "excluded"
                else "matched by no rule: unquantized"
                if bucket == "unlisted"
                else ""
            ),
            modules=used[letter],
        )
        for bucket, letter in sorted(
            letters.items(), key=lambda kv: (kv[0] in ("excluded", "unlisted"), kv[1] == UNLISTED)
        )
        if used[letter]
    ]
    if any(ABSENT in row.cells for row in rows):
        legend.append(LegendEntry(ABSENT, "absent", "no such module in this layer", 0))
    if footnotes:
        legend.append(LegendEntry(MIXED, "experts disagree", "see the footnotes", 0))
    return SchemeMap(
        stack=stack,
        layers=len(layers),
        columns=columns,
        rows=tuple(rows),
        footnotes=tuple(footnotes),
        others=tuple(groups),
        legend=tuple(legend),
        notes=(
            ("an experts column stands for every routed expert of the layer",)
            if experts_keys
            else ()
        ),
    )


def _legend_line(entry: LegendEntry) -> str:
    count = f" ({entry.modules} module{'s' if entry.modules != 1 else ''})" if entry.modules else ""
    description = f": {entry.description}" if entry.description else ""
    return visible(f"{entry.letter}  {entry.bucket}{description}{count}")


def _other_line(group: OtherGroup) -> str:
    if len(group.letters) == 1:
        text = group.letters[0][0]
    else:
        text = ", ".join(f"{letter} {n}" for letter, n in group.letters)
    if group.modules > 1:
        text += f" ({group.modules} modules)"
    if group.odd:
        shown = ", ".join(group.odd[:MAX_ODD])
        more = f" and {len(group.odd) - MAX_ODD} more" if len(group.odd) > MAX_ODD else ""
        text += f"; off: {shown}{more}"
    return visible(text)


def _title(scheme_map: SchemeMap) -> str:
    if scheme_map.stack is None:
        return "Scheme map: no layer stack; every module below"
    return (
        f"Scheme map: {visible(scheme_map.stack)}, {scheme_map.layers} layers by projection "
        "(one letter per module)"
    )


Segment = tuple[str, bool]
"""Text, and whether it is a cell (styled by its letter on a terminal)."""


def _grid(scheme_map: SchemeMap) -> list[list[Segment]]:
    """The grid as lines of segments: group headers, leaf labels, one line per row."""
    columns = scheme_map.columns
    first = max(len("layer"), *(len(r.layers) for r in scheme_map.rows))
    labels = [visible(c.label) for c in columns]
    widths = [max(len(label), 1) for label in labels]
    runs: list[tuple[str, list[int]]] = []
    for i, column in enumerate(columns):
        group = visible(column.group)
        if runs and runs[-1][0] == group:
            runs[-1][1].append(i)
        else:
            runs.append((group, [i]))
    for group, members in runs:
        span = sum(widths[i] for i in members) + len(members) - 1
        if len(group) > span:
            widths[members[-1]] += len(group) - span
    gap = "  " if any(group for group, _ in runs) else " "

    def line(head: str, cells: Sequence[str], align: str, cell: bool) -> list[Segment]:
        out: list[Segment] = [(head.ljust(first), False)]
        for _, members in runs:
            out.append((gap, False))
            for j, i in enumerate(members):
                if j:
                    out.append((" ", False))
                text = cells[i]
                pad = widths[i] - len(text)
                left = pad // 2 if align == "center" else 0
                out += [(" " * left, False), (text, cell), (" " * (pad - left), False)]
        return out

    lines: list[list[Segment]] = []
    if any(group for group, _ in runs):
        header: list[Segment] = [("".ljust(first), False)]
        for group, members in runs:
            span = sum(widths[i] for i in members) + len(members) - 1
            header += [(gap, False), (group.ljust(span), False)]
        lines.append(header)
    lines.append(line("layer", labels, "left", False))
    lines += [line(row.layers, row.cells, "center", True) for row in scheme_map.rows]
    return lines


def _tail(scheme_map: SchemeMap) -> list[tuple[str, str]]:
    """Everything after the grid (other modules, legend, notes, footnotes), each line with the
    mark it explains ("" for none)."""
    out: list[tuple[str, str]] = []
    if scheme_map.others:
        out += [("", ""), ("outside the layers:", "")]
        labels = [visible(g.label) for g in scheme_map.others]
        width = max(map(len, labels))
        out += [
            (f"  {label.ljust(width)}  {_other_line(g)}", "")
            for label, g in zip(labels, scheme_map.others, strict=True)
        ]
    out += [("", ""), ("legend:", "")]
    out += [(f"  {_legend_line(e)}", e.letter) for e in scheme_map.legend]
    out += [(f"  {visible(note)}", "") for note in scheme_map.notes]
    if scheme_map.footnotes:
        out += [("", ""), ("experts that disagree:", MIXED)]
        out += [(f"  {visible(note)}", MIXED) for note in scheme_map.footnotes[:MAX_FOOTNOTES]]
        if len(scheme_map.footnotes) > MAX_FOOTNOTES:
            more = len(scheme_map.footnotes) - MAX_FOOTNOTES
            out.append((f"  and {more} more (see --format json)", MIXED))
    return out


def render_map_text(scheme_map: SchemeMap) -> list[str]:
    """Plain fixed-width lines: the grid, the other modules, the legend and the footnotes."""
    out = [_title(scheme_map)]
    if scheme_map.columns:
        out += ["".join(text for text, _ in segments).rstrip() for segments in _grid(scheme_map)]
    return out + [line for line, _ in _tail(scheme_map)]


def render_map_markdown(report: Report) -> list[str]:
    """The map as a fenced block, so the grid keeps its columns in a PR description."""
    return md_fence(render_map_text(build_map(report)))


_STYLES = ("cyan", "magenta", "green", "blue", "yellow", "bright_cyan", "bright_magenta")


def map_renderable(report: Report) -> RenderableType:
    """The map for a terminal: the same grid, a colour per scheme."""
    scheme_map = build_map(report)
    styles = {EXCLUDED: "dim", UNLISTED: "dim", ABSENT: "dim", MIXED: "bold red"}
    schemes = [e.letter for e in scheme_map.legend if e.letter not in styles]
    styles.update({letter: _STYLES[i % len(_STYLES)] for i, letter in enumerate(schemes)})
    lines: list[RenderableType] = [
        Text(_title(scheme_map), style="bold", no_wrap=True, overflow="ignore")
    ]
    if scheme_map.columns:
        for segments in _grid(scheme_map):
            text = Text(no_wrap=True, overflow="ignore")
            for part, cell in segments:
                text.append(part, style=styles.get(part, "") if cell else "")
            text.rstrip()
            lines.append(text)
    lines += [
        Text(line, style=styles.get(mark, ""), no_wrap=True, overflow="ignore")
        for line, mark in _tail(scheme_map)
    ]
    return Group(*lines)
