"""The folder benchmark's checkpoints are real: the safetensors library opens every shard, and
qarm audits them (the benchmark itself is not run here; see docs/performance.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from synthetic import write_folder


@pytest.mark.parametrize(
    ("family", "variant", "code"),
    [
        ("modelopt", "moe", 0),
        ("compressed-tensors", "moe", 0),
        ("modelopt", "sound", 0),
        ("modelopt", "refused", 1),
    ],
)
def test_bench_folders_open_in_safetensors_and_audit(
    tmp_path: Path, run: Any, family: str, variant: str, code: int
) -> None:
    shape = "tiny" if variant == "moe" else "unlike-quick"
    count, files = write_folder(shape, tmp_path / "c", family, 300, "dotstar", variant)
    names = 0
    for shard in sorted((tmp_path / "c").glob("*.safetensors")):
        with safe_open(str(shard), "np") as handle:
            names += len(list(handle.keys()))
    assert (names, len(list((tmp_path / "c").glob("*.safetensors")))) == (count, files)
    result = run("audit", str(tmp_path / "c"), "-f", "json")
    assert result.exit_code == code, result.output
    report = json.loads(result.stdout)
    assert report["totals"]["tensors"] == count


def test_pair_alternates_two_processes_and_reports_their_ratio(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pair import main

    sleeper = [sys.executable, "-c", "import time; time.sleep(0.3)"]
    assert main(["-n", "2", "--vs", f"{sys.executable} -c pass", "--", *sleeper]) == 0
    out = capsys.readouterr().out
    assert "2 pairs" in out and "exit [0]" in out
    # A sleeps 0.3 s more than B starts and ends: its wall is the larger, pair by pair
    assert float(out.split("A/B wall: ")[1].split()[0]) > 1.5, out
