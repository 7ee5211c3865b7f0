"""What qarm writes outside the report's own text: stderr lines, tracebacks, stdout, ``-o``
files, the job summary.

* Every stderr line has its tokens scrubbed and is made :func:`.escape.visible`, so no string
  from outside starts a line of its own (a ``::error`` command to a CI runner).
* With ``QARM_DEBUG=1``, tracebacks are written the same way, every chained exception included.
* A closed stdout (``qarm audit ... | head``) ends the writing quietly; the exit code is the
  one the audit earned.
* ``-o`` is checked before any work and written in one piece, never half a report.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from ..errors import OutputError, UsageError
from .escape import no_command, visible
from .model import Report


def tokens() -> list[str]:
    """Every Hub token qarm could have sent (the environment's, and the saved login once
    huggingface_hub is loaded), longest first; none shorter than 6 characters (scrubbing those
    would mangle every message)."""
    found = {os.environ.get(name, "") for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    hub = sys.modules.get("huggingface_hub")
    if hub is not None:
        with contextlib.suppress(Exception):
            found.add(hub.get_token() or "")
    usable = {t for token in found for t in (token, token.strip()) if len(t) >= 6}
    return sorted(usable, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` without any token in it, whatever a server or a library put in a message."""
    for token in tokens():
        text = text.replace(token, "<HF_TOKEN>")
    return text


def say(line: str) -> None:
    """One line on stderr: tokens scrubbed, nothing hidden (see :func:`.escape.visible`), so
    no string from outside can start a line of its own, nor stand first on it as a ``::error``
    command to a CI runner (:func:`.escape.no_command`)."""
    click.echo(no_command(visible(scrub(line))), err=True)


_CAUSE = "The above exception was the direct cause of the following exception:"
_CONTEXT = "During handling of the above exception, another exception occurred:"


def print_traceback(exc: BaseException) -> None:
    """With QARM_DEBUG=1: the traceback of ``exc`` and of every exception chained to it, each
    message scrubbed of tokens and made visible (the frames are qarm's and its libraries')."""
    if os.environ.get("QARM_DEBUG") != "1":
        return
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    lines: list[str] = []
    for error, after in reversed(chain):
        lines.append("Traceback (most recent call last):")
        for frame in traceback.format_tb(error.__traceback__):  # qarm's and its libraries'
            lines += frame.rstrip("\n").split("\n")
        name = type(error).__qualname__
        module = type(error).__module__
        label = name if module in ("builtins", "__main__") else f"{module}.{name}"
        message = str(error)
        lines.append(f"{label}: {message}" if message else label)
        lines += [str(note) for note in getattr(error, "__notes__", ())]
        if after:
            lines += ["", after, ""]
    for line in lines:
        say(line)  # a message stays on its line


def stdout_gone() -> None:
    """The reader of stdout went away (``qarm audit ... | head``): everything qarm would still
    write there goes to the null device, and the audit ends with the exit code it earned."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def echo(text: str | bytes) -> None:
    """Write ``text`` to stdout as is; a closed pipe ends the writing quietly. Bytes (a JSON
    report) go to the binary stream as they are: click strips terminal escape sequences from
    text only, and JSON spells every control character as an escape."""
    try:
        click.echo(text, nl=False)
    except BrokenPipeError:
        stdout_gone()


class Output:
    """Where ``-o`` writes, checked before any work: the folder exists and takes a file
    (a temporary one is made there at once), or the target is a device or a pipe that can be
    opened for writing. The report is written at the end, in one piece: a regular file is
    replaced only once the whole text is in the temporary file, so an interrupted or failed
    run leaves the old file (or none) and never half a report. Nor does it replace a file of a
    local source the run reads (``reads``): qarm modifies nothing it audits."""

    def __init__(
        self, path: Path | None, option: str = "--output", reads: Sequence[str] = ()
    ) -> None:
        self.path = path
        self.option = option
        self.temp: Path | None = None
        self.target = path
        if path is None:
            return
        shown = visible(str(path))
        if path.is_symlink() or path.exists():
            self.target = Path(os.path.realpath(path))
        target = self.target
        assert target is not None
        _refuse_a_source(target, reads, option, shown)
        try:
            exists = target.exists()
            if exists and target.is_dir():
                raise UsageError(option, f"{shown} is a folder")
            if exists and not target.is_file():  # /dev/stdout, /dev/full, a named pipe
                if not os.access(target, os.W_OK):
                    raise UsageError(option, f"{shown} is not writable")
                return
            if exists and not os.access(target, os.W_OK):
                raise UsageError(option, f"{shown} is not writable")
            folder = target.parent
            if not folder.is_dir():
                problem = "is not a folder" if folder.exists() else "does not exist"
                raise UsageError(option, f"{shown}: the folder {visible(str(folder))} {problem}")
            handle, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
            os.close(handle)
        except OSError as exc:
            raise UsageError(
                option, f"{shown}: cannot write there: {exc.strerror or exc}"
            ) from None
        self.temp = Path(temp)

    @classmethod
    @contextlib.contextmanager
    def at(
        cls, path: Path | None, option: str = "--output", reads: Sequence[str] = ()
    ) -> Iterator[Output]:
        """The output for ``path``; its temporary file is removed however the block ends."""
        out = cls(path, option, reads)
        try:
            yield out
        finally:
            out.discard()

    def put(self, text: str | bytes) -> None:
        """Write the whole report where it goes: stdout, or the file (see :meth:`write`)."""
        if self.path is None:
            echo(text)
        else:
            self.write(text)

    def write(self, text: str | bytes) -> None:
        """Write the whole report (text as UTF-8), or raise an :class:`OutputError` naming the
        target."""
        assert self.path is not None and self.target is not None
        data = text.encode() if isinstance(text, str) else text
        try:
            if self.temp is None:
                with self.target.open("wb") as handle:
                    handle.write(data)
                return
            with self.temp.open("wb") as handle:
                handle.write(data)
            mode = self.target.stat().st_mode & 0o7777 if self.target.exists() else None
            if mode is None:
                umask = os.umask(0)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.chmod(self.temp, mode)
            os.replace(self.temp, self.target)
            self.temp = None
        except OSError as exc:
            raise OutputError(
                visible(str(self.path)), f"cannot write the report: {exc.strerror or exc}"
            ) from None

    @classmethod
    def check(cls, path: Path, option: str = "--output") -> None:
        """Check ``path`` as :class:`Output` does, for a writer of its own (the manifest)."""
        cls(path, option).discard()

    def discard(self) -> None:
        if self.temp is not None:
            with contextlib.suppress(OSError):
                self.temp.unlink()
            self.temp = None


def _refuse_a_source(target: Path, reads: Sequence[str], option: str, shown: str) -> None:
    """A UsageError when ``target`` is an existing file that is, or lies inside, a local
    source in ``reads`` (a manifest, a shard, a file of the audited folder)."""
    if not target.is_file():
        return
    for source in reads:
        path = Path(source)
        if not path.exists():
            continue  # a Hub repository or standard input
        real = Path(os.path.realpath(path))
        if target == real or (real.is_dir() and target.is_relative_to(real)):
            raise UsageError(
                option, f"{shown} is a file of the source {visible(source)}, which qarm only reads"
            )


def append_summary(path: Path, markdown: str) -> None:
    """GitHub Actions' job summary: the markdown reports are appended, whatever the format, in
    one write once every source is audited."""
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write(markdown)
    except OSError as exc:
        say(f"qarm: warning: cannot append to GITHUB_STEP_SUMMARY {path}: {exc}")


WIDE = 120
"""The table's width where no terminal says one and ``COLUMNS`` is not set (a CI log, a file)."""


def table_width(to_stdout: bool = True) -> int:
    """The width the table is laid out for: ``COLUMNS`` when set, as every terminal program
    reads it; else the terminal's width (stdout's, or stderr's when stdout is a pipe into
    ``less``); else :data:`WIDE`. ``-o FILE`` asks no terminal, so a file is the same on every
    machine."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and int(columns) > 0:
        return int(columns)
    if to_stdout:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                if stream.isatty():
                    return os.get_terminal_size(stream.fileno()).columns
    return WIDE


def step_outputs(reports: Sequence[Report], failed: int, exit_code: int) -> dict[str, str]:
    """A GitHub Actions step's outputs for a run: the worst verdict (``error`` when a source
    could not be audited), the counts over every source, and the exit code."""
    verdicts = [r.verdict for r in reports]
    verdict = (
        "error" if failed else next((v for v in ("refused", "warnings") if v in verdicts), "clean")
    )
    return {
        "verdict": verdict,
        "refusals": str(sum(len(r.refusals) for r in reports)),
        "warnings": str(sum(len(r.warnings) for r in reports)),
        "notes": str(sum(len(r.notes) for r in reports)),
        "ignored": str(sum(len(r.ignored) for r in reports)),
        "sources": str(len(reports) + failed),
        "failed": str(failed),
        "exit-code": str(int(exit_code)),
    }


def append_outputs(path: Path, outputs: dict[str, str]) -> None:
    """``GITHUB_OUTPUT``: ``name=value`` lines (qarm's own words and numbers, never a line
    break), appended in one write."""
    try:
        with path.open("a", encoding="utf-8") as file:
            file.write("".join(f"{k}={v}\n" for k, v in outputs.items()))
    except OSError as exc:
        say(f"qarm: warning: cannot append to GITHUB_OUTPUT {path}: {exc}")
