"""What an audit of a large folder works out ahead, in a forked child, while the headers are
read (``commands/ahead.py``): the declaration and what the index's module names match. The
report and every error are those of the audit that works both out itself."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_safetensors
from qarm_audit.resolve.matchers import FirstMatch, _pattern_set, adopt, prime_elsewhere
from test_index_of_headers import INDEX, transformers_index

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"
# re: targets and ignores (MoE experts, attention), and ModelOpt-converted NVFP4
SHARDED = (
    "llmcompressor-moe-fp8attn-w4a16experts",
    "llmcompressor-mixed-fp8attn-w4a16mlp",
    "ctconvert-modelopt-nvfp4",
    "llmcompressor-w4a16",
)


def sharded(producer: str, root: Path) -> Path:
    """The producer's checkpoint as ``save_pretrained`` shards it: two files and the index."""
    source = PRODUCERS / producer
    for document in source.glob("*.json"):
        shutil.copy(document, root / document.name)
    data = (source / "model.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__", None)
    names = list(header)
    files = {"model-00001-of-00002.safetensors": names[::2]}
    files["model-00002-of-00002.safetensors"] = names[1::2]
    weight_map = {}
    for file, part in files.items():
        write_safetensors(root / file, {n: (header[n]["dtype"], header[n]["shape"]) for n in part})
        weight_map.update(dict.fromkeys(part, file))
    sizes = sum(e["data_offsets"][1] - e["data_offsets"][0] for e in header.values())
    (root / INDEX).write_text(transformers_index(weight_map, sizes))
    return root


AHEAD_OR_NOT = """
import sys
from qarm_audit import audit
from qarm_audit.commands import ahead
from qarm_audit.errors import QarmError
from qarm_audit.report.render_json import render_json
from qarm_audit.resolve import matchers

started, adopted = [], []
start, take = ahead.AuditAhead.start, matchers._PatternSet.adopt

def watched_start(self, documents, index):
    start(self, documents, index)
    started.append(self._aside is not None and self._aside.forked)

def watched_adopt(self, names, lists, places):
    adopted.append(len(names.split("\\n")) if names else 0)
    take(self, names, lists, places)

ahead.AuditAhead.start, matchers._PatternSet.adopt = watched_start, watched_adopt

def outcome(root):
    try:
        return render_json(audit(root))
    except QarmError as exc:
        return f"{type(exc).__name__}: {exc}"

for root in sys.argv[1:]:
    ahead.AHEAD_MIN_BYTES = 1 << 62
    matchers._pattern_set.cache_clear()
    itself = outcome(root)
    assert started == [False], started
    ahead.AHEAD_MIN_BYTES = 0
    matchers._pattern_set.cache_clear()
    started.clear()
    aside = outcome(root)
    assert started == [True], started
    assert aside == itself, root
    shown = aside[:40].replace("\\n", " ")
    print(root.rsplit("/", 1)[1], "adopted" if any(adopted) else "none", shown)
    started.clear(), adopted.clear()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_audit_with_work_done_ahead_is_the_audit_without(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): each folder audited with
    nothing worked out ahead, then with the child forked, gives the same JSON, or the same
    error; the index's names are matched ahead where a declaration has ``re:`` entries."""
    roots = []
    for producer in SHARDED:
        root = tmp_path / producer
        root.mkdir()
        roots.append(sharded(producer, root))
    broken = tmp_path / "broken-declaration"
    broken.mkdir()
    sharded("llmcompressor-w4a16", broken)
    config = json.loads((broken / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = "four"
    (broken / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [sys.executable, "-c", AHEAD_OR_NOT, *map(str, roots), str(broken)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines.keys() == {*SHARDED, "broken-declaration"}
    # the MoE's experts and attention by re:, the converted NVFP4's lm_head ignore by re:
    assert lines["llmcompressor-moe-fp8attn-w4a16experts"].startswith("adopted {")
    assert lines["llmcompressor-mixed-fp8attn-w4a16mlp"].startswith("adopted {")
    assert lines["llmcompressor-w4a16"].startswith("none {")  # a class target, no re:
    assert lines["broken-declaration"].startswith("none DeclarationError")


def test_names_matched_elsewhere_are_what_matching_here_finds() -> None:
    """:func:`prime_elsewhere` in one pattern set, :func:`adopt` into a new one: the same
    outcome for every name, as priming it here gives (names not printable ASCII are left to
    be matched here, where a pattern may refuse them)."""
    patterns = [
        r".*layers\.1\.mlp\.experts\.\d+\.(gate|up|down)_proj$",
        r".*self_attn\..*",
        "lm_head",
    ]
    names = [
        *(
            f"model.layers.{n}.mlp.experts.{e}.{p}_proj"
            for n in (0, 1)
            for e in range(3)
            for p in ("gate", "up", "down")
        ),
        "model.layers.1.self_attn.q_proj",
        "lm_head",
        "model.layers.1.mlp.experts.0.gate_proj\u00e9",
    ]
    _pattern_set.cache_clear()
    primed = prime_elsewhere(patterns, "targets", names)
    here = dict(FirstMatch(patterns, "targets").shared.memo)
    _pattern_set.cache_clear()
    adopt(primed)
    taken = FirstMatch(patterns, "targets").shared.memo
    assert taken == {n: o for n, o in here.items() if n.isascii()}
    assert len(taken) == len(names) - 1
    assert FirstMatch(patterns, "targets").firsts(names[:-1]) == [
        FirstMatch(patterns, "targets").first(n) for n in names[:-1]
    ]
    # another set's lists are not taken
    _pattern_set.cache_clear()
    adopt(primed._replace(lists=[(7,)] * len(primed.lists)))
    assert FirstMatch(patterns, "targets").shared.memo == {}
    _pattern_set.cache_clear()
