"""A compressed-tensors declaration's ``re:`` entries tried on most of the module names in a
forked copy while the process builds the layer tree and tries the rest
(``resolve/matching_ahead.py``): the report, and every error, is what the audit matching every
name itself gives; and the copy's work is what the audit uses."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import write_safetensors
from processes import AUDIT_OUTCOME, run_alone
from qarm_audit.declarations import read_declaration
from qarm_audit.resolve.matching_ahead import pattern_lists
from qarm_audit.sources.local import read_local_shard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import synthetic

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"

AHEAD_OR_NOT = (
    AUDIT_OUTCOME
    + """
import sys
from qarm_audit.resolve import matchers, matching_ahead

primed = []  # names the process itself worked out, pattern set by pattern set
prime = matchers._PatternSet.prime
def watched(self, names):
    names = list(names)
    primed.append(sum(n not in self.memo for n in names))
    prime(self, names)
matchers._PatternSet.prime = watched

for root in sys.argv[1:]:
    matching_ahead.AHEAD_MIN_NAMES = 1 << 62
    primed.clear()
    matchers._pattern_set.cache_clear()  # nothing known from the audit before
    itself = outcome(root)
    worked_here = sum(primed)
    matching_ahead.AHEAD_MIN_NAMES = 0
    primed.clear()
    matchers._pattern_set.cache_clear()
    aside = outcome(root)
    assert aside == itself, root
    name = root.rsplit("/", 1)[1]
    if '"verdict"' in aside and not name.startswith("no-copy-"):
        # the copy matched the back of the names the process matched itself before: the
        # process matched its front share only, half at most (on the engine's names, where they
        # differ)
        assert 0 < 2 * sum(primed) <= worked_here, (name, worked_here, primed)
    print(name, aside[:40].replace("\\n", " "))
"""
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fork is taken on Linux only")
def test_the_audit_with_names_matched_aside_is_the_audit_without(tmp_path: Path) -> None:
    """In a process of its own (a fork needs the only thread): the benchmark's MoE declared by
    500 ``re:`` entries led by ``.*``, a producer's MoE checkpoint, and a declaration with a
    pattern qarm refuses (with and without a refusal the grouping meets first), and one only
    the producer's view holds and refuses, each audited with the names matched in the process
    and then in the copy: the same JSON, or the same error."""
    roots = [tmp_path / "bench-ct"]
    synthetic.write_folder("tiny", roots[0], "compressed-tensors", 500)
    roots.append(tmp_path / "llmcompressor-moe-fp8attn-w4a16experts")
    shutil.copytree(PRODUCERS / roots[-1].name, roots[-1])
    roots.append(_renamed(tmp_path / "qwen3.5-renamed"))
    roots.append(tmp_path / "catastrophic")
    shutil.copytree(PRODUCERS / "llmcompressor-moe-fp8attn-w4a16experts", roots[-1])
    config = json.loads((roots[-1] / "config.json").read_text())
    config["quantization_config"]["ignore"].append("re:(a+)+$")
    (roots[-1] / "config.json").write_text(json.dumps(config))
    # that pattern, and two tensor names that split alike, which the grouping refuses first
    roots.append(tmp_path / "clash-before-catastrophic")
    shutil.copytree(roots[-2], roots[-1])
    shard = roots[-1] / "model.safetensors"
    tensors = {e.name: (e.dtype, e.shape) for e in read_local_shard(shard, shard.name).tensors}
    write_safetensors(shard, {**tensors, "a": ("F32", [1]), ".a": ("F32", [1])})
    # a pattern only the producer's view holds that it cannot compile (a mid-pattern flag,
    # which re refuses and the engine's regex module reads): no copy is started, and the audit
    # reports the producer's view as unreadable rather than stopping
    roots.append(tmp_path / "no-copy-producer-refuses")
    shutil.copytree(PRODUCERS / "llmcompressor-moe-fp8attn-w4a16experts", roots[-1])
    config = json.loads((roots[-1] / "config.json").read_text())
    config["quantization_config"]["ignore"].append("re:.*(?i)NEVER_MATCHES$")
    (roots[-1] / "config.json").write_text(json.dumps(config))
    lines = run_alone(AHEAD_OR_NOT, *map(str, roots)).splitlines()
    assert [line.split()[0] for line in lines] == [root.name for root in roots]
    assert '"verdict"' in lines[0] and "catastrophic" in lines[3], lines
    assert "IntegrityError" in lines[4], lines
    assert '"verdict"' in lines[5], lines


def _renamed(root: Path) -> Path:
    """A Llama checkpoint's tensors under the names Qwen3.5 gives them
    (``model.language_model.``), declared for Qwen3.5, whose engine renames them
    (``language_model.model.``) before matching ``re:`` entries: the engine's view is tried on
    names the checkpoint does not hold."""
    source = PRODUCERS / "llmcompressor-fp8-dynamic"
    header = read_local_shard(source / "model.safetensors", "model.safetensors")
    root.mkdir()
    write_safetensors(
        root / "model.safetensors",
        {
            entry.name.replace("model.", "model.language_model.", 1): (entry.dtype, entry.shape)
            for entry in header.tensors
        },
    )
    config = json.loads((source / "config.json").read_text())
    config["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    rules = config["quantization_config"]
    rules["config_groups"]["group_0"]["targets"] = ["re:.*mlp\\..*_proj$", "re:.*self_attn\\..*"]
    rules["ignore"] = ["lm_head", "re:.*layers\\.1\\.mlp\\..*"]
    (root / "config.json").write_text(json.dumps(config))
    return root


def test_the_pattern_sets_are_the_resolvers_and_the_producers() -> None:
    """Each set once: the engine's on its own names, compiled as its pattern module reads
    them; the producer's on the checkpoint's, as ``re`` reads them."""
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear", "re:.*mlp\\..*", "re:.*(?i)Q_PROJ$"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                }
            },
            "ignore": ["lm_head", "re:.*gate$"],
        }
    }
    declaration = read_declaration({"config.json": json.dumps(config)})
    ignore, targets = ((".*gate$",), "ignore"), ((".*(?i)Q_PROJ$", ".*mlp\\..*"), "targets")
    assert pattern_lists(declaration, declaration, "re") == [
        (*ignore, True),
        (*targets, True),
        (*ignore, False),
        (*targets, False),
    ]
    # the regex module scopes a mid-pattern flag to what follows it
    assert pattern_lists(declaration, declaration, "regex") == [
        (*ignore, True),
        ((".*(?i:Q_PROJ$)", ".*mlp\\..*"), "targets", True),
        (*ignore, False),
        (*targets, False),
    ]
