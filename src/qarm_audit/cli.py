"""The ``qarm`` command: a thin layer of click over the library. Only this module exits."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .commands.audit import DEFAULT_ENGINE, ROUTING_CHOICES, audit
from .engines.detect import select_engine
from .engines.profile import BUILTIN
from .errors import ExitCode, QarmError, UsageError
from .report import (
    FORMATS,
    json_schema,
    render_json,
    render_json_bytes,
    render_markdown,
    verdict_line,
)
from .report.escape import no_command
from .report.group import plural
from .report.locate import source_file
from .report.model import Report
from .report.output import (
    Output,
    append_outputs,
    append_summary,
    echo,
    print_traceback,
    say,
    step_outputs,
    table_width,
)
from .report.policy import IgnoreRule, load_config_file, load_config_ignores, parse_cli_ignores
from .report.progress import HubProgress
from .report.render_github import Annotations
from .report.render_markdown import render_markdown_error
from .runtime import VERSION, collector_paused, exit_without_teardown, hold_until_exit, keep
from .sources import Checkpoint, open_source, render_manifest, write_manifest
from .sources.folders import checkpoint_folders
from .sources.stdin import STDIN, read_stdin_manifest

if TYPE_CHECKING:
    from rich.console import Console

# rich (the terminal's tables) is imported where a table is drawn: a run writing JSON,
# markdown or annotations does not load it.

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


INTERRUPTED = 130
"""The exit code after Ctrl-C (128 + SIGINT), as a shell reports a process it interrupted."""


class _Group(click.Group):
    """Turns every QarmError into one line on stderr and its exit code; never a traceback
    (unless QARM_DEBUG=1, and then one with every token scrubbed); Ctrl-C into exit 130."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except QarmError as exc:
            _print_error(exc)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            say("qarm: interrupted; nothing more was written")
            ctx.exit(INTERRUPTED)
        except Exception as exc:
            print_traceback(exc)
            hint = (
                "" if os.environ.get("QARM_DEBUG") == "1" else " (set QARM_DEBUG=1 for a traceback)"
            )
            say(f"qarm: internal error: {type(exc).__name__}: {exc}{hint}")
            ctx.exit(ExitCode.COULD_NOT_AUDIT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="qarm")
def cli() -> None:
    """Audit a quantized checkpoint's declaration against the tensors it ships."""


@cli.command("audit", short_help="Audit checkpoints: the declaration against the shipped tensors.")
@click.argument("sources", metavar="SOURCE...", nargs=-1, required=True)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="Report format. github: workflow-command annotations for GitHub Actions.",
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
    help=f"Engine profile: a built-in name ({', '.join(BUILTIN)}), a release of one "
    "(vllm==0.32.0; a bare name takes the installed release if modelled, else the newest), "
    "or a .toml file.",
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
    "Without it the machine's GPU is used if one is detected (QARM_GPU=none turns that off), "
    "else the arm line gives the arm for each capability range.",
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
@click.option(
    "--map",
    "show_map",
    is_flag=True,
    help="Add the scheme map: one letter per module, layers by projection kind "
    "(table, markdown and the job summary).",
)
@click.option(
    "--ignore",
    "ignore_specs",
    multiple=True,
    metavar="CODE[:MODULE-PATTERN][: REASON]",
    help="Move the findings of CODE (on modules matching the fnmatch pattern) to the ignored "
    "list (repeatable); the reason follows a colon and a space, or comes from --ignore-reason.",
)
@click.option(
    "--ignore-reason",
    metavar="TEXT",
    help="Why the --ignore findings that give no reason of their own are accepted.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read [[ignore]] rules from this file instead of ./qarm.toml or ./pyproject.toml.",
)
@click.option(
    "--json-output",
    "json_output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the JSON report here (an array with several sources), whatever the format.",
)
@click.option(
    "--folders",
    "folders",
    is_flag=True,
    help="Each SOURCE is a file of a checkpoint folder (pre-commit passes file names): audit "
    "each folder holding one once.",
)
@click.option("-q", "--quiet", is_flag=True, help="No summary line or progress on stderr.")
@click.option(
    "-v", "--verbose", is_flag=True, help="Also say on stderr what is audited and which ignores."
)
def audit_command(
    sources: tuple[str, ...],
    fmt: str,
    output: Path | None,
    engine: str,
    env_pairs: tuple[str, ...],
    gpu: str | None,
    routing: str | None,
    fail_on: str,
    require_pinned: bool,
    probe_scalars: bool,
    show_map: bool,
    ignore_specs: tuple[str, ...],
    ignore_reason: str | None,
    config_file: Path | None,
    json_output: Path | None,
    folders: bool,
    quiet: bool,
    verbose: bool,
) -> None:
    """Audit each SOURCE: a folder, a manifest (- reads one from standard input), a
    declaration file, or owner/name@revision.

    The report goes to standard output (or -o FILE; -o - is standard output), a one-line
    summary per source to standard error. Several sources are audited in turn (one JSON array
    with -f json); the exit code is the worst. Ignores come from --ignore, --config, or
    ./qarm.toml or ./pyproject.toml. With GITHUB_STEP_SUMMARY set, the markdown report is also
    appended to that file; with GITHUB_OUTPUT set, the verdict and counts are step outputs.

    Exit codes: 0 clean, 1 refusals (or warnings with --fail-on warning), 2 usage or bad
    input, 3 could not audit (I/O, network).
    """
    if quiet and verbose:
        raise UsageError("--quiet", "given with --verbose")
    if sources.count(STDIN) > 1:
        raise UsageError("SOURCE", "- (standard input) can be read only once")
    rules = [
        *(load_config_file(config_file) if config_file else load_config_ignores(Path.cwd())),
        *_cli_ignores(ignore_specs, ignore_reason),
    ]
    if folders:
        sources = _checkpoint_folders(sources, verbose)
    select_engine(engine)  # a bad profile or release fails before any source is read
    options = _AuditOptions(
        fmt=fmt,
        engine=engine,
        env=_parse_env(env_pairs),
        gpu=gpu,
        routing=routing,
        fail_on=fail_on,
        require_pinned=require_pinned,
        probe_scalars=probe_scalars,
        show_map=show_map,
        rules=rules,
        quiet=quiet,
        verbose=verbose,
    )
    if verbose and rules:
        origins = sorted({r.origin for r in rules})
        say(f"qarm: {plural(len(rules), 'ignore rule')} from {', '.join(origins)}")
    out_at = Output.at(_dash(output), reads=sources)
    with out_at as out, Output.at(_dash(json_output), "--json-output", sources) as js:
        run = _AuditRun(options, out, len(sources))
        keep(run)  # its reports are freed at the process's end, not before it
        worst = run.run(sources, js if json_output is not None else None)
    click.get_current_context().exit(worst)


def _dash(path: Path | None) -> Path | None:
    """``-o -``: standard output, as ``pip-audit -o -`` and most tools read it."""
    return None if path is not None and str(path) == STDIN else path


def _cli_ignores(specs: tuple[str, ...], reason: str | None) -> list[IgnoreRule]:
    """``--ignore CODE[:PATTERN]`` takes --ignore-reason; ``--ignore "CODE[:PATTERN]: REASON"``
    carries its own (the reason after the first colon and space), so each ignore can say why."""
    plain = [s for s in specs if ": " not in s]
    if reason and not plain:
        raise UsageError("--ignore-reason", "given without an --ignore that needs it")
    rules = parse_cli_ignores(plain, reason)
    for spec in specs:
        if ": " in spec:
            code, _, own = spec.partition(": ")
            rules += parse_cli_ignores([code.strip()], own.strip())
    return rules


def _checkpoint_folders(paths: tuple[str, ...], verbose: bool) -> tuple[str, ...]:
    folders, skipped = checkpoint_folders(paths)
    if verbose:
        for given in skipped:
            say(f"qarm: skipped {given}: its folder holds no checkpoint")
        say(f"qarm: {plural(len(paths), 'file')} -> {plural(len(folders), 'checkpoint folder')}")
    return folders


@dataclass(frozen=True)
class _AuditOptions:
    fmt: str
    engine: str
    env: dict[str, str]
    gpu: str | None
    routing: str | None
    fail_on: str
    require_pinned: bool
    probe_scalars: bool
    show_map: bool
    rules: list[IgnoreRule]
    quiet: bool
    verbose: bool


class _AuditRun:
    """One ``qarm audit`` over its sources: what each writes where, and the worst exit code."""

    def __init__(self, options: _AuditOptions, out: Output, count: int) -> None:
        self.o = options
        self.out = out
        self.count = count
        self.summary = os.environ.get("GITHUB_STEP_SUMMARY")
        self.outputs = os.environ.get("GITHUB_OUTPUT")
        self.to_terminal = options.fmt == "table" and out.path is None
        self.annotations = Annotations(count, summary=bool(self.summary))
        self.texts: list[str] = []
        self.summaries: list[str] = []
        self.reports: list[Report] = []
        self.failed = 0
        self.worst = ExitCode.CLEAN

    def run(self, sources: tuple[str, ...], json_out: Output | None) -> ExitCode:
        for n, source in enumerate(sources):
            if self.o.verbose:
                say(f"qarm: auditing {source} ({n + 1} of {len(sources)})")
            try:
                report = self._audit(source)
            except UsageError:
                raise
            except QarmError as exc:
                self._failed(source, exc, json_out)
                continue
            self._audited(report, first=not self.reports)
        self._finish(json_out)
        return self.worst

    def _audit(self, source: str) -> Report:
        o = self.o
        bar = not o.quiet and o.fmt not in ("json", "github") and sys.stderr.isatty()
        spec: str | Checkpoint = source
        if source == STDIN:
            spec = read_stdin_manifest(sys.stdin.buffer)
        return audit(
            spec,
            engine=o.engine,
            env=o.env,
            gpu=o.gpu,
            require_pinned=o.require_pinned,
            observer=HubProgress(bar=bar, quiet=o.quiet),
            probe_scalars=o.probe_scalars,
            routing=o.routing,
            ignores=o.rules,
        )

    def _failed(self, source: str, exc: QarmError, json_out: Output | None) -> None:
        if self.o.fmt == "github" and self.out.path is None:
            # in the order given: after the annotations of the sources before it
            self.texts.append(self.annotations.error(str(exc), source_file(source)))
        if self.summary:
            self.summaries.append(render_markdown_error(source, str(exc)) + "\n")
        self.failed += 1
        self.worst = max(self.worst, exc.exit_code)
        if self.count == 1:
            self._finish(json_out)
            raise exc
        # several sources: an error names a file of its checkpoint (config.json), so say which
        said = str(exc)
        _print_error(exc, "" if said.startswith(source) else f"{source}: ")

    def _audited(self, report: Report, first: bool) -> None:
        o = self.o
        self.reports.append(report)
        self.worst = max(self.worst, exit_code_for(report, o.fail_on))
        if self.to_terminal:
            if not first:
                echo("\n")
            from .report.console import ReportConsole
            from .report.render_table import render_table

            render_table(report, ReportConsole(width=table_width()), scheme_map=o.show_map)
        elif o.fmt == "github":
            self.texts.append(self.annotations.report(report))
        elif o.fmt != "json":
            self.texts.append(_render(report, o.fmt, o.show_map))
        if not o.quiet:
            say(verdict_line(report))
        if self.summary:
            self.summaries.append(render_markdown(report, scheme_map=o.show_map) + "\n")

    def _finish(self, json_out: Output | None) -> None:
        o = self.o
        any_report = bool(self.reports) or self.count > 1
        if o.fmt == "github":
            self.texts.append(self.annotations.close())
        if o.fmt == "json":
            if any_report:
                self.out.put(self._json())
        elif not self.to_terminal:
            text = ("\n" if o.fmt in ("table", "markdown") else "").join(self.texts)
            if o.fmt != "github":
                text = no_command(text)
            if self.out.path is None or any_report:
                self.out.put(text)
        if json_out is not None and any_report:
            json_out.put(self._json())
        if self.summary and self.summaries:
            append_summary(Path(self.summary), "".join(self.summaries))
        if self.outputs:
            append_outputs(Path(self.outputs), step_outputs(self.reports, self.failed, self.worst))

    def _json(self) -> bytes:
        if self.count == 1 and self.reports:
            return render_json_bytes(self.reports[0])
        return _json_array(self.reports).encode()


def _render(report: Report, fmt: str, show_map: bool) -> str:
    if fmt == "markdown":
        return render_markdown(report, scheme_map=show_map)
    from io import StringIO

    from .report.console import ReportConsole
    from .report.render_table import render_table

    buffer = StringIO()
    console = ReportConsole(file=buffer, width=table_width(to_stdout=False), color_system=None)
    render_table(report, console, scheme_map=show_map)
    return buffer.getvalue()


def _json_array(reports: list[Report]) -> str:
    """Several sources: one JSON array of reports, each exactly as ``render_json`` writes it."""
    if not reports:
        return "[]\n"
    items = [render_json(r).rstrip("\n") for r in reports]
    return "[\n" + ",\n".join(items) + "\n]\n"


def _print_error(exc: QarmError, checkpoint: str = "") -> None:
    print_traceback(exc)
    say(f"qarm: error: {checkpoint}{exc}")


@cli.command("manifest", short_help="Capture a header-only manifest of SOURCE.")
@click.argument("source")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Manifest file to write (.json, or .json.gz for a compressed one; - for stdout).",
)
@click.option("--force", is_flag=True, help="Replace an existing file with different content.")
@click.option(
    "--require-pinned",
    is_flag=True,
    help="Refuse a Hub revision that is not a full 40-hex commit sha.",
)
def manifest_command(source: str, output: Path, force: bool, require_pinned: bool) -> None:
    """Capture SOURCE's documents and headers (no weights) as a manifest at OUTPUT (-o -:
    standard output, e.g. for ``qarm audit -``)."""
    to_stdout = str(output) == STDIN
    if not to_stdout:
        Output.check(output)
    checkpoint = open_source(
        source, require_pinned=require_pinned, observer=HubProgress(bar=sys.stderr.isatty())
    )
    from .sources.integrity import check_integrity

    check_integrity(checkpoint)
    tensors = sum(len(s.tensors) for s in checkpoint.shards)
    if to_stdout:
        echo(render_manifest(checkpoint))
        state, output = "wrote", Path("standard output")
    else:
        state = "wrote" if write_manifest(checkpoint, output, force=force) else "unchanged"
    shards = plural(len(checkpoint.shards), "shard")
    say(f"{state} {output}: {plural(tensors, 'tensor')} in {shards}")


@cli.command("schema", short_help="Print the JSON schema of audit --format json.")
def schema_command() -> None:
    """Print the JSON schema of ``qarm audit --format json``."""
    click.echo(json_schema(), nl=False)


def main() -> None:
    """Console entry point. The command runs with the cyclic collector paused, as an audit
    does (:func:`~qarm_audit.runtime.collector_paused`): what it builds is acyclic, and each
    time the collector came back between the library's steps it walked every object alive (a
    report of a MoE checkpoint: 40 ms). An audit leaves some 50 to 400 objects in cycles, so
    even a long run of many sources holds little. The process then ends without the
    interpreter's teardown once everything is written
    (:func:`~qarm_audit.runtime.exit_without_teardown`), and what the last audit built is
    not freed before then (:func:`~qarm_audit.runtime.hold_until_exit`)."""
    hold_until_exit()
    with collector_paused():
        try:
            cli(prog_name="qarm")
        except SystemExit as exc:
            exit_without_teardown(exc.code)


# --- diff and explain ----------------------------------------------------------------------------

VIEW_FORMATS = ("table", "markdown", "json")

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _emit(
    fmt: str,
    out: Output,
    text: Callable[[], str],
    table: Callable[[Console], None],
) -> None:
    """Write ``text()`` (JSON or markdown) or the rich ``table`` to ``out`` or stdout."""
    from .report.console import ReportConsole

    if fmt == "table" and out.path is None:
        table(ReportConsole())
        return
    if fmt == "table":
        from io import StringIO

        buffer = StringIO()
        table(ReportConsole(file=buffer, width=120, color_system=None))
        rendered = buffer.getvalue()
    else:
        rendered = text()
    if out.path is not None:
        out.write(rendered)
    else:
        echo(rendered)


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


def _view_options(format_help: str, what: str) -> Callable[[_Command], _Command]:
    """``-f/--format`` and ``-o/--output`` for the commands that render one view."""

    def add(function: _Command) -> _Command:
        function = click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False, path_type=Path),
            help=f"Write the {what} here instead of standard output.",
        )(function)
        return click.option(
            "-f",
            "--format",
            "fmt",
            type=click.Choice(VIEW_FORMATS),
            default="table",
            show_default=True,
            help=format_help,
        )(function)

    return add


@cli.command("diff", short_help="Compare two checkpoints: names, dtypes, shapes, declarations.")
@click.argument("a")
@click.argument("b")
@_view_options("Report format (JSON keeps every row; the others group and count).", "report")
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
    from .commands.diff import diff
    from .report.render_diff import render_diff_json, render_diff_markdown, render_diff_table

    with Output.at(_dash(output), reads=(a, b)) as out:
        report = diff(
            a, b, engine=engine, env=_parse_env(env_pairs), gpu=gpu, require_pinned=require_pinned
        )
        _emit(
            fmt,
            out,
            lambda: render_diff_json(report) if fmt == "json" else render_diff_markdown(report),
            lambda console: render_diff_table(report, console),
        )
    if fmt != "table" or _dash(output) is not None:
        say(report.summary)
    click.get_current_context().exit(ExitCode.CLEAN if report.identical else ExitCode.FINDINGS)


@cli.command("explain", short_help="Explain how one module or tensor of SOURCE resolves.")
@click.argument("source")
@click.argument("name")
@_view_options("Report format.", "explanation")
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
    from .commands.explain import explain
    from .report.render_explain import (
        render_explain_json,
        render_explain_markdown,
        render_explain_table,
    )

    with Output.at(_dash(output), reads=(source,)) as out:
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
            out,
            lambda: (
                render_explain_json(explanation)
                if fmt == "json"
                else render_explain_markdown(explanation)
            ),
            lambda console: render_explain_table(explanation, console),
        )
