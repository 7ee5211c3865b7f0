"""What a benchmark ran on, for its first line: ratios compare only within one machine."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


def describe() -> str:
    """``2 CPUs (AMD EPYC), Python 3.11.7``: the CPU model as the kernel names it, where it
    does (``/proc/cpuinfo``), else as ``platform`` does."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"
