"""The running package: its version, and process-level settings for large audits."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

VERSION = "0.1.0"
"""The package version (``qarm --version``, the Hub user agent); pyproject.toml states it too."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (re-entrant).

    Reading and auditing a checkpoint allocates millions of acyclic objects (header entries,
    modules, rows); the collector's passes over them are pure overhead, up to half the time of
    a million-tensor audit. Reference counting still frees everything as usual.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_held: list[object] = []
_holding = False


def hold_until_exit() -> None:
    """From now on, :func:`held` keeps what it is given until the process ends.

    For a process that ends by :func:`exit_without_teardown`: freeing what a million-tensor
    audit built (its header entries, modules, memberships) takes a fifth of a second and
    changes nothing it writes. Library callers never ask for it, so nothing is kept for them.
    """
    global _holding
    _holding = True


def held(*objects: object) -> None:
    """Keep ``objects`` alive until the process ends, where :func:`hold_until_exit` asked for
    it; the last call's only, so a run of many audits holds one audit's structures at most."""
    if _holding:
        _held[:] = objects


_kept: list[object] = []


def keep(thing: object) -> None:
    """Keep ``thing`` alive until the process ends, where :func:`hold_until_exit` asked for it:
    the CLI keeps its run's reports (a quarter million module rows in a MoE report), which it
    needs until the last one is written, rather than freeing them just before the exit."""
    if _holding:
        _kept.append(thing)


def exit_without_teardown(code: str | int | None) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown.

    Freeing every object the process built, and every module, changes nothing it wrote (a
    tenth of a second at the end of a Hub audit, which holds huggingface_hub's client and its
    modules besides the report). Both streams are flushed and every exit handler (``atexit``)
    runs, as at an ordinary exit. The ordinary exit is taken instead where it would do more
    than that: a code that is not a number (it is printed), a stream that cannot be flushed
    (the interpreter reports it and exits 120), or a thread the interpreter would wait for
    that is still running. A stream that an exit handler leaves unflushable ends the process
    with 120, as the interpreter would.
    """
    if code is not None and not isinstance(code, int):
        raise SystemExit(code)
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        raise SystemExit(code)
    if not _flushed():
        raise SystemExit(code)
    atexit._run_exitfuncs()
    os._exit((code or 0) if _flushed() else 120)


def _flushed() -> bool:
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return False
    return True
