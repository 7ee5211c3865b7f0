"""``qarm diff``: the seed's two checkpoints, and each kind of difference on small real ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import MANIFESTS, llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from qarm_audit.commands.diff import DiffReport, diff
from qarm_audit.errors import ExitCode
from qarm_audit.modules.operands import split_name
from qarm_audit.report.render_diff import render_diff_json, render_diff_markdown

MTP = str(MANIFESTS / "seed-mtp-w4a16.manifest.json")
W4A4 = str(MANIFESTS / "seed-nvfp4-w4a4.manifest.json")

SEED_SUMMARY = (
    "B = A re-split (4 -> 3 shards): 193 input_scale added, 193 modules relabelled "
    "W4A16_NVFP4 -> NVFP4, 0 dtype or shape disagreements"
)


def test_the_2001_names_are_the_2194_less_193_input_scales_relabelled() -> None:
    report = diff(MTP, W4A4)
    assert (report.a.tensors, report.b.tensors) == (2001, 2194)
    assert report.only_a == []  # A's names are a subset of B's
    assert len(report.only_b) == 193
    assert report.only_b_by_operand == {"input_scale": 193}
    assert report.changed == []  # zero dtype or shape disagreements
    # the differences are exactly the 193 input_scale tensors and the 193 relabelled modules
    assert {m.change for m in report.modules} == {"relabelled"}
    assert {(m.a_bucket, m.b_bucket) for m in report.modules} == {("W4A16_NVFP4", "NVFP4")}
    assert {m.module for m in report.modules} == {split_name(n)[0] for n in report.only_b}
    (move,) = report.module_moves
    assert (move.modules, move.a_arm, move.b_arm) == (193, "W4A16-NVFP4", "W4A4-NVFP4")
    assert [c.key for c in report.config] == ["schemes", "quantized_layers"]
    assert report.summary == SEED_SUMMARY
    assert not report.identical


def test_the_mtp_shard_merge_is_a_layout_difference() -> None:
    layout = diff(MTP, W4A4).layout
    assert not layout.identical
    assert [s.names for s in layout.a_shards] == [970, 976, 40, 15]
    assert [s.names for s in layout.b_shards] == [1000, 1000, 194]
    mtp = [line for line in layout.lines if "all under mtp." in line]
    assert mtp == [
        "A's model-00004-of-00004.safetensors (15 names, all under mtp.) merged into "
        "model-00003-of-00003.safetensors, together with names from "
        "model-00002-of-00004.safetensors, model-00003-of-00004.safetensors"
    ]
    assert len(layout.moved) == 2001  # every shard was renamed: JSON keeps every row
    assert sum(f.names for f in layout.flows) == 2001
    assert {(f.a_file, f.b_file) for f in layout.flows if f.a_file.startswith("model-00004")} == {
        ("model-00004-of-00004.safetensors", "model-00003-of-00003.safetensors")
    }


def test_the_other_direction_says_removed_and_reverses_each_move() -> None:
    report = diff(W4A4, MTP)
    assert report.summary == (
        "B = A re-split (3 -> 4 shards): 193 input_scale removed, 193 modules relabelled "
        "NVFP4 -> W4A16_NVFP4, 0 dtype or shape disagreements"
    )
    assert len(report.only_a) == 193 and report.only_b == []


def test_a_checkpoint_is_identical_to_itself(run) -> None:
    report = diff(MTP, MTP)
    assert report.identical
    assert report.summary == (
        "B = A: identical names, dtypes, shapes, declarations and layout (2001 names in 4 shards)"
    )
    result = run("diff", MTP, MTP)
    assert result.exit_code == ExitCode.CLEAN


def test_cli_exit_codes_and_formats(run, tmp_path: Path) -> None:
    table = run("diff", MTP, W4A4)
    assert table.exit_code == ExitCode.FINDINGS
    assert SEED_SUMMARY in " ".join(table.stdout.split())
    markdown = run("diff", MTP, W4A4, "-f", "markdown")
    assert markdown.exit_code == ExitCode.FINDINGS
    assert f"**{SEED_SUMMARY}**" in markdown.stdout
    assert "| `input_scale` | 0 | 193 | `lm_head.input_scale` |" in markdown.stdout
    assert "| relabelled | `W4A16_NVFP4 (W4A16-NVFP4)` | `NVFP4 (W4A4-NVFP4)` | 193 |" in (
        markdown.stdout
    )
    assert markdown.stderr.strip() == SEED_SUMMARY
    raw = run("diff", MTP, W4A4, "-f", "json")
    document = json.loads(raw.stdout)
    DiffReport.model_validate(document)
    assert len(document["only_b"]) == 193 and len(document["layout"]["moved"]) == 2001
    assert document["only_b"] == sorted(document["only_b"])
    assert run("diff", MTP, W4A4, "-f", "json").stdout == raw.stdout  # deterministic
    out = tmp_path / "diff.md"
    assert run("diff", MTP, W4A4, "-f", "markdown", "-o", out).exit_code == ExitCode.FINDINGS
    assert out.read_text() == markdown.stdout
    missing = run("diff", MTP, tmp_path / "nothing")
    assert missing.exit_code == ExitCode.BAD_INPUT
    assert missing.stderr.startswith("qarm: error: ")
    assert run("diff", MTP).exit_code == ExitCode.BAD_INPUT


# --- small real checkpoints -------------------------------------------------------------------


def _write(root: Path, tensors: dict[str, Any], quant: dict[str, Any], files: int = 1) -> str:
    names = sorted(tensors)
    if files == 1:
        shards = {"model.safetensors": tensors}
    else:
        cut = len(names) // files
        shards = {
            f"model-{i + 1:05d}-of-{files:05d}.safetensors": {
                n: tensors[n] for n in names[i * cut : (i + 1) * cut if i < files - 1 else None]
            }
            for i in range(files)
        }
    write_checkpoint(root, shards, {"hf_quant_config.json": quant})
    return str(root)


def _model() -> dict[str, Any]:
    return llama(layers=2, spell=nvfp4_modelopt)


def test_dtype_shape_and_declaration_keys(tmp_path: Path) -> None:
    base = _model()
    other = dict(base)
    scale = "model.layers.0.mlp.up_proj.weight_scale_2"
    weight = "model.layers.1.mlp.down_proj.weight_scale"
    other[scale] = ("BF16", ())
    other[weight] = ("F8_E4M3", (64, 4))
    a = _write(tmp_path / "a", base, modelopt_file("NVFP4", ["lm_head"]))
    b = _write(tmp_path / "b", other, modelopt_file("NVFP4", ["lm_head", "model.norm"], kv="FP8"))
    report = diff(a, b)
    assert [(c.name, c.a_dtype, c.b_dtype) for c in report.changed] == [
        (scale, "F32", "BF16"),
        (weight, "F8_E4M3", "F8_E4M3"),
    ]
    assert report.changed[1].a_shape == [64, 8] and report.changed[1].b_shape == [64, 4]
    config = {c.key: c for c in report.config}
    assert (config["kv_cache"].a, config["kv_cache"].b) == ("none", "FP8")
    assert config["exclude"].only_b == ["model.norm"] and config["exclude"].only_a == []
    assert report.summary == (
        "B = A: 1 module excluded in B only (unlisted -> excluded), kv_cache none -> FP8, "
        "exclude +1 -0, 2 dtype or shape disagreements"
    )
    (norm,) = report.modules  # excludes apply to any module, a norm included
    assert (norm.module, norm.b_how, norm.b_rule) == ("model.norm", "exact", "model.norm")
    assert report.layout.identical
    markdown = render_diff_markdown(report)
    assert "| `weight_scale_2` | dtype F32 -> BF16 | 1 |" in markdown
    assert "| `weight_scale` | shape | 1 |" in markdown


def test_excluded_in_one_only_and_provenance(tmp_path: Path) -> None:
    tensors = _model()
    tensors.update(nvfp4_modelopt("lm_head", 256, 64))
    a = _write(tmp_path / "a", tensors, modelopt_file("W4A16_NVFP4", ["lm_head"]))
    b = _write(tmp_path / "b", tensors, modelopt_file("W4A16_NVFP4", ["lm_head*"]))
    report = diff(a, b)
    assert not report.identical  # same names, dtypes, shapes and layout: declarations differ
    (change,) = report.modules
    assert (change.module, change.change) == ("lm_head", "provenance")
    assert (change.a_how, change.b_how) == ("exact", "wildcard")
    c = _write(tmp_path / "c", tensors, modelopt_file("W4A16_NVFP4", []))
    report = diff(a, c)
    (change,) = report.modules
    assert (change.change, change.a_bucket, change.b_bucket) == (
        "excluded in A only",
        "excluded",
        "W4A16_NVFP4",
    )
    assert "1 module excluded in A only (excluded -> W4A16_NVFP4)" in report.summary


def test_a_re_split_with_the_same_names_is_a_layout_difference_only(tmp_path: Path) -> None:
    tensors = _model()
    quant = modelopt_file("NVFP4", ["lm_head"])
    a = _write(tmp_path / "a", tensors, quant)
    b = _write(tmp_path / "b", tensors, quant, files=2)
    report = diff(a, b)
    assert not report.identical and not report.layout.identical
    assert report.only_a == report.only_b == report.changed == report.modules == []
    assert report.summary == "B = A re-split (1 -> 2 shards): 0 dtype or shape disagreements"
    (line,) = [line for line in report.layout.lines if line.startswith("A's")]
    assert line.startswith("A's model.safetensors (") and " split across " in line
    same = diff(b, _write(tmp_path / "c", tensors, quant, files=2))
    assert same.identical and same.layout.lines == []
    assert render_diff_json(same) == render_diff_json(same)
