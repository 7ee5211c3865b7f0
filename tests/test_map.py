"""``--map``: the scheme map, from Report.modules, on the seed manifests and a MoE checkpoint."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest
from rich.console import Console

from conftest import MANIFESTS, REPO
from qarm_audit import audit
from qarm_audit.report.model import ModuleRow, Report
from qarm_audit.report.render_map import (
    ABSENT,
    MIXED,
    SchemeMap,
    build_map,
    map_renderable,
    render_map_text,
)

MOE = REPO / "fixtures" / "producers" / "modelopt-moe-nvfp4"
SEEDS = sorted(MANIFESTS.glob("seed-*.manifest.json"))


@cache
def _report(path: Path) -> Report:
    return audit(str(path))


def _column(scheme_map: SchemeMap, name: str) -> int:
    return [c.name for c in scheme_map.columns].index(name)


def _cells(scheme_map: SchemeMap, name: str) -> set[str]:
    index = _column(scheme_map, name)
    return {row.cells[index] for row in scheme_map.rows}


def _layers(span: str) -> range:
    first, _, last = span.partition("-")
    return range(int(first), int(last or first) + 1)


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.name.split(".")[0])
def test_every_module_but_norms_is_on_the_map_once(path: Path) -> None:
    report = _report(path)
    scheme_map = build_map(report)
    shown = [m for m in report.modules if "norm" not in m["module"].rsplit(".", 1)[-1]]
    assert sum(e.modules for e in scheme_map.legend) == len(shown)
    assert sum(g.modules for g in scheme_map.others) + sum(
        len(_layers(r.layers)) * sum(c not in (ABSENT, MIXED) for c in r.cells)
        for r in scheme_map.rows
    ) == len(shown)
    covered = [n for r in scheme_map.rows for n in _layers(r.layers)]
    assert covered == sorted(set(covered)) and len(covered) == scheme_map.layers


def test_seed_mtp_layers_attention_kinds_and_the_unlisted_mtp() -> None:
    scheme_map = build_map(_report(MANIFESTS / "seed-mtp-w4a16.manifest.json"))
    assert scheme_map.stack == "model.language_model.layers" and scheme_map.layers == 64
    letters = {e.bucket: e.letter for e in scheme_map.legend}
    assert letters["FP8"] == "F" and letters["W4A16_NVFP4"] == "W" and letters["unlisted"] == "-"
    for proj in ("mlp.gate", "mlp.up", "mlp.down"):
        assert _cells(scheme_map, proj) == {"W"}
    # hybrid: full attention every fourth layer, linear attention in the others
    assert _cells(scheme_map, "self_attn.q") == {"F", ABSENT}
    q, qkv = _column(scheme_map, "self_attn.q"), _column(scheme_map, "linear_attn.in_qkv")
    for row in scheme_map.rows:
        assert (row.cells[q] == ABSENT) != (row.cells[qkv] == ABSENT)
        assert (row.cells[q] == "F") == all(n % 4 == 3 for n in _layers(row.layers))
    others = {g.label: g for g in scheme_map.others}
    assert others["mtp.*"].letters == (("-", others["mtp.*"].modules),)
    assert others["lm_head"].letters == (("W", 1),)
    assert others["model.visual.*"].modules > 100


def test_seed_sibling_excludes_visual_and_mtp() -> None:
    scheme_map = build_map(_report(MANIFESTS / "seed-sibling-w4a16.manifest.json"))
    others = {g.label: g for g in scheme_map.others}
    assert [letter for letter, _ in others["mtp.*"].letters] == ["x"]
    assert [letter for letter, _ in others["model.visual.*"].letters] == ["x"]
    # vLLM's Qwen3.5 fuses in_proj_b/in_proj_a into in_proj_ba, which the shard wildcards
    # (*linear_attn.in_proj_a) do not reach: unlisted (unquantized all the same), not excluded
    assert _cells(scheme_map, "linear_attn.in_a") == {"-", ABSENT}


def test_moe_producer_checkpoint_experts_in_one_cell() -> None:
    scheme_map = build_map(_report(MOE))
    assert scheme_map.stack == "model.layers" and scheme_map.layers == 2
    assert [c.name for c in scheme_map.columns] == [
        "self_attn.q",
        "self_attn.k",
        "self_attn.v",
        "self_attn.o",
        "mlp.gate",
        "experts.gate",
        "experts.up",
        "experts.down",
    ]
    assert [c.experts for c in scheme_map.columns][-3:] == [True, True, True]
    assert len(scheme_map.rows) == 1 and scheme_map.rows[0].layers == "0-1"
    assert scheme_map.rows[0].cells == ("N", "N", "N", "N", "x", "N", "N", "N")
    text = "\n".join(render_map_text(scheme_map))
    assert "experts" in text and "every routed expert" in text


def _deepseek_like(base: Report) -> Report:
    """61 layers of 256 experts: 3 dense BF16 layers, an excluded MTP layer 61, and expert 42
    of layer 17 excluded."""

    def row(name: str, bucket: str) -> ModuleRow:
        return ModuleRow(module=name, bucket=bucket, how="exact", rule="", tensors=1, shipped="")

    rows = [row("lm_head", "excluded"), row("model.embed_tokens", "unlisted")]
    for layer in range(62):
        p = f"model.layers.{layer}"
        mtp = layer == 61
        rows.append(row(f"{p}.input_layernorm", "unlisted"))
        attention = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
        rows += [row(f"{p}.self_attn.{a}", "excluded" if mtp else "NVFP4") for a in attention]
        if layer < 3:
            rows += [row(f"{p}.mlp.{proj}", "unlisted") for proj in ("gate_proj", "up_proj")]
            rows.append(row(f"{p}.mlp.down_proj", "unlisted"))
            continue
        rows.append(row(f"{p}.mlp.gate", "excluded"))
        for expert in range(256):
            odd = mtp or (layer == 17 and expert == 42)
            for proj in ("gate_proj", "up_proj", "down_proj"):
                rows.append(row(f"{p}.mlp.experts.{expert}.{proj}", "excluded" if odd else "NVFP4"))
        for proj in ("gate_proj", "up_proj", "down_proj"):
            rows.append(row(f"{p}.mlp.shared_experts.{proj}", "excluded" if mtp else "NVFP4"))
    return base.model_copy(update={"modules": rows})


def test_61_layers_by_256_experts_stays_readable() -> None:
    report = _deepseek_like(_report(MOE))
    scheme_map = build_map(report)
    assert [r.layers for r in scheme_map.rows] == ["0-2", "3-16", "17", "18-60", "61"]
    gate_proj, expert_gate = (
        _column(scheme_map, "mlp.gate_proj"),
        _column(scheme_map, "experts.gate"),
    )
    dense, _, odd, _, mtp = scheme_map.rows
    assert dense.cells[gate_proj] == "-" and dense.cells[expert_gate] == ABSENT
    assert odd.cells[expert_gate] == MIXED
    assert set(mtp.cells) == {"x", ABSENT}
    assert scheme_map.footnotes[0] == (
        "layer 17 experts.gate: N on 255 of 256 experts; x on expert 42"
    )
    lines = render_map_text(scheme_map)
    assert max(len(line) for line in lines) <= 100
    assert len(lines) < 40
    console = Console(width=100, record=True, color_system=None)
    console.print(map_renderable(report))
    shown = console.export_text()
    assert "18-60" in shown and "x on expert 42" in shown


def test_footnotes_list_every_odd_expert_in_ranges() -> None:
    base = _report(MOE)
    rows = [
        ModuleRow(
            module=f"model.layers.0.mlp.experts.{e}.down_proj",
            bucket="excluded" if e in (3, 4, 5, 9) else "NVFP4",
            how="exact",
            rule="",
            tensors=1,
            shipped="",
        )
        for e in range(16)
    ]
    scheme_map = build_map(base.model_copy(update={"modules": rows}))
    assert scheme_map.footnotes == (
        "layer 0 experts.down: N on 12 of 16 experts; x on experts 3-5, 9",
    )


def test_no_layer_stack_lists_every_group() -> None:
    base = _report(MOE)
    rows = [
        ModuleRow(module=m, bucket=b, how="exact", rule="", tensors=1, shipped="")
        for m, b in (("lm_head", "NVFP4"), ("encoder.proj", "unlisted"))
    ]
    scheme_map = build_map(base.model_copy(update={"modules": rows}))
    assert scheme_map.stack is None and scheme_map.rows == () and scheme_map.columns == ()
    assert [g.label for g in scheme_map.others] == ["encoder.*", "lm_head"]
    assert render_map_text(scheme_map)[0].startswith("Scheme map: no layer stack")


def test_letters_tell_config_groups_apart() -> None:
    scheme_map = build_map(
        _report(REPO / "fixtures" / "producers" / "llmcompressor-mixed-fp8attn-w4a16mlp")
    )
    letters = {e.bucket: e.letter for e in scheme_map.legend}
    assert [letters[g] for g in ("group_0", "group_1", "group_2")] == ["0", "1", "2"]
    assert len(set(letters.values())) == len(letters)


def test_cli_map_in_markdown_and_table(run) -> None:
    seed = MANIFESTS / "seed-sibling-w4a16.manifest.json"
    markdown = run("audit", seed, "-f", "markdown", "--map").stdout
    block = markdown[markdown.index("```text\n") :]
    assert block.splitlines()[1].startswith("Scheme map: model.language_model.layers")
    assert "\n```\n" in block
    assert "Scheme map" not in run("audit", seed, "-f", "markdown").stdout
    table = run("audit", MOE, "--map").stdout
    assert "Scheme map: model.layers" in table and "0-1" in table
    assert (
        run("audit", seed, "-f", "json", "--map").stdout == run("audit", seed, "-f", "json").stdout
    )


def test_map_counts_match_the_buckets() -> None:
    report = _report(MANIFESTS / "seed-nvfp4-w4a4.manifest.json")
    scheme_map = build_map(report)
    per_bucket = Counter(
        m["bucket"] for m in report.modules if "norm" not in m["module"].split(".")[-1]
    )
    assert {e.bucket: e.modules for e in scheme_map.legend if e.modules} == dict(per_bucket)
