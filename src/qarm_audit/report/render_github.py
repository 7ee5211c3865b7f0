"""GitHub Actions workflow commands: one annotation per finding, shown on the run and the PR.

``::error`` for refusals, ``::warning`` for warnings, ``::notice`` for notes and for ignored
findings (with the reason); the title carries the code, the message names module and tensor.
``file=`` (and ``line=``, for a manifest) put it on the file in the PR's diff (see
:mod:`.locate`). GitHub shows at most :data:`LIMIT` annotations of each type per step and drops
the rest silently: past that, a finding is a plain log line, and one closing notice says how
many were not annotated and that every finding is in the job summary.

Data is escaped as the runner requires: ``%``, CR and LF in the message; also ``:`` and ``,`` in
a property (``title``, ``file``).
"""

from __future__ import annotations

from collections import Counter

from .escape import gh_data as _escape_data
from .escape import gh_property as _escape_property
from .locate import Locate, locator
from .model import FindingRow, IgnoredRow, Report

LEVEL = {"refusal": "error", "warning": "warning", "info": "notice"}
LIMIT = 10
"""Annotations of one type GitHub shows for a step."""
_NAMES = {"error": "errors", "warning": "warnings", "notice": "notices"}


class Annotations:
    """The annotations of one run, over every source: the cap holds for the run.

    ``sources``: how many sources the run audits (each ends with a verdict notice, which the
    notice budget keeps room for, and for the closing notice); ``summary``: whether the markdown
    report goes to the job summary (``GITHUB_STEP_SUMMARY`` is set)."""

    def __init__(self, sources: int = 1, *, summary: bool = False, limit: int = LIMIT) -> None:
        self.limit = limit
        self.summary = summary
        self.finding_notices = max(0, limit - 1 - sources)
        self.shown: Counter[str] = Counter()
        self.hidden: Counter[str] = Counter()

    def _command(self, level: str, budget: int, properties: list[str], data: str) -> str:
        if self.shown[level] < budget:
            self.shown[level] += 1
            return f"::{level} {','.join(properties)}::{data}"
        self.hidden[level] += 1
        return f"qarm {level} (not annotated: {LIMIT} per type): {data}"

    def _finding(
        self, level: str, title: str, where: tuple[str | None, int | None], data: str
    ) -> str:
        budget = self.finding_notices if level == "notice" else self.limit
        properties = []
        file, line = where
        if file is not None:
            properties.append(f"file={_escape_property(file)}")
            if line is not None:
                properties.append(f"line={line}")
        properties.append(f"title={_escape_property(title)}")
        return self._command(level, budget, properties, data)

    def report(self, report: Report) -> str:
        """Every finding, every ignored finding, then the verdict; one command per line."""
        from .render_markdown import source_label, verdict_line

        source = source_label(report)
        locate: Locate = locator(report)
        lines = [
            self._finding(
                LEVEL[r.severity], f"qarm {r.code}", locate(r), _escape_data(_message(r, source))
            )
            for r in (*report.refusals, *report.warnings, *report.notes)
        ]
        lines += [
            self._finding("notice", f"qarm {r.code} (ignored)", locate(r), _ignored(r, source))
            for r in report.ignored
        ]
        lines.append(
            self._command(
                "notice", self.limit - 1, ["title=qarm audit"], _escape_data(verdict_line(report))
            )
        )
        return "\n".join(lines) + "\n"

    def error(self, problem: str, file: str | None = None) -> str:
        """A source that could not be audited (bad input, I/O): one ``::error`` of its own,
        on ``file`` when the source is a file of the repository."""
        properties = [f"file={_escape_property(file)}"] if file else []
        properties.append("title=qarm error")
        return self._command("error", self.limit, properties, _escape_data(problem)) + "\n"

    def close(self) -> str:
        """The closing notice when the cap left findings out; else nothing."""
        if not self.hidden:
            return ""
        counts = ", ".join(f"{n} more {_NAMES[level]}" for level, n in sorted(self.hidden.items()))
        where = (
            "every finding is in the job summary"
            if self.summary
            else "every finding is in the log above; --format markdown or json lists them all"
        )
        text = f"{counts} not annotated (GitHub shows {self.limit} of each type per step); {where}"
        return f"::notice title=qarm annotations::{_escape_data(text)}\n"


def _message(row: FindingRow, source: str) -> str:
    where = f" [{row.module}]" if row.module else ""
    return f"{source}{where}: {row.message}"


def _ignored(row: IgnoredRow, source: str) -> str:
    where = f" [{row.module}]" if row.module else ""
    return _escape_data(
        f"{source}{where}: {row.message} (ignored {row.severity} by {row.origin}: {row.reason})"
    )


def render_github(report: Report) -> str:
    """One report's workflow commands, capped as one run of one source is."""
    annotations = Annotations(1)
    return annotations.report(report) + annotations.close()


def render_github_error(problem: str) -> str:
    """A source that could not be audited (bad input, I/O): one ``::error`` of its own."""
    return Annotations(1).error(problem)
