"""The process runs with the collector paused and ends without the interpreter's teardown,
with everything an exit does.

``qarm`` ends through :func:`~qarm_audit.runtime.exit_without_teardown`: its output flushed, its
exit handlers run, its exit code the one earned, and no time spent freeing what it built. Each
case runs a real process that watches for the teardown (an object whose finaliser writes to
stderr when the interpreter frees it) or for the collector (``gc.callbacks``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import MANIFESTS

SRC = str(Path(__file__).resolve().parent.parent / "src")

WATCH = """
import atexit, sys, threading, time
sys.path.insert(0, {src!r})

class Watched:
    def __del__(self):
        sys.stderr.write("torn down\\n")

watched = Watched()
atexit.register(lambda: sys.stderr.write("exit handler ran\\n"))
"""

IMPORT = """
from qarm_audit.cli import main
"""

CALL = """
sys.argv = ["qarm", *sys.argv[1:]]
main()
"""

MAIN = IMPORT + CALL

SEED = str(MANIFESTS / "seed-nvfp4-w4a4.manifest.json")


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WATCH.format(src=SRC) + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_audit_writes_its_report_and_ends_without_teardown() -> None:
    done = _run(MAIN, "audit", SEED, "-f", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["totals"]["tensors"] == 2194  # all of it, flushed
    assert "exit handler ran" in done.stderr
    assert "torn down" not in done.stderr


def test_the_command_runs_with_the_collector_paused() -> None:
    """No collection from the command's start to its end (each walked every object alive);
    imports, before the command, are not counted."""
    counted = """
import gc
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info))
atexit.register(lambda: sys.stderr.write(f"{len(collections)} collections\\n"))
"""
    done = _run(IMPORT + counted + CALL, "audit", SEED, "-f", "json")
    assert done.returncode == 0, done.stderr
    assert "\n0 collections\n" in "\n" + done.stderr


def test_the_command_holds_what_the_audit_built_until_the_end() -> None:
    """Freed at the process's end rather than after the audit: the last audit's checkpoint
    and modules, and the run's reports, are still alive when the exit handlers run."""
    counted = """
from qarm_audit import runtime
from qarm_audit.sources.checkpoint import Checkpoint
atexit.register(
    lambda: sys.stderr.write(
        f"held {sum(isinstance(o, Checkpoint) for o in runtime._held)} checkpoint\\n"
        f"kept {sum(len(getattr(o, 'reports', ())) for o in runtime._kept)} reports\\n"
    )
)
"""
    done = _run(IMPORT + counted + CALL, "audit", SEED, SEED, "-f", "json")
    assert done.returncode == 0, done.stderr
    assert "held 1 checkpoint" in done.stderr  # the last one's only
    assert "kept 2 reports" in done.stderr


def test_the_library_holds_nothing() -> None:
    from qarm_audit import audit, runtime

    audit(SEED)
    assert runtime._held == []
    assert runtime._kept == []


def test_the_exit_code_is_the_one_earned() -> None:
    refused = _run(MAIN, "audit", SEED, "-f", "json", "--fail-on", "warning")
    assert refused.returncode == 1, refused.stderr
    usage = _run(MAIN, "audit", SEED, "--engine", "no-such-engine")
    assert usage.returncode == 2, usage.stderr
    assert "torn down" not in refused.stderr + usage.stderr


def test_a_thread_still_running_takes_the_ordinary_exit() -> None:
    """The interpreter waits for a thread that is not a daemon; so does the process."""
    started = """
from qarm_audit.runtime import exit_without_teardown

def late():
    time.sleep(0.3)
    sys.stderr.write("thread ended\\n")

threading.Thread(target=late).start()
exit_without_teardown(3)
"""
    done = _run(started)
    assert done.returncode == 3, done.stderr
    assert "thread ended" in done.stderr
    assert "torn down" in done.stderr  # the ordinary exit, teardown and all


def test_a_code_that_is_not_a_number_is_printed_as_sys_exit_prints_it() -> None:
    done = _run("from qarm_audit.runtime import exit_without_teardown as end\nend('bye')")
    assert done.returncode == 1
    assert "bye" in done.stderr
    assert "exit handler ran" in done.stderr


def test_an_unflushable_stdout_takes_the_ordinary_exit() -> None:
    """stdout closed under the process: the interpreter names the failure and exits 120."""
    code = """
import os
from qarm_audit.runtime import exit_without_teardown
sys.stdout = open(os.dup(1), "w")  # buffered, as on a pipe
sys.stdout.write("x")
os.close(sys.stdout.fileno())
exit_without_teardown(0)
"""
    done = _run(code)
    assert done.returncode == 120, done.stderr
    assert "Bad file descriptor" in done.stderr  # as the interpreter says it
    assert "exit handler ran" in done.stderr
