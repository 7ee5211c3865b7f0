"""The running package: its version, and process-level settings for large audits."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

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
