"""qarm in a CI step: ignores with reasons, --format github, the job summary, several sources."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import MANIFESTS, REPO, fp8_modelopt, llama, modelopt_file, write_checkpoint
from qarm_audit import IgnoreRule, audit
from qarm_audit.errors import ExitCode
from qarm_audit.report.model import FindingRow, IgnoredRow, Report
from qarm_audit.report.policy import PolicyError, load_config_ignores
from qarm_audit.report.render_github import _escape_data, _escape_property, render_github

CLEAN = MANIFESTS / "seed-mtp-w4a16.manifest.json"
STRAY = "unquantized-ships-quantized"


@pytest.fixture
def refused(tmp_path: Path) -> Path:
    """FP8 everywhere, lm_head excluded and still shipping FP8 scales: one refusal on lm_head."""
    t = llama(spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    return write_checkpoint(
        tmp_path / "ckpt",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])},
    )


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current folder, so no qarm.toml or pyproject.toml of the repo applies."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def _json(result) -> dict:
    return json.loads(result.stdout)


# --- ignores ----------------------------------------------------------------------------------


def test_without_ignores_the_refusal_fails(run, refused: Path, workdir: Path) -> None:
    result = run("audit", refused, "-f", "json")
    assert result.exit_code == ExitCode.FINDINGS
    assert [r["code"] for r in _json(result)["refusals"]] == [STRAY]
    assert _json(result)["ignored"] == []


def test_qarm_toml_ignore_moves_the_finding_and_changes_the_exit_code(
    run, refused: Path, workdir: Path
) -> None:
    (workdir / "qarm.toml").write_text(
        f'[[ignore]]\ncode = "{STRAY}"\nmodule = "lm_head"\nreason = "stripped by our loader"\n'
    )
    result = run("audit", refused, "-f", "json")
    assert result.exit_code == ExitCode.CLEAN
    report = _json(result)
    assert report["refusals"] == [] and report["verdict"] != "refused"
    assert report["ignored"] == [
        {
            "code": STRAY,
            "severity": "refusal",
            "module": "lm_head",
            "tensor": report["ignored"][0]["tensor"],
            "message": report["ignored"][0]["message"],
            "reason": "stripped by our loader",
            "origin": "qarm.toml",
        }
    ]
    assert "1 ignored" in result.stderr


def test_pyproject_tool_qarm_ignore(run, refused: Path, workdir: Path) -> None:
    (workdir / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[[tool.qarm.ignore]]\n'
        f'code = "{STRAY}"\nreason = "accepted in review #12"\n'
    )
    result = run("audit", refused, "-f", "json")
    assert result.exit_code == ExitCode.CLEAN
    assert [(i["origin"], i["reason"]) for i in _json(result)["ignored"]] == [
        ("pyproject.toml", "accepted in review #12")
    ]


def test_qarm_toml_wins_over_pyproject(workdir: Path) -> None:
    (workdir / "qarm.toml").write_text("")
    (workdir / "pyproject.toml").write_text(
        f'[[tool.qarm.ignore]]\ncode = "{STRAY}"\nreason = "r"\n'
    )
    assert load_config_ignores(workdir) == []


def test_config_option_points_elsewhere(run, refused: Path, workdir: Path, tmp_path: Path) -> None:
    config = tmp_path / "policies" / "release.toml"
    config.parent.mkdir()
    config.write_text(f'[[ignore]]\ncode = "{STRAY}"\nmodule = "lm_*"\nreason = "release policy"\n')
    (workdir / "qarm.toml").write_text("")  # not read: --config replaces it
    result = run("audit", refused, "-f", "json", "--config", config)
    assert result.exit_code == ExitCode.CLEAN
    assert _json(result)["ignored"][0]["origin"] == str(config)
    assert run("audit", refused, "--config", tmp_path / "missing.toml").exit_code == 2


def test_cli_ignore_with_pattern(run, refused: Path, workdir: Path) -> None:
    matched = run(
        "audit", refused, "-f", "json", "--ignore", f"{STRAY}:lm_*", "--ignore-reason", "r"
    )
    assert matched.exit_code == ExitCode.CLEAN
    assert _json(matched)["ignored"][0]["origin"] == "--ignore"
    missed = run(
        "audit", refused, "-f", "json", "--ignore", f"{STRAY}:model.*", "--ignore-reason", "r"
    )
    assert missed.exit_code == ExitCode.FINDINGS
    assert [r["code"] for r in _json(missed)["refusals"]] == [STRAY]


def test_pattern_matching_rules() -> None:
    rule = IgnoreRule(code=STRAY, module="model.layers.*.mlp.*", reason="r", origin="t")
    assert rule.matches(STRAY, "model.layers.3.mlp.down_proj")
    assert rule.matches(STRAY, "model.layers.3.mlp.experts.7.up_proj")  # * crosses dots
    assert not rule.matches(STRAY, "model.layers.3.self_attn.o_proj")
    assert not rule.matches("operand-dtype", "model.layers.3.mlp.down_proj")
    everything = IgnoreRule(code=STRAY, module="*", reason="r", origin="t")
    assert everything.matches(STRAY, "")  # a declaration-level finding has no module


def test_missing_reason_is_a_usage_error(run, refused: Path, workdir: Path) -> None:
    result = run("audit", refused, "--ignore", STRAY)
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "--ignore-reason" in result.stderr
    assert run("audit", refused, "--ignore", STRAY, "--ignore-reason", "  ").exit_code == 2
    assert run("audit", refused, "--ignore-reason", "why").exit_code == 2
    (workdir / "qarm.toml").write_text(f'[[ignore]]\ncode = "{STRAY}"\n')
    no_reason = run("audit", refused)
    assert no_reason.exit_code == ExitCode.BAD_INPUT and "reason is mandatory" in no_reason.stderr


def test_unknown_code_is_a_usage_error(run, refused: Path, workdir: Path) -> None:
    result = run("audit", refused, "--ignore", "no-such-code", "--ignore-reason", "r")
    assert result.exit_code == ExitCode.BAD_INPUT and "unknown code" in result.stderr
    (workdir / "qarm.toml").write_text('[[ignore]]\ncode = "nope"\nreason = "r"\n')
    assert run("audit", refused).exit_code == ExitCode.BAD_INPUT
    (workdir / "qarm.toml").write_text(f'[[ignore]]\ncode = "{STRAY}"\nreason = "r"\nwhy = 1\n')
    assert run("audit", refused).exit_code == ExitCode.BAD_INPUT
    (workdir / "qarm.toml").write_text("[[ignore]\n")
    bad = run("audit", refused)
    assert bad.exit_code == ExitCode.BAD_INPUT and "qarm.toml" in bad.stderr


def test_unmatched_ignore_is_a_note(run, workdir: Path) -> None:
    result = run(
        "audit", CLEAN, "-f", "json", "--ignore", "operand-dtype:lm_head", "--ignore-reason", "old"
    )
    assert result.exit_code == ExitCode.CLEAN
    notes = [n for n in _json(result)["notes"] if n["code"] == "ignore-unmatched"]
    assert len(notes) == 1
    assert "operand-dtype:lm_head" in notes[0]["message"] and "old" in notes[0]["message"]


def test_ignoring_warnings_changes_fail_on_warning(run, workdir: Path) -> None:
    hopper = ("--gpu", "A100")  # FP8 runs weight-only there: declared-arm-differs warns
    assert run("audit", CLEAN, *hopper, "--fail-on", "warning").exit_code == ExitCode.FINDINGS
    result = run(
        "audit",
        CLEAN,
        *hopper,
        "--fail-on",
        "warning",
        "-f",
        "json",
        "--ignore",
        "declared-arm-differs",
        "--ignore",
        "kv-scales-missing",
        "--ignore-reason",
        "A100 fleet",
    )
    assert result.exit_code == ExitCode.CLEAN
    report = _json(result)
    assert report["verdict"] == "clean" and report["warnings"] == []
    assert {i["code"] for i in report["ignored"]} == {"declared-arm-differs", "kv-scales-missing"}


def test_every_format_shows_the_ignored(run, refused: Path, workdir: Path) -> None:
    args = ("--ignore", STRAY, "--ignore-reason", "stripped-at-load")
    markdown = run("audit", refused, "-f", "markdown", *args).stdout
    assert "<details><summary>Ignored (1)</summary>" in markdown
    assert "stripped-at-load" in markdown and f"`{STRAY}`" in markdown
    table = run("audit", refused, *args).stdout
    assert "Ignored (1)" in table and "stripped-at-load" in table
    github = run("audit", refused, "-f", "github", *args).stdout
    assert f",title=qarm {STRAY} (ignored)::" in github and "::notice file=" in github
    assert "stripped-at-load" in github and "::error" not in github


def test_library_ignores(refused: Path) -> None:
    rule = IgnoreRule(code=STRAY, module="lm_head", reason="r", origin="api")
    report = audit(str(refused), ignores=[rule])
    assert report.refusals == [] and report.verdict != "refused"
    assert [(i.code, i.origin) for i in report.ignored] == [(STRAY, "api")]
    with pytest.raises(PolicyError):
        from qarm_audit.report.policy import parse_cli_ignores

        parse_cli_ignores([STRAY], None)


# --- --format github and the job summary ------------------------------------------------------


def test_escape_rules() -> None:
    assert _escape_data("100% a\r\nb") == "100%25 a%0D%0Ab"
    assert _escape_property("qarm x:y,z%") == "qarm x%3Ay%2Cz%25"
    assert _escape_data("a:b,c") == "a:b,c"  # only properties escape : and ,


def _with_rows(report: Report, **rows: list) -> Report:
    return report.model_copy(update=rows)


def test_levels_and_escaping_in_annotations() -> None:
    base = audit(str(CLEAN))

    def row(code: str, severity: str, message: str) -> FindingRow:
        return FindingRow(code=code, severity=severity, module="m.x", tensor="", message=message)

    report = _with_rows(
        base,
        refusals=[row("spelling-mismatch", "refusal", "50% off\nsecond line")],
        warnings=[row("kv-scales-missing", "warning", "w")],
        notes=[row("unknown-keys", "info", "n")],
        ignored=[
            IgnoredRow(
                code="operand-dtype",
                severity="refusal",
                module="",
                tensor="",
                message="i",
                reason="because, really: yes",
                origin="qarm.toml",
            )
        ],
    )
    lines = render_github(report).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [
        "::error",
        "::warning",
        "::notice",
        "::notice",
        "::notice",
    ]
    assert lines[0] == (
        f"::error file={CLEAN.relative_to(REPO)},title=qarm spelling-mismatch::"
        f"{CLEAN} [m.x]: 50%25 off%0Asecond line"
    )
    assert "because, really: yes" in lines[3]  # message data keeps : and ,
    assert lines[-1].startswith("::notice title=qarm audit::")
    assert all("\n" not in line for line in lines)


def test_github_format_from_the_cli(run, refused: Path, workdir: Path) -> None:
    result = run("audit", refused, "-f", "github")
    assert result.exit_code == ExitCode.FINDINGS
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"::error file={refused}/model.safetensors,title=qarm {STRAY}::")
    assert "[lm_head]" in lines[0]
    assert lines[-1].startswith("::notice title=qarm audit::")


@pytest.mark.parametrize("fmt", ["github", "json", "table", "markdown"])
def test_step_summary_gets_the_markdown_for_any_format(
    run, workdir: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    summary = workdir / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert run("audit", CLEAN, "-f", fmt, "--map").exit_code == ExitCode.CLEAN
    assert run("audit", CLEAN, "-f", fmt).exit_code == ExitCode.CLEAN
    text = summary.read_text()
    assert text.startswith("earlier step\n### qarm audit: ")  # appended, never replaced
    assert text.count("### qarm audit: ") == 2
    assert text.count("Scheme map:") == 1


def test_no_summary_without_the_variable(run, workdir: Path) -> None:
    assert run("audit", CLEAN, "-f", "github").exit_code == 0
    assert list(workdir.iterdir()) == []


def test_unwritable_summary_warns_and_keeps_the_exit_code(
    run, refused: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(workdir / "no" / "such" / "dir.md"))
    result = run("audit", refused, "-f", "github")
    assert result.exit_code == ExitCode.FINDINGS
    assert "cannot append to GITHUB_STEP_SUMMARY" in result.stderr


# --- several sources ---------------------------------------------------------------------------


def test_several_sources_each_in_turn_exit_is_the_worst(run, refused: Path, workdir: Path) -> None:
    result = run("audit", CLEAN, refused, "-f", "markdown")
    assert result.exit_code == ExitCode.FINDINGS
    assert result.stdout.count("### qarm audit: ") == 2
    assert result.stderr.count("\n") == 2  # one verdict line each
    table = run("audit", CLEAN, refused)
    assert table.exit_code == ExitCode.FINDINGS
    assert str(CLEAN) in table.stdout and str(refused) in table.stdout
    github = run("audit", CLEAN, refused, "-f", "github").stdout
    assert github.count("::notice title=qarm audit::") == 2


def test_several_sources_json_is_an_array(run, refused: Path, workdir: Path) -> None:
    result = run("audit", CLEAN, refused, "-f", "json")
    assert result.exit_code == ExitCode.FINDINGS
    reports = json.loads(result.stdout)
    assert isinstance(reports, list) and len(reports) == 2
    assert [Report.model_validate(r).verdict for r in reports] == ["warnings", "refused"]
    single = json.loads(run("audit", CLEAN, "-f", "json").stdout)
    assert isinstance(single, dict) and single == reports[0]


def test_a_bad_source_does_not_stop_the_others(
    run, refused: Path, workdir: Path, tmp_path: Path
) -> None:
    result = run("audit", CLEAN, tmp_path / "missing", "-f", "json")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "qarm: error: " in result.stderr and "missing" in result.stderr
    assert [r["verdict"] for r in json.loads(result.stdout)] == ["warnings"]
    assert run("audit", tmp_path / "a", tmp_path / "b", "-f", "json").stdout == "[]\n"
    # an error about a file of a checkpoint names the checkpoint too, where several are audited
    documents = {"config.json": '{"a": 1, "a": 2}'}
    broken = write_checkpoint(tmp_path / "broken", {"model.safetensors": llama()}, documents)
    result = run("audit", CLEAN, broken)
    assert result.exit_code == ExitCode.BAD_INPUT
    assert f"qarm: error: {broken}: config.json: duplicate key 'a'\n" in result.stderr


def test_several_sources_to_one_output_file(run, refused: Path, workdir: Path) -> None:
    out = workdir / "reports.md"
    assert run("audit", CLEAN, refused, "-f", "markdown", "-o", out).exit_code == 1
    assert out.read_text().count("### qarm audit: ") == 2
    array = workdir / "reports.json"
    run("audit", CLEAN, refused, "-f", "json", "-o", array)
    assert len(json.loads(array.read_text())) == 2


def test_usage_errors_stop_before_any_source(run, refused: Path, workdir: Path) -> None:
    result = run("audit", CLEAN, refused, "--engine", "nonexistent")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stderr.count("qarm: error:") == 1 and result.stdout == ""
    assert run("audit", CLEAN, refused, "--gpu", "sm999").stderr.count("qarm: error:") == 1


def test_an_unreadable_source_is_an_error_annotation(run, workdir: Path, tmp_path: Path) -> None:
    single = run("audit", tmp_path / "missing", "-f", "github")
    assert single.exit_code == ExitCode.BAD_INPUT
    assert single.stdout.startswith("::error title=qarm error::") and "missing" in single.stdout
    several = run("audit", CLEAN, tmp_path / "missing", "-f", "github")
    assert several.exit_code == ExitCode.BAD_INPUT
    assert several.stdout.count("::error title=qarm error::") == 1
    assert "::notice title=qarm audit::" in several.stdout
    # in the order given: the first source's annotations and verdict, then the failed one's
    lines = several.stdout.splitlines()
    verdict = next(
        i for i, line in enumerate(lines) if line.startswith("::notice title=qarm audit")
    )
    failed = next(i for i, line in enumerate(lines) if line.startswith("::error title=qarm error"))
    assert verdict < failed, lines


# --- annotations on the file, the cap, the summary of every source, step outputs -------------

W4A4 = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"


def _annotation(line: str) -> dict[str, str]:
    head = line.split("::")[1]
    level, _, properties = head.partition(" ")
    out = dict(p.split("=", 1) for p in properties.split(","))
    out["level"] = level
    return out


def test_annotations_point_at_the_manifest_row(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_WORKSPACE", str(REPO))
    result = run("audit", W4A4, "-f", "github", "--engine", "name-probe")
    rows = W4A4.read_text().split("\n")
    lines = [_annotation(line) for line in result.stdout.splitlines() if line.startswith("::w")]
    assert {a["file"] for a in lines} == {"fixtures/manifests/seed-nvfp4-w4a4.manifest.json"}
    by_title = {a["title"]: int(a["line"]) for a in lines}
    report = audit(str(W4A4), engine="name-probe")
    (differs,) = [w for w in report.warnings if w.code == "declared-arm-differs"]
    # a module finding lands on the module's first tensor row; a declaration finding on the
    # line where the document that declares it starts
    assert rows[by_title["qarm declared-arm-differs"] - 1].startswith(f'  "{differs.module}.')
    assert rows[by_title["qarm kv-scales-missing"] - 1].startswith(' "config.json": [')


def test_a_tensor_finding_lands_on_its_row(tmp_path: Path, run, workdir: Path) -> None:
    from qarm_audit.sources import open_source, render_manifest

    t = llama(spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    folder = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])},
    )
    manifest = workdir / "c.manifest.json"
    manifest.write_text(render_manifest(open_source(str(folder))))
    line = run("audit", manifest.name, "-f", "github").stdout.splitlines()[0]
    where = _annotation(line)
    assert where["file"] == "c.manifest.json"
    row = manifest.read_text().split("\n")[int(where["line"]) - 1]
    (refusal,) = audit(str(manifest)).refusals
    assert row.startswith(f'  "{refusal.tensor}\\t')
    on_folder = _annotation(run("audit", folder, "-f", "github").stdout.splitlines()[0])
    assert on_folder["file"] == f"{folder}/model.safetensors" and "line" not in on_folder


def test_a_declaration_finding_of_a_folder_lands_on_its_config_file(tmp_path: Path, run) -> None:
    t = llama(spell=fp8_modelopt)
    folder = write_checkpoint(
        tmp_path / "kv",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"], kv="FP8")},
    )
    lines = run("audit", folder, "-f", "github").stdout.splitlines()
    (warning,) = [_annotation(line) for line in lines if line.startswith("::warning")]
    assert warning["title"] == "qarm kv-scales-missing"
    assert warning["file"] == f"{folder}/hf_quant_config.json" and "line" not in warning


def _flood(tmp_path: Path) -> Path:
    from conftest import nvfp4_modelopt

    t = llama(layers=8, spell=nvfp4_modelopt)  # 56 operand-missing refusals
    return write_checkpoint(
        tmp_path / "flood",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])},
    )


def test_annotations_are_capped_per_type_with_a_notice(
    run, tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flood = _flood(tmp_path)
    plain = run("audit", flood, flood, "-f", "github", "--engine", "name-probe").stdout
    levels = [line.split(" ", 1)[0] for line in plain.splitlines() if line.startswith("::")]
    assert levels.count("::error") == 10 and levels.count("::notice") <= 10
    assert plain.count("qarm error (not annotated: 10 per type): ") == 2 * 56 - 10
    assert plain.count("::notice title=qarm audit::") == 2
    assert plain.splitlines()[-1].startswith("::notice title=qarm annotations::102 more errors")
    assert "--format markdown or json" in plain.splitlines()[-1]
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(workdir / "summary.md"))
    summary = run("audit", flood, "-f", "github", "--engine", "name-probe").stdout
    assert summary.splitlines()[-1].endswith("every finding is in the job summary")
    assert "operand-missing: all 56 modules" in (workdir / "summary.md").read_text()


def test_a_broken_manifest_is_an_error_on_its_file(run, workdir: Path) -> None:
    broken = workdir / "broken.manifest.json"
    broken.write_text('{"format": "qarm-manifest/2", "shards": 3}')
    result = run("audit", broken.name, "-f", "github")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stdout.startswith("::error file=broken.manifest.json,title=qarm error::")


def test_the_job_summary_holds_every_source_failed_ones_too(
    run, tmp_path: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = workdir / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    missing = tmp_path / "missing"
    result = run("audit", CLEAN, missing, "-f", "github")
    assert result.exit_code == ExitCode.BAD_INPUT
    text = summary.read_text()
    assert text.count("### qarm audit: ") == 2
    assert f"### qarm audit: `{missing}`\n\n🛑 **could not audit**: " in text
    summary.unlink()
    assert run("audit", missing, "-f", "github").exit_code == ExitCode.BAD_INPUT
    assert "could not audit" in summary.read_text()  # one source, failed: still there


def test_step_outputs_and_the_json_report(
    run, refused: Path, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = workdir / "outputs"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    report = workdir / "report.json"
    result = run("audit", CLEAN, refused, "-f", "github", "--json-output", report)
    assert result.exit_code == ExitCode.FINDINGS
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert values["verdict"] == "refused" and values["refusals"] == "1"
    reports = json.loads(report.read_text())
    assert [r["verdict"] for r in reports] == ["warnings", "refused"]
    assert values["warnings"] == str(sum(len(r["warnings"]) for r in reports))
    assert values["failed"] == "0" and values["exit-code"] == "1"
    outputs.unlink()
    run("audit", CLEAN, tmp_path / "missing", "-f", "json", "-q")
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert values["verdict"] == "error" and values["failed"] == "1" and values["sources"] == "2"


def _action_step(name: str) -> str:
    import yaml

    action = yaml.safe_load((REPO / "action.yml").read_text())
    return next(s for s in action["runs"]["steps"] if s["name"] == name)["run"]


def test_action_declares_outputs_and_takes_ignores_with_reasons(
    tmp_path: Path, workdir: Path
) -> None:
    """The action's own Audit script, run by bash with the inputs as the runner passes them:
    each ignore line is one argument, its reason keeps its spaces."""
    import os
    import subprocess
    import sys

    import yaml

    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert {"verdict", "refusals", "warnings", "report"} <= set(action["outputs"])
    assert "ignore" in action["inputs"]
    launcher = tmp_path / "bin" / "qarm"
    launcher.parent.mkdir()
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m qarm_audit "$@"\n')
    launcher.chmod(0o755)
    outputs = workdir / "outputs"
    env = {
        **os.environ,
        "PATH": f"{launcher.parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(sys.path),
        "QARM_SOURCE": str(W4A4),
        "QARM_ENGINE": "name-probe",
        "QARM_FAIL_ON": "warning",
        "QARM_IGNORE": "kv-scales-missing: fleet runs bf16 kv\n"
        "  declared-arm-differs:*: W4A16 Marlin on purpose\n\n",
        "QARM_ARGS": "--map",
        "GITHUB_OUTPUT": str(outputs),
        "RUNNER_TEMP": str(workdir),
    }
    done = subprocess.run(
        ["bash", "-c", _action_step("Audit")],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    values = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert values["verdict"] == "clean" and values["ignored"] == "2"
    report = json.loads(Path(values["report"]).read_text())
    assert sorted(i["reason"] for i in report["ignored"]) == [
        "W4A16 Marlin on purpose",
        "fleet runs bf16 kv",
    ]


# --- pre-commit: the checkpoint-folder hook ----------------------------------------------------


def test_checkpoint_hook_audits_each_folder_once(run, refused: Path, tmp_path: Path) -> None:
    """pre-commit passes file names; the folder is the unit, audited once and whole."""
    import yaml

    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["qarm-audit-checkpoints"]
    assert hook["entry"] == "qarm audit --folders"
    pattern = re.compile(hook["files"])
    for name in ("ckpt/model.safetensors", "ckpt/config.json", "hf_quant_config.json"):
        assert pattern.search(name), name
    assert not pattern.search("fixtures/manifests/x.manifest.json")

    clean = write_checkpoint(tmp_path / "clean", {"model.safetensors": llama()})
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "config.json").write_text("{}")  # not a checkpoint folder
    files = [
        refused / "model.safetensors",
        refused / "hf_quant_config.json",
        clean / "model.safetensors",
        tmp_path / "app" / "config.json",
    ]
    result = run("audit", "--folders", "-v", "-f", "json", *files)
    assert result.exit_code == ExitCode.FINDINGS
    reports = json.loads(result.stdout)
    assert [r["source"]["location"] for r in reports] == [str(refused), str(clean)]
    assert [r["verdict"] for r in reports] == ["refused", "clean"]
    assert "qarm: 4 files -> 2 checkpoint folders" in result.stderr
    assert "app/config.json: its folder holds no checkpoint" in result.stderr
    assert [r["code"] for r in reports[0]["refusals"]] == [STRAY]
    # a shard audited alone has no declaration: every FP8 module is refused, not lm_head alone
    alone = json.loads(run("audit", refused / "model.safetensors", "-f", "json").stdout)
    assert len(alone["refusals"]) > 1 and alone["declaration"]["source"] != "hf_quant_config.json"
    nothing = run("audit", "--folders", tmp_path / "app" / "config.json")
    assert nothing.exit_code == ExitCode.CLEAN and nothing.stdout == ""
