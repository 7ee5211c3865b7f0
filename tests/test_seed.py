"""The seed's own table, reproduced on header-only reconstructions of its checkpoints."""

from __future__ import annotations

import json

from conftest import MANIFESTS
from qarm_audit import audit

MTP = str(MANIFESTS / "seed-mtp-w4a16.manifest.json")
W4A4 = str(MANIFESTS / "seed-nvfp4-w4a4.manifest.json")
SIBLING = str(MANIFESTS / "seed-sibling-w4a16.manifest.json")


def buckets(report) -> dict[str, tuple[int, int, dict[str, int]]]:
    return {b.scheme: (b.tensors, b.modules, b.membership) for b in report.buckets}


def test_the_2001_name_checkpoint_gives_the_seed_table_exactly() -> None:
    report = audit(MTP)
    assert [s.tensors for s in report.integrity.shards] == [970, 976, 40, 15]
    assert report.totals.tensors == 2001
    assert buckets(report) == {
        "FP8": (720, 256, {"exact": 208, "prefix": 48}),
        "W4A16_NVFP4": (579, 193, {"exact": 193}),
        "unlisted": (702, 536, {"none": 536}),
        "kv_cache": (0, 0, {}),
        "unclassified": (0, 0, {}),
    }
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    assert report.refusals == []
    assert report.declaration.rules == {"quantized_layers": 401, "exclude_modules": 0}


def test_the_48_prefix_members_are_the_linear_attn_containers() -> None:
    report = audit(MTP)
    prefix = [m for m in report.modules if m["how"] == "prefix"]
    assert len(prefix) == 48
    assert all(m["module"].endswith(".linear_attn") and m["bucket"] == "FP8" for m in prefix)
    assert all(m["rule"].startswith(m["module"] + ".") for m in prefix)


def test_shards_exceed_total_size_by_exactly_their_headers_and_prefixes() -> None:
    integrity = audit(MTP).integrity
    headers = sum(8 + s.header_length for s in integrity.shards)
    assert sum(s.size for s in integrity.shards) - integrity.total_size == headers
    assert integrity.total_size == integrity.tensor_bytes
    assert "Not a content hash" in integrity.verification


def test_the_2194_name_checkpoint_declares_nvfp4_w4a4_and_runs_w4a16_by_default() -> None:
    report = audit(W4A4, engine="name-probe")
    assert report.totals.tensors == 2194
    assert report.refusals == []
    assert buckets(report)["NVFP4"] == (772, 193, {"exact": 193})
    (arm,) = [a for a in report.arms if a.scheme == "NVFP4"]
    assert (arm.declared, arm.executed, arm.modules) == ("W4A4-NVFP4", "W4A16-NVFP4", 193)
    assert arm.operands == {"input_scale": "193/193"}
    assert "declared NVFP4" not in arm.line()  # scheme first, arms after
    assert arm.line().startswith(
        "NVFP4: declared W4A4-NVFP4, input_scale on 193/193 -> executed W4A16-NVFP4"
    )
    assert [w.code for w in report.warnings] == ["declared-arm-differs", "kv-scales-missing"]


def test_the_flag_moves_the_2194_name_checkpoint_to_w4a4() -> None:
    report = audit(W4A4, engine="name-probe", env={"W4A4": "1"})
    (arm,) = [a for a in report.arms if a.scheme == "NVFP4"]
    assert (arm.declared, arm.executed) == ("W4A4-NVFP4", "W4A4-NVFP4")
    assert "incoherent" in (arm.note or "")
    assert "declared-arm-differs" not in [w.code for w in report.warnings]


def test_the_sibling_shape_is_silent() -> None:
    """Wildcard excludes, input_scale shipped under W4A16_NVFP4, FP8 KV with zero scales."""
    report = audit(SIBLING, engine="name-probe")
    assert report.refusals == []
    assert buckets(report)["W4A16_NVFP4"] == (772, 193, {"exact": 193})
    assert buckets(report)["excluded"][2] == {"wildcard": 326}
    assert [w.code for w in report.warnings] == ["kv-scales-missing"]
    assert [n.code for n in report.notes] == ["input-scale-unread"]
    (arm,) = [a for a in report.arms if a.scheme == "W4A16_NVFP4"]
    assert (arm.declared, arm.executed) == ("W4A16-NVFP4", "W4A16-NVFP4")


def test_the_seed_checkpoints_exit_0_and_print_the_arm_line(run) -> None:
    for manifest in (MTP, W4A4, SIBLING):
        assert run("audit", manifest, "--engine", "name-probe").exit_code == 0
    result = run("audit", W4A4, "-f", "markdown", "--engine", "name-probe")
    assert (
        "NVFP4: declared W4A4-NVFP4, input_scale on 193/193 -> executed W4A16-NVFP4"
        in result.stdout
    )
    flagged = run("audit", W4A4, "-f", "json", "--engine", "name-probe", "--env", "W4A4=1")
    arms = {a["scheme"]: a for a in json.loads(flagged.stdout)["arms"]}
    assert arms["NVFP4"]["executed"] == arms["NVFP4"]["declared"] == "W4A4-NVFP4"


def test_committed_manifests_are_what_the_generator_writes() -> None:
    import subprocess
    import sys

    script = MANIFESTS.parent / "make_seed_manifests.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
