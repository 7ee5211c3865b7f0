"""Every refusal class fires by name through the CLI, and stays silent on its look-alike shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    INTER,
    PROJ,
    H,
    fp8_modelopt,
    llama,
    modelopt_file,
    nvfp4_modelopt,
    plain,
    write_checkpoint,
)
from qarm_audit import audit

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


def seed_like(n: int, proj: str) -> str:
    return "FP8" if proj in ATTN else "W4A16_NVFP4"


def spell_seed(module: str, out: int, inp: int):
    return (
        fp8_modelopt(module, out, inp)
        if module.rsplit(".", 1)[1] in ATTN
        else nvfp4_modelopt(module, out, inp)
    )


def layers_map(layers: int = 2) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in range(layers):
        for proj in PROJ:
            group = "self_attn" if proj in ATTN else "mlp"
            algo = seed_like(n, proj)
            out[f"model.layers.{n}.{group}.{proj}"] = (
                {"quant_algo": algo} if algo == "FP8" else {"quant_algo": algo, "group_size": 16}
            )
    return out


def mixed(
    tmp_path: Path,
    tensors: dict[str, Any],
    layers: dict[str, Any] | None = None,
    excludes: list[str] | None = None,
    kv: str | None = None,
) -> Path:
    documents = {
        "config.json": {"model_type": "llama"},
        "hf_quant_config.json": modelopt_file(
            "MIXED_PRECISION", excludes, kv, layers or layers_map()
        ),
    }
    return write_checkpoint(tmp_path / "ckpt", {"model.safetensors": tensors}, documents)


def codes(report) -> list[str]:
    return [r.code for r in report.refusals]


def refused(run, path: Path, code: str, module: str, *extra: str) -> dict[str, Any]:
    result = run("audit", path, "-f", "json", *extra)
    assert result.exit_code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    hits = [r for r in report["refusals"] if r["code"] == code]
    assert hits, report["refusals"]
    assert any(r["module"] == module for r in hits), hits
    return report


def test_baseline_is_clean(tmp_path: Path, run) -> None:
    path = mixed(tmp_path, llama(spell=spell_seed))
    result = run("audit", path)
    assert result.exit_code == 0, result.stdout


# --- declared FP8, shipped NVFP4 (and the reverse) ------------------------------------------


def test_fp8_declared_nvfp4_shipped_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.1.self_attn.o_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(nvfp4_modelopt(m))
    refused(run, mixed(tmp_path, t), "spelling-mismatch", m)


def test_nvfp4_declared_fp8_shipped_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.0.mlp.down_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(fp8_modelopt(m, H, INTER))
    refused(run, mixed(tmp_path, t), "spelling-mismatch", m)


def test_nvfp4_declared_with_input_scale_shipped_is_silent(tmp_path: Path) -> None:
    """The sibling shape: W4A16_NVFP4 declared, input_scale shipped anyway."""
    report = audit(
        str(
            mixed(
                tmp_path,
                llama(
                    spell=lambda m, o, i: (
                        fp8_modelopt(m, o, i)
                        if m.rsplit(".", 1)[1] in ATTN
                        else nvfp4_modelopt(m, o, i, input_scale=True)
                    )
                ),
            )
        )
    )
    assert codes(report) == []
    assert [n.code for n in report.notes if "some-gpus" not in n.code] == ["input-scale-unread"]


# --- declared unquantized, shipped quantized ----------------------------------------------


def test_unlisted_module_shipping_scales_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed, lm_head=fp8_modelopt("lm_head", 256, H))
    refused(run, mixed(tmp_path, t), "unquantized-ships-quantized", "lm_head")


def test_excluded_module_shipping_scales_is_refused(tmp_path: Path, run) -> None:
    t = llama(
        spell=lambda m, o, i: nvfp4_modelopt(m, o, i, input_scale=True),
        lm_head=nvfp4_modelopt("lm_head", 256, H, input_scale=True),
    )
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head*"])}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    report = refused(run, path, "unquantized-ships-quantized", "lm_head")
    assert "excluded (wildcard 'lm_head*')" in report["refusals"][0]["message"]


def test_no_declaration_at_all_shipping_scales_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, {"config.json": {}})
    report = refused(run, path, "unquantized-ships-quantized", "model.layers.0.mlp.up_proj")
    assert report["declaration"]["family"] == "absent"


def test_kv_scale_on_an_unquantized_module_is_not_a_quantized_spelling(tmp_path: Path) -> None:
    t = llama(spell=spell_seed)
    t["model.layers.0.self_attn.k_proj.k_scale"] = ("F32", ())
    t["model.layers.0.self_attn.v_proj.v_scale"] = ("F32", ())
    t["lm_head.k_scale"] = ("F32", ())  # a bf16 module shipping a KV scale
    report = audit(str(mixed(tmp_path, t, kv="FP8")))
    assert codes(report) == []
    assert {b.scheme: b.tensors for b in report.buckets}["kv_cache"] == 3


def test_excluded_bf16_module_is_silent(tmp_path: Path) -> None:
    t = llama(spell=lambda m, o, i: nvfp4_modelopt(m, o, i, input_scale=True))
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])}
    report = audit(str(write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)))
    assert codes(report) == []


# --- declared quantized, shipped plain ----------------------------------------------------


def test_declared_nvfp4_shipping_bf16_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.1.mlp.gate_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(plain(m, INTER, H))
    refused(run, mixed(tmp_path, t), "quantized-ships-unquantized", m)


def test_prefix_container_with_plain_parameters_is_silent(tmp_path: Path) -> None:
    """The seed's linear_attn containers: A_log and dt_bias under a listed child."""
    t = llama(spell=spell_seed)
    t["model.layers.0.self_attn.A_log"] = ("F32", (4,))
    report = audit(str(mixed(tmp_path, t)))
    assert codes(report) == []
    row = next(m for m in report.modules if m["module"] == "model.layers.0.self_attn")
    assert (row["bucket"], row["how"]) == ("FP8", "prefix")


# --- an algorithm with no arm -------------------------------------------------------------


def mxfp8(module: str, out: int, inp: int) -> dict[str, Any]:
    return {
        f"{module}.weight": ("F8_E4M3", (out, inp)),
        f"{module}.weight_scale": ("U8", (out, inp // 32)),
    }


def test_mxfp8_declared_has_no_arm_in_the_seed_engine(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.0.mlp.down_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(mxfp8(m, H, INTER))
    layers = layers_map()
    layers[m] = {"quant_algo": "MXFP8"}
    report = refused(run, mixed(tmp_path, t, layers), "no-arm", m, "--engine", "name-probe")
    assert codes_of(report) == ["no-arm"]


def test_mxfp8_listed_nowhere_never_fires(tmp_path: Path) -> None:
    """The seed: an MXFP8 log line is not an MXFP8 module; nothing MXFP8 is declared here."""
    report = audit(str(mixed(tmp_path, llama(spell=spell_seed))))
    assert "no-arm" not in codes(report)


def codes_of(report: dict[str, Any]) -> list[str]:
    return sorted({r["code"] for r in report["refusals"]})


# --- unseen or unclassified operand families ------------------------------------------------


def test_awq_triple_on_a_declared_fp8_module_is_refused_not_unquantized(
    tmp_path: Path, run
) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.0.self_attn.o_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(
        {
            f"{m}.qweight": ("I32", (H // 8, H)),
            f"{m}.qzeros": ("I32", (1, H // 8)),
            f"{m}.scales": ("F16", (1, H)),
        }
    )
    report = refused(run, mixed(tmp_path, t), "spelling-mismatch", m)
    assert "awq-gptq" in report["refusals"][0]["message"]


def test_unclassified_operand_is_refused_and_bucketed(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.0.mlp.down_proj"
    t[f"{m}.weight_scale_3"] = ("F32", ())
    report = refused(run, mixed(tmp_path, t), "unclassified-operand", m)
    assert {b["scheme"]: b["tensors"] for b in report["buckets"]}["unclassified"] == 1


def test_plain_parameters_that_mention_scale_are_not_unclassified(tmp_path: Path) -> None:
    t = llama(spell=spell_seed)
    t["model.logit_scale"] = ("F32", ())
    t["model.layers.0.layer_scale"] = ("F32", (H,))
    assert codes(audit(str(mixed(tmp_path, t)))) == []


# --- declared module ships nothing --------------------------------------------------------


def test_declared_module_that_ships_nothing_is_refused(tmp_path: Path, run) -> None:
    layers = layers_map()
    layers["model.layers.7.mlp.down_proj"] = {"quant_algo": "FP8"}
    refused(
        run,
        mixed(tmp_path, llama(spell=spell_seed), layers),
        "declared-module-missing",
        "model.layers.7.mlp.down_proj",
    )


def test_lone_declaration_never_reports_missing_modules(run) -> None:
    from conftest import REALWORLD

    result = run("audit", REALWORLD / "aic-deepseek-v4-flash-nvfp4" / "hf_quant_config.json")
    assert result.exit_code == 0


# --- fused shards declared differently ------------------------------------------------------


def test_fused_shards_declared_differently_are_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    m = "model.layers.1.self_attn.k_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(nvfp4_modelopt(m))
    layers = layers_map()
    layers[m] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
    refused(
        run,
        mixed(tmp_path, t, layers),
        "fused-shards-disagree",
        "model.layers.1.self_attn.qkv_proj",
    )


def test_partially_excluded_fused_shards_are_refused(tmp_path: Path, run) -> None:
    t = llama(spell=lambda m, o, i: nvfp4_modelopt(m, o, i, input_scale=True))
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["model.layers.0.mlp.gate_proj"])}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    refused(run, path, "fused-shards-disagree", "model.layers.0.mlp.gate_up_proj")


def test_unfused_siblings_declared_differently_are_silent(tmp_path: Path) -> None:
    """o_proj and down_proj are not fused with anything: different schemes are fine."""
    report = audit(str(mixed(tmp_path, llama(spell=spell_seed))))
    assert "fused-shards-disagree" not in codes(report)


# --- operand dtype, shape, presence ---------------------------------------------------------


def test_wrong_scale_dtype_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    t["model.layers.0.mlp.up_proj.weight_scale_2"] = ("BF16", ())
    refused(run, mixed(tmp_path, t), "operand-dtype", "model.layers.0.mlp.up_proj")


def test_wrong_scale_shape_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    t["model.layers.0.mlp.up_proj.weight_scale"] = ("F8_E4M3", (INTER, H // 32))
    report = refused(run, mixed(tmp_path, t), "operand-shape", "model.layers.0.mlp.up_proj")
    assert "group 16" in report["refusals"][0]["message"]


def test_missing_required_operand_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed)
    del t["model.layers.1.self_attn.v_proj.input_scale"]
    refused(run, mixed(tmp_path, t), "operand-missing", "model.layers.1.self_attn.v_proj")


def test_nvfp4_w4a4_declared_without_input_scale_is_refused(tmp_path: Path, run) -> None:
    t = llama(spell=lambda m, o, i: nvfp4_modelopt(m, o, i, input_scale=False))
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    refused(run, path, "operand-missing", "model.layers.0.mlp.up_proj")


# --- declarations that cannot be read -------------------------------------------------------


def test_unreadable_declaration_is_refused_never_unquantized(tmp_path: Path, run) -> None:
    config = {"quantization_config": {"quant_method": "hqq", "nbits": 4, "group_size": 64}}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": llama()}, {"config.json": config})
    report = refused(run, path, "declaration-unreadable", "")
    assert "quant_method 'hqq'" in report["refusals"][0]["message"]


@pytest.mark.parametrize("fail_on,expected", [("refusal", 0), ("warning", 1), ("never", 0)])
def test_fail_on_threshold(tmp_path: Path, run, fail_on: str, expected: int) -> None:
    path = mixed(tmp_path, llama(spell=spell_seed), kv="FP8")  # kv-scales-missing: a warning
    assert run("audit", path, "--fail-on", fail_on).exit_code == expected


def test_refusal_exit_code_cannot_be_hidden_by_the_default(tmp_path: Path, run) -> None:
    t = llama(spell=spell_seed, lm_head=fp8_modelopt("lm_head", 256, H))
    assert run("audit", mixed(tmp_path, t)).exit_code == 1
    assert run("audit", mixed(tmp_path / "x", t), "--fail-on", "never").exit_code == 0


def test_modelopt_nvfp4_declared_compressed_tensors_spelling_shipped_is_refused(
    tmp_path: Path, run
) -> None:
    """Same family, other producer: the engine's ModelOpt loader finds no ``weight``."""
    t = llama(spell=spell_seed)
    m = "model.layers.0.mlp.down_proj"
    for k in [k for k in t if k.startswith(m + ".")]:
        del t[k]
    t.update(
        {
            f"{m}.weight_packed": ("U8", (H, INTER // 2)),
            f"{m}.weight_scale": ("F8_E4M3", (H, INTER // 16)),
            f"{m}.weight_global_scale": ("F32", (1,)),
        }
    )
    report = refused(run, mixed(tmp_path, t), "spelling-mismatch", m)
    assert "compressed-tensors spelling" in report["refusals"][0]["message"]


def test_experts_alike_are_counted_by_how_each_resolved(tmp_path: Path) -> None:
    """Experts with one layout and one scheme, listed one by one in layer 0 and through their
    container in layer 1: the bucket's membership split keeps the two apart."""
    t: dict[str, Any] = {}
    layers: dict[str, Any] = {"model.layers.1.mlp.experts": {"quant_algo": "NVFP4"}}
    for layer in (0, 1):
        for e in range(2):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                module = f"model.layers.{layer}.mlp.experts.{e}.{proj}"
                t.update(nvfp4_modelopt(module))
                if layer == 0:
                    layers[module] = {"quant_algo": "NVFP4", "group_size": 16}
    report = audit(str(mixed(tmp_path, t, layers)))
    (bucket,) = [b for b in report.buckets if b.scheme == "NVFP4"]
    assert (bucket.modules, bucket.membership) == (12, {"exact": 6, "experts": 6})
