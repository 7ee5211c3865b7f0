"""The terminal's console: rich's, imported only by what draws a table or a progress bar."""

from __future__ import annotations

from rich.console import Console

from .output import stdout_gone


class ReportConsole(Console):
    """rich's console, except that a closed stdout does not end the process with exit 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stdout_gone()
