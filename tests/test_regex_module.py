"""The vLLM engine view reads ``re:`` patterns as the ``regex`` module does (vLLM compiles them
with ``import regex as re``): a flag group in mid pattern, which Python's ``re`` refuses, applies
from where it stands to the end of its group (``resolve/regex_module.py``). Held to the module
itself where it is installed (scripts/derive_vllm_answers.py needs it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import write_checkpoint
from qarm_audit import audit
from qarm_audit.errors import PatternError
from qarm_audit.resolve.regex_module import regex_module_form

PATTERNS = [
    r".*(?i)_PROJ$",
    r"a(?i)b|c",
    r"x|a(?i)b",
    r"(?:a(?i)b|c)d",
    r"a(?i)b(?-i)c",
    r"(a(?i)b)c",
    r"(?s)a(?i).b",
    r"model\.layers\.\d+\.(?i)MLP\.(gate|UP)_proj$",
    r"[(?i)]a(?i)B",
    r"(?P<x>a(?m)^b)",
    r"a(?i:b)(?s).c",
    r"(?<=a)(?i)b",
]
NAMES = [
    "model.q_proj",
    "model.Q_PROJ",
    "ab",
    "aB",
    "Ab",
    "C",
    "c",
    "X",
    "x",
    "aBd",
    "CD",
    "Cd",
    "aBc",
    "aBC",
    "abC",
    "a\nB",
    "a\nb",
    "model.layers.3.mlp.gate_proj",
    "model.layers.3.MLP.UP_proj",
    "model.layers.3.mlp.up_PROJ",
    "(aB",
    "i)a",
    "a\nb",
    "aBXc",
    "aB\nc",
]


def test_a_mid_pattern_flag_becomes_a_scoped_group_over_what_follows() -> None:
    assert regex_module_form(r".*(?i)_PROJ$") == r".*(?i:_PROJ$)"
    assert regex_module_form(r"a(?i)b|c") == r"a(?i:b)|(?i:c)"
    assert regex_module_form(r"a(?i)b(?-i)c") == r"a(?i:b(?-i:c))"
    assert regex_module_form(r"(a(?i)b)c") == r"(a(?i:b))c"


def test_what_re_takes_or_no_exact_rewrite_exists_is_left_as_written() -> None:
    for pattern in (r"(?i).*_proj$", r".*_proj$", r"a(?i:b)c"):
        assert regex_module_form(pattern) == pattern
    # verbose (changes how the rest is parsed), comments, conditionals, empty flags, unbalanced
    for pattern in (r"a (?x) b", r"a(?#c)(?i)b", r"(a)?(?(1)b|c)(?i)d", r"a(?)b", r"a(?i)b)"):
        assert regex_module_form(pattern) == pattern
        with pytest.raises(re.error):
            re.compile(pattern)


def test_the_rewrite_answers_as_the_regex_module_does() -> None:
    regex = pytest.importorskip("regex")
    for pattern in PATTERNS:
        with pytest.raises(re.error):
            re.compile(pattern)  # each one is a pattern only the regex module takes
        ours = re.compile(regex_module_form(pattern))
        theirs = regex.compile(pattern)
        for name in NAMES:
            assert bool(ours.match(name)) == bool(theirs.match(name)), (pattern, name)


def test_vllm_resolves_a_mid_pattern_flag_and_says_the_producer_cannot(tmp_path: Path) -> None:
    """Under vLLM the pattern resolves (the ``regex`` module's reading) and the producer's
    failure is a warning; SGLang compiles with Python's ``re`` and the declaration is refused
    by name, as before."""
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "g": {
                "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                "targets": ["re:.*(?i)O_PROJ$"],
            }
        },
        "ignore": [],
    }
    config = {"architectures": ["LlamaForCausalLM"], "quantization_config": block}
    folder = write_checkpoint(
        tmp_path / "ckpt",
        {
            "model.safetensors": {
                "model.layers.0.self_attn.o_proj.weight": ("F8_E4M3", (16, 16)),
                "model.layers.0.self_attn.o_proj.weight_scale": ("F32", (1,)),
                "model.layers.0.mlp.down_proj.weight": ("BF16", (16, 16)),
            }
        },
        {"config.json": config},
    )
    report = audit(str(folder), engine="vllm==0.33.0")
    assert report.refusals == []
    [warning] = [w for w in report.warnings if w.code == "producer-engine-disagree"]
    assert "compressed-tensors cannot compile 're:.*(?i)O_PROJ$'" in warning.message
    with pytest.raises(PatternError, match="does not compile"):
        audit(str(folder), engine="sglang")


def test_hostile_patterns_are_left_for_the_matcher_to_refuse() -> None:
    deep = "(" * 1000 + "a(?i)b" + ")" * 1000
    assert regex_module_form(deep) == deep  # too deep to rewrite: "nested too deeply" follows
    long = "a" * 5000 + "(?i)b"
    assert regex_module_form(long) == long  # over the cap: refused unread
    many = "a(?i)" * 800  # under the cap, and over it once rewritten
    assert regex_module_form(many) == many


_ATOMS = ["a", "B", ".", r"\.", "[aB]", "x*", "(?i:b)"]
_FLAG_GROUPS = ["(?i)", "(?-i)", "(?s)", "(?i-s)", "(?m)"]


@st.composite
def _mid_flag_patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 9))
        if kind < 5:
            parts.append(draw(st.sampled_from(_ATOMS)))
        elif kind < 7:
            parts.append(draw(st.sampled_from(_FLAG_GROUPS)))
        elif kind < 8:
            parts.append("|")
        elif depth < 2:
            inner = draw(_mid_flag_patterns(depth + 1))
            parts.append(draw(st.sampled_from(["(?:", "(", "(?=", "(?!"])) + inner + ")")
    return "a" + "".join(parts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(_mid_flag_patterns(), st.lists(st.text("aAbB.x\n", max_size=6), min_size=1, max_size=6))
def test_the_rewrite_answers_as_the_regex_module_does_on_generated_patterns(
    pattern: str, names: list[str]
) -> None:
    regex = pytest.importorskip("regex")
    try:
        theirs = regex.compile(pattern)
    except regex.error:
        assume(False)
    written = regex_module_form(pattern)
    try:
        ours = re.compile(written)
    except re.error:
        assume(False)  # no exact rewrite: refused by name
        raise
    for name in names:
        assert bool(ours.match(name)) == bool(theirs.match(name)), (pattern, written, name)
