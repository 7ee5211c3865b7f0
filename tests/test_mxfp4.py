"""``quant_method: mxfp4`` checkpoints (gpt-oss's native MXFP4), **not producer output**: no CPU
producer writes the format offline (transformers' quantizer downloads its kernels from the
Hub), so each checkpoint is written with the safetensors library in exactly the layout
transformers' converter saves and vLLM's loader reads (``Mxfp4ReverseDeserialize``,
huggingface/transformers src/transformers/integrations/mxfp4.py@v5.24.0;
``GptOssMxfp4MoEMethod.create_weights`` and ``_load_weights_mxfp4``,
vllm-project/vllm vllm/model_executor/layers/quantization/mxfp4.py and
vllm/model_executor/models/gpt_oss.py, 0.30-0.33): per layer ``mlp.experts`` with
``gate_up_proj_blocks`` U8 ``[E, 2I, H/32, 16]``, ``gate_up_proj_scales`` U8 ``[E, 2I, H/32]``,
``gate_up_proj_bias`` BF16 ``[E, 2I]``, ``down_proj_blocks`` U8 ``[E, H, I/32, 16]``,
``down_proj_scales`` U8 ``[E, H, I/32]``, ``down_proj_bias`` BF16 ``[E, H]``, beside a tiny
gpt-oss's BF16 attention (q/k/v/o with biases, ``sinks``), router, norms, embedding and head
(E=4, H=I=64, two layers). They live in ``tmp_path``."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import test_producers
from qarm_audit import audit
from qarm_audit.commands.explain import explain
from qarm_audit.declarations import read_declaration
from qarm_audit.errors import PatternError
from test_producers import Tensors, write_tensors, zeros

RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
E, H, INTER, HEADS, KV, HEAD_DIM, VOCAB = 4, 64, 64, 4, 2, 16, 128
EXPERTS = "model.layers.0.mlp.experts"
NOT_CONVERT = [
    "model.layers.*.self_attn",
    "model.layers.*.mlp.router",
    "model.embed_tokens",
    "lm_head",
]
CONFIG: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": H,
    "intermediate_size": INTER,
    "num_local_experts": E,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 2,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": HEAD_DIM,
    "vocab_size": VOCAB,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": NOT_CONVERT},
}


def experts(t: Tensors, name: str) -> None:
    t[f"{name}.gate_up_proj_blocks"] = zeros("U8", (E, 2 * INTER, H // 32, 16))
    t[f"{name}.gate_up_proj_scales"] = zeros("U8", (E, 2 * INTER, H // 32))
    t[f"{name}.gate_up_proj_bias"] = zeros("BF16", (E, 2 * INTER))
    t[f"{name}.down_proj_blocks"] = zeros("U8", (E, H, INTER // 32, 16))
    t[f"{name}.down_proj_scales"] = zeros("U8", (E, H, INTER // 32))
    t[f"{name}.down_proj_bias"] = zeros("BF16", (E, H))


def gpt_oss_tensors() -> Tensors:
    t: Tensors = {
        "model.embed_tokens.weight": zeros("BF16", (VOCAB, H)),
        "model.norm.weight": zeros("BF16", (H,)),
        "lm_head.weight": zeros("BF16", (VOCAB, H)),
    }
    for i in (0, 1):
        p = f"model.layers.{i}"
        t[f"{p}.input_layernorm.weight"] = zeros("BF16", (H,))
        t[f"{p}.post_attention_layernorm.weight"] = zeros("BF16", (H,))
        for leaf, out in (("q_proj", HEADS * HEAD_DIM), ("k_proj", KV * HEAD_DIM)):
            t[f"{p}.self_attn.{leaf}.weight"] = zeros("BF16", (out, H))
            t[f"{p}.self_attn.{leaf}.bias"] = zeros("BF16", (out,))
        t[f"{p}.self_attn.v_proj.weight"] = zeros("BF16", (KV * HEAD_DIM, H))
        t[f"{p}.self_attn.v_proj.bias"] = zeros("BF16", (KV * HEAD_DIM,))
        t[f"{p}.self_attn.o_proj.weight"] = zeros("BF16", (H, HEADS * HEAD_DIM))
        t[f"{p}.self_attn.o_proj.bias"] = zeros("BF16", (H,))
        t[f"{p}.self_attn.sinks"] = zeros("BF16", (HEADS,))
        t[f"{p}.mlp.router.weight"] = zeros("BF16", (E, H))
        t[f"{p}.mlp.router.bias"] = zeros("BF16", (E,))
        experts(t, f"{p}.mlp.experts")
    return t


def checkpoint(tmp_path: Path, edit: Any = None, name: str = "gpt-oss", **config: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    document = {**CONFIG, **config}
    (folder / "config.json").write_text(json.dumps(document, indent=2))
    tensors = gpt_oss_tensors()
    if edit is not None:
        edit(tensors)
    write_tensors(folder, {"model.safetensors": tensors})
    return folder


refusals = partial(test_producers.refusals, engine="vllm", gpu="sm90")


ARMS = {
    "sm80": ("W4A16-MXFP4", "Marlin"),
    "sm89": ("W4A16-MXFP4", "Marlin"),
    "sm90": ("W4A16-MXFP4", "OAI Triton (triton_kernels)"),
    "sm100": ("W4A16-MXFP4", "FlashInfer TRT-LLM MXFP4, BF16 activations"),
    "sm120": ("W4A16-MXFP4", "Marlin"),
}


@pytest.mark.parametrize("release", RELEASES)
def test_gpt_oss_in_the_loader_layout_audits_clean(tmp_path: Path, release: str) -> None:
    folder = checkpoint(tmp_path)
    for gpu, (arm, kernel) in ARMS.items():
        report = audit(str(folder), engine=f"vllm=={release}", gpu=gpu)
        assert report.verdict == "clean", (gpu, report.refusals, report.warnings)
        rows = [a for a in report.arms if a.scheme == "MXFP4"]
        assert [(a.executed, a.kernel, a.modules) for a in rows] == [(arm, kernel, 2)], gpu
    got = {b.scheme: (b.tensors, b.modules) for b in report.buckets if b.tensors}
    assert got == {"MXFP4": (12, 2), "unlisted": (29, 19)}
    assert sum(b.tensors for b in report.buckets) == report.totals.tensors
    mx = next(b for b in report.buckets if b.scheme == "MXFP4")
    assert mx.parameters == 2 * (E * 2 * INTER * H + E * 2 * INTER + E * H * INTER + E * H)
    assert report.notes == []  # GptOssForCausalLM is modelled: no architecture-not-modelled
    rows = {m["module"]: (m["bucket"], m["how"], m["rule"]) for m in report.modules}
    assert rows[EXPERTS] == ("MXFP4", "class", "RoutedExperts")
    assert rows["model.layers.0.self_attn.q_proj"] == (
        "unlisted",
        "class",
        "LinearBase (UnquantizedLinearMethod)",
    )
    router = "GateLinear" if release != "0.30.0" else "ReplicatedLinear"
    assert rows["model.layers.0.mlp.router"] == ("unlisted", "no-quant-config", router)
    assert rows["model.embed_tokens"] == ("unlisted", "not-a-linear", "VocabParallelEmbedding")
    assert rows["lm_head"] == ("unlisted", "not-a-linear", "ParallelLMHead")
    assert report.declaration.rules == {"modules_to_not_convert": 4}
    assert report.declaration.excludes == NOT_CONVERT


@pytest.mark.parametrize("release", RELEASES)
def test_below_sm80_no_arm(tmp_path: Path, release: str) -> None:
    report = audit(str(checkpoint(tmp_path)), engine=f"vllm=={release}", gpu="sm75")
    assert report.verdict == "refused"
    text = " ".join(r.message for r in report.refusals)
    assert (
        "The quantization method gpt_oss_mxfp4 is not supported for the current GPU. "
        "Minimum capability: 80. Current capability: 75." in text
    )
    assert {a.executed for a in report.arms if a.scheme == "MXFP4"} == {"none"}


def test_declaration_reads_two_keys_and_the_model_type() -> None:
    declaration = read_declaration({"config.json": json.dumps(CONFIG)})
    assert declaration.family == "mxfp4" and declaration.mxfp4 is not None
    scheme = declaration.schemes["MXFP4"]
    assert (scheme.algo, scheme.declared_arm, scheme.moe_dims) == (
        "gpt_oss_mxfp4",
        "W4A16-MXFP4",
        (E, H, INTER),
    )
    assert declaration.findings == ()
    other = read_declaration({"config.json": json.dumps({**CONFIG, "model_type": "kimi_k3"})})
    assert other.schemes["MXFP4"].algo == "mxfp4"
    extra = {**CONFIG, "quantization_config": {"quant_method": "mxfp4", "dequantize": True}}
    noted = read_declaration({"config.json": json.dumps(extra)})
    assert [f.code for f in noted.findings] == ["unknown-keys"]
    assert noted.mxfp4 is not None and noted.mxfp4.rule_counts() == {}


def test_another_model_type_is_unknown(tmp_path: Path) -> None:
    report = audit(str(checkpoint(tmp_path, model_type="kimi_k3")), engine="vllm", gpu="sm90")
    rows = [a for a in report.arms if a.scheme == "MXFP4"]
    assert [a.executed for a in rows] == ["unknown"]
    assert "GptOssMxfp4Config does not claim the checkpoint" in rows[0].reason


def test_moe_backend_other_than_auto_is_unknown(tmp_path: Path) -> None:
    report = audit(
        str(checkpoint(tmp_path)), engine="vllm", gpu="sm90", env={"moe_backend": "marlin"}
    )
    assert {a.executed for a in report.arms if a.scheme == "MXFP4"} == {"unknown"}


def test_experts_shipped_bf16_are_refused_with_the_engines_view(tmp_path: Path) -> None:
    """The producer skipped the experts by modules_to_not_convert; vLLM ignores the list."""

    def edit(t: Tensors) -> None:
        for op in (
            "gate_up_proj_blocks",
            "gate_up_proj_scales",
            "down_proj_blocks",
            "down_proj_scales",
        ):
            del t[f"{EXPERTS}.{op}"]
        t[f"{EXPERTS}.gate_up_proj"] = zeros("BF16", (E, H, 2 * INTER))
        t[f"{EXPERTS}.down_proj"] = zeros("BF16", (E, INTER, H))

    folder = checkpoint(
        tmp_path,
        edit,
        quantization_config={
            "quant_method": "mxfp4",
            "modules_to_not_convert": [*NOT_CONVERT, "model.layers.0.mlp.experts"],
        },
    )
    report = audit(str(folder), engine="vllm", gpu="sm90")
    assert {(r.code, r.module) for r in report.refusals} == {
        ("quantized-ships-unquantized", EXPERTS)
    }
    message = report.refusals[0].message
    assert "reads no modules_to_not_convert" in message and "GptOssMxfp4MoEMethod" in message
    assert {(w.code, w.module) for w in report.warnings} == {("producer-engine-disagree", EXPERTS)}


@pytest.mark.parametrize(
    ("entry", "skipped"),
    [
        # two unbounded repeats: re2 answers, as Python's re would
        ("model.*.mlp.*", {EXPERTS, "model.layers.1.mlp.experts"}),
        ("model.layers.0.mlp.exp", set()),  # the match ends inside a part of the name
        ("model.layers.0.", {EXPERTS}),  # ... or just after a dot
        ("(?:.?.?)*[xy]", set()),  # Python's re would not end on a long name; re2 answers
        ("a{4294967296}", set()),  # no valid regex: a suffix only (transformers would raise)
        ("(?:" * 1000 + "a" + ")" * 1000, set()),  # nested beyond re's parser: no regex either
    ],
)
def test_a_modules_to_not_convert_entry_is_matched_as_transformers_matches_it(
    tmp_path: Path, entry: str, skipped: set[str]
) -> None:
    config = {"quant_method": "mxfp4", "modules_to_not_convert": [*NOT_CONVERT, entry]}
    report = audit(str(checkpoint(tmp_path, quantization_config=config)), engine="vllm")
    disagree = {w.module for w in report.warnings if w.code == "producer-engine-disagree"}
    assert disagree == skipped


def test_a_modules_to_not_convert_entry_python_could_not_end_on_is_refused(
    tmp_path: Path,
) -> None:
    config = {"quant_method": "mxfp4", "modules_to_not_convert": ["(?=m)(?:..?)*s"]}
    with pytest.raises(PatternError, match=r"modules_to_not_convert.*catastrophic backtracking"):
        audit(str(checkpoint(tmp_path, quantization_config=config)), engine="vllm")


@pytest.mark.parametrize(
    ("operand", "shape"),
    [
        ("gate_up_proj_blocks", (E, 2 * INTER, H // 32, 8)),  # last dim not 16
        ("gate_up_proj_scales", (E, 2 * INTER, H // 16)),  # disagrees with the blocks
        ("down_proj_blocks", (E, H, 2 * INTER // 32, 16)),  # I from config.json is 64
        ("down_proj_bias", (E, 2 * H)),
        ("gate_up_proj_blocks", (2 * E, 2 * INTER, H // 32, 16)),  # E from config.json is 4
    ],
)
def test_blocks_scales_and_bias_shapes(
    tmp_path: Path, operand: str, shape: tuple[int, ...]
) -> None:
    def edit(t: Tensors) -> None:
        t[f"{EXPERTS}.{operand}"] = zeros(t[f"{EXPERTS}.{operand}"][0], shape)

    folder = checkpoint(tmp_path, edit)
    report = audit(str(folder), engine="vllm", gpu="sm90")
    assert {(r.code, r.tensor) for r in report.refusals} == {
        ("operand-shape", f"{EXPERTS}.{operand}")
    }


def test_shapes_checked_against_each_other_without_config_sizes(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{EXPERTS}.down_proj_blocks"] = zeros("U8", (E, H, 3, 16))

    folder = checkpoint(tmp_path, edit, num_local_experts=None)
    assert refusals(folder) == {"operand-shape": {EXPERTS}}


@pytest.mark.parametrize(
    ("sizes", "said"),
    [
        ({"hidden_size": "64"}, "hidden_size is '64'"),
        ({"hidden_size": -4}, "hidden_size is -4"),
        ({"intermediate_size": True}, "intermediate_size is True"),
        ({"num_local_experts": None}, "num_local_experts missing"),
        ({"hidden_size": [1] * 100}, "hidden_size is [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, ..."),
    ],
)
def test_unusable_config_sizes_warn_that_their_check_did_not_run(
    tmp_path: Path, sizes: dict[str, Any], said: str
) -> None:
    report = audit(str(checkpoint(tmp_path, **sizes)), engine="vllm", gpu="sm90")
    assert report.verdict == "warnings" and report.refusals == []
    (warning,) = report.warnings
    assert warning.code == "config-sizes-unread" and said in warning.message


def test_scales_not_u8_refused(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        t[f"{EXPERTS}.down_proj_scales"] = zeros("BF16", (E, H, INTER // 32))

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-dtype": {EXPERTS}}


def test_missing_scales_refused(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{EXPERTS}.gate_up_proj_scales"]

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-missing": {EXPERTS}}


def test_missing_bias_refused_for_gpt_oss(tmp_path: Path) -> None:
    def edit(t: Tensors) -> None:
        del t[f"{EXPERTS}.down_proj_bias"]

    assert refusals(checkpoint(tmp_path, edit)) == {"operand-missing": {EXPERTS}}


def test_blocks_on_a_module_the_engine_does_not_quantize(tmp_path: Path) -> None:
    router = "model.layers.1.mlp.router"

    def edit(t: Tensors) -> None:
        t[f"{router}.gate_up_proj_blocks"] = zeros("U8", (E, 2, 16))

    assert refusals(checkpoint(tmp_path, edit)) == {"unquantized-ships-quantized": {router}}


def test_explain_experts_and_attention(tmp_path: Path) -> None:
    folder = str(checkpoint(tmp_path))
    experts = explain(folder, EXPERTS, engine="vllm", gpu="sm90")
    module = experts.modules[0]
    assert (module.bucket, module.how, module.rule) == ("MXFP4", "class", "RoutedExperts")
    assert [a.step for a in module.attempts] == ["modules_to_not_convert", "layer class"]
    q = explain(folder, "model.layers.0.self_attn.q_proj", engine="vllm", gpu="sm90").modules[0]
    assert (q.bucket, q.how) == ("unlisted", "class")
    assert "transformers' quantizer skips it for 'model.layers.*.self_attn'" in q.attempts[0].detail


def test_json_is_deterministic(tmp_path: Path) -> None:
    from qarm_audit.report.render_json import render_json

    folder = str(checkpoint(tmp_path))
    first = render_json(audit(folder, engine="vllm", gpu="sm90"))
    assert first == render_json(audit(folder, engine="vllm", gpu="sm90"))


def test_sglang_below_sm80_no_arm_else_unknown(tmp_path: Path) -> None:
    folder = str(checkpoint(tmp_path))
    low = audit(folder, engine="sglang", gpu="sm75")
    assert "The quantization method mxfp4 is not supported for the current GPU. " in " ".join(
        r.message for r in low.refusals
    )
    high = audit(folder, engine="sglang", gpu="sm90")
    assert {a.executed for a in high.arms if a.scheme == "MXFP4"} == {"unknown"}
