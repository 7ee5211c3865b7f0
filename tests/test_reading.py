"""The report as a reviewer reads it: one row per cause, the verdict at both ends, names that
wrap at dots, the width of the terminal or COLUMNS, folds in markdown, counted words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import MANIFESTS, fp8_modelopt, llama, modelopt_file, write_checkpoint
from qarm_audit import audit
from qarm_audit.report import render_markdown
from qarm_audit.report.model import FindingRow

MTP = MANIFESTS / "seed-mtp-w4a16.manifest.json"
W4A4 = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"


def test_one_cause_on_401_modules_is_two_rows_and_the_verdict_closes_the_table(run) -> None:
    """``--gpu sm70`` on the seed: 401 no-arm refusals, one cause per declared scheme."""
    table = run("audit", MTP, "--gpu", "sm70")
    assert table.exit_code == 1
    rows = [line for line in table.stdout.splitlines() if "no-arm" in line]
    assert len(rows) == 2
    assert "401 refusals" in table.stdout.splitlines()[-1]  # the verdict, again, last
    assert table.stdout.splitlines()[0] == table.stdout.splitlines()[-1]
    assert "208 modules:" in table.stdout and "193 modules:" in table.stdout
    assert "<module> is declared FP8" in table.stdout
    report = json.loads(run("audit", MTP, "--gpu", "sm70", "-f", "json").stdout)
    assert len(report["refusals"]) == 401  # the JSON keeps every row
    markdown = run("audit", MTP, "--gpu", "sm70", "-f", "markdown").stdout
    assert len([line for line in markdown.splitlines() if line.startswith("| `no-arm`")]) == 2
    assert markdown.count("<summary>no-arm: all ") == 2
    listed = re.findall(r"^- `(model\.[^`]+|lm_head)`$", markdown, re.M)
    assert sorted(listed) == sorted(r["module"] for r in report["refusals"])


def test_one_row_speaking_of_many_modules_says_so(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    report = audit(str(W4A4), engine="name-probe")
    (differs,) = [w for w in report.warnings if w.code == "declared-arm-differs"]
    assert "on 193 modules" in differs.message
    table = run("audit", W4A4, "--engine", "name-probe").stdout
    assert "(first of 193)" in table
    markdown = render_markdown(report)
    assert f"`{differs.module}` (first of 193)" in markdown


def test_counted_words(tmp_path: Path, run) -> None:
    t = llama(spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    path = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": t},
        {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])},
    )
    line = run("audit", path, "-f", "json").stderr
    assert "(1 refusal, " in line and " in 1 shard)" in line
    markdown = run("audit", path, "-f", "markdown").stdout
    assert "1 refusal," in markdown and "1 refusals" not in markdown
    table = run("audit", path).stdout
    assert "1 shard verified" in table and "1 shards" not in table


def test_counted_words_outside_the_audit_report(tmp_path: Path, run) -> None:
    """The manifest and diff commands and the unread-files findings count in words too."""
    t = llama(spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    documents = {"hf_quant_config.json": modelopt_file("FP8", ["lm_head"])}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    manifest = run("manifest", path, "-o", "-")
    assert manifest.stderr.rstrip().endswith(" tensors in 1 shard"), manifest.stderr
    diff = run("diff", path, path)
    assert "in 1 shard)" in diff.stdout + diff.stderr
    assert "1 shards" not in diff.stdout + diff.stderr
    (path / "pytorch_model.bin").write_bytes(b"\0" * 16)
    unread = json.loads(run("audit", path, "-f", "json").stdout)["warnings"]
    (message,) = [w["message"] for w in unread if w["code"] == "weight-files-unread"]
    assert message.startswith("1 weight file beside the 1 shard read was not audited: "), message
    empty = write_checkpoint(tmp_path / "empty", {"model.safetensors": {}}, documents)
    findings = json.loads(run("audit", empty, "-f", "json").stdout)["refusals"]
    (message,) = [f["message"] for f in findings if f["code"] == "weights-unread"]
    assert "(1 safetensors shard, 0 tensors)" in message, message


def test_names_wrap_at_dots_at_80_columns(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    table = run("audit", MTP, "--gpu", "sm70").stdout
    refusals = table[table.index("Refusals (401)") :].splitlines()
    body = [line for line in refusals if line.startswith("│")]
    assert body
    assert max(len(line) for line in body) <= 80
    cells = [line.split("│")[2].strip() for line in body if line.count("│") >= 4]
    modules = [c for c in cells if c and not c.startswith("module")]
    # every line of a module cell ends at a dot, a comma, or the end of a name
    for cell in modules:
        assert re.fullmatch(r"[\w.,: …]*", cell), cell
        assert cell.endswith((".", ",", "…", ":")) or re.search(r"\w$", cell), cell
    joined = ""
    for cell in modules:  # a line that ends at a dot goes on without a space
        joined += cell if not joined or joined.endswith(".") else " " + cell
    assert "lm_head, model.language_model.layers.0.mlp.down_proj, " in joined
    assert "208 modules: model.language_model.layers.0.linear_attn.in_proj_qkv, " in joined


def test_width_is_columns_or_wide_off_a_terminal(run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    narrow = run("audit", MTP, "--gpu", "sm70").stdout
    bordered = [line for line in narrow.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in bordered) <= 100
    monkeypatch.delenv("COLUMNS")
    wide = run("audit", MTP, "--gpu", "sm70").stdout  # not a terminal, no COLUMNS
    bordered = [line for line in wide.splitlines() if line[:1] in "┏┃┡│└"]
    assert 80 < max(len(line) for line in bordered) <= 120


def test_on_a_terminal_the_table_is_the_terminal_s_width(tmp_path: Path) -> None:
    """Without COLUMNS, the width of the terminal stdout is (a pseudo-terminal 90 wide)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 90, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent / "src")
    command = [sys.executable, "-m", "qarm_audit", "audit", str(MTP), "--gpu", "sm70"]
    child = subprocess.Popen(command, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert child.wait(timeout=120) == 1
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode("utf-8"))
    bordered = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert bordered and max(len(line) for line in bordered) == 90


def test_markdown_folds_the_arms_and_the_map(run) -> None:
    markdown = run("audit", W4A4, "--engine", "name-probe", "-f", "markdown", "--map").stdout
    arms = markdown.index("<details><summary>Arms (declared vs executed): ")
    assert markdown.index("NVFP4: declared W4A4-NVFP4", arms) < markdown.index("</details>", arms)
    folded = markdown.index("<details><summary>Scheme map</summary>")
    assert folded < markdown.index("Scheme map: ") < markdown.index("</details>", folded)


def test_an_empty_tensor_cell_is_empty(run) -> None:
    markdown = run("audit", MTP, "-f", "markdown").stdout
    rows = [line for line in markdown.splitlines() if line.startswith("| `kv-scales-missing`")]
    assert rows and all("``" not in row for row in rows)
    assert "| `kv-scales-missing` |  |  | config.json" in rows[0]


def test_grouped_rows_and_their_folds_are_escaped() -> None:
    base = audit(str(MTP))
    names = [f"model.layers.{i}.mlp.x`|<b>*y*" for i in range(5)]
    rows = [
        FindingRow(
            code="no-arm",
            severity="refusal",
            module=name,
            tensor=f"{name}.weight",
            message=f"{name} has no arm",
        )
        for name in names
    ]
    markdown = render_markdown(base.model_copy(update={"refusals": rows, "verdict": "refused"}))
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    inline = [t for t in tokens if t.type == "inline"]
    assert not [c for t in inline for c in t.children or [] if c.type == "html_inline"]
    (row,) = [line for line in markdown.splitlines() if line.startswith("| `no-arm`")]
    alone = (
        MarkdownIt("commonmark")
        .enable("table")
        .parse(f"| a | b | c | d |\n|---|---|---|---|\n{row}")
    )
    assert len([t for t in alone if t.type == "td_open"]) == 4  # no | from a name ends a cell
    assert "5 modules: " in row and "&lt;module> has no arm" in row
    fold = markdown[markdown.index("<summary>no-arm: all 5 modules, from ") :]
    assert fold.count("\n- ``model.layers.") == 5


def test_an_arm_over_one_module_says_one_module(tmp_path: Path) -> None:
    module = "model.layers.0.mlp.down_proj"
    documents = {"hf_quant_config.json": modelopt_file("FP8", [])}
    folder = write_checkpoint(
        tmp_path / "c", {"model.safetensors": fp8_modelopt(module)}, documents
    )
    lines = [arm.line() for arm in audit(str(folder)).arms]
    assert lines and all(line.endswith("[1 module]") for line in lines)
