"""GitHub Actions workflow commands: one annotation per finding, shown on the run and the PR.

``::error`` for refusals, ``::warning`` for warnings, ``::notice`` for notes and for ignored
findings (with the reason); the title carries the code, the message names module and tensor. Data
is escaped as the runner requires: ``%``, CR and LF in the message; also ``:`` and ``,`` in the
title property.
"""

from __future__ import annotations

from .escape import gh_data as _escape_data
from .escape import gh_property as _escape_property
from .model import FindingRow, IgnoredRow, Report

LEVEL = {"refusal": "error", "warning": "warning", "info": "notice"}


def _line(row: FindingRow, source: str) -> str:
    where = f" [{row.module}]" if row.module else ""
    title = _escape_property(f"qarm {row.code}")
    message = _escape_data(f"{source}{where}: {row.message}")
    return f"::{LEVEL[row.severity]} title={title}::{message}"


def _ignored_line(row: IgnoredRow, source: str) -> str:
    where = f" [{row.module}]" if row.module else ""
    title = _escape_property(f"qarm {row.code} (ignored)")
    message = _escape_data(
        f"{source}{where}: {row.message} (ignored {row.severity} by {row.origin}: {row.reason})"
    )
    return f"::notice title={title}::{message}"


def render_github(report: Report) -> str:
    """One workflow command per line: every finding, every ignored finding, then the verdict."""
    from .render_markdown import source_label, verdict_line

    source = source_label(report)
    lines = [_line(r, source) for r in (*report.refusals, *report.warnings, *report.notes)]
    lines += [_ignored_line(r, source) for r in report.ignored]
    lines.append(f"::notice title=qarm audit::{_escape_data(verdict_line(report))}")
    return "\n".join(lines) + "\n"


def render_github_error(problem: str) -> str:
    """A source that could not be audited (bad input, I/O): one ``::error`` of its own."""
    return f"::error title=qarm error::{_escape_data(problem)}\n"
