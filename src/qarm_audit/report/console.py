"""The terminal's console: rich's, imported only by what draws a table or a progress bar."""

from __future__ import annotations

import os
import sys
from typing import IO, Any, cast

from rich.console import Console

from .escape import no_command
from .output import stdout_gone


class ReportConsole(Console):
    """rich's console (on stdout, or stderr with ``stderr=True``), except that a closed stdout
    does not end the process with exit 1, and that no line it writes is a workflow command to a
    CI runner reading the log (a source label stands first on the table's first line; see
    :func:`.escape.no_command`)."""

    def __init__(self, **options: Any) -> None:
        # rich reads COLUMNS and LINES with str.isdigit, true for "²", which int() refuses
        options.setdefault("_environ", {k: v for k, v in os.environ.items() if _readable(k, v)})
        stream = sys.stderr if options.get("stderr") else sys.stdout
        if "file" not in options and stream is not None:  # None: rich writes nowhere
            options["file"] = cast(IO[str], CommandFreeStream(stream))
        super().__init__(**options)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stdout_gone()


def _readable(name: str, value: str) -> bool:
    return name not in ("COLUMNS", "LINES") or (value.isascii() and value.isdigit())


class CommandFreeStream:
    """A text stream written through :func:`.escape.no_command`, write by write; a write that
    continues a line which already holds more than spaces is not at a line's start. Anything
    else (``isatty``, ``fileno``, ``encoding``) is the wrapped stream's."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.mid_line = False

    def write(self, text: str) -> int:
        if self.mid_line:
            head, newline, rest = text.partition("\n")
            shown = head + newline + no_command(rest) if newline else text
        else:
            shown = no_command(text)
        line = shown.rpartition("\n")[2]
        self.mid_line = bool(line.strip()) or (self.mid_line and "\n" not in shown)
        return self.stream.write(shown)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
