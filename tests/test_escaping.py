"""Every output format escapes what comes from outside: a name cannot forge markdown, send a
terminal sequence, be read as rich markup, or start a line of its own (a workflow command in
CI). See docs/reliability.md."""

from __future__ import annotations

import functools
import json
import re
import struct
import tempfile
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from rich.console import Console

from conftest import f32, fp8_modelopt, modelopt_file, write_checkpoint
from qarm_audit import audit
from qarm_audit.errors import ExitCode
from qarm_audit.report import render_github, render_json, render_markdown, verdict_line
from qarm_audit.report.escape import md_code, md_text, visible
from qarm_audit.report.model import Report
from qarm_audit.report.render_table import render_table

LLAMA = {"model_type": "llama"}
PLAIN = {"model.layers.0.mlp.up_proj.weight": ("BF16", (64, 64))}

MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")

HIDDEN = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""What no output of qarm but JSON and workflow commands may hold raw (a line feed aside)."""


def md_shape(text: str) -> list[Any]:
    """The structure of a markdown document: every block token, and for each run of inline
    text the kinds of its inline tokens (code spans, HTML, links, emphasis, line breaks), plain
    text left out."""
    shape: list[Any] = []
    for token in MD.parse(text):
        if token.type == "inline":
            kinds = [c.type for c in token.children or () if c.type not in ("text", "text_special")]
            shape.append(tuple(kinds))
        else:
            shape.append((token.type, token.tag))
    return shape


def shown_text(text: str, kinds: tuple[str, ...] = ("text", "text_special", "code_inline")) -> str:
    """What a reader sees of a markdown document: the text of its inline tokens (of ``kinds``:
    ``("text", "text_special")`` for its prose only)."""
    return "\n".join(
        "".join(child.content for child in token.children or () if child.type in kinds)
        for token in MD.parse(text)
        if token.type == "inline"
    )


def _fields() -> frozenset[str]:
    schema = Report.model_json_schema()
    parts = [schema, *schema.get("$defs", {}).values()]
    return frozenset(key for part in parts for key in part.get("properties", {}))


FIELDS = _fields()
"""The report's own keys (a dict key that is not one is data: a scheme name, a setting)."""


def _replace(value: Any, names: re.Pattern[str], table: dict[str, str]) -> Any:
    if isinstance(value, str):
        return names.sub(lambda m: table[m.group()], value)  # one pass: none replaced twice
    if isinstance(value, dict):
        return {
            (k if k in FIELDS else _replace(k, names, table)): _replace(v, names, table)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_replace(v, names, table) for v in value]
    return value


LINKABLE = re.compile(r"[@\uff20\ufe6b#]|://|www\.|gh-[0-9]", re.IGNORECASE)
"""What GitHub reads in a document's text as a mention, a web or e-mail address, or an issue
reference (``@org/team``, ``x@y.z``, ``https://``, ``www.``, ``#1``, ``GH-1``)."""


def _stand_in(name: str, letter: str) -> str:
    """A plain word for each word of ``name``, holding ``@`` where that word holds what GitHub
    links (such a word is shown as code, a span between each two ``|``, which it keeps): the
    same structure, rendered."""
    return " ".join(
        "|".join(f"NAME@{letter}" if part else "" for part in word.split("|"))
        if LINKABLE.search(word)
        else f"NAME{letter}"
        for word in name.split(" ")
    )


def placeholder(report: Report, *names: str) -> Report:
    """The same report with each of ``names`` replaced by a harmless word, everywhere: rendered,
    it must have exactly the structure of the report itself."""
    ordered = sorted(set(names), key=len, reverse=True)
    table = {name: _stand_in(name, chr(65 + i)) for i, name in enumerate(ordered)}
    pattern = re.compile("|".join(map(re.escape, ordered)))
    return Report.model_validate(_replace(report.model_dump(mode="json"), pattern, table))


def ct_config(group: str) -> dict[str, Any]:
    """compressed-tensors FP8 (weights only) on every Linear, under the group name ``group``."""
    weights = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}
    body = {"targets": ["Linear"], "weights": weights, "format": "float-quantized"}
    return {
        "model_type": "llama",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {group: body},
            "ignore": ["lm_head"],
        },
    }


def hostile_checkpoint(root: Path, name: str, where: str) -> Path:
    """``name`` as part of a module name (an FP8 weight without its scales: two refusals quote
    it), or as the config_groups name of a declaration the BF16 weights refuse."""
    if where == "module":
        module = f"model.layers.0.mlp.{name}"
        tensors = {f"{module}.weight": ("F8_E4M3", (64, 64)), **PLAIN}
        documents: dict[str, Any] = {
            "config.json": LLAMA,
            "hf_quant_config.json": modelopt_file("FP8"),
        }
    else:
        tensors = dict(PLAIN)
        documents = {"config.json": ct_config(name)}
    return write_checkpoint(root, {"model.safetensors": tensors}, documents)


FORGERIES = {
    "cr": "x\r\r### ✅ **clean**: 0 refusals\r\r",
    "lf": "x\n\n### ✅ **clean**: 0 refusals\n\n",
    "crlf-comment": "x\r\n\r\n<!--",
    "html": "x</details><details open><summary>✅ clean</summary>",
    "backticks": "x` <img src=x onerror=alert(1)> ``` y",
    "pipe": "x | y | z",  # escaped before as well: a guard
    "entity": "x &lt;!-- &#96; &amp;",
    "u2028": "x\u2028### fake",
    "u2029": "x\u2029### fake",
    "u0085": "x\u0085### fake",
    "link": "[click here](https://evil.example)",
    "emphasis": "**x** _y_ ~~z~~",
}


@pytest.mark.parametrize("where", ["module", "config_groups"])
@pytest.mark.parametrize("label", sorted(FORGERIES))
def test_a_name_cannot_forge_the_markdown_or_the_job_summary(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch, label: str, where: str
) -> None:
    """The PR markdown and the job summary (written as action.yml runs qarm: -f github with
    GITHUB_STEP_SUMMARY set) have the structure of the same report with the name replaced by a
    plain word: no row ended, no heading or verdict added, no HTML or comment opened."""
    name = FORGERIES[label]
    root = hostile_checkpoint(tmp_path / "ckpt", name, where)
    report = audit(str(root))
    assert report.refusals
    expected = md_shape(render_markdown(placeholder(report, name)))
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run("audit", root, "-f", "markdown")
    assert result.exit_code == ExitCode.FINDINGS
    assert run("audit", root, "-f", "github").exit_code == ExitCode.FINDINGS
    documents = [result.stdout, *summary.read_text().split("\n### ")]
    assert len(documents) == 3
    for text in documents:
        text = text if text.startswith("### ") else "### " + text
        assert md_shape(text) == expected, label
        assert not HIDDEN.search(text)
        assert [line for line in text.split("\n") if line.startswith("#")] == [text.split("\n")[0]]
        assert not any(line.startswith("✅") for line in text.split("\n"))
        assert visible(name) in shown_text(text)  # in prose too (a linkable word as code)


LINKING = {
    "mention": "@octocat",
    "team": "x.@org/team",
    "email": "a@b.example",
    "url": "https://evil.example/x",
    "www": "WWW.evil.example",
    "issue": "#1",
    "gh": "gh-1",
    "other-repo": "owner/repo#1",
    "fullwidth": "\uff20octocat",
    "pipe": "x|@octocat",  # a code span in prose shows a backslash before |: none may be there
}


def prose_of(text: str) -> str:
    """What GitHub's mention and link filters read of a markdown document: its text outside
    code spans and, in HTML, outside ``<code>``."""
    out = []
    for token in MD.parse(text):
        if token.type == "inline":
            for child in token.children or ():
                if child.type in ("text", "text_special"):
                    out.append(child.content)
                elif child.type == "html_inline":
                    out.append(re.sub(r"<code>.*?</code>", "", child.content))
        elif token.type == "html_block":
            out.append(re.sub(r"<code>.*?</code>", "", token.content))
    return "\n".join(out)


@pytest.mark.parametrize("where", ["module", "config_groups"])
@pytest.mark.parametrize("label", sorted(LINKING))
def test_a_name_can_neither_mention_nor_link(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch, label: str, where: str
) -> None:
    """On GitHub, ``@org/team`` in a PR comment notifies the team, ``#1`` cross-references an
    issue, and an address becomes a link: a word of a name that would is shown as code, in the
    PR markdown, the job summary and explain's markdown, and is still shown whole."""
    name = LINKING[label]
    root = hostile_checkpoint(tmp_path / "ckpt", name, where)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    documents = [run("audit", root, "-f", "markdown").stdout]
    assert run("audit", root, "-f", "github").exit_code == ExitCode.FINDINGS
    documents.append(summary.read_text())
    if where == "module":
        module = f"model.layers.0.mlp.{name}"
        documents.append(run("explain", root, module, "-f", "markdown").stdout)
    if where == "module":  # four alike: the markdown folds them under a <summary> naming one
        tensors = {f"model.layers.{i}.mlp.{name}.weight": ("F8_E4M3", (64, 64)) for i in range(4)}
        documents_ = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")}
        many = write_checkpoint(tmp_path / "many", {"model.safetensors": tensors}, documents_)
        folded = run("audit", many, "-f", "markdown").stdout
        assert "<summary>operand-missing: all 4 modules" in folded
        documents.append(folded)
    for text in documents:
        assert name in shown_text(text) or name in text, label
        assert not LINKABLE.search(prose_of(text)), (label, prose_of(text))
        assert "\\|" not in shown_text(text), label  # shown as written, in prose and tables


# -- the terminal, -o files, stderr ----------------------------------------------------------

ESCAPES = "x\x1b[2J\x1b[31mred\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\\x07\x08"


def test_no_control_sequence_reaches_the_table_the_files_or_the_summary(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the ESC sequences of a name reached the terminal table, -o files and the job
    summary raw (clear the screen, recolour, a hidden hyperlink)."""
    root = hostile_checkpoint(tmp_path / "ckpt", ESCAPES, "module")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    outputs = [run("audit", root).stdout]
    for fmt in ("table", "markdown"):
        out = tmp_path / f"report.{fmt}"
        assert run("audit", root, "-f", fmt, "-o", out).exit_code == ExitCode.FINDINGS
        outputs.append(out.read_text())
    outputs.append(summary.read_text())
    for text in outputs:
        assert "\x1b" not in text and "\x07" not in text and "\x08" not in text
        assert not HIDDEN.search(text)
        assert "\\x1b" in text  # shown, escaped
    for text in outputs[2:]:
        assert visible(ESCAPES) in shown_text(text)


def test_json_on_stdout_spells_every_control_character_as_an_escape(
    tmp_path: Path, run: Any
) -> None:
    """JSON reaches stdout unstripped (it can hold no raw escape sequence): the name comes
    back whole from the JSON, and no ESC, BEL or backspace is in the text."""
    root = hostile_checkpoint(tmp_path / "ckpt", ESCAPES, "module")
    result = run("audit", root, "-f", "json")
    assert result.exit_code == ExitCode.FINDINGS, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\x08" not in result.stdout
    modules = [row["module"] for row in json.loads(result.stdout)["modules"]]
    assert any(ESCAPES in module for module in modules), modules


def test_rich_markup_in_a_name_is_shown_as_written(tmp_path: Path, run: Any) -> None:
    """A config_groups name "[/bold]" made the default table of a clean checkpoint exit 3
    (MarkupError); "[red]" in a module name was swallowed, naming a module that does not exist."""
    tensors = {
        "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", (64, 64)),
        "model.layers.0.mlp.down_proj.weight_scale": ("F32", ()),
    }
    clean = write_checkpoint(
        tmp_path / "clean", {"model.safetensors": tensors}, {"config.json": ct_config("[/bold]")}
    )
    result = run("audit", clean)
    assert result.exit_code == ExitCode.CLEAN, result.stderr
    assert "[/bold]" in result.stdout
    module = "model.layers.0.mlp.[red]down[/red]_proj[link=https://evil.example]"
    refused = hostile_checkpoint(
        tmp_path / "refused", module.removeprefix("model.layers.0.mlp."), "module"
    )
    result = run("audit", refused)
    assert result.exit_code == ExitCode.FINDINGS, result.stderr
    assert module in result.stdout and "model.layers.0.mlp.down_proj" not in result.stdout


def _starts_a_command(text: str) -> list[str]:
    """Lines a GitHub runner would read as a workflow command (it trims leading spaces)."""
    return [line for line in text.split("\n") if line.lstrip().startswith("::")]


FORGED = "x\n::error title=qarm::forged"


def test_no_stderr_line_and_no_table_line_starts_a_workflow_command(
    tmp_path: Path, run: Any
) -> None:
    """A newline in a declared algorithm (the verdict line), in a shard file name (an error
    line) or in a probed tensor name (the --probe-scalars lines) started a line of its own; so
    did a long name with a space, wrapped by rich at the console width."""
    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8" + FORGED)}
    algo = write_checkpoint(tmp_path / "algo", {"model.safetensors": PLAIN}, documents)
    result = run("audit", algo, "-f", "json")
    assert result.exit_code == ExitCode.FINDINGS
    assert _starts_a_command(result.stderr) == [] and "FP8x\\n::error" in result.stderr

    shard = tmp_path / "shard"
    shard.mkdir()
    (shard / f"model{FORGED}.safetensors").write_bytes(struct.pack("<Q", 2) + b"[]")
    result = run("audit", shard)
    assert result.exit_code == ExitCode.BAD_INPUT
    assert _starts_a_command(result.stderr) == [] and "model x\\n::error" not in result.stderr
    assert result.stderr.count("\n") == 1

    wrapped = "a" * 180 + " ::error title=qarm::wrapped"
    for module in (f"model.layers.0.mlp.{FORGED}", f"model.layers.0.mlp.{wrapped}"):
        tensors = fp8_modelopt(module)
        tensors[f"{module}.weight_scale"] = ("F32", (), f32(0.0))
        root = write_checkpoint(
            tmp_path / str(len(module)),
            {"model.safetensors": tensors},
            {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")},
        )
        for args in ((), ("-f", "table", "-o", tmp_path / "t.txt")):
            result = run("audit", root, "--probe-scalars", *args)
            assert result.exit_code == ExitCode.FINDINGS
            text = (tmp_path / "t.txt").read_text() if args else result.stdout
            assert "zero:" in text
            assert _starts_a_command(text) == [] and _starts_a_command(result.stderr) == []


def test_no_line_starts_a_workflow_command_from_a_label_or_a_mapped_name(
    tmp_path: Path, run: Any
) -> None:
    """A source label stands first on the verdict line and on the table's first and last
    lines, and ``--map`` indents module names at the start of its lines: a label or a name
    that begins with ``::`` was a workflow command once the runner trimmed the indent."""
    command = "::error title=forged::x"
    names = {
        f"{command}.weight": ("BF16", (64, 64)),
        f"model.layers.0.{command}.q_proj.weight": ("BF16", (64, 64)),
    }
    root = write_checkpoint(
        tmp_path / "map",
        {"model.safetensors": {**fp8_modelopt("model.layers.0.mlp.up_proj"), **names}},
        {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")},
    )
    manifest = tmp_path / "m.json"
    assert run("manifest", root, "-o", manifest).exit_code == 0
    document = json.loads(manifest.read_text())
    document["origin"] = {"repo": command, "revision": None}
    manifest.write_text(json.dumps(document))
    for source in (root, manifest):
        for fmt in ("table", "markdown", "json"):
            result = run("audit", source, "--map", "-f", fmt)
            assert result.exit_code in (ExitCode.CLEAN, ExitCode.FINDINGS), result.stderr
            assert _starts_a_command(result.stdout) == [], (source, fmt)
            assert _starts_a_command(result.stderr) == [], (source, fmt)
    assert "\\x3a:error title=forged::x" in result.stderr


def test_the_table_stream_escapes_a_command_only_at_a_line_start() -> None:
    """rich may write one line in several pieces: a piece that continues a line holding text
    is not at a line's start, one that follows only spaces is."""
    from qarm_audit.report.console import CommandFreeStream

    out = StringIO()
    stream = CommandFreeStream(out)
    for piece in ("x", "::a\n::b\n", "  ", "::c", " ::d\n"):
        stream.write(piece)
    assert out.getvalue() == "x::a\n\\x3a:b\n  \\x3a:c ::d\n"
    assert _starts_a_command(out.getvalue()) == []


def test_workflow_command_data_hides_nothing(tmp_path: Path) -> None:
    """A terminal sequence or a bidirectional override in a name reached the log raw inside an
    annotation; line breaks still take the runner's own ``%0A``."""
    from qarm_audit.report.escape import gh_data

    hostile = "a\x1b]8;;https://x.example\x07b\x08\x7f\u202ec\U000e0041"
    assert gh_data(hostile) == "a\\x1b]8;;https://x.example\\x07b\\x08\\x7f\\u202ec\\U000e0041"
    assert gh_data("50% a\r\nb") == "50%25 a%0D%0Ab"


def test_characters_that_draw_nothing_are_shown() -> None:
    """Tag characters, variation selectors, the combining grapheme joiner and the Hangul
    fillers draw nothing: ``up_proj`` with one appended looked like ``up_proj``."""
    for char in ("\U000e0041", "\U000e0100", "\ufe0f", "\u034f", "\u115f", "\u3164", "\uffa0"):
        assert visible(f"up_proj{char}") != f"up_proj{char}", hex(ord(char))
        assert visible(f"up_proj{char}").isascii()


# -- the escapers themselves ---------------------------------------------------------------


def test_code_spans_cannot_be_closed_and_keep_their_text() -> None:
    for name in ["a", "a`b", "``", "`x`", "a ` b", " a ", "a\\", "\\`", "x | y"]:
        for table in (True, False):
            text = f"| c |\n|---|\n| {md_code(name)} |\n" if table else md_code(name, table=False)
            inline = [t for t in MD.parse(text) if t.type == "inline"][-1]
            assert [c.type for c in inline.children or ()] == ["code_inline"], name
            assert (inline.children or [])[0].content == name


def test_prose_keeps_its_text() -> None:
    for name in ["a_b", "_a_", "*a*", "a\\|b", "<!--", "&lt;", "`", "[a](b)", "~~a~~", "x\\"]:
        inline = [t for t in MD.parse(f"| c |\n|---|\n| {md_text(name)} |\n") if t.type == "inline"]
        children = inline[-1].children or []
        assert {c.type for c in children} <= {"text", "text_special"}, name
        assert "".join(c.content for c in children) == name


# -- every format, arbitrary names -------------------------------------------------------------

NAMES = st.one_of(
    st.text(min_size=1, max_size=24),
    st.text(
        alphabet=st.sampled_from(
            list("\r\n\t`|<>&*_~[]()!#@/\\%:,.= -x\x1b\u2028\u2029\u0085\u202e")
        ),
        min_size=1,
        max_size=24,
    ),
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@functools.cache
def _vocabulary() -> str:
    """Every string of the report of the same checkpoint with plain names: a name found in it
    (a verdict, a code, a word of a message) cannot be told from qarm's own text by replacing."""
    root = Path(tempfile.mkdtemp()) / "ckpt"
    tensors = {"model.layers.0.mlp.qqq.weight": ("F8_E4M3", (64, 64)), **PLAIN}
    write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": ct_config("ggg")})
    return "\n".join(_strings(audit(str(root)).model_dump(mode="json")))


def _formats(report: Report, scheme_map: bool = False) -> dict[str, str]:
    buffer = StringIO()
    console = Console(file=buffer, width=100_000, color_system=None)
    render_table(report, console, scheme_map=scheme_map)
    return {
        "table": buffer.getvalue(),
        "markdown": render_markdown(report, scheme_map=scheme_map),
        "json": render_json(report),
        "github": render_github(report),
        "stderr": visible(verdict_line(report)) + "\n",
    }


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(module=NAMES, group=NAMES)
def test_arbitrary_names_leave_every_format_with_its_structure(
    tmp_path_factory: pytest.TempPathFactory, module: str, group: str
) -> None:
    """A real checkpoint whose module name and config_groups name are arbitrary Unicode, in
    every format: the same structure as the report with those names replaced by plain words
    (markdown blocks, table rows, headings, inline code and HTML; lines of the table, of the
    workflow commands and of stderr); no raw control character, no line a CI runner would read
    as a command; the scheme map one fenced block; JSON gives the names back."""
    assume(module not in _vocabulary() and group not in _vocabulary())
    root = tmp_path_factory.mktemp("p") / "ckpt"
    name = f"model.layers.0.mlp.{module}"
    tensors = {f"{name}.weight": ("F8_E4M3", (64, 64)), **PLAIN}
    write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": ct_config(group)})
    try:
        report = audit(str(root))
    except Exception as exc:  # some names are refused by name, never by a crash
        assert type(exc).__module__ == "qarm_audit.errors", exc
        return
    rendered = _formats(report)
    baseline = _formats(placeholder(report, module, group))
    assert md_shape(rendered["markdown"]) == md_shape(baseline["markdown"])
    for fmt in ("table", "github", "stderr"):
        assert rendered[fmt].count("\n") == baseline[fmt].count("\n"), fmt
    assert all(line.startswith("::") for line in rendered["github"].rstrip("\n").split("\n"))
    for fmt in ("table", "markdown", "stderr"):
        assert not HIDDEN.search(rendered[fmt]), fmt
        assert _starts_a_command(rendered[fmt]) == [], fmt
    # the map lays modules out by the parts of their names: its shape may differ, its lines not
    mapped = _formats(report, scheme_map=True)
    assert [t.type for t in MD.parse(mapped["markdown"]) if t.type == "fence"] == ["fence"]
    for fmt in ("table", "markdown"):
        assert not HIDDEN.search(mapped[fmt]), fmt
        assert _starts_a_command(mapped[fmt]) == [], fmt
    modules = {row["module"] for row in json.loads(rendered["json"])["modules"]}
    assert name in modules
    assert group in {s["name"] for s in json.loads(rendered["json"])["declaration"]["schemes"]}


def test_diff_and_explain_escape_as_the_audit_does(tmp_path: Path, run: Any) -> None:
    """The same name through qarm diff and qarm explain, in every format: the table of explain
    exited 3 on the markup, ESC and line feeds went out raw."""
    name = "model.layers.0.mlp.x[/bold]\x1b[31m\n::error::forged|`<!--"
    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")}
    a = write_checkpoint(
        tmp_path / "a", {"model.safetensors": {f"{name}.weight": ("F8_E4M3", (4, 4))}}, documents
    )
    b = write_checkpoint(
        tmp_path / "b", {"model.safetensors": {f"{name}.weight": ("BF16", (4, 4))}}, documents
    )
    for fmt in ("table", "markdown", "json"):
        for args, code in ((("diff", a, b), 1), (("explain", a, name), 0)):
            result = run(*args, "-f", fmt)
            assert result.exit_code == code, (args, fmt, result.stderr)
            for text in (result.stdout, result.stderr):
                assert "\x1b" not in text and _starts_a_command(text) == [], (args, fmt)
            if fmt == "markdown":
                tokens = MD.parse(result.stdout)
                assert not [t for t in tokens if t.type.startswith("html")], args
                assert [t.tag for t in tokens if t.type == "heading_open"].count("h3") == 1
                assert visible(name) in shown_text(result.stdout)
            if fmt == "json":
                assert any(name in text for text in _strings(json.loads(result.stdout)))
