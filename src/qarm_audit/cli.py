"""The ``qarm`` command: a thin layer of click over the library. Only this module exits."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from . import __version__
from .audit import DEFAULT_ENGINE, ROUTING_CHOICES, audit
from .engines.profile import BUILTIN
from .errors import ExitCode, QarmError, UsageError
from .report import FORMATS, json_schema, render_json, render_markdown, verdict_line
from .report.model import Report
from .report.render_table import render_table
from .sources import open_source, write_manifest

FAIL_ON = ("refusal", "warning", "never")


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError("--env", f"{pair!r} is not KEY=VALUE")
        out[key] = value
    return out


def exit_code_for(report: Report, fail_on: str) -> ExitCode:
    if fail_on == "never":
        return ExitCode.CLEAN
    if report.refusals or (fail_on == "warning" and report.warnings):
        return ExitCode.FINDINGS
    return ExitCode.CLEAN


class _HubStderr:
    """Shows a Hub read on stderr: the resolved revision, and a progress bar on a terminal."""

    def __init__(self, bar: bool) -> None:
        self.bar = bar
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def resolved(self, revision: str, sha: str) -> None:
        click.echo(f"qarm: resolved {revision} -> {sha}", err=True)

    def headers_started(self, total: int) -> None:
        if self.bar and total:
            self.progress = Progress(
                TextColumn("reading headers"),
                BarColumn(),
                MofNCompleteColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.task = self.progress.add_task("headers", total=total)
            self.progress.start()

    def header_read(self, file: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)

    def headers_finished(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class _Group(click.Group):
    """Turns every QarmError into one line on stderr and its exit code; never a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except QarmError as exc:
            if os.environ.get("QARM_DEBUG") == "1":
                traceback.print_exc()
            click.echo(f"qarm: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except Exception as exc:
            if os.environ.get("QARM_DEBUG") == "1":
                raise
            click.echo(
                f"qarm: internal error: {type(exc).__name__}: {exc} "
                "(set QARM_DEBUG=1 for a traceback)",
                err=True,
            )
            ctx.exit(ExitCode.COULD_NOT_AUDIT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="qarm")
def cli() -> None:
    """Audit a quantized checkpoint's declaration against the tensors it ships."""


@cli.command("audit")
@click.argument("source")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Report format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report here instead of standard output.",
)
@click.option(
    "--engine",
    default=DEFAULT_ENGINE,
    show_default=True,
    help=f"Engine profile: a built-in name ({', '.join(BUILTIN)}) or a .toml file.",
)
@click.option(
    "--env",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Engine setting for the profile (repeatable), e.g. W4A4=1.",
)
@click.option(
    "--gpu",
    help="GPU as sm80..sm121 or a name (A100, L40S, H100, H200, B200, RTX 5090, GB10). "
    "Without it the arm line gives the arm for each capability range.",
)
@click.option(
    "--routing",
    type=click.Choice(ROUTING_CHOICES),
    help="Route modules by the declaration, by the shipped tensor names (probe), or both "
    "(the profile's own routing, plus every module whose arm moves under the other). "
    "Default: the profile's own.",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default="refusal",
    show_default=True,
    help="Lowest severity that makes the exit code 1.",
)
@click.option(
    "--require-pinned",
    is_flag=True,
    help="Refuse a Hub revision that is not a full 40-hex commit sha.",
)
@click.option(
    "--probe-scalars",
    is_flag=True,
    help="Also read the scalar scale tensors (at most 64 elements each) and judge their values.",
)
def audit_command(
    source: str,
    fmt: str,
    output: Path | None,
    engine: str,
    env_pairs: tuple[str, ...],
    gpu: str | None,
    routing: str | None,
    fail_on: str,
    require_pinned: bool,
    probe_scalars: bool,
) -> None:
    """Audit SOURCE: a folder, a manifest, a declaration file, or owner/name@revision.

    Exit codes: 0 clean, 1 refusals (or warnings with --fail-on warning), 2 usage or bad
    input, 3 could not audit (I/O, network).
    """
    report = audit(
        source,
        engine=engine,
        env=_parse_env(env_pairs),
        gpu=gpu,
        require_pinned=require_pinned,
        observer=_HubStderr(bar=fmt != "json" and sys.stderr.isatty()),
        probe_scalars=probe_scalars,
        routing=routing,
    )
    if fmt == "json":
        text = render_json(report)
    elif fmt == "markdown":
        text = render_markdown(report)
    else:
        text = ""
    if output is not None:
        if fmt == "table":
            from io import StringIO

            buffer = StringIO()
            render_table(report, Console(file=buffer, width=120, color_system=None))
            text = buffer.getvalue()
        output.write_text(text, encoding="utf-8")
    elif fmt == "table":
        render_table(report, Console())
    else:
        click.echo(text, nl=False)
    if fmt != "table" or output is not None:
        click.echo(verdict_line(report), err=True)
    click.get_current_context().exit(exit_code_for(report, fail_on))


@cli.command("manifest")
@click.argument("source")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Manifest file to write (.json, or .json.gz for a compressed one).",
)
@click.option("--force", is_flag=True, help="Replace an existing file with different content.")
@click.option(
    "--require-pinned",
    is_flag=True,
    help="Refuse a Hub revision that is not a full 40-hex commit sha.",
)
def manifest_command(source: str, output: Path, force: bool, require_pinned: bool) -> None:
    """Capture SOURCE's documents and headers (no weights) as a manifest at OUTPUT."""
    checkpoint = open_source(
        source, require_pinned=require_pinned, observer=_HubStderr(bar=sys.stderr.isatty())
    )
    from .integrity import check_integrity

    check_integrity(checkpoint)
    written = write_manifest(checkpoint, output, force=force)
    tensors = sum(len(s.tensors) for s in checkpoint.shards)
    state = "wrote" if written else "unchanged"
    click.echo(f"{state} {output}: {tensors} tensors in {len(checkpoint.shards)} shards", err=True)


@cli.command("schema")
def schema_command() -> None:
    """Print the JSON schema of ``qarm audit --format json``."""
    click.echo(json_schema(), nl=False)


def main() -> None:
    """Console entry point."""
    cli(prog_name="qarm")


# --- diff and explain ----------------------------------------------------------------------------

VIEW_FORMATS = ("table", "markdown", "json")

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _emit(
    fmt: str,
    output: Path | None,
    text: Callable[[], str],
    table: Callable[[Console], None],
) -> None:
    """Write ``text()`` (JSON or markdown) or the rich ``table`` to ``output`` or stdout."""
    if fmt == "table" and output is None:
        table(Console())
        return
    if fmt == "table":
        from io import StringIO

        buffer = StringIO()
        table(Console(file=buffer, width=120, color_system=None))
        rendered = buffer.getvalue()
    else:
        rendered = text()
    if output is not None:
        output.write_text(rendered, encoding="utf-8")
    else:
        click.echo(rendered, nl=False)


def _engine_options(function: _Command) -> _Command:
    """--engine, --env, --gpu and --require-pinned, as ``qarm audit`` takes them."""
    options = [
        click.option(
            "--engine",
            default=DEFAULT_ENGINE,
            show_default=True,
            help="Engine profile: a built-in name or a .toml file.",
        ),
        click.option(
            "--env",
            "env_pairs",
            multiple=True,
            metavar="KEY=VALUE",
            help="Engine setting for the profile (repeatable), e.g. W4A4=1.",
        ),
        click.option("--gpu", help="GPU as sm80..sm121 or a name (H100, B200, RTX 5090)."),
        click.option(
            "--require-pinned",
            is_flag=True,
            help="Refuse a Hub revision that is not a full 40-hex commit sha.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@cli.command("diff")
@click.argument("a")
@click.argument("b")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(VIEW_FORMATS),
    default="table",
    show_default=True,
    help="Report format (JSON keeps every row; the others group and count).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report here instead of standard output.",
)
@_engine_options
def diff_command(
    a: str,
    b: str,
    fmt: str,
    output: Path | None,
    engine: str,
    env_pairs: tuple[str, ...],
    gpu: str | None,
    require_pinned: bool,
) -> None:
    """Compare checkpoint B with checkpoint A (folders, manifests, owner/name@revision).

    Said from A's point of view: "added" is in B only, "x -> y" is A's value then B's. Exit
    codes: 0 identical (names, dtypes, shapes, declarations, layout), 1 different, 2 usage or
    bad input, 3 could not read.
    """
    from .diff import diff
    from .report.render_diff import render_diff_json, render_diff_markdown, render_diff_table

    report = diff(
        a, b, engine=engine, env=_parse_env(env_pairs), gpu=gpu, require_pinned=require_pinned
    )
    _emit(
        fmt,
        output,
        lambda: render_diff_json(report) if fmt == "json" else render_diff_markdown(report),
        lambda console: render_diff_table(report, console),
    )
    if fmt != "table" or output is not None:
        click.echo(report.summary, err=True)
    click.get_current_context().exit(ExitCode.CLEAN if report.identical else ExitCode.FINDINGS)


@cli.command("explain")
@click.argument("source")
@click.argument("name")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(VIEW_FORMATS),
    default="table",
    show_default=True,
    help="Report format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the explanation here instead of standard output.",
)
@_engine_options
def explain_command(
    source: str,
    name: str,
    fmt: str,
    output: Path | None,
    engine: str,
    env_pairs: tuple[str, ...],
    gpu: str | None,
    require_pinned: bool,
) -> None:
    """Explain how NAME (a module, a tensor, or a fused/experts module) of SOURCE resolves.

    Every rule tried and the one that decided, the operands shipped, the verdict and the arm.
    Exit codes: 0 explained, 2 NAME not found (the closest names are printed) or bad input,
    3 could not read.
    """
    from .explain import explain
    from .report.render_explain import (
        render_explain_json,
        render_explain_markdown,
        render_explain_table,
    )

    explanation = explain(
        source,
        name,
        engine=engine,
        env=_parse_env(env_pairs),
        gpu=gpu,
        require_pinned=require_pinned,
    )
    _emit(
        fmt,
        output,
        lambda: (
            render_explain_json(explanation)
            if fmt == "json"
            else render_explain_markdown(explanation)
        ),
        lambda console: render_explain_table(explanation, console),
    )
