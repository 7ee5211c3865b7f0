"""A large folder's declaration parsed in a forked copy while the headers are read
(``commands/ahead.py``): the report and every error are those of the audit that parses the
declaration itself."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from processes import AUDIT_OUTCOME, run_alone

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
FOLDERS = (
    "modelopt-mixed-fp8attn-nvfp4mlp",  # MIXED_PRECISION: the list of quantized layers
    "modelopt-nvfp4-sharded",  # an index proven aside as well
    "llmcompressor-moe-fp8attn-w4a16experts",  # re: targets and ignores
    "transformers-bnb-nf4-llama",
)

AHEAD_OR_NOT = (
    AUDIT_OUTCOME
    + """
import sys
from qarm_audit.commands import ahead
from qarm_audit.declarations import read_declaration

started = []
start = ahead.AuditAhead.documents

def watched_start(self, documents):
    start(self, documents)
    started.append(self._aside is not None and self._aside.forked)

ahead.AuditAhead.documents = watched_start

for root in sys.argv[1:]:
    ahead.AHEAD_MIN_BYTES = 1 << 62
    started.clear()
    itself = outcome(root)
    assert started == [False], started
    ahead.AHEAD_MIN_BYTES = 0
    started.clear()
    aside = outcome(root)
    assert started == [True], started
    assert aside == itself, root
    print(root.rsplit("/", 1)[1], aside[:40].replace("\\n", " "))

# a declaration asked for other documents than the ones started with is theirs
first, other = ({"config.json": open(f"{r}/config.json").read()} for r in sys.argv[3:5])
early = ahead.AuditAhead()
early.documents(first)
assert early.declaration(other) == read_declaration(other) != read_declaration(first)
assert early.declaration(first) == read_declaration(first)
early.close()
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_audit_with_the_declaration_parsed_ahead_is_the_audit_without(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): each folder audited with the
    declaration parsed in the process, then in the forked copy, gives the same JSON, or the
    same error."""
    roots = []
    for producer in FOLDERS:
        roots.append(tmp_path / producer)
        shutil.copytree(PRODUCERS / producer, roots[-1])
    broken = tmp_path / "broken-declaration"
    shutil.copytree(PRODUCERS / "llmcompressor-w4a16", broken)
    config = json.loads((broken / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = "four"
    (broken / "config.json").write_text(json.dumps(config))
    out = run_alone(AHEAD_OR_NOT, *map(str, roots), str(broken))
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines.keys() == {*FOLDERS, "broken-declaration"}
    assert all(lines[folder].startswith("{") for folder in FOLDERS)
    assert lines["broken-declaration"].startswith("DeclarationError")
