"""The docs name every finding code, and the README's commands stay true."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from qarm_audit.findings import CODES


def test_every_finding_code_is_documented() -> None:
    text = (REPO / "docs" / "findings.md").read_text()
    missing = [code for code in CODES if f"`{code}`" not in text]
    assert missing == []


def test_readme_opens_with_the_two_commands() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```")]
    assert block == [
        "pip install . && qarm audit fixtures/manifests/seed-nvfp4-w4a4.manifest.json",
        "pip install '.[test]' && python -m pytest",
    ]
    assert (REPO / "fixtures" / "manifests" / "seed-nvfp4-w4a4.manifest.json").is_file()
    assert "python -m pytest" in (REPO / ".ci" / "run").read_text()


def test_readme_says_what_its_first_audit_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU: one warning, kv-scales-missing, exit 0; the sm80-sm90 fallback is a note."""
    from click.testing import CliRunner

    from qarm_audit.cli import cli

    monkeypatch.setenv("QARM_GPU", "none")
    monkeypatch.setenv("QARM_DETECT_ENGINE", "0")
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "That manifest passes with one warning, `kv-scales-missing`" in readme
    assert "and exit code 0" in readme and "is a note, not a warning" in readme
    seed = "fixtures/manifests/seed-nvfp4-w4a4.manifest.json"
    result = CliRunner().invoke(cli, ["audit", str(REPO / seed), "-f", "json"])
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["verdict"] == "warnings" and report["engine"]["gpu"] is None
    assert [w["code"] for w in report["warnings"]] == ["kv-scales-missing"]
    assert {n["code"] for n in report["notes"]} == {"arm-differs-on-some-gpus"}


def _fenced(text: str, first_line: str) -> list[str]:
    """The lines of the fenced block whose first line is ``first_line`` (without it)."""
    lines = text.splitlines()
    start = lines.index(first_line)
    assert lines[start - 1].startswith("```")
    end = lines.index("```", start)
    return lines[start + 1 : end]


def _help(*args: str) -> list[str]:
    from click.testing import CliRunner

    from qarm_audit.cli import cli

    result = CliRunner().invoke(cli, list(args), prog_name="qarm", terminal_width=80)
    assert result.exit_code == 0, result.output
    return [line.rstrip() for line in result.output.rstrip("\n").splitlines()]


def test_readme_help_blocks_match_the_real_help() -> None:
    readme = (REPO / "README.md").read_text()
    assert _fenced(readme, "$ qarm --help") == _help("--help")
    assert _fenced(readme, "$ qarm audit --help") == _help("audit", "--help")


def test_shell_completion_script_as_documented() -> None:
    from click.testing import CliRunner

    from qarm_audit.cli import cli

    assert "_QARM_COMPLETE=bash_source qarm" in (REPO / "docs" / "quickstart.md").read_text()
    result = CliRunner().invoke(
        cli, [], prog_name="qarm", env={"_QARM_COMPLETE": "bash_source"}, catch_exceptions=False
    )
    assert result.exit_code == 0
    assert "_qarm_completion" in result.output and "complete " in result.output


def test_python_api_example_runs_and_names_only_exported_things(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import re

    import qarm_audit

    text = (REPO / "docs" / "quickstart.md").read_text()
    section = text[text.index("## Python API") :]
    example = section[section.index("```python\n") + len("```python\n") :]
    example = example[: example.index("```")]
    imported = re.findall(r"^from qarm_audit import (.+)$", example, re.M)
    names = {n.strip() for line in imported for n in line.split(",")}
    assert names and names <= set(qarm_audit.__all__)
    namespace: dict[str, object] = {}
    monkeypatch.chdir(REPO)
    exec(compile(example, "quickstart.md", "exec"), namespace)  # runs as written, from the root
    for name in ("audit", "diff", "explain", "Report", "ExitCode", "QarmError"):
        assert name in qarm_audit.__all__


def test_json_doc_names_every_report_field() -> None:
    from qarm_audit.report.model import SCHEMA_VERSION, Report

    text = (REPO / "docs" / "json.md").read_text()
    assert f'"{SCHEMA_VERSION}"' in text
    missing = [field for field in Report.model_fields if f"`{field}`" not in text]
    assert missing == []


def test_json_doc_example_and_schema_id_are_what_the_tool_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """json.md's example is the projection its ``jq`` line makes of a real audit, and the
    ``$id`` it quotes is the schema's; each nested row type's fields are named too."""
    import re

    from qarm_audit import audit
    from qarm_audit.report.model import Bucket
    from qarm_audit.report.render_json import SCHEMA_ID

    text = (REPO / "docs" / "json.md").read_text()
    assert f"`{SCHEMA_ID}`" in text
    assert [f for f in Bucket.model_fields if f"`{f}`" not in text] == []
    example = text.split("## Example", 1)[1]
    command = re.search(r"\$ qarm audit (\S+) -f json", example)
    shown = re.search(r"^(\{\n.*?\n\})$", example, re.M | re.S)
    assert command and shown
    monkeypatch.chdir(REPO)
    report = json.loads(audit(command[1]).model_dump_json())
    projected = {
        "verdict": report["verdict"],
        "totals": report["totals"],
        "warnings": [row["code"] for row in report["warnings"]],
    }
    assert json.loads(shown[1]) == projected
