"""Starting qarm as a real process from a test."""

from __future__ import annotations

import signal
import subprocess
import sys

AUDIT_OUTCOME = """
from qarm_audit import audit
from qarm_audit.errors import QarmError
from qarm_audit.report.render_json import render_json

def outcome(root):
    try:
        return render_json(audit(root))
    except QarmError as exc:
        return f"{type(exc).__name__}: {exc}"
"""
"""A script's start: ``outcome(root)``, the audit's JSON, or its error by name."""


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: the signal at its default disposition.

    A suite started as a background job (``pytest &`` in a script, ``nohup``) inherits SIGINT
    ignored, and so would the child; Python installs no KeyboardInterrupt handler for a signal
    ignored at start, so Ctrl-C would do nothing and the test would fail for the runner's sake."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_alone(script: str, *args: str, timeout: float = 300) -> str:
    """``python -c script args...`` in a process of its own, where the script's thread is the
    only one (a fork is taken only then; a test process may run others): its output, once it
    has exited 0."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
