"""Native ``quant_method: fp8`` checkpoints (DeepSeek, Qwen3-FP8, transformers'
FineGrainedFP8Config): declaration, membership as vLLM's ``Fp8Config`` decides it, and every
tensor against the scheme. Folders are real safetensors files; the producer manifests come from
transformers' own quantizer (fixtures/producers/make_finegrained_fp8.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import INTER, H, Tensors, llama, plain, write_checkpoint

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"
BLOCK = [32, 32]


def block_fp8(module: str, out: int, inp: int) -> Tensors:
    return {
        f"{module}.weight": ("F8_E4M3", (out, inp)),
        f"{module}.weight_scale_inv": ("F32", (-(-out // 32), -(-inp // 32))),
    }


def unquantized(tensors: Tensors, module: str, out: int, inp: int) -> dict[str, Any]:
    """``tensors`` with ``module`` shipped as a plain BF16 weight."""
    t = {k: v for k, v in tensors.items() if not k.startswith(module + ".")}
    t.update(plain(module, out, inp))
    return t


def config(**quant: Any) -> dict[str, Any]:
    q: dict[str, Any] = {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "weight_block_size": BLOCK,
        "fmt": "e4m3",
    }
    q.update(quant)
    q = {k: v for k, v in q.items() if v is not None}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "quantization_config": q}


def audit(run: Any, root: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run("audit", root, "-f", "json", "--gpu", "H100", *extra)
    return result.exit_code, json.loads(result.stdout)


def rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["module"]: r for r in report["modules"]}


def codes(report: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((r["code"], r.get("module") or "") for r in report["refusals"])


def checkpoint(tmp_path: Path, tensors: Tensors, **quant: Any) -> Path:
    return write_checkpoint(
        tmp_path / "ckpt", {"model.safetensors": tensors}, {"config.json": config(**quant)}
    )


def test_block_fp8_resolves_every_module_and_the_buckets_sum(tmp_path: Path, run: Any) -> None:
    tensors = unquantized(llama(spell=block_fp8), "model.layers.1.mlp.down_proj", H, INTER)
    root = checkpoint(tmp_path, tensors, ignored_layers=["model.layers.1.mlp.down_proj"])
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    assert report["declaration"]["family"] == "fp8"
    by = rows(report)
    assert by["model.layers.0.self_attn.q_proj"]["bucket"] == "FP8_BLOCK_32x32"
    assert by["model.layers.0.self_attn.q_proj"]["how"] == "class"
    assert (
        by["model.layers.1.mlp.down_proj"]["bucket"],
        by["model.layers.1.mlp.down_proj"]["how"],
    ) == (
        "excluded",
        "exact",
    )
    assert by["lm_head"]["how"] == "not-a-linear"  # ParallelLMHead is no LinearBase
    assert by["model.embed_tokens"]["bucket"] == "unlisted"
    assert sum(b["tensors"] for b in report["buckets"]) == report["totals"]["tensors"]
    assert report["totals"]["tensors"] == len(tensors)


def test_modules_to_not_convert_stands_in_only_for_an_empty_ignored_layers(
    tmp_path: Path, run: Any
) -> None:
    tensors = unquantized(llama(spell=block_fp8), "model.layers.0.mlp.down_proj", H, INTER)
    root = checkpoint(
        tmp_path,
        tensors,
        ignored_layers=[],
        modules_to_not_convert=["model.layers.0.mlp.down_proj"],
    )
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    assert rows(report)["model.layers.0.mlp.down_proj"]["bucket"] == "excluded"
    both = checkpoint(
        tmp_path / "b",
        tensors,
        ignored_layers=["model.layers.1.mlp.down_proj"],
        modules_to_not_convert=["model.layers.0.mlp.down_proj"],
    )
    code, report = audit(run, both)
    # vLLM reads modules_to_not_convert only when ignored_layers is empty: layer 0's plain
    # down_proj is declared FP8, and layer 1's FP8 one is ignored
    assert ("quantized-ships-unquantized", "model.layers.0.mlp.down_proj") in codes(report)
    assert ("unquantized-ships-quantized", "model.layers.1.mlp.down_proj") in codes(report)


def test_a_missing_weight_scale_inv_is_refused_by_name(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    del tensors["model.layers.0.self_attn.o_proj.weight_scale_inv"]
    code, report = audit(run, checkpoint(tmp_path, tensors))
    assert code == 1
    assert codes(report) == [("operand-missing", "model.layers.0.self_attn.o_proj")]
    assert report["refusals"][0]["tensor"] == "model.layers.0.self_attn.o_proj.weight_scale_inv"


def test_a_scale_grid_of_the_wrong_shape_is_refused(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    # gate_proj is [128, 64]: block 32x32 gives a [4, 2] grid; [2, 4] is the transpose
    tensors["model.layers.1.mlp.gate_proj.weight_scale_inv"] = ("F32", (2, 4))
    code, report = audit(run, checkpoint(tmp_path, tensors))
    assert code == 1
    assert codes(report) == [("operand-shape", "model.layers.1.mlp.gate_proj")]
    assert "block 32x32" in report["refusals"][0]["message"]


def test_the_grid_rounds_up(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    code, report = audit(run, checkpoint(tmp_path, tensors, weight_block_size=[32, 48]))
    assert code == 1  # every grid was written for 32x32
    tensors = llama(
        spell=lambda m, o, i: {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale_inv": ("F32", (-(-o // 32), -(-i // 48))),
        }
    )
    code, report = audit(run, checkpoint(tmp_path / "b", tensors, weight_block_size=[32, 48]))
    assert code == 0, report["refusals"]


def test_a_bf16_weight_under_a_quantized_module_is_refused(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    del tensors["model.layers.0.mlp.up_proj.weight_scale_inv"]
    tensors["model.layers.0.mlp.up_proj.weight"] = ("BF16", (INTER, H))
    _code, report = audit(run, checkpoint(tmp_path, tensors))
    assert codes(report) == [("quantized-ships-unquantized", "model.layers.0.mlp.up_proj")]


def test_a_stray_scale_on_an_ignored_module_is_refused(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    tensors["model.layers.0.mlp.down_proj.weight"] = ("BF16", (H, INTER))
    root = checkpoint(tmp_path, tensors, ignored_layers=["model.layers.0.mlp.down_proj"])
    code, report = audit(run, root)
    assert code == 1
    assert codes(report) == [("unquantized-ships-quantized", "model.layers.0.mlp.down_proj")]


def test_an_e5m2_weight_is_refused(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    tensors["model.layers.0.self_attn.o_proj.weight"] = ("F8_E5M2", (H, H))
    _code, report = audit(run, checkpoint(tmp_path, tensors))
    assert codes(report) == [("operand-dtype", "model.layers.0.self_attn.o_proj")]


def test_a_fused_layer_is_skipped_only_when_every_shard_is(tmp_path: Path, run: Any) -> None:
    tensors = dict(llama(spell=block_fp8))
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    for name in shards:
        del tensors[f"{name}.weight_scale_inv"]
        tensors[f"{name}.weight"] = ("BF16", (H, H))
    code, report = audit(run, checkpoint(tmp_path, tensors, ignored_layers=shards))
    assert code == 0, report["refusals"]
    assert {rows(report)[s]["bucket"] for s in shards} == {"excluded"}
    # the fused name itself, as Step-3.5-Flash lists it
    fused = ["model.layers.0.self_attn.qkv_proj"]
    code, report = audit(run, checkpoint(tmp_path / "f", tensors, ignored_layers=fused))
    assert code == 0, report["refusals"]
    assert {rows(report)[s]["rule"] for s in shards} == {"model.layers.0.self_attn.qkv_proj"}
    # some shards but not all: vLLM raises
    code, report = audit(run, checkpoint(tmp_path / "s", tensors, ignored_layers=shards[:1]))
    assert code == 1
    fused_rows = [r for r in report["refusals"] if r["code"] == "fused-shards-disagree"]
    assert [r["module"] for r in fused_rows] == ["model.layers.0.self_attn.qkv_proj"]
    assert (
        "Detected some but not all shards of model.layers.0.self_attn.qkv_proj"
        in (fused_rows[0]["message"])
    )


def moe_tensors(experts_fp8: bool = True) -> dict[str, Any]:
    t: dict[str, Any] = {
        "model.embed_tokens.weight": ("BF16", (256, H)),
        "model.norm.weight": ("BF16", (H,)),
        "lm_head.weight": ("BF16", (256, H)),
    }
    p = "model.layers.0"
    t[f"{p}.input_layernorm.weight"] = ("BF16", (H,))
    t[f"{p}.post_attention_layernorm.weight"] = ("BF16", (H,))
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        t.update(block_fp8(f"{p}.self_attn.{proj}", H, H))
    t.update(block_fp8(f"{p}.mlp.gate", 4, H))
    for e in range(4):
        for proj, (o, i) in {
            "gate_proj": (32, H),
            "up_proj": (32, H),
            "down_proj": (H, 32),
        }.items():
            name = f"{p}.mlp.experts.{e}.{proj}"
            t.update(block_fp8(name, o, i) if experts_fp8 else plain(name, o, i))
    return t


def moe_config(**quant: Any) -> dict[str, Any]:
    doc = config(**quant)
    doc["architectures"] = ["Qwen3MoeForCausalLM"]
    doc["model_type"] = "qwen3_moe"
    return doc


def test_an_experts_layer_is_skipped_by_any_entry_that_contains_its_name(
    tmp_path: Path, run: Any
) -> None:
    root = write_checkpoint(
        tmp_path / "moe",
        {"model.safetensors": moe_tensors(experts_fp8=False)},
        # vLLM: the MoE layer's prefix inside an entry holding "experts" skips the whole layer
        {"config.json": moe_config(ignored_layers=["model.layers.0.mlp.experts.0.gate_proj"])},
    )
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    experts = {m: r for m, r in rows(report).items() if ".experts." in m}
    assert len(experts) == 12
    assert {(r["bucket"], r["how"]) for r in experts.values()} == {("excluded", "experts")}
    root = write_checkpoint(
        tmp_path / "fp8",
        {"model.safetensors": moe_tensors()},
        {"config.json": moe_config()},
    )
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    assert rows(report)["model.layers.0.mlp.experts.3.down_proj"]["rule"] == "FusedMoE"
    # vLLM's GateLinear takes the quant config: a router FP8 as any other linear
    assert rows(report)["model.layers.0.mlp.gate"]["bucket"] == "FP8_BLOCK_32x32"


def test_per_tensor_static_fp8_needs_its_input_scale(tmp_path: Path, run: Any) -> None:
    def spell(m: str, o: int, i: int) -> Tensors:
        return {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale": ("F32", ()),
            f"{m}.input_scale": ("F32", ()),
        }

    tensors = dict(llama(spell=spell))
    root = checkpoint(tmp_path, tensors, activation_scheme="static", weight_block_size=None)
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    assert rows(report)["model.layers.0.mlp.up_proj"]["bucket"] == "FP8"
    del tensors["model.layers.0.mlp.up_proj.input_scale"]
    tensors["model.layers.1.mlp.up_proj.weight_scale_inv"] = ("F32", (4, 2))
    root = checkpoint(tmp_path / "b", tensors, activation_scheme="static", weight_block_size=None)
    code, report = audit(run, root)
    assert codes(report) == [
        ("operand-missing", "model.layers.0.mlp.up_proj"),
        ("operand-unexpected", "model.layers.1.mlp.up_proj"),
    ]


def test_vllm_refuses_block_fp8_with_static_activations(tmp_path: Path, run: Any) -> None:
    root = checkpoint(tmp_path, llama(spell=block_fp8), activation_scheme="static")
    code, report = audit(run, root)
    assert code == 1
    [refusal] = [r for r in report["refusals"] if r["code"] == "engine-refuses-declaration"]
    assert (
        "The block-wise quantization only supports dynamic activation scheme"
        in (refusal["message"])
    )


@pytest.mark.parametrize(
    ("quant", "where"),
    [
        ({"activation_scheme": "sometimes"}, "activation_scheme"),
        ({"activation_scheme": None}, "activation_scheme"),
        ({"weight_block_size": [128]}, "weight_block_size"),
        ({"weight_block_size": [128, 0]}, "weight_block_size"),
    ],
)
def test_a_declaration_vllm_cannot_read_is_refused_by_name(
    tmp_path: Path, run: Any, quant: dict[str, Any], where: str
) -> None:
    root = checkpoint(tmp_path, llama(spell=block_fp8), **quant)
    result = run("audit", root, "-f", "json")
    assert result.exit_code == 2
    assert where in result.stderr
    assert "Traceback" not in result.stderr


def test_below_sm75_vllm_has_no_arm_and_below_sm90_block_fp8_runs_weight_only(
    tmp_path: Path, run: Any
) -> None:
    root = checkpoint(tmp_path, llama(spell=block_fp8))
    low = run("audit", root, "--gpu", "sm70").stdout
    assert "The quantization method fp8 is not supported for the current GPU" in low
    a100 = run("audit", root, "--gpu", "A100", "-f", "json")
    arms = json.loads(a100.stdout)["arms"]
    assert {(a["executed"], a.get("kernel")) for a in arms} == {("W8A16-FP8", "Marlin")}


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_every_modelled_vllm_release_gives_the_block_arm(
    tmp_path: Path, run: Any, release: str
) -> None:
    root = checkpoint(tmp_path, llama(spell=block_fp8))
    report = json.loads(run("audit", root, "-f", "json", f"--engine=vllm=={release}").stdout)
    executed = {(a["executed"], a.get("gpu")) for a in report["arms"]}
    assert ("W8A8-FP8", "sm90+") in executed
    assert ("W8A16-FP8", "sm80-sm89") in executed


def test_transformers_finegrained_fp8_llama_is_clean(run: Any) -> None:
    path = FIXTURES / "transformers-finegrained-fp8-llama.manifest.json"
    code, report = audit(run, path)
    assert code == 0, report["refusals"]
    assert rows(report)["model.layers.1.mlp.down_proj"]["bucket"] == "excluded"


def test_transformers_finegrained_fp8_moe_is_refused_where_vllm_cannot_load_it(run: Any) -> None:
    """transformers 5.17 writes each expert's scale grid squeezed to one dimension ([2] for a
    [1, 2] grid) and leaves the router unquantized without listing it."""
    path = FIXTURES / "transformers-finegrained-fp8-qwen3moe.manifest.json"
    code, report = audit(run, path)
    assert code == 1
    found = {(r["code"], r["module"]) for r in report["refusals"]}
    assert ("operand-shape", "model.layers.0.mlp.experts.0.gate_proj") in found
    assert ("quantized-ships-unquantized", "model.layers.0.mlp.gate") in found
    assert {c for c, _ in found} == {"operand-shape", "quantized-ships-unquantized"}


def test_ue8m0_scales_may_ship_as_e8m0_only_where_declared(tmp_path: Path, run: Any) -> None:
    def spell(m: str, o: int, i: int) -> Tensors:
        return {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale_inv": ("F8_E8M0", (-(-o // 32), -(-i // 32))),
        }

    code, report = audit(run, checkpoint(tmp_path, llama(spell=spell), scale_fmt="ue8m0"))
    assert code == 0, report["refusals"]
    code, report = audit(run, checkpoint(tmp_path / "f", llama(spell=spell), scale_fmt="float"))
    assert code == 1
    assert {r["code"] for r in report["refusals"]} == {"operand-dtype"}


def test_a_fused_shard_that_is_no_whole_number_of_blocks_is_refused(
    tmp_path: Path, run: Any
) -> None:
    # q_proj and k_proj are 64 rows: no multiple of block_n 48; v_proj, the last shard, may be
    def spell(m: str, o: int, i: int) -> Tensors:
        return {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale_inv": ("F32", (-(-o // 48), -(-i // 32))),
        }

    root = checkpoint(tmp_path, llama(layers=1, spell=spell), weight_block_size=[48, 32])
    _code, report = audit(run, root)
    found = [r for r in report["refusals"] if r["code"] == "block-shape-indivisible"]
    assert sorted((r["module"], r["tensor"]) for r in found) == [
        ("model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.gate_proj.weight"),
        ("model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.k_proj.weight"),
        ("model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.q_proj.weight"),
    ]
    assert "is not divisible by weight quantization block_n = 48" in found[0]["message"]


def test_a_moe_whose_intermediate_size_is_no_whole_number_of_blocks_is_refused(
    tmp_path: Path, run: Any
) -> None:
    tensors = moe_tensors()  # experts' gate/up are 32 rows
    root = write_checkpoint(
        tmp_path / "moe",
        {"model.safetensors": tensors},
        {"config.json": moe_config(weight_block_size=[64, 32])},
    )
    _code, report = audit(run, root)
    found = [r for r in report["refusals"] if r["code"] == "block-shape-indivisible"]
    assert [r["module"] for r in found] == ["model.layers.0.mlp.experts"]


@pytest.mark.parametrize("shape", [(32 * 64,), ()])
def test_an_expert_weight_of_another_rank_is_refused_not_an_internal_error(
    tmp_path: Path, run: Any, shape: tuple[int, ...]
) -> None:
    tensors = moe_tensors()
    tensors["model.layers.0.mlp.experts.0.gate_proj.weight"] = ("F8_E4M3", shape)
    root = write_checkpoint(
        tmp_path / "moe",
        {"model.safetensors": tensors},
        {"config.json": moe_config(weight_block_size=[64, 32])},
    )
    code, report = audit(run, root)
    assert code == 1
    refused = {(r["code"], r["module"]) for r in report["refusals"]}
    assert ("operand-shape", "model.layers.0.mlp.experts.0.gate_proj") in refused, refused


def deepseek_v3(hidden: int = 256) -> dict[str, Any]:
    """DeepSeek-V3's layout at its real MLA widths (q_lora_rank 1536, kv_lora_rank 512 + rope
    64 = 576 rows of kv_a_proj_with_mqa): one dense layer, one MoE layer with a shared expert."""

    def fp8(m: str, o: int, i: int) -> Tensors:
        return {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale_inv": ("F32", (-(-o // 128), -(-i // 128))),
        }

    t: dict[str, Any] = {
        "model.embed_tokens.weight": ("BF16", (512, hidden)),
        "model.norm.weight": ("BF16", (hidden,)),
        "lm_head.weight": ("BF16", (512, hidden)),
    }
    for n in (0, 1):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", (hidden,))
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", (hidden,))
        t[f"{p}.self_attn.q_a_layernorm.weight"] = ("BF16", (1536,))
        t[f"{p}.self_attn.kv_a_layernorm.weight"] = ("BF16", (512,))
        t.update(fp8(f"{p}.self_attn.q_a_proj", 1536, hidden))
        t.update(fp8(f"{p}.self_attn.q_b_proj", 4 * 192, 1536))
        t.update(fp8(f"{p}.self_attn.kv_a_proj_with_mqa", 576, hidden))
        t.update(fp8(f"{p}.self_attn.kv_b_proj", 4 * 256, 512))
        t.update(fp8(f"{p}.self_attn.o_proj", hidden, 4 * 128))
    for proj, (o, i) in {"gate_proj": (512, hidden), "up_proj": (512, hidden)}.items():
        t.update(fp8(f"model.layers.0.mlp.{proj}", o, i))
    t.update(fp8("model.layers.0.mlp.down_proj", hidden, 512))
    t["model.layers.1.mlp.gate.weight"] = ("BF16", (4, hidden))
    t["model.layers.1.mlp.gate.e_score_correction_bias"] = ("F32", (4,))
    for e in [*(f"experts.{k}" for k in range(4)), "shared_experts"]:
        t.update(fp8(f"model.layers.1.mlp.{e}.gate_proj", 128, hidden))
        t.update(fp8(f"model.layers.1.mlp.{e}.up_proj", 128, hidden))
        t.update(fp8(f"model.layers.1.mlp.{e}.down_proj", hidden, 128))
    return t


def deepseek_config(**quant: Any) -> dict[str, Any]:
    doc = config(weight_block_size=[128, 128], **quant)
    doc.update(
        architectures=["DeepseekV3ForCausalLM"],
        model_type="deepseek_v3",
        q_lora_rank=1536,
        kv_lora_rank=512,
        first_k_dense_replace=1,
        n_routed_experts=4,
        n_shared_experts=1,
        num_hidden_layers=2,
    )
    return doc


def test_deepseek_v3_block_fp8_on_its_layer_tree(tmp_path: Path, run: Any) -> None:
    tensors = deepseek_v3()
    root = write_checkpoint(
        tmp_path / "v3", {"model.safetensors": tensors}, {"config.json": deepseek_config()}
    )
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    by = rows(report)
    # q_a_proj and kv_a_proj_with_mqa are one layer; kv_a's 576 rows end in a partial block,
    # which the last shard may
    assert by["model.layers.0.self_attn.kv_a_proj_with_mqa"]["bucket"] == "FP8_BLOCK_128x128"
    assert by["model.layers.1.mlp.gate"]["how"] == "no-quant-config"  # built without one
    assert sum(b["tensors"] for b in report["buckets"]) == len(tensors)
    # a shared expert's projection is skipped by vLLM's experts stage
    skip = ["model.layers.1.mlp.shared_experts.down_proj"]
    tensors = unquantized(tensors, skip[0], 256, 128)
    root = write_checkpoint(
        tmp_path / "skip",
        {"model.safetensors": tensors},
        {"config.json": deepseek_config(ignored_layers=skip)},
    )
    code, report = audit(run, root)
    assert code == 0, report["refusals"]
    assert (rows(report)[skip[0]]["bucket"], rows(report)[skip[0]]["how"]) == (
        "excluded",
        "experts",
    )


# --- SGLang -------------------------------------------------------------------------------------
# sgl-project/sglang python/sglang/srt/layers/quantization/fp8.py@v0.5.23 (the same in 0.5.22):
# Fp8Config (minimum capability 80) builds Fp8LinearMethod, weight-only FP8 Marlin on
# 80 <= cc < 89 or under SGLANG_FORCE_FP8_MARLIN=1, else W8A8. models/llama.py renames a shipped
# .weight_scale_inv to .weight_scale before the lookup, while the block method registers
# weight_scale_inv: the block scales of a Llama-family checkpoint are never loaded.


def sglang(run: Any, root: Path, gpu: str, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run("audit", root, "-f", "json", "--engine", "sglang", "--gpu", gpu, *extra)
    return result.exit_code, json.loads(result.stdout)


# SGLang builds a MoE router without a quant method: DeepSeek's MoEGate is a bare weight
# parameter (models/deepseek_v2.py@v0.5.23), so the official FP8 checkpoints' BF16 gate, which
# their quantization_config does not list, is what SGLang loads.
def test_sglang_takes_deepseek_v3_block_fp8_with_its_bf16_router(tmp_path: Path, run: Any) -> None:
    root = write_checkpoint(
        tmp_path / "v3", {"model.safetensors": deepseek_v3()}, {"config.json": deepseek_config()}
    )
    for gpu in ("sm90", "sm100"):
        code, report = sglang(run, root, gpu)
        assert code == 0, report["refusals"]
        assert rows(report)["model.layers.1.mlp.gate"]["how"] == "no-quant-config"


def test_sglang_runs_native_fp8_weight_only_below_sm89(tmp_path: Path, run: Any) -> None:
    root = write_checkpoint(
        tmp_path / "qwen",
        {"model.safetensors": llama(spell=block_fp8)},
        {"config.json": {**config(), "architectures": ["Qwen3ForCausalLM"]}},
    )
    arms = lambda report: {(a["executed"], a.get("kernel")) for a in report["arms"]}  # noqa: E731
    code, ampere = sglang(run, root, "sm80")
    assert code == 0 and arms(ampere) == {("W8A16-FP8", "Marlin")}
    assert "Weight-only FP8 compression will be used" in ampere["arms"][0]["log"]
    _, hopper = sglang(run, root, "sm90")
    assert {a["executed"] for a in hopper["arms"]} == {"W8A8-FP8"}
    _, forced = sglang(run, root, "sm90", "--env", "SGLANG_FORCE_FP8_MARLIN=1")
    assert arms(forced) == {("W8A16-FP8", "Marlin")}
    code, turing = sglang(run, root, "sm75")
    assert code == 1 and {r["code"] for r in turing["refusals"]} == {"no-arm"}
    assert "Minimum capability: 80. Current capability: 75." in turing["refusals"][0]["message"]


def test_sglang_refuses_block_fp8_with_static_activations(tmp_path: Path, run: Any) -> None:
    root = checkpoint(tmp_path, llama(spell=block_fp8), activation_scheme="static")
    code, report = sglang(run, root, "sm90")
    assert code == 1
    messages = [
        r["message"] for r in report["refusals"] if r["code"] == "engine-refuses-declaration"
    ]
    assert messages and "only supports dynamic activation scheme" in messages[0]


@pytest.mark.parametrize("release", ["0.5.22", "0.5.23"])
def test_sglang_never_loads_a_llama_checkpoints_block_scales(run: Any, release: str) -> None:
    path = FIXTURES / "transformers-finegrained-fp8-llama.manifest.json"
    code, report = sglang(run, path, "sm90", f"--engine=sglang=={release}")
    assert code == 1
    (refusal,) = report["refusals"]
    assert refusal["code"] == "operand-unloaded"
    assert refusal["tensor"].endswith(".weight_scale_inv")
    assert "LlamaForCausalLM weight loader renames it to weight_scale" in refusal["message"]
    assert "torch.finfo(torch.float32).min" in refusal["message"]
    # the same folder declared as another architecture loads its scales
    assert audit(run, path)[0] == 0  # vLLM


def test_sglang_loads_the_block_scales_of_other_architectures(tmp_path: Path, run: Any) -> None:
    root = write_checkpoint(
        tmp_path / "qwen",
        {"model.safetensors": llama(spell=block_fp8)},
        {"config.json": {**config(), "architectures": ["Qwen3ForCausalLM"]}},
    )
    assert sglang(run, root, "sm90")[0] == 0
    llama_root = checkpoint(tmp_path, llama(spell=block_fp8))
    code, report = sglang(run, llama_root, "sm90")
    assert code == 1 and {r["code"] for r in report["refusals"]} == {"operand-unloaded"}


@pytest.mark.parametrize("release", ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"])
def test_vllm_mistral3_renames_block_scales_away(tmp_path: Path, run: Any, release: str) -> None:
    """vllm-project/vllm vllm/model_executor/models/mistral3.py: hf_to_vllm_mapper renames
    .weight_scale_inv to .weight_scale (Mistral's per-tensor FP8), which the block method does
    not register: AutoWeightsLoader raises."""
    root = write_checkpoint(
        tmp_path / "m3",
        {"model.safetensors": llama(spell=block_fp8)},
        {"config.json": {**config(), "architectures": ["Mistral3ForConditionalGeneration"]}},
    )
    _, report = audit(run, root, f"--engine=vllm=={release}")
    unloaded = [r for r in report["refusals"] if r["code"] == "operand-unloaded"]
    assert unloaded and "AutoWeightsLoader raises as it loads" in unloaded[0]["message"]


def qwen2_moe(gate_spell: Any) -> dict[str, Any]:
    """A Qwen2-MoE-shaped tensor set in FP8 W8A8 (per tensor), no architecture modelled: two
    layers of 2 routed experts, a shared expert and its gate, written by ``gate_spell``."""

    def fp8(m: str, o: int, i: int) -> dict[str, Any]:
        return {
            f"{m}.weight": ("F8_E4M3", (o, i)),
            f"{m}.weight_scale": ("F32", ()),
            f"{m}.input_scale": ("F32", ()),
        }

    t: dict[str, Any] = {
        "model.embed_tokens.weight": ("BF16", (256, 128)),
        "model.norm.weight": ("BF16", (128,)),
        "lm_head.weight": ("BF16", (256, 128)),
    }
    for n in (0, 1):
        p = f"model.layers.{n}"
        t[f"{p}.input_layernorm.weight"] = ("BF16", (128,))
        t[f"{p}.post_attention_layernorm.weight"] = ("BF16", (128,))
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.update(fp8(f"{p}.self_attn.{proj}", 128, 128))
        t[f"{p}.mlp.gate.weight"] = ("BF16", (2, 128))
        for e in ("experts.0", "experts.1", "shared_expert"):
            t.update(fp8(f"{p}.mlp.{e}.gate_proj", 64, 128))
            t.update(fp8(f"{p}.mlp.{e}.up_proj", 64, 128))
            t.update(fp8(f"{p}.mlp.{e}.down_proj", 128, 64))
        t.update(gate_spell(f"{p}.mlp.shared_expert_gate"))
    return t


# vLLM and SGLang build a MoE's shared-expert gate without a quant config (a ReplicatedLinear
# with quant_config=None, or SGLang's torch.nn.Linear): where no layer facts say so, the
# generic tree does too.
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_shared_expert_gate_is_built_without_a_quant_config(
    tmp_path: Path, run: Any, engine: str
) -> None:
    from conftest import CT_FP8

    config = {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "num_hidden_layers": 2,
        "num_experts": 2,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": CT_FP8,
                    "input_activations": {**CT_FP8, "dynamic": False},
                }
            },
            "ignore": ["lm_head", "re:.*mlp\\.gate$"],
        },
    }
    quantized = qwen2_moe(
        lambda m: {
            f"{m}.weight": ("F8_E4M3", (1, 128)),
            f"{m}.weight_scale": ("F32", ()),
            f"{m}.input_scale": ("F32", ()),
        }
    )
    root = write_checkpoint(
        tmp_path / "q", {"model.safetensors": quantized}, {"config.json": config}
    )
    result = run("audit", root, "-f", "json", "--engine", engine, "--gpu", "sm90")
    report = json.loads(result.stdout)
    refused = {(f["code"], f["module"]) for f in report["refusals"]}
    assert refused == {
        ("unquantized-ships-quantized", f"model.layers.{n}.mlp.shared_expert_gate") for n in (0, 1)
    }
    plain_gate = qwen2_moe(lambda m: {f"{m}.weight": ("BF16", (1, 128))})
    root = write_checkpoint(
        tmp_path / "p", {"model.safetensors": plain_gate}, {"config.json": config}
    )
    result = run("audit", root, "-f", "json", "--engine", engine, "--gpu", "sm90")
    assert json.loads(result.stdout)["refusals"] == []
