"""``quant_method: gptq`` checkpoints written by GPTQModel's own quantizer
(fixtures/producers/make_gptq.py): the declaration, membership as vLLM's
``AutoGPTQConfig.get_quant_method`` decides it (``dynamic``, ``modules_in_block_to_quantize``,
``lm_head``), every tensor against the int32 ``qweight`` / ``qzeros`` and ``scales`` vLLM's
``AutoGPTQLinearMethod`` creates, vLLM's arm per release and each of its refusals. A defect is
planted by rewriting a genuine checkpoint's header and bytes with the safetensors library."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import test_producers
from conftest import REPO
from qarm_audit import audit
from qarm_audit.declarations import read_declaration
from qarm_audit.errors import DeclarationError
from test_producers import Tensors, drop, plant, zeros

CORPUS = REPO / "fixtures" / "producers"
W4 = "gptqmodel-gptq-w4g32-llama"
W8 = "gptqmodel-gptq-w8g64-llama"
CHANNEL = "gptqmodel-gptq-w4-channel-llama"
ACT = "gptqmodel-gptq-w4g32-actorder-llama"
DYNAMIC = "gptqmodel-gptq-w4g32-dynamic-llama"
DOWN = "model.layers.0.mlp.down_proj"
RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]


refusals = partial(test_producers.refusals, engine="vllm")


buckets = partial(test_producers.buckets, engine="vllm")


def _config(folder: Path, **changes: Any) -> Path:
    path = folder / "config.json"
    document = json.loads(path.read_text())
    document["quantization_config"].update(changes)
    path.write_text(json.dumps(document, indent=2))
    return folder


def copy(tmp_path: Path, name: str) -> Path:
    return plant(tmp_path, name, lambda t: None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (W4, {"GPTQ_W4_G32": (56, 14), "unlisted": (7, 7)}),
        (W8, {"GPTQ_W8_G64": (56, 14), "unlisted": (7, 7)}),
        (CHANNEL, {"GPTQ_W4_CH": (56, 14), "unlisted": (7, 7)}),
        (
            DYNAMIC,
            {
                "GPTQ_W4_G32": (36, 9),
                "GPTQ_W8_G32": (16, 4),
                "excluded": (1, 1),
                "unlisted": (7, 7),
            },
        ),
    ],
)
@pytest.mark.parametrize("release", RELEASES)
def test_genuine_gptq_checkpoint_audits_clean(
    name: str, expected: dict[str, tuple[int, int]], release: str
) -> None:
    engine = f"vllm=={release}"
    report = audit(str(CORPUS / name), engine=engine)
    assert report.refusals == [] and report.warnings == []
    assert buckets(CORPUS / name, engine=engine) == expected
    for arm in report.arms:
        assert arm.executed == ("W8A16-INT" if "_W8_" in arm.scheme else "W4A16-INT")


def test_dynamic_rules_skip_and_override_by_the_engine_layer_name() -> None:
    report = audit(str(CORPUS / DYNAMIC), engine="vllm")
    rows = {r["module"]: r for r in report.modules}
    down = rows["model.layers.1.mlp.down_proj"]
    assert (down["bucket"], down["how"]) == ("excluded", "dynamic")
    assert down["rule"] == r"-:.*\.1\.mlp\.down_proj"
    q = rows["model.layers.1.self_attn.q_proj"]
    assert (q["bucket"], q["how"]) == ("GPTQ_W8_G32", "dynamic")
    assert rows["model.layers.0.self_attn.q_proj"]["bucket"] == "GPTQ_W4_G32"
    assert rows["lm_head"]["bucket"] == "unlisted"  # lm_head false: ParallelLMHead unquantized


def test_g_idx_shipped_without_desc_act_is_what_gptqmodel_writes_and_vllm_drops() -> None:
    report = audit(str(CORPUS / W4), engine="vllm")
    (arm,) = report.arms
    assert arm.executed == "W4A16-INT"
    assert "g_idx shipped on 14/14 but not read on this arm" in f"{arm.reason} {arm.note}"


@pytest.mark.parametrize("release", RELEASES)
def test_desc_act_with_groups_is_refused_by_vllm(release: str) -> None:
    report = audit(str(CORPUS / ACT), engine=f"vllm=={release}")
    (refusal,) = report.refusals
    assert refusal.code == "engine-refuses-declaration"
    assert "GPTQ group activation ordering (desc_act=True) is no longer supported" in (
        refusal.message
    )


@pytest.mark.parametrize("gpu", ["sm80", "sm90", "sm100"])
def test_the_arm_holds_on_every_gpu_qarm_knows(gpu: str) -> None:
    """The sm60 and sm75 floors (AutoGPTQConfig, Marlin's types) are below every GPU qarm
    takes: the arm is the same on each."""
    report = audit(str(CORPUS / W8), engine="vllm", gpu=gpu)
    assert {a.executed for a in report.arms} == {"W8A16-INT"}
    assert report.refusals == []


# --- each way a GPTQ checkpoint goes wrong, refused by name -------------------------------------


def test_plain_weight_where_modules_in_block_to_quantize_names_it(tmp_path: Path) -> None:
    """vLLM builds the listed layer with ``qweight``/``qzeros``/``scales``: a BF16 ``weight``
    has no parameter to load into."""

    def edit(t: Tensors) -> None:
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    folder = _config(
        plant(tmp_path, W4, edit),
        modules_in_block_to_quantize=[
            ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
            ["self_attn.o_proj"],
            ["mlp.gate_proj", "mlp.up_proj"],
            ["mlp.down_proj"],
        ],
    )
    assert refusals(folder) == {"quantized-ships-unquantized": {DOWN}}


def test_plain_shard_of_a_fused_layer_without_the_list(tmp_path: Path) -> None:
    """Without ``modules_in_block_to_quantize`` vLLM takes the modules that ship a non-float
    tensor; a fused layer with one shard plain is its ValueError."""
    module = "model.layers.0.self_attn.k_proj"

    def edit(t: Tensors) -> None:
        drop(t, module)
        t[f"{module}.weight"] = zeros("BF16", (32, 64))

    found = refusals(plant(tmp_path, W4, edit))
    assert found == {
        "fused-shards-disagree": {"model.layers.0.self_attn.qkv_proj"},
        "quantized-ships-unquantized": {module},
    }


def test_plain_module_without_the_list_is_read_unquantized(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    report = audit(str(plant(tmp_path, W4, edit)), engine="vllm")
    assert report.refusals == []
    rows = {r["module"]: r for r in report.modules}
    assert (rows[DOWN]["bucket"], rows[DOWN]["how"]) == ("excluded", "not-listed")


@pytest.mark.parametrize("operand", ["qzeros", "scales", "qweight"])
def test_missing_gptq_operand(tmp_path: Path, operand: str) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.{operand}"]

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-missing": {DOWN}}


def test_g_idx_absent_with_desc_act(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.g_idx"]

    found = refusals(plant(tmp_path, ACT, edit), engine="name-probe")
    assert found.get("operand-missing") == {DOWN}


def test_qweight_packed_for_other_bits(tmp_path: Path) -> None:
    """8-bit packing (4 a word) under ``bits: 4`` (8 a word): twice the rows."""

    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qweight"] = zeros("I32", (32, 64))

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-shape": {DOWN}}


def test_awq_layout_under_gptq(tmp_path: Path) -> None:
    """AWQ's ``qweight`` is ``[in, out/pack]``: under GPTQ its columns are not ``out``."""

    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qweight"] = zeros("I32", (128, 8))

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-shape": {DOWN}}


def test_scales_group_count_disagrees_with_group_size(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.scales"] = zeros("F16", (2, 64))  # group 64 of in=128; declared 32

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-shape": {DOWN}}


def test_declared_group_size_other_than_the_shipped_one(tmp_path: Path) -> None:
    folder = _config(copy(tmp_path, W4), group_size=64)
    assert refusals(folder) == {"operand-shape": _linears()}


def test_a_group_that_does_not_divide_the_input(tmp_path: Path) -> None:
    """group_size 48 over in=64: the shipped two groups are what a producer writes for it,
    and vLLM takes whole groups only (it allocates in // group); in=128 disagrees besides."""
    folder = _config(copy(tmp_path, W4), group_size=48)
    assert refusals(folder)["operand-shape"] == _linears()
    q = "model.layers.0.self_attn.q_proj"
    [message] = [
        r.message for r in audit(str(folder), engine="name-probe").refusals if r.module == q
    ]
    said = f"{q} has in=64, not a multiple of GPTQ_W4_G48's group of 48: the producer writes "
    assert message == said + "the last group partial, as a whole one"
    # vLLM's profile says what vLLM does with it
    [message] = [r.message for r in audit(str(folder)).refusals if r.module == q]
    assert message == (
        said + "the last group partial, as a whole one; vllm v0.34.0: it allocates in // group "
        "scale groups, one fewer than shipped, and its kernels take whole groups only"
    )


def test_qzeros_packed_for_other_bits(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qzeros"] = zeros("I32", (4, 16))

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-shape": {DOWN}}


def test_gptq_operand_of_the_wrong_dtype(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qzeros"] = zeros("U8", (4, 8))

    assert refusals(plant(tmp_path, W4, edit)) == {"operand-dtype": {DOWN}}


def test_dynamic_skip_of_a_module_that_ships_gptq_operands(tmp_path: Path) -> None:
    folder = _config(copy(tmp_path, W4), dynamic={r"-:.*\.0\.mlp\.down_proj": {}})
    assert refusals(folder) == {"unquantized-ships-quantized": {DOWN}}


def test_unlisted_module_that_ships_gptq_operands(tmp_path: Path) -> None:
    folder = _config(copy(tmp_path, W4), modules_in_block_to_quantize=["self_attn", "gate", "up"])
    found = refusals(folder)
    assert found == {
        "unquantized-ships-quantized": {DOWN, "model.layers.1.mlp.down_proj"},
    }


@pytest.mark.parametrize(("bits", "sym"), [(3, True), (2, True), (4, False)])
def test_vllm_refuses_bits_and_asymmetry_it_has_no_type_for(
    tmp_path: Path, bits: int, sym: bool
) -> None:
    folder = _config(copy(tmp_path, W4), bits=bits, sym=sym)
    found = audit(str(folder), engine="vllm").refusals
    messages = [r.message for r in found if r.code == "engine-refuses-declaration"]
    assert messages and f"Unsupported quantization config: bits={bits}, sym={sym}" in messages[0]


def test_vllm_refuses_a_group_size_marlin_lacks(tmp_path: Path) -> None:
    folder = _config(copy(tmp_path, CHANNEL), group_size=16)
    messages = [r.message for r in audit(str(folder), engine="vllm").refusals]
    assert any("Marlin does not support group_size = 16" in m for m in messages)


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"bits": 5}, "Only support quantization to [2,3,4,8] bits but found 5"),
        ({"group_size": 0}, "group_size must be greater than 0 or equal to -1"),
        ({"desc_act": "yes"}, "desc_act"),
        ({"dynamic": {"+:x": {"bits": 6}}}, "bits but found 6"),
        ({"dynamic": {"+:x": {"group_size": 0}}}, "group_size must be greater than 0"),
        ({"dynamic": {"+:x": {"sym": 1}}}, "sym is 1, not a bool"),
    ],
)
def test_unreadable_gptq_declaration_is_a_named_error(change: dict[str, Any], text: str) -> None:
    document = json.loads((CORPUS / W4 / "config.json").read_text())
    document["quantization_config"].update(change)
    with pytest.raises(DeclarationError, match=text.replace("[", r"\[").replace("]", r"\]")):
        read_declaration({"config.json": json.dumps(document)})


def test_missing_required_key_is_a_named_error() -> None:
    document = json.loads((CORPUS / W4 / "config.json").read_text())
    del document["quantization_config"]["sym"]
    with pytest.raises(DeclarationError, match="sym"):
        read_declaration({"config.json": json.dumps(document)})


def _linears() -> set[str]:
    leaves = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"]
    leaves += ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    return {f"model.layers.{i}.{leaf}" for i in (0, 1) for leaf in leaves}


@pytest.mark.parametrize("release", ["0.5.22", "0.5.23"])
@pytest.mark.parametrize(
    ("name", "arm"), [(W4, "W4A16-INT"), (W8, "W8A16-INT"), (ACT, "W4A16-INT")]
)
def test_sglang_runs_gptq_on_marlin_from_sm80(release: str, name: str, arm: str) -> None:
    """sgl-project/sglang python/sglang/srt/layers/quantization/gptq/gptq.py@v0.5.23: CUDA
    registers gptq_marlin only; GPTQMarlinConfig claims a symmetric 4- or 8-bit checkpoint with
    a Marlin group size on sm80+ (desc_act taken), and configs/model_config.py refuses the rest
    as an unknown method."""
    engine = f"sglang=={release}"
    report = audit(str(CORPUS / name), engine=engine, gpu="sm90")
    assert report.refusals == [] and report.warnings == []
    (row,) = report.arms
    assert (row.executed, row.kernel) == (arm, "GPTQ Marlin")
    assert (
        row.log
        == "The model is convertible to gptq_marlin during runtime. Using gptq_marlin kernel."
    )
    turing = audit(str(CORPUS / name), engine=engine, gpu="sm75")
    assert {r.code for r in turing.refusals} == {"no-arm"}
    assert "Unknown quantization method: gptq." in turing.refusals[0].message


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"sym": False}, "TYPE_MAP holds symmetric 4 and 8 bits only"),
        ({"bits": 3}, "TYPE_MAP holds symmetric 4 and 8 bits only"),
        ({"group_size": 16}, "group sizes -1, 32, 64 and 128 only"),
    ],
)
def test_sglang_refuses_gptq_that_marlin_does_not_take(
    tmp_path: Path, change: dict[str, Any], says: str
) -> None:
    folder = _config(copy(tmp_path, W4), **change)
    report = audit(str(folder), engine="sglang", gpu="sm90")
    messages = [r.message for r in report.refusals if r.code == "engine-refuses-declaration"]
    assert messages and says in messages[0]
    assert "Unknown quantization method: gptq." in messages[0]


def test_declared_shows_the_dynamic_rule_count_and_diff_the_skips() -> None:
    report = audit(str(CORPUS / DYNAMIC), engine="vllm")
    assert report.declaration.rules == {"dynamic": 2}
    assert report.declaration.excludes == [r"-:.*\.1\.mlp\.down_proj"]


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("model.layers.1.mlp.down_proj", "skips it"),
        ("model.layers.1.self_attn.q_proj", "overrides it: GPTQ_W8_G32"),
        ("lm_head", "no LinearBase"),
    ],
)
def test_explain_traces_the_gptq_decision(run: Any, module: str, expected: str) -> None:
    result = run("explain", CORPUS / DYNAMIC, module, "-f", "json")
    assert result.exit_code == 0
    assert expected in result.stdout


def test_dynamic_keys_vllm_does_not_read_are_kept() -> None:
    document = json.loads((CORPUS / W4 / "config.json").read_text())
    document["quantization_config"]["dynamic"] = {r"+:.*\.0\..*": {"bits": 8, "damp_percent": 0.1}}
    declaration = read_declaration({"config.json": json.dumps(document)})
    assert sorted(declaration.schemes) == ["GPTQ_W4_G32", "GPTQ_W8_G32"]


@pytest.mark.parametrize(("name", "scheme"), [(W4, "GPTQ_W4_G32"), (W8, "GPTQ_W8_G64")])
def test_parameters_count_every_packed_weight_once(name: str, scheme: str) -> None:
    """Two layers of q/k/v/o (64x64, 32x64 twice, 64x64) and gate/up/down (128x64 thrice)."""
    report = audit(str(CORPUS / name), engine="vllm")
    per_layer = 64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3
    assert {b.scheme: b.parameters for b in report.buckets}[scheme] == 2 * per_layer
