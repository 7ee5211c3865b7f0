"""``quant_method: awq`` checkpoints: one written by GPTQModel's AWQ quantizer on the CPU
(fixtures/producers/make_gptq.py, ``gptqmodel-awq-w4g32-llama``: GEMM layout, ``zero_point``
false, BF16 scales), and, for the defects and the other declarations, checkpoints that are
**not producer output**: written with the safetensors library in exactly the layout vLLM's
loader creates for them (``AutoAWQMarlinLinearMethod`` and
``BaseAWQLinearMethod.create_weights``, vllm/model_executor/layers/quantization/auto_awq.py,
0.30-0.33): ``qweight`` I32 ``[in, out/8]``, ``qzeros`` I32 ``[in/group, out/8]``, ``scales``
F16 ``[in/group, out]`` beside a tiny Llama's BF16 norms, embedding and head. They live in
``tmp_path``, never in the producer corpus."""

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
from test_producers import Tensors, drop, plant, write_tensors, zeros

CORPUS = REPO / "fixtures" / "producers"
PRODUCED = "gptqmodel-awq-w4g32-llama"
LLAMA = CORPUS / "gptqmodel-gptq-w4g32-llama" / "config.json"
DOWN = "model.layers.0.mlp.down_proj"
RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
SHAPES = {  # [out, in] of each linear of the tiny Llama (hidden 64, 4 heads, 2 kv heads)
    "self_attn.q_proj": (64, 64),
    "self_attn.k_proj": (32, 64),
    "self_attn.v_proj": (32, 64),
    "self_attn.o_proj": (64, 64),
    "mlp.gate_proj": (128, 64),
    "mlp.up_proj": (128, 64),
    "mlp.down_proj": (64, 128),
}
DECLARATION = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True}


def awq_tensors(group: int = 32) -> Tensors:
    t: Tensors = {
        "model.embed_tokens.weight": zeros("BF16", (128, 64)),
        "model.norm.weight": zeros("BF16", (64,)),
        "lm_head.weight": zeros("BF16", (128, 64)),
    }
    for i in (0, 1):
        t[f"model.layers.{i}.input_layernorm.weight"] = zeros("BF16", (64,))
        t[f"model.layers.{i}.post_attention_layernorm.weight"] = zeros("BF16", (64,))
        for leaf, (out, inner) in SHAPES.items():
            name = f"model.layers.{i}.{leaf}"
            t[f"{name}.qweight"] = zeros("I32", (inner, out // 8))
            t[f"{name}.qzeros"] = zeros("I32", (inner // group, out // 8))
            t[f"{name}.scales"] = zeros("F16", (inner // group, out))
    return t


def checkpoint(tmp_path: Path, edit: Any = None, name: str = "awq", **declaration: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads(LLAMA.read_text())
    config["quantization_config"] = {**DECLARATION, **declaration}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tensors = awq_tensors(config["quantization_config"].get("group_size", 32))
    if edit is not None:
        edit(tensors)
    write_tensors(folder, {"model.safetensors": tensors})
    return folder


refusals = partial(test_producers.refusals, engine="vllm")


@pytest.mark.parametrize("release", RELEASES)
def test_awq_in_the_loader_layout_audits_clean(tmp_path: Path, release: str) -> None:
    report = audit(str(checkpoint(tmp_path)), engine=f"vllm=={release}")
    assert report.refusals == [] and report.warnings == []
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    got = {b.scheme: (b.tensors, b.modules) for b in report.buckets if b.tensors}
    assert got == {"AWQ_W4_G32": (42, 14), "unlisted": (7, 7)}
    assert {a.executed for a in report.arms} == {"W4A16-INT"}


@pytest.mark.parametrize("release", RELEASES)
def test_gptqmodel_awq_checkpoint_audits_clean(release: str) -> None:
    report = audit(str(CORPUS / PRODUCED), engine=f"vllm=={release}")
    assert report.refusals == [] and report.warnings == [] and report.notes == []
    got = {b.scheme: (b.tensors, b.modules) for b in report.buckets if b.tensors}
    assert got == {"AWQ_W4_G32_SYM": (42, 14), "unlisted": (7, 7)}
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    assert {a.executed for a in report.arms} == {"W4A16-INT"}


def test_gptqmodel_awq_with_g_idx_planted_is_refused(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.g_idx"] = zeros("I32", (128,))

    assert refusals(plant(tmp_path, PRODUCED, edit)) == {"operand-unexpected": {DOWN}}


def test_w_bit_and_q_group_size_are_read_first() -> None:
    document = json.loads(LLAMA.read_text())
    document["quantization_config"] = {
        "quant_method": "awq",
        "w_bit": 4,
        "bits": 8,
        "q_group_size": 64,
        "zero_point": True,
        "version": "gemm",
    }
    declaration = read_declaration({"config.json": json.dumps(document)})
    assert list(declaration.schemes) == ["AWQ_W4_G64"]


def test_modules_to_not_convert_skips_by_substring(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        for i in (0, 1):
            drop(t, f"model.layers.{i}.mlp.down_proj")
            t[f"model.layers.{i}.mlp.down_proj.weight"] = zeros("BF16", (64, 128))

    folder = checkpoint(tmp_path, edit, modules_to_not_convert=["down_proj"])
    report = audit(str(folder), engine="vllm")
    assert report.refusals == []
    rows = {r["module"]: r for r in report.modules}
    assert (rows[DOWN]["bucket"], rows[DOWN]["how"], rows[DOWN]["rule"]) == (
        "excluded",
        "substring",
        "down_proj",
    )


def test_without_the_list_a_plain_module_is_read_unquantized(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    report = audit(str(checkpoint(tmp_path, edit)), engine="vllm")
    assert report.refusals == []
    rows = {r["module"]: r for r in report.modules}
    assert rows[DOWN]["bucket"] == "excluded"


# --- each way an AWQ checkpoint goes wrong, refused by name -------------------------------------


def test_plain_weight_the_declaration_quantizes(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        drop(t, DOWN)
        t[f"{DOWN}.weight"] = zeros("BF16", (64, 128))

    folder = checkpoint(tmp_path, edit, modules_to_not_convert=["lm_head"])
    assert refusals(folder) == {"quantized-ships-unquantized": {DOWN}}


def test_not_converted_module_that_ships_awq_operands(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, modules_to_not_convert=["o_proj"])
    o_proj = {f"model.layers.{i}.self_attn.o_proj" for i in (0, 1)}
    assert refusals(folder) == {"unquantized-ships-quantized": o_proj}


def test_not_converting_one_shard_of_a_fused_layer(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, modules_to_not_convert=["layers.0.self_attn.k_proj"])
    found = refusals(folder)
    assert found["fused-shards-disagree"] == {"model.layers.0.self_attn.qkv_proj"}


@pytest.mark.parametrize("operand", ["qweight", "qzeros", "scales"])
def test_missing_awq_operand(tmp_path: Path, operand: str) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{DOWN}.{operand}"]

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-missing": {DOWN}}


def test_g_idx_is_no_awq_operand(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.g_idx"] = zeros("I32", (128,))

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-unexpected": {DOWN}}


def test_gptq_layout_under_an_awq_declaration(tmp_path: Path) -> None:
    """GPTQ packs along the input (``[in/8, out]``); AWQ along the output (``[in, out/8]``)."""

    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qweight"] = zeros("I32", (16, 64))

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-shape": {DOWN}}


def test_qweight_packed_for_other_bits(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qweight"] = zeros("I32", (128, 16))  # 4 a word: 8-bit packing

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-shape": {DOWN}}


def test_scales_group_count_disagrees_with_group_size(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.scales"] = zeros("F16", (2, 64))
        t[f"{DOWN}.qzeros"] = zeros("I32", (2, 8))

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-shape": {DOWN}}


def test_qzeros_group_count_disagrees(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{DOWN}.qzeros"] = zeros("I32", (2, 8))

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-shape": {DOWN}}


@pytest.mark.parametrize("bits", [8, 3])
def test_vllm_refuses_bits_other_than_4(tmp_path: Path, bits: int) -> None:
    folder = checkpoint(tmp_path, bits=bits)
    messages = [
        r.message
        for r in audit(str(folder), engine="vllm").refusals
        if r.code == "engine-refuses-declaration"
    ]
    assert messages and f"Unsupported num_bits = {bits}. Supported: 4." in messages[0]


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"bits": 5}, "bits but found 5"),
        ({"group_size": -2}, "group_size must be greater than 0 or equal to -1"),
        ({"zero_point": None}, "zero_point"),
    ],
)
def test_unreadable_awq_declaration_is_a_named_error(change: dict[str, Any], text: str) -> None:
    document = json.loads(LLAMA.read_text())
    document["quantization_config"] = {**DECLARATION, **change}
    if change.get("zero_point", True) is None:
        del document["quantization_config"]["zero_point"]
    with pytest.raises(DeclarationError, match=text):
        read_declaration({"config.json": json.dumps(document)})


@pytest.mark.parametrize("release", ["0.5.22", "0.5.23"])
def test_sglang_runs_awq_on_marlin_from_sm80_and_dequantized_below(
    tmp_path: Path, release: str
) -> None:
    """sgl-project/sglang python/sglang/srt/layers/quantization/awq/awq.py@v0.5.23:
    AWQMarlinConfig.override_quantization_method claims quant_method awq where
    is_awq_marlin_compatible holds (check_marlin_supported finds no type below sm80); else
    AWQConfig (minimum capability 75) dequantizes and runs a 16-bit matmul."""
    folder = checkpoint(tmp_path)
    engine = f"sglang=={release}"
    hopper = audit(str(folder), engine=engine, gpu="sm90")
    assert hopper.refusals == [] and hopper.warnings == []
    (arm,) = hopper.arms
    assert (arm.executed, arm.log) == (
        "W4A16-INT",
        "The model is convertible to awq_marlin during runtime. Using awq_marlin kernel.",
    )
    (turing,) = audit(str(folder), engine=engine, gpu="sm75").arms
    assert (turing.executed, turing.kernel) == ("W4A16-INT", "awq_dequantize + a 16-bit matmul")
    volta = audit(str(folder), engine=engine, gpu="sm70")
    assert {r.code for r in volta.refusals} == {"no-arm"}
    assert "Minimum capability: 75. Current capability: 70." in volta.refusals[0].message


def test_sglang_refuses_awq_of_other_than_4_bits(tmp_path: Path) -> None:
    report = audit(str(checkpoint(tmp_path, bits=8)), engine="sglang", gpu="sm90")
    messages = [r.message for r in report.refusals if r.code == "engine-refuses-declaration"]
    assert messages and (
        "Currently, only 4-bit weight quantization is supported for AWQ, but got 8 bits."
        in messages[0]
    )


def test_explain_traces_the_awq_skip(tmp_path: Path, run: Any) -> None:
    folder = checkpoint(tmp_path, modules_to_not_convert=["o_proj"])
    result = run("explain", folder, "model.layers.0.self_attn.o_proj", "-f", "json")
    assert "'o_proj' occurs inside the name" in result.stdout


def test_modules_to_not_convert_is_reported_and_diffed(tmp_path: Path) -> None:
    """The report names AWQ's exclusions as written, as it does every format's; a diff sees
    one added."""
    from qarm_audit.commands.diff import diff

    a = checkpoint(tmp_path, name="a", modules_to_not_convert=["lm_head"])
    b = checkpoint(tmp_path, name="b", modules_to_not_convert=["lm_head", DOWN])
    report = audit(str(b))
    assert report.declaration.rules == {"modules_to_not_convert": 2}
    assert report.declaration.excludes == ["lm_head", DOWN]
    config = {c.key: c for c in diff(str(a), str(b)).config}
    assert config["exclude"].only_b == [DOWN] and config["exclude"].only_a == []
    assert audit(str(checkpoint(tmp_path, name="none"))).declaration.rules == {}


@pytest.mark.parametrize(
    ("version", "warned"),
    [("gemm", False), ("GEMM", False), ("exllama", False), ("ipex", False), ("gemv", True)],
)
def test_a_version_of_another_layout_is_a_warning(
    tmp_path: Path, version: str, warned: bool
) -> None:
    report = audit(str(checkpoint(tmp_path, version=version)), engine="vllm")
    codes = [w.code for w in report.warnings]
    assert codes == (["awq-version-unread"] if warned else [])
    if warned:
        assert f"AWQ version {version!r}: vLLM reads no version" in report.warnings[0].message
    assert report.refusals == []  # the tensors are GEMM's: vLLM loads them
