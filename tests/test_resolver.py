"""The resolver, pure: names and a declaration in, memberships out, as engines resolve them."""

from __future__ import annotations

import json

import pytest

from qarm_audit.declarations import read_declaration
from qarm_audit.errors import PatternError
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.resolve import resolve
from qarm_audit.sources.checkpoint import TensorEntry

LINEAR = ("weight", "weight_scale")


def entries(*modules: str, operands: tuple[str, ...] = LINEAR) -> list[TensorEntry]:
    out = []
    for module in modules:
        for op in operands:
            shape = (8, 8) if op == "weight" else ()
            out.append(TensorEntry(f"{module}.{op}", "F32", shape, 0, 0))
    return out


def resolved(document: dict, tensors: list[TensorEntry], name: str = "hf_quant_config.json"):
    declaration = read_declaration({name: json.dumps(document)})
    resolution = resolve(declaration, build_inventory(tensors))
    return resolution


def modelopt(algo: str = "NVFP4", excludes: list[str] | None = None, layers: dict | None = None):
    q: dict = {"quant_algo": algo, "exclude_modules": excludes or []}
    if layers is not None:
        q["quantized_layers"] = layers
    return {"producer": {"name": "modelopt"}, "quantization": q}


def how(resolution, module: str) -> tuple[str, str, str]:
    m = resolution.memberships[module]
    return m.bucket, m.how, m.rule


ATTN = [
    f"model.layers.{i}.self_attn.{p}" for i in (0, 1, 10) for p in ("q_proj", "k_proj", "v_proj")
]
MLP = [
    f"model.layers.{i}.mlp.{p}" for i in (0, 1, 10) for p in ("gate_proj", "up_proj", "down_proj")
]


# --- ModelOpt excludes: vLLM's three stages on the engine's (fused) name --------------------


def test_exact_exclude() -> None:
    r = resolved(modelopt(excludes=["lm_head"]), entries("lm_head", *MLP))
    assert how(r, "lm_head") == ("excluded", "exact", "lm_head")
    assert how(r, MLP[0])[0] == "NVFP4"


def test_wildcard_crosses_dots_and_is_labelled() -> None:
    r = resolved(modelopt(excludes=["model.layers.1.*"]), entries(*MLP))
    assert how(r, "model.layers.1.mlp.down_proj") == ("excluded", "wildcard", "model.layers.1.*")
    assert how(r, "model.layers.10.mlp.down_proj")[0] == "NVFP4"  # the dot form spares layer 10


def test_star_without_dot_also_matches_layer_10() -> None:
    r = resolved(modelopt(excludes=["model.layers.1*"]), entries(*MLP))
    assert how(r, "model.layers.10.mlp.down_proj")[:2] == ("excluded", "wildcard")


def test_bare_gate_excludes_gate_up_proj_by_substring_only_and_says_so() -> None:
    r = resolved(modelopt(excludes=["gate"]), entries(*MLP))
    assert how(r, "model.layers.0.mlp.gate_proj") == ("excluded", "substring", "gate")
    assert how(r, "model.layers.0.mlp.up_proj") == ("excluded", "substring", "gate")  # fused
    assert how(r, "model.layers.0.mlp.down_proj")[0] == "NVFP4"
    assert {f.code for f in r.findings} == {"substring-exclude"}


def test_wildcard_on_hf_shards_leaves_the_fused_module_quantized() -> None:
    r = resolved(modelopt(excludes=["*q_proj"]), entries(*ATTN))
    assert how(r, "model.layers.0.self_attn.q_proj")[0] == "NVFP4"


def test_shard_listed_alone_splits_a_fused_module() -> None:
    r = resolved(modelopt(excludes=["model.layers.0.self_attn.q_proj"]), entries(*ATTN))
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]
    assert r.findings[0].module == "model.layers.0.self_attn.qkv_proj"


def test_all_shards_listed_excludes_the_fused_module() -> None:
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    r = resolved(modelopt(excludes=shards), entries(*ATTN))
    assert all(how(r, s)[:2] == ("excluded", "exact") for s in shards)
    assert r.findings == []


def test_one_expert_excluded_excludes_the_routed_experts_layer() -> None:
    experts = [f"model.layers.0.mlp.experts.{e}.{p}" for e in range(3) for p in ("w1", "w2")]
    r = resolved(modelopt(excludes=["model.layers.0.mlp.experts.1.w2"]), entries(*experts))
    assert all(how(r, m)[0] == "excluded" for m in experts)


# --- MIXED_PRECISION lookup strategies, in vLLM's order ----------------------------------


def test_mixed_exact_and_unlisted() -> None:
    r = resolved(
        modelopt("MIXED_PRECISION", layers={MLP[0]: {"quant_algo": "FP8"}}), entries(MLP[0], MLP[2])
    )
    assert how(r, MLP[0]) == ("FP8", "exact", MLP[0])
    assert how(r, MLP[2]) == ("unlisted", "none", "")


def test_mixed_prefix_takes_the_first_child_in_map_order_not_sorted_order() -> None:
    layers = {
        "model.layers.0.attn.z_proj": {"quant_algo": "NVFP4"},
        "model.layers.0.attn.a_proj": {"quant_algo": "FP8"},
    }
    tensors = [TensorEntry("model.layers.0.attn.A_log", "F32", (4,), 0, 0)]
    r = resolved(modelopt("MIXED_PRECISION", layers=layers), tensors)
    assert how(r, "model.layers.0.attn") == ("NVFP4", "prefix", "model.layers.0.attn.z_proj")
    assert [f.code for f in r.findings] == ["prefix-children-disagree"]


def test_mixed_prefix_does_not_match_a_sibling_with_a_longer_name() -> None:
    layers = {"model.layers.0.attn2.q": {"quant_algo": "FP8"}}
    tensors = [TensorEntry("model.layers.0.attn.A_log", "F32", (4,), 0, 0)]
    r = resolved(modelopt("MIXED_PRECISION", layers=layers), tensors)
    assert how(r, "model.layers.0.attn")[0] == "unlisted"


def test_mixed_language_model_alias_and_lm_head() -> None:
    layers = {
        "model.language_model.layers.0.mlp.down_proj": {"quant_algo": "FP8"},
        "lm_head": {"quant_algo": "NVFP4"},
    }
    r = resolved(
        modelopt("MIXED_PRECISION", layers=layers),
        entries("language_model.model.layers.0.mlp.down_proj", "language_model.lm_head"),
    )
    assert how(r, "language_model.model.layers.0.mlp.down_proj")[0] == "FP8"
    assert how(r, "language_model.lm_head") == ("NVFP4", "exact", "lm_head")


def test_mixed_keyed_by_fused_experts_container() -> None:
    """DeepSeek-V4 maps ``layers.N.ffn.experts`` rather than per-expert Linear names."""
    layers = {"layers.0.ffn.experts": {"quant_algo": "NVFP4", "group_size": 16}}
    experts = [f"layers.0.ffn.experts.{e}.w{k}" for e in range(4) for k in (1, 2, 3)]
    r = resolved(modelopt("MIXED_PRECISION", layers=layers), entries(*experts))
    assert all(how(r, m) == ("NVFP4", "experts", "layers.0.ffn.experts") for m in experts)
    assert r.unmatched == []


def _loop_and_bulk(document: dict, tensors: list[TensorEntry], **set_on: object):
    """The resolution of ``tensors`` with a layer's members decided in bulk (the common path)
    and with every member decided by the loop, and how many layers the bulk path took.
    ``set_on`` is set on every expert module first (what the layer tree would set)."""
    import qarm_audit.resolve.resolver as resolver

    declaration = read_declaration({"hf_quant_config.json": json.dumps(document)})
    modules = build_inventory(tensors)
    for info in modules.values():
        if ".experts." in info.name:
            for field, value in set_on.items():
                setattr(info, field, value)
    bulk = resolver._ModelOpt._all_listed_alike
    taken: list[bool] = []

    def counted(self, once, members, names, direct) -> bool:  # type: ignore[no-untyped-def]
        taken.append(bulk(self, once, members, names, direct))
        return taken[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resolver._ModelOpt, "_all_listed_alike", counted)
        fast = resolve(declaration, modules)
        patch.setattr(resolver._ModelOpt, "_all_listed_alike", lambda *_: False)
        slow = resolve(declaration, modules)
    return fast, slow, sum(taken)


EXPERTS = [f"model.layers.{i}.mlp.experts.{e}.{p}" for i in (0, 1) for e in range(4) for p in "ab"]


@pytest.mark.parametrize(
    ("algos", "set_on", "bulk_layers"),
    [
        ({}, {}, 2),  # every expert listed, one algorithm per experts layer
        ({}, {"quant_config": False}, 2),  # the engine builds the experts without one
        ({}, {"layer_kind": "norm", "layer_class": "RMSNorm"}, 2),  # or as no linear
        ({"model.layers.0.mlp.experts.2.a": "FP8"}, {}, 1),  # two algorithms in one layer
        ({"model.layers.1.mlp.experts.3.b": None}, {}, 1),  # one expert not listed
    ],
)
def test_layers_decided_in_bulk_decide_as_the_member_loop(
    algos: dict, set_on: dict, bulk_layers: int
) -> None:
    layers = {name: {"quant_algo": "NVFP4"} for name in EXPERTS}
    for name, algo in algos.items():
        if algo is None:
            del layers[name]
        else:
            layers[name] = {"quant_algo": algo}
    fast, slow, taken = _loop_and_bulk(
        modelopt("MIXED_PRECISION", layers=layers), entries(*EXPERTS), **set_on
    )
    assert taken == bulk_layers
    assert fast.memberships == slow.memberships
    assert list(fast.memberships) == list(slow.memberships)
    assert fast.findings == slow.findings and fast.unmatched == slow.unmatched
    if set_on:
        assert {m.bucket for m in fast.memberships.values()} == {"unlisted"}


def test_mixed_entry_with_no_module_is_unmatched() -> None:
    r = resolved(
        modelopt("MIXED_PRECISION", layers={"model.layers.9.mlp.down_proj": {"quant_algo": "FP8"}}),
        entries(MLP[0]),
    )
    assert r.unmatched == ["model.layers.9.mlp.down_proj"]


# --- compressed-tensors targets and ignores ---------------------------------------------


def ct(groups: dict, ignore: list[str] | None = None) -> dict:
    return {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": groups,
            "ignore": ignore or [],
        }
    }


FP8_GROUP = {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}


def test_ct_regex_is_anchored_at_the_start_only() -> None:
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:.*down_proj"]}})
    r = resolved(doc, entries(*ATTN, *MLP), "config.json")
    assert how(r, "model.layers.0.mlp.down_proj") == ("g", "regex", "re:.*down_proj")
    # re.match, not search: "down_proj" does not match at the start of the name
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:down_proj"]}})
    r = resolved(doc, entries(*ATTN, *MLP), "config.json")
    assert how(r, "model.layers.0.mlp.down_proj")[0] == "unlisted"


def test_ct_target_on_the_fused_name_takes_every_shard() -> None:
    # vLLM tests the fused layer's own name first: "qkv_proj" ends in "v_proj"
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:.*v_proj$"]}})
    r = resolved(doc, entries(*ATTN), "config.json")
    assert {how(r, n) for n in ATTN} == {("g", "fused", "re:.*v_proj$")}
    assert r.findings == []


def test_ct_targets_on_some_shards_leave_the_fused_layer_unquantized() -> None:
    # q and k targeted, v not: vLLM finds no target for qkv_proj and says nothing
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:.*[qk]_proj$"]}})
    r = resolved(doc, entries(*ATTN), "config.json")
    assert {how(r, n)[0] for n in ATTN} == {"unlisted"}
    assert {f.code for f in r.findings} == {"fused-shards-disagree"}
    assert "resolves every shard unlisted" in r.findings[0].message


def test_ct_every_shard_targeted_takes_the_first_shards_target() -> None:
    doc = ct({"a": {**FP8_GROUP, "targets": [ATTN[0]]}, "b": {**FP8_GROUP, "targets": ATTN[1:3]}})
    r = resolved(doc, entries(*ATTN[:3]), "config.json")
    assert {how(r, n) for n in ATTN[:3]} == {("a", "fused", ATTN[0])}
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]  # k and v meant group b


def test_ct_regex_is_not_fullmatch() -> None:
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:model.layers.1"]}})
    r = resolved(doc, entries(*MLP), "config.json")
    assert how(r, "model.layers.10.mlp.down_proj")[0] == "g"  # prefix match reaches layer 10


def test_ct_class_target_matches_linear_modules_only() -> None:
    tensors = [
        *entries(*MLP),
        TensorEntry("model.norm.weight", "BF16", (8,), 0, 0),
        TensorEntry("model.embed_tokens.weight", "BF16", (8, 8), 0, 0),
    ]
    r = resolved(
        ct({"g": {**FP8_GROUP, "targets": ["Linear"]}}, ["lm_head"]), tensors, "config.json"
    )
    assert how(r, MLP[0]) == ("g", "class", "Linear")
    assert how(r, "model.norm")[0] == "unlisted"
    assert how(r, "model.embed_tokens")[0] == "unlisted"


def test_ct_exact_name_target_beats_a_later_class_target() -> None:
    groups = {
        "a": {**FP8_GROUP, "targets": ["Linear"]},
        "b": {**FP8_GROUP, "targets": ["model.layers.0.mlp.down_proj"]},
    }
    r = resolved(ct(groups), entries(*MLP), "config.json")
    assert how(r, "model.layers.0.mlp.down_proj") == ("b", "exact", "model.layers.0.mlp.down_proj")


def test_ct_same_target_in_two_groups_last_group_wins() -> None:
    groups = {"a": {**FP8_GROUP, "targets": ["Linear"]}, "b": {**FP8_GROUP, "targets": ["Linear"]}}
    r = resolved(ct(groups), entries(*MLP), "config.json")
    assert how(r, MLP[0])[0] == "b"


def test_ct_ignore_names_and_regexes() -> None:
    doc = ct({"g": {**FP8_GROUP, "targets": ["Linear"]}}, ["re:.*self_attn.*", MLP[0]])
    r = resolved(doc, entries(*ATTN, *MLP), "config.json")
    assert how(r, ATTN[0]) == ("excluded", "regex", "re:.*self_attn.*")
    assert how(r, MLP[0])[:2] == ("excluded", "exact")
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]  # gate ignored, up not


def test_ct_catastrophic_pattern_is_refused_by_name() -> None:
    doc = ct({"g": {**FP8_GROUP, "targets": ["re:(a+)+$"]}})
    with pytest.raises(PatternError, match="nests quantifiers"):
        resolved(doc, entries(*MLP), "config.json")


UNPLAIN = "model.layers.0.mlp.\u00e9_proj"
"""A module name that is not printable ASCII: re2's classes are ASCII, Python's Unicode."""
BACKTRACKS = r"re:.*\w+_proj$"
"""Two repeats: safe in re2, which cannot answer exactly for :data:`UNPLAIN`; unsafe in re."""


def test_ct_a_name_no_engine_answers_safely_is_refused_where_the_engine_meets_it() -> None:
    """A pattern that can answer :data:`UNPLAIN` only by backtracking is refused, naming the
    pattern and the module, as resolving module by module in the engine's order does; every
    other name is still decided at once (and exactly, by re2)."""
    doc = ct({"g": {**FP8_GROUP, "targets": ["Linear"]}}, [BACKTRACKS])
    with pytest.raises(PatternError, match="only on printable ASCII names") as info:
        resolved(doc, entries(*MLP, UNPLAIN), "config.json")
    assert "_proj$" in info.value.problem and repr(UNPLAIN) in info.value.problem
    plain = resolved(doc, entries(*MLP), "config.json")
    assert how(plain, MLP[0]) == ("excluded", "regex", BACKTRACKS)


def test_ct_producer_asks_an_ignore_pattern_only_where_compressed_tensors_does() -> None:
    """compressed-tensors ignores a module by its class before it tries ``re:`` entries: a
    pattern that would refuse the name is never met, so the producer view decides it."""
    from qarm_audit.resolve.producer import producer_view

    doc = ct({"g": {**FP8_GROUP, "targets": ["Linear"]}}, ["Linear", BACKTRACKS])
    declaration = read_declaration({"config.json": json.dumps(doc)})
    view = producer_view(declaration, build_inventory(entries(*MLP, UNPLAIN)))
    assert view is not None
    decided = view[UNPLAIN]
    assert (decided.bucket, decided.how, decided.rule) == ("excluded", "exact", "Linear")


def test_producer_engine_disagreements_pair_each_module_with_its_own_memberships() -> None:
    """The engine's view may come in another order than the modules': each module is
    compared with its own membership, whatever order either is in."""
    from qarm_audit.resolve.producer import disagreements
    from qarm_audit.resolve.resolver import Membership

    modules = build_inventory(entries("a.q", "a.k", "b.o"))
    quantized, excluded = Membership("g", "regex", "re:.*"), Membership("excluded", "exact", "a.q")
    producer = [quantized, quantized, quantized]
    for engine in (
        {"a.q": excluded, "a.k": quantized, "b.o": quantized},
        {"b.o": quantized, "a.k": quantized, "a.q": excluded},
    ):
        found = disagreements(producer, engine, modules, "compressed-tensors", "vllm")
        assert [(f.code, f.module) for f in found] == [("producer-engine-disagree", "a.q")]
        assert found[0].message.startswith("a.q: compressed-tensors resolves it g (regex")


def test_ct_broken_pattern_is_refused_by_name() -> None:
    with pytest.raises(PatternError, match="does not compile"):
        resolved(ct({"g": {**FP8_GROUP, "targets": ["re:([a-z"]}}), entries(*MLP), "config.json")


def test_wildcard_question_mark_is_a_wildcard_not_a_literal_prefix() -> None:
    r = resolved(modelopt(excludes=["model.layers.?.mlp.down_proj"]), entries(*MLP))
    assert how(r, "model.layers.1.mlp.down_proj")[:2] == ("excluded", "wildcard")
    assert how(r, "model.layers.10.mlp.down_proj")[0] == "NVFP4"  # ? is one character


def test_ct_regex_with_an_optional_literal_still_matches() -> None:
    doc = ct({"g": {**FP8_GROUP, "targets": [r"re:model\.layerss?\.0\.mlp\.down_proj"]}})
    r = resolved(doc, entries(*MLP), "config.json")
    assert how(r, "model.layers.0.mlp.down_proj")[:2] == ("g", "regex")


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        (r"model\.layers\.3\.mlp", "model.layers.3.mlp"),
        (r".*q_proj", ""),
        (r"model\.layers\.\d+", "model.layers."),
        ("a|b", ""),
        ("(?i)abc", ""),
        ("abc?d", "ab"),
        ("ab+c", "ab"),
        (r"model\.(a|b)", "model."),
        (r"x\.y{2}", "x."),
    ],
)
def test_regex_literal_prefix_is_conservative(pattern: str, prefix: str) -> None:
    from qarm_audit.resolve.matchers import regex_prefix

    assert regex_prefix(pattern) == prefix


def test_excludes_nested_hundreds_deep_are_still_resolved() -> None:
    # a, aa, aaa, ...: the factored substring regex outgrows re's compiler; the loop answers
    excludes = ["a" * i for i in range(1, 800)]
    r = resolved(modelopt(excludes=excludes), entries(*MLP))
    assert how(r, MLP[0])[:2] == ("excluded", "substring")  # "a" is inside "layers"
