"""``quant_method: bitsandbytes`` checkpoints written by transformers' own bitsandbytes quantizer
(fixtures/producers/make_bitsandbytes.py): the declaration, the dotted 4-bit operands kept with
their module, membership as ``is_layer_skipped_bnb`` decides it, every tensor against what the
producer writes, and vLLM's refusal of the method. A defect is planted by rewriting a genuine
checkpoint's header and bytes with the safetensors library."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import test_producers
from conftest import REPO
from qarm_audit import audit
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.sources.checkpoint import TensorEntry
from test_producers import Tensors, drop, plant, zeros

CORPUS = REPO / "fixtures" / "producers"
NF4 = "transformers-bnb-nf4-llama"
DQ = "transformers-bnb-nf4-dq-llama"
FP4 = "transformers-bnb-fp4-llama"
INT8 = "transformers-bnb-int8-llama"
SKIP = "transformers-bnb-nf4-skip-llama"
MOE = "transformers-bnb-nf4-qwen3moe"
DOWN = "model.layers.0.mlp.down_proj"
Q4 = ".weight.quant_state.bitsandbytes__"


refusals = partial(test_producers.refusals, engine="sglang")


buckets = partial(test_producers.buckets, engine="sglang")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (NF4, {"BNB_NF4": (56, 14), "unlisted": (7, 7)}),
        (DQ, {"BNB_NF4_DQ": (84, 14), "unlisted": (7, 7)}),
        (FP4, {"BNB_FP4": (56, 14), "unlisted": (7, 7)}),
        (INT8, {"BNB_INT8": (42, 14), "unlisted": (7, 7)}),
        (SKIP, {"BNB_NF4": (48, 12), "excluded": (2, 2), "unlisted": (7, 7)}),
    ],
)
def test_genuine_bitsandbytes_checkpoint_audits_clean(
    name: str, expected: dict[str, tuple[int, int]]
) -> None:
    assert refusals(CORPUS / name) == {}
    assert audit(str(CORPUS / name), engine="sglang").warnings == []
    assert buckets(CORPUS / name) == expected


def test_skip_modules_match_a_component_of_the_engine_layer_name() -> None:
    report = audit(str(CORPUS / SKIP), engine="sglang")
    rows = {r["module"]: r for r in report.modules}
    down = rows[DOWN]
    assert (down["bucket"], down["how"], down["rule"]) == ("excluded", "component", "down_proj")
    assert rows["lm_head"]["bucket"] == "unlisted"  # ParallelLMHead: no LinearBase


def test_dotted_operands_belong_to_their_module() -> None:
    report = audit(str(CORPUS / DQ), engine="sglang")
    assert report.totals.modules == 21  # 14 linears, 2x2 norms, norm, embedding, head
    assert {b.scheme: b.tensors for b in report.buckets}["unclassified"] == 0


def test_only_bitsandbytes_parts_are_joined() -> None:
    def entry(name: str) -> TensorEntry:
        return TensorEntry(name, "F32", (4,), 0, 16)

    names = [
        "a.weight",
        "a.weight.absmax",
        "a.weight.quant_state.bitsandbytes__nf4",
        "b.weight.absmax",
        "b.weight.other",  # a module named weight holding a non-bnb tensor: left alone
        "c.weight",
    ]
    modules = build_inventory(entry(n) for n in names)
    assert sorted(modules) == ["a", "b.weight", "c"]
    assert list(modules["a"].operands) == [
        "weight",
        "weight.absmax",
        "weight.quant_state.bitsandbytes__nf4",
    ]


def test_moe_experts_left_unquantized_by_transformers_are_refused() -> None:
    """transformers 5 holds Qwen3-MoE experts as one 3-D parameter, which its bitsandbytes
    quantizer (nn.Linear only) leaves BF16; the engine's FusedMoE takes the bitsandbytes method
    without asking any skip rule, so it expects packed experts."""
    found = refusals(CORPUS / MOE)
    assert set(found) == {"quantized-ships-unquantized"}
    assert "model.layers.0.mlp.experts.0.gate_proj" in found["quantized-ships-unquantized"]
    assert not any("self_attn" in m for m in found["quantized-ships-unquantized"])


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0"])
def test_vllm_has_no_bitsandbytes_method(release: str, run: Any) -> None:
    result = run("audit", CORPUS / NF4, "-f", "json", f"--engine=vllm=={release}")
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert {a["executed"] for a in report["arms"]} == {"none"}
    assert "Unknown quantization method: bitsandbytes" in result.stdout


# --- each way a bitsandbytes checkpoint goes wrong, refused by name ----------------------------


def test_plain_weight_where_the_declaration_quantizes(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    assert refusals(plant(tmp_path, NF4, edit)) == {"quantized-ships-unquantized": {DOWN}}


def test_unpacked_weight_beside_its_quant_state(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    assert refusals(plant(tmp_path, NF4, edit)) == {"operand-dtype": {DOWN}}


@pytest.mark.parametrize("operand", ["weight.absmax", "weight.quant_state.bitsandbytes__nf4"])
def test_missing_quant_state_operand(tmp_path: Path, operand: str) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.{operand}"]

    assert refusals(plant(tmp_path, NF4, edit)) == {"operand-missing": {DOWN}}


def test_quant_state_of_the_other_4bit_type(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}{Q4}fp4"] = t.pop(f"{DOWN}{Q4}nf4")

    assert refusals(plant(tmp_path, NF4, edit)) == {"spelling-mismatch": {DOWN}}


def test_double_quant_declared_but_nested_absent(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.weight.nested_absmax"]
        del t[f"{DOWN}.weight.nested_quant_map"]

    assert refusals(plant(tmp_path, DQ, edit)) == {"operand-missing": {DOWN}}


def test_nested_shipped_without_double_quant(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight.nested_absmax"] = zeros("F32", (1,))
        t[f"{DOWN}.weight.nested_quant_map"] = zeros("F32", (256,))

    assert refusals(plant(tmp_path, NF4, edit)) == {"operand-unexpected": {DOWN}}


def test_absmax_count_disagrees_with_the_packed_weight(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight.absmax"] = zeros("F32", (64,))

    assert refusals(plant(tmp_path, NF4, edit)) == {"operand-shape": {DOWN}}


def test_int8_without_its_row_scales(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.SCB"]

    assert refusals(plant(tmp_path, INT8, edit)) == {"operand-missing": {DOWN}}


def _config(folder: Path, **changes: Any) -> Path:
    path = folder / "config.json"
    document = json.loads(path.read_text())
    document["quantization_config"].update(changes)
    path.write_text(json.dumps(document, indent=2))
    return folder


def test_skipped_module_that_ships_bnb_operands(tmp_path: Path) -> None:
    root = _config(plant(tmp_path, NF4, lambda t: None), llm_int8_skip_modules=["down_proj"])
    found = refusals(root)
    assert found == {"unquantized-ships-quantized": {DOWN, "model.layers.1.mlp.down_proj"}}


def test_skip_rule_on_a_shard_leaves_the_fused_layer_quantized(tmp_path: Path) -> None:
    """``k_proj`` is no component of the engine's ``qkv_proj``: the engine quantizes the fused
    layer that transformers left BF16 in part."""

    def edit(t: Tensors) -> None:
        module = "model.layers.0.self_attn.k_proj"
        drop(t, module)
        t[f"{module}.weight"] = zeros("BF16", (32, 64))

    root = _config(plant(tmp_path, NF4, edit), llm_int8_skip_modules=["lm_head", "k_proj"])
    assert refusals(root) == {"quantized-ships-unquantized": {"model.layers.0.self_attn.k_proj"}}


def test_both_load_flags_are_a_named_declaration_error(tmp_path: Path, run: Any) -> None:
    root = _config(plant(tmp_path, NF4, lambda t: None), load_in_8bit=True)
    result = run("audit", root, "-f", "json")
    assert result.exit_code == 2
    assert "load_in_4bit and load_in_8bit are both True" in result.stderr
    assert "Traceback" not in result.stderr


def test_absmax_not_quantized_again_under_double_quant(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.weight.absmax"] = zeros("F32", (128,))

    assert refusals(plant(tmp_path, DQ, edit)) == {"operand-dtype": {DOWN}}


def test_double_quant_declared_over_a_single_quant_checkpoint(tmp_path: Path) -> None:
    root = _config(plant(tmp_path, NF4, lambda t: None), bnb_4bit_use_double_quant=True)
    found = refusals(root)
    assert set(found) == {"operand-dtype", "operand-missing"}
    assert len(found["operand-missing"]) == 14


@pytest.mark.parametrize("release", ["0.5.22", "0.5.23"])
@pytest.mark.parametrize(
    ("name", "arm"),
    [
        (NF4, "W4A16-BNB-NF4"),
        (DQ, "W4A16-BNB-NF4"),
        (FP4, "W4A16-BNB-FP4"),
        (INT8, "W8A8-BNB-INT8"),
    ],
)
def test_sglang_runs_the_declared_bitsandbytes_arm(
    run: Any, release: str, name: str, arm: str
) -> None:
    result = run("audit", CORPUS / name, "-f", "json", f"--engine=sglang=={release}")
    assert result.exit_code == 0
    arms = json.loads(result.stdout)["arms"]
    assert {(a["declared"], a["executed"]) for a in arms if a["declared"] != "unquantized"} == {
        (arm, arm)
    }


def test_diff_names_the_dotted_operands_and_the_skip_list(run: Any) -> None:
    result = run("diff", CORPUS / SKIP, CORPUS / NF4)
    assert result.exit_code in (0, 1), result.stderr
    assert "2 weight.quant_state.bitsandbytes__nf4 added" in result.stdout
    assert "exclude +0 -2" in result.stdout


def test_skip_entry_equal_to_a_leading_run_of_components(tmp_path: Path) -> None:
    root = _config(plant(tmp_path, NF4, lambda t: None), llm_int8_skip_modules=["model.layers.0"])
    report = audit(str(root), engine="sglang")
    rows = {r["module"]: r for r in report.modules}
    assert (rows[DOWN]["how"], rows[DOWN]["rule"]) == ("prefix", "model.layers.0")
    assert rows["model.layers.0.self_attn.q_proj"]["bucket"] == "excluded"
    assert rows["model.layers.1.mlp.down_proj"]["bucket"] == "BNB_NF4"
    skipped = {r.module for r in report.refusals if r.code == "unquantized-ships-quantized"}
    assert len(skipped) == 7 and all(m.startswith("model.layers.0.") for m in skipped)


@pytest.mark.parametrize(
    ("name", "entries", "how"),
    [
        ("model.layers.0.mlp.down_proj", ("down_proj",), "component"),
        ("model.layers.0.mlp.down_proj", ("mlp",), "component"),
        ("model.layers.0.mlp.down_proj", ("model.layers.0",), "prefix"),
        ("model.layers.11.mlp.down_proj", ("model.layers.1",), None),
        ("model.layers.0.mlp.down_proj", ("layers.0",), None),  # not from the start
        ("model.layers.0.mlp.down_proj", ("down",), None),  # no substring stage
        ("model.layers.0.self_attn.qkv_proj", ("k_proj",), None),
    ],
)
def test_is_layer_skipped_bnb(name: str, entries: tuple[str, ...], how: str | None) -> None:
    from qarm_audit.resolve.bitsandbytes import skipped_by

    found = skipped_by(name, entries)
    assert (found.how if found else None) == how


def warnings_of(folder: Path | str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in audit(str(folder), engine="sglang").warnings:
        out.setdefault(r.code, set()).add(r.module)
    return out


def test_producer_and_engine_part_on_the_moe_experts_and_router() -> None:
    """transformers keeps the 3-D experts and the TopKRouter unquantized; SGLang quantizes the
    experts (FusedMoE) and, like transformers, not the router: Qwen3-MoE's gate is a
    ReplicatedLinear given a quant config only for modelslim
    (sgl-project/sglang python/sglang/srt/models/qwen3_moe.py@v0.5.23, gate_quant_config)."""
    found = warnings_of(CORPUS / MOE)
    assert found == {
        "producer-engine-disagree": {"model.layers.0.mlp.experts", "model.layers.1.mlp.experts"}
    }


def test_producer_skips_a_shard_the_engine_quantizes_fused(tmp_path: Path) -> None:
    """With skip entries given, transformers adds no default skip: it quantizes the head too,
    which the engine's ParallelLMHead cannot take."""
    root = _config(plant(tmp_path, NF4, lambda t: None), llm_int8_skip_modules=["k_proj"])
    qkv = {f"model.layers.{i}.self_attn.qkv_proj" for i in (0, 1)}
    assert warnings_of(root) == {"producer-engine-disagree": qkv | {"lm_head"}}


@pytest.mark.parametrize(
    ("entries", "disagree"),
    [
        (["lm_head", "down_proj"], set()),  # suffix: as the engine's component test
        (["lm_head", "model.layers.0"], set()),  # from the start up to a dot: as its prefix
        (
            ["lm_head", "mlp.down_proj"],
            {"model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"},
        ),
        (["lm_head", "re.*down_proj"], set()),  # a regex entry: no producer view
        (["lm_head", "model.layers.0.mlp.down"], set()),  # a start not up to a dot: no skip
    ],
)
def test_transformers_skip_match(tmp_path: Path, entries: list[str], disagree: set[str]) -> None:
    root = _config(plant(tmp_path, NF4, lambda t: None), llm_int8_skip_modules=entries)
    assert warnings_of(root).get("producer-engine-disagree", set()) == disagree


def test_a_regex_skip_entry_has_no_producer_view() -> None:
    from qarm_audit.declarations import read_declaration
    from qarm_audit.resolve.producer import producer_view

    documents = {"config.json": (CORPUS / SKIP / "config.json").read_text()}
    declaration = read_declaration(documents)
    assert producer_view(declaration, {}) == {}
    document = json.loads(documents["config.json"])
    document["quantization_config"]["llm_int8_skip_modules"] = ["lm_head", r"mlp\.down_proj"]
    declaration = read_declaration({"config.json": json.dumps(document)})
    assert producer_view(declaration, {}) is None
