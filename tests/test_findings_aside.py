"""The producer's view and the completeness check worked out in a forked copy while the audit
resolves (``commands/findings_aside.py``): the report, and every error, is what the audit
working them out itself gives; the copy's work is what the audit uses; and a part the copy has
not sent when the audit wants it is worked out in the process, not waited for."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import write_safetensors
from processes import AUDIT_OUTCOME, run_alone
from qarm_audit.sources.local import read_local_shard

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
MOE = "llmcompressor-moe-fp8attn-w4a16experts"

ASIDE_OR_NOT = (
    AUDIT_OUTCOME
    + """
import os, sys, time
from qarm_audit.commands import findings_aside

parent = os.getpid()
here = []  # the parts the process worked out itself
fail_in_copy = sleep_in_copy = False
producer_part, completeness = findings_aside.producer_part, findings_aside.completeness_refusals

def watched_producer(*args):
    if os.getpid() == parent:
        here.append("producer")
    elif fail_in_copy:
        raise RuntimeError("the copy's work failed")
    return producer_part(*args)

def watched_completeness(*args):
    if os.getpid() == parent:
        here.append("completeness")
    elif sleep_in_copy:
        time.sleep(60)
    return completeness(*args)

findings_aside.producer_part = watched_producer
findings_aside.completeness_refusals = watched_completeness

for root in sys.argv[1:]:
    name = root.rsplit("/", 1)[1]
    findings_aside.ASIDE_MIN_MODULES = 1 << 62
    here.clear()
    itself = outcome(root)
    worked_here = sorted(here)
    findings_aside.ASIDE_MIN_MODULES = 0
    here.clear()
    aside = outcome(root)
    assert aside == itself, name
    viewed = not name.startswith("modelopt")  # no producer's view: no copy
    if '"verdict"' in aside:
        assert worked_here == ["completeness", "producer"], (name, worked_here)
        assert ("producer" in here) is not viewed, (name, here)  # the copy's, waited for
    fail_in_copy = True
    here.clear()
    assert outcome(root) == itself, name
    assert '"verdict"' not in aside or "producer" in here, (name, here)
    fail_in_copy = False
    print(name, aside[:40].replace("\\n", " "))

# a later part the copy has not sent by then is worked out here, the copy stopped
sleep_in_copy = True
here.clear()
started = time.monotonic()
outcome(sys.argv[1])
assert here == ["completeness"] and time.monotonic() - started < 30, here
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_audit_with_findings_worked_out_aside_is_the_audit_without(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): a compressed-tensors MoE, one
    lacking an expert's projection (a completeness refusal), one whose ``re:`` entry the
    producer cannot compile, a bitsandbytes checkpoint the producer and the engine resolve
    differently, and a ModelOpt one (no producer's view: no copy), each audited with the
    findings worked out in the process and then in the copy, and with the copy's work failing:
    the same JSON, or the same error."""
    roots = [tmp_path / MOE]
    shutil.copytree(PRODUCERS / MOE, roots[0])
    roots.append(tmp_path / "expert-lacking")
    shutil.copytree(PRODUCERS / MOE, roots[-1])
    shard = roots[-1] / "model.safetensors"
    tensors = {e.name: (e.dtype, e.shape) for e in read_local_shard(shard, shard.name).tensors}
    lacking = next(n for n in tensors if ".experts.1.up_proj." in n).rpartition(".")[0] + "."
    write_safetensors(shard, {n: t for n, t in tensors.items() if not n.startswith(lacking)})
    roots.append(tmp_path / "producer-cannot-compile")
    shutil.copytree(PRODUCERS / MOE, roots[-1])
    _edit(roots[-1], lambda q: q["ignore"].append("re:.*(?i)_PROJ$"))
    roots.append(tmp_path / "bnb-skips-a-shard")
    shutil.copytree(PRODUCERS / "transformers-bnb-nf4-llama", roots[-1])
    _edit(roots[-1], lambda q: q.update(llm_int8_skip_modules=["k_proj"]))
    roots.append(tmp_path / "modelopt")
    shutil.copytree(PRODUCERS / "modelopt-mixed-fp8attn-nvfp4mlp", roots[-1])
    lines = dict(
        line.split(" ", 1) for line in run_alone(ASIDE_OR_NOT, *map(str, roots)).splitlines()
    )
    assert list(lines) == [root.name for root in roots]
    reports = {name: json.loads(run_json(root)) for name, root in zip(lines, roots, strict=True)}
    codes = {name: _codes(report) for name, report in reports.items()}
    assert "experts-incomplete" in codes["expert-lacking"], codes
    assert "producer-engine-disagree" in codes["producer-cannot-compile"], codes
    assert "producer-engine-disagree" in codes["bnb-skips-a-shard"], codes


def run_json(root: Path) -> str:
    from qarm_audit import audit
    from qarm_audit.report.render_json import render_json

    return render_json(audit(str(root)))


def _codes(report: dict[str, object]) -> set[str]:
    rows = [*report["refusals"], *report["warnings"], *report["notes"]]  # type: ignore[misc]
    return {row["code"] for row in rows}


def _edit(root: Path, change: object) -> None:
    config = json.loads((root / "config.json").read_text())
    change(config["quantization_config"])  # type: ignore[operator]
    (root / "config.json").write_text(json.dumps(config))
