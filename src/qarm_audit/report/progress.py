"""The Hub read shown on stderr: the resolved revision, and a progress bar on a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .output import say

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class HubProgress:
    """Shows a Hub read on stderr: the resolved revision, and a progress bar on a terminal."""

    def __init__(self, bar: bool, quiet: bool = False) -> None:
        self.bar = bar
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def resolved(self, revision: str, sha: str) -> None:
        if not self.quiet:
            say(f"qarm: resolved {revision} -> {sha}")

    def headers_started(self, total: int) -> None:
        from huggingface_hub.utils import (  # type: ignore[attr-defined]  # public, lazily exported
            are_progress_bars_disabled,
        )

        # HF_HUB_DISABLE_PROGRESS_BARS (or disable_progress_bars()) silences qarm's bar too
        if self.bar and total and not are_progress_bars_disabled():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            from .console import ReportConsole

            self.progress = Progress(
                TextColumn("reading headers"),
                BarColumn(),
                MofNCompleteColumn(),
                console=ReportConsole(stderr=True),
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
