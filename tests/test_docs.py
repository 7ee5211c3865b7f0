"""The docs name every finding code, and the README's commands stay true."""

from __future__ import annotations

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
