"""Benchmark children run as an installed qarm runs: from cached bytecode.

``pip install`` compiles every module to bytecode, so an installed ``qarm`` does not compile its
sources at start; a checkout on ``PYTHONPATH`` under ``PYTHONDONTWRITEBYTECODE=1`` (set on some
machines) compiles all of them in every process, a quarter of a second here. The children get
the bytecode cache back, kept under a prefix of its own (``PYTHONPYCACHEPREFIX``) so that the
checkout is not written, and :func:`warm` runs each command once, untimed, to fill it.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

PYCACHE = Path(tempfile.gettempdir()) / "qarm-bench-pycache"


def environment(base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm(command: list[str], env: Mapping[str, str]) -> None:
    """Run ``command`` once so that every module it imports is in the bytecode cache."""
    subprocess.run(command, env=env, capture_output=True, check=False)
