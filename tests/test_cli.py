"""The command line: exit codes, formats, schema, errors as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MANIFESTS, fp8_modelopt, llama, modelopt_file, write_checkpoint
from qarm_audit.errors import ExitCode
from qarm_audit.report.model import SCHEMA_VERSION, Report

W4A4 = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"


def test_exit_0_clean(run) -> None:
    result = run("audit", MANIFESTS / "seed-mtp-w4a16.manifest.json")
    assert result.exit_code == ExitCode.CLEAN


def test_exit_1_on_refusal(tmp_path: Path, run) -> None:
    t = llama(spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    path = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])},
    )
    result = run("audit", path)
    assert result.exit_code == ExitCode.FINDINGS
    assert "unquantized-ships-quantized" in result.stdout


def test_exit_2_on_usage_and_bad_input(tmp_path: Path, run) -> None:
    assert run("audit").exit_code == ExitCode.BAD_INPUT
    assert run("audit", W4A4, "--format", "xml").exit_code == ExitCode.BAD_INPUT
    assert run("audit", W4A4, "--env", "NOPE").exit_code == ExitCode.BAD_INPUT
    unknown = run("audit", W4A4, "--env", "NOPE=1")
    assert unknown.exit_code == ExitCode.BAD_INPUT and "no setting NOPE" in unknown.stderr
    assert run("audit", W4A4, "--engine", "nonexistent").exit_code == ExitCode.BAD_INPUT
    assert run("audit", W4A4, "--gpu", "sm999").exit_code == ExitCode.BAD_INPUT
    missing = run("audit", tmp_path / "nothing-here")
    assert missing.exit_code == ExitCode.BAD_INPUT
    assert missing.stderr.startswith("qarm: error: ") and missing.stderr.count("\n") == 1


def test_exit_3_when_the_disk_fails(tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": llama()})

    def failing_open(self: Path, *args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Path, "open", failing_open)
    result = run("audit", path)
    assert result.exit_code == ExitCode.COULD_NOT_AUDIT
    assert "Input/output error" in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_a_traceback(tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QARM_DEBUG", "1")
    result = run("audit", tmp_path / "missing")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "Traceback" in result.stderr


def test_json_validates_against_the_published_schema(run, tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads(run("schema").stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(f"/report-{SCHEMA_VERSION}.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    report = json.loads(run("audit", W4A4, "-f", "json").stdout)
    validator.validate(report)
    Report.model_validate(report)
    assert report["schema_version"] == "1.3"
    for bucket in ("unlisted", "kv_cache", "unclassified"):
        assert bucket in [b["scheme"] for b in report["buckets"]]
    assert {"scheme", "modules", "declared", "executed", "reason"} <= set(report["arms"][0])
    several = json.loads(run("audit", W4A4, W4A4, "-f", "json").stdout)
    validator.validate(several)  # the several-sources array validates too
    assert not validator.is_valid({"verdict": "clean"})
    assert not validator.is_valid([{"verdict": "clean"}])


def test_summary_on_stderr_report_on_stdout(run) -> None:
    """As README says: the report on stdout, the one-line summary on stderr, in every format
    (pip-audit's way); -q leaves the summary out."""
    for fmt in ("json", "table", "markdown", "github"):
        result = run("audit", W4A4, "-f", fmt, "--engine", "name-probe")
        assert result.stderr.count("\n") == 1, fmt
        assert "warnings (0 refusals, 2 warnings" in result.stderr, fmt
        assert run("audit", W4A4, "-f", fmt, "-q").stderr == "", fmt
    json.loads(run("audit", W4A4, "-f", "json").stdout)


def test_verbose_says_what_is_audited(run) -> None:
    result = run("audit", W4A4, W4A4, "-v", "--ignore", "kv-scales-missing: bf16 KV fleet")
    assert f"qarm: auditing {W4A4} (2 of 2)" in result.stderr
    assert "qarm: 1 ignore rule from --ignore" in result.stderr
    assert run("audit", W4A4, "-q", "-v").exit_code == ExitCode.BAD_INPUT


def test_dash_output_is_stdout(run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("audit", W4A4, "-f", "json", "-o", "-")
    assert json.loads(result.stdout)["verdict"] == "warnings"
    assert list(tmp_path.iterdir()) == []  # no file named "-"
    assert run("audit", W4A4, "-f", "markdown", "-o", "-").stdout.startswith("### qarm audit")


def test_dash_source_reads_a_manifest_from_stdin(tmp_path: Path) -> None:
    import gzip

    from click.testing import CliRunner

    from qarm_audit.cli import cli

    runner = CliRunner()
    plain = runner.invoke(cli, ["audit", "-", "-f", "json"], input=W4A4.read_bytes())
    assert plain.exit_code == 0, plain.stderr
    report = json.loads(plain.stdout)
    assert report["source"]["location"] == "-" and report["totals"]["tensors"] == 2194
    packed = runner.invoke(
        cli, ["audit", "-", "-f", "json"], input=gzip.compress(W4A4.read_bytes())
    )
    assert json.loads(packed.stdout)["totals"] == report["totals"]
    empty = runner.invoke(cli, ["audit", "-"], input=b"")
    assert empty.exit_code == ExitCode.BAD_INPUT and "standard input is empty" in empty.stderr
    junk = runner.invoke(cli, ["audit", "-"], input=b"not a manifest")
    assert junk.exit_code == ExitCode.BAD_INPUT and "Traceback" not in junk.stderr
    twice = runner.invoke(cli, ["audit", "-", "-"], input=W4A4.read_bytes())
    assert twice.exit_code == ExitCode.BAD_INPUT


def test_an_ignore_carries_its_own_reason(run) -> None:
    result = run(
        "audit",
        W4A4,
        "-f",
        "json",
        "--engine",
        "name-probe",
        "--ignore",
        "kv-scales-missing: fleet runs bf16 kv",
        "--ignore",
        "declared-arm-differs:*: W4A16 on purpose",
    )
    reasons = {i["code"]: i["reason"] for i in json.loads(result.stdout)["ignored"]}
    assert reasons == {
        "kv-scales-missing": "fleet runs bf16 kv",
        "declared-arm-differs": "W4A16 on purpose",
    }
    assert run("audit", W4A4, "--ignore", "kv-scales-missing").exit_code == ExitCode.BAD_INPUT


def test_output_file(tmp_path: Path, run) -> None:
    out = tmp_path / "report.md"
    assert run("audit", W4A4, "-f", "markdown", "-o", out).exit_code == 0
    assert out.read_text().startswith("### qarm audit")


def test_table_format_names_the_arm_line(run) -> None:
    result = run("audit", W4A4)
    assert "W4A4-NVFP4" in result.stdout and "W4A16-NVFP4" in result.stdout


def test_module_entry_point_and_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "qarm_audit", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "qarm" in done.stdout


def test_markdown_folds_a_flood_of_one_finding_code(tmp_path: Path, run) -> None:
    from conftest import nvfp4_modelopt

    t = llama(layers=8, spell=nvfp4_modelopt)  # NVFP4 declared W4A4, no input_scale anywhere
    path = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])},
    )
    result = run("audit", path, "-f", "markdown", "--engine", "name-probe")
    rows = [line for line in result.stdout.splitlines() if line.startswith("| `operand-missing`")]
    assert len(rows) == 1 and "| 56 modules: `model.layers.0.mlp.down_proj`, " in rows[0]
    assert "`<module>.input_scale`" in rows[0] and "&lt;module> is declared NVFP4" in rows[0]
    folded = result.stdout[
        result.stdout.index(
            "operand-missing: all 56 modules, from model.layers.0.mlp.down_proj</summary>"
        ) :
    ]
    folded = folded[: folded.index("</details>")]
    assert folded.count("\n- `model.layers.") == 56
    report = json.loads(run("audit", path, "-f", "json", "--engine", "name-probe").stdout)
    assert len([r for r in report["refusals"] if r["code"] == "operand-missing"]) == 56
