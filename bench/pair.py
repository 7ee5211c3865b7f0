"""Two whole processes in turn, A B A B ..., and the ratio A/B pair by pair.

    python bench/pair.py -n 6 \\
        --vs 'env PYTHONPATH=/tmp/old/src python -m qarm_audit audit /tmp/folder -f json' \\
        -- python -m qarm_audit audit /tmp/folder -f json

Each run's CPU (user + system) and peak memory are the kernel's own accounting of the reaped
child (``os.wait4``); wall seconds are a monotonic clock around it. Pairing keeps a ratio
meaningful while the machine's speed drifts during the call; the median of the pairs is the
figure to quote, and the range says how noisy the machine was. What the commands print is
discarded. One untimed run of each comes first (bytecode, page cache). A child's peak cannot
read below this process's own (the child starts as its copy), so the first line prints that
floor.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    peak_mib: float
    code: int


def run_once(argv: list[str]) -> Run:
    start = time.monotonic()
    child = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is KiB on Linux.
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=5, help="pairs to time (default 5)")
    parser.add_argument("--vs", required=True, help="the baseline B, one shell-split string")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- A and its arguments")
    args = parser.parse_args(argv)
    a = args.command[1:] if args.command[:1] == ["--"] else args.command
    b = shlex.split(args.vs)
    if not a or not b or args.runs < 1:
        parser.error("give -n >= 1, --vs 'B ...' and -- A ...")
    run_once(a)
    run_once(b)
    pairs = [(run_once(a), run_once(b)) for _ in range(args.runs)]
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"# {describe()}, {args.runs} pairs; median (min-max); peak floor {floor:.1f} MiB")
    for label, side in (("A", [p[0] for p in pairs]), ("B", [p[1] for p in pairs])):
        codes = sorted({r.code for r in side})
        wall, cpu = spread([r.wall for r in side]), spread([r.cpu for r in side])
        peak = spread([r.peak_mib for r in side])
        print(f"{label}: wall {wall} s, cpu {cpu} s, peak {peak} MiB, exit {codes}")
    print(f"A/B wall: {spread([x.wall / y.wall for x, y in pairs])}")
    print(f"A/B cpu:  {spread([x.cpu / y.cpu for x, y in pairs])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
