"""Starting qarm as a real process from a test."""

from __future__ import annotations

import signal


def sigint_as_at_a_terminal() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: the signal at its default disposition.

    A suite started as a background job (``pytest &`` in a script, ``nohup``) inherits SIGINT
    ignored, and so would the child; Python installs no KeyboardInterrupt handler for a signal
    ignored at start, so Ctrl-C would do nothing and the test would fail for the runner's sake."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
