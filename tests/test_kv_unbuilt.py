"""A declared KV cache for which the engine's quant config builds no KV-cache method.

vLLM 0.30-0.33 (vllm-project/vllm vllm/model_executor/layers/quantization/modelopt.py,
``ModelOptQuantConfigBase.from_config`` and ``ModelOptMixedPrecisionConfig.get_quant_method``):
from config.json's flat form a KV algorithm is taken only from a ``kv_cache_scheme`` mapping of
type float and 8 bits, and the mixed-precision config builds its KV-cache method only where it
took one; the single-algorithm configs build it for every attention layer. The KV-cache dtype is
set apart from that (``get_kv_cache_quant_algo_string`` in ``vllm/utils/torch_utils.py``), from
the scheme string too, so the KV cache is quantized while the shipped scales have no parameter
(``maybe_remap_kv_scale_name``: "... is not loaded.") and stay 1.0.

SGLang 0.5.22-0.5.23 (sgl-project/sglang python/sglang/srt/layers/quantization/modelopt_quant.py
``ModelOptFp8Config.from_config``, ``ModelOptMixedPrecisionConfig.from_config``): where
``kv_cache_scheme`` is no mapping both read ``kv_cache_quant_algo``, and the KV-cache dtype comes
from that same reading (``srt/mem_cache/kv_cache_dtype.py``): no method, no quantized KV cache.

ModelOpt 0.47 writes an FP8 KV cache as a mapping and an NVFP4 one as the bare string
``"NVFP4"`` (fixtures/producers/modelopt-mixed-fp8kv, -mixed-nvfp4kv).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, fp8_modelopt, llama, write_checkpoint
from qarm_audit import audit
from qarm_audit.report.model import Report

CORPUS = REPO / "fixtures" / "producers"
VLLM = ["vllm==0.30.0", "vllm==0.31.0", "vllm==0.32.0", "vllm==0.33.0"]
SGLANG = ["sglang==0.5.22", "sglang==0.5.23"]
ATTENTION = [f"model.layers.{n}.self_attn" for n in range(2)]


def scales(shape: tuple[int, ...] = ()) -> dict[str, Any]:
    out = {}
    for attention in ATTENTION:
        out[f"{attention}.k_proj.k_scale"] = ("F32", shape)
        out[f"{attention}.v_proj.v_scale"] = ("F32", shape)
    return out


def fp8_layers(tensors: dict[str, Any]) -> dict[str, Any]:
    """A MIXED_PRECISION map listing every module that ships an FP8 weight as FP8."""
    return {
        name.removesuffix(".weight"): {"quant_algo": "FP8"}
        for name, (dtype, _) in tensors.items()
        if dtype == "F8_E4M3"
    }


def flat(root: Path, algo: str, kv: dict[str, Any], shipped: dict[str, Any], engine: str) -> Report:
    """ModelOpt FP8 projections declared in config.json's flat form as ``algo`` (every
    projection listed FP8 under MIXED_PRECISION), with the KV-cache keys ``kv``."""
    tensors = {**llama(2, fp8_modelopt), **shipped}
    block: dict[str, Any] = {
        "quant_method": "modelopt",
        "quant_algo": algo,
        "ignore": ["lm_head"],
        "producer": {"name": "modelopt", "version": "0.47.0"},
        **kv,
    }
    if algo == "MIXED_PRECISION":
        block["quantized_layers"] = fp8_layers(tensors)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "quantization_config": block,
    }
    folder = write_checkpoint(root, {"model.safetensors": tensors}, {"config.json": config})
    return audit(str(folder), engine=engine, gpu="sm100")


def codes(report: Report) -> list[str]:
    return sorted(f.code for f in [*report.refusals, *report.warnings] if f.code.startswith("kv-"))


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_drops_the_scales_of_a_modelopt_mixed_nvfp4_kv_cache(engine: str) -> None:
    report = audit(str(CORPUS / "modelopt-mixed-nvfp4kv"), engine=engine, gpu="sm100")
    assert [(f.code, f.severity) for f in report.warnings] == [("kv-scales-unloaded", "warning")]
    assert report.refusals == []
    message = report.warnings[0].message
    assert message.startswith(
        "config.json: quantization_config declares a KV cache of NVFP4 for MIXED_PRECISION "
        f"and 4 k/v scales are shipped; vllm v{engine.split('==')[1]} builds no KV-cache method"
    )
    assert "the KV cache is quantized with the attention layers' default scales of 1.0" in message
    assert "vllm/model_executor/layers/quantization/modelopt.py@" in message


@pytest.mark.parametrize("engine", SGLANG)
def test_sglang_reads_no_kv_algorithm_from_the_nvfp4_string(engine: str) -> None:
    report = audit(str(CORPUS / "modelopt-mixed-nvfp4kv"), engine=engine, gpu="sm100")
    assert [f.code for f in report.warnings] == ["kv-cache-ignored"]
    message = report.warnings[0].message
    assert "the KV cache stays in the model's dtype" in message
    assert "; it builds no KV-cache method for it: ModelOptMixedPrecisionConfig" in message
    assert "still built" not in message


@pytest.mark.parametrize("engine", [*VLLM, *SGLANG])
def test_a_modelopt_mixed_fp8_kv_cache_mapping_builds_the_method(engine: str) -> None:
    report = audit(str(CORPUS / "modelopt-mixed-fp8kv"), engine=engine, gpu="sm100")
    assert report.verdict == "clean", [*report.refusals, *report.warnings]


def test_the_method_is_built_for_a_mapping_of_float_8_only(tmp_path: Path) -> None:
    fp8 = {"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}
    assert codes(flat(tmp_path / "fp8", "MIXED_PRECISION", fp8, scales(), "vllm")) == []
    fp4 = {"kv_cache_scheme": {"num_bits": 4, "type": "float"}}
    assert codes(flat(tmp_path / "fp4", "MIXED_PRECISION", fp4, scales(), "vllm")) == [
        "kv-scales-unloaded"
    ]
    # the flat form's kv_cache_quant_algo is not read for the method at all
    key = {"kv_cache_quant_algo": "FP8"}
    assert codes(flat(tmp_path / "key", "MIXED_PRECISION", key, scales(), "vllm")) == [
        "kv-scales-unloaded"
    ]
    # nested (hf_quant_config.json's shape) reads kv_cache_quant_algo: built
    tensors = {**llama(2, fp8_modelopt), **scales()}
    quantization = {
        "quant_algo": "MIXED_PRECISION",
        "kv_cache_quant_algo": "NVFP4",
        "exclude_modules": ["lm_head"],
        "quantized_layers": fp8_layers(tensors),
    }
    nested = write_checkpoint(
        tmp_path / "nested",
        {"model.safetensors": tensors},
        {
            "config.json": {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
            "hf_quant_config.json": {
                "producer": {"name": "modelopt", "version": "0.47.0"},
                "quantization": quantization,
            },
        },
    )
    assert codes(audit(str(nested), engine="vllm", gpu="sm100")) == []


def test_a_single_algorithm_config_builds_the_method_whatever_the_form(tmp_path: Path) -> None:
    nvfp4 = {"kv_cache_scheme": "NVFP4"}
    assert codes(flat(tmp_path / "v", "FP8", nvfp4, scales(), "vllm")) == []


def test_unloaded_scales_are_not_checked_and_none_shipped_is_missing(tmp_path: Path) -> None:
    nvfp4 = {"kv_cache_scheme": "NVFP4"}
    misshapen = flat(tmp_path / "shape", "MIXED_PRECISION", nvfp4, scales((8,)), "vllm")
    assert codes(misshapen) == ["kv-scales-unloaded"]
    assert codes(flat(tmp_path / "none", "MIXED_PRECISION", nvfp4, {}, "vllm")) == [
        "kv-scales-missing"
    ]


def test_sglang_takes_the_kv_dtype_from_its_own_reading(tmp_path: Path) -> None:
    """SGLang's FP8 config: a string kv_cache_scheme "FP8" is no mapping, so kv_cache_quant_algo
    is read, and without one neither a method nor an FP8 KV cache is made; with one, both."""
    string = {"kv_cache_scheme": "FP8"}
    report = flat(tmp_path / "s", "FP8", string, scales(), "sglang")
    assert codes(report) == ["kv-cache-ignored"]
    assert report.warnings[0].message.startswith(
        "config.json: quantization_config declares a KV cache of FP8; sglang v0.5.23 builds "
        "no KV-cache method for it: ModelOptFp8Config takes a KV algorithm"
    )
    assert "and takes its KV-cache dtype from that same reading: with --kv-cache-dtype auto" in (
        report.warnings[0].message
    )
    # no scale is loaded: a misshapen one fails nothing
    assert codes(flat(tmp_path / "shape", "FP8", string, scales((8,)), "sglang")) == [
        "kv-cache-ignored"
    ]
    keyed = {"kv_cache_scheme": "FP8", "kv_cache_quant_algo": "FP8"}
    assert codes(flat(tmp_path / "k", "FP8", keyed, scales(), "sglang")) == []
    # the mixed-precision config takes any mapping: NVFP4 builds the method, loads the scales
    # (and SGLang's KV cache stays in the model's dtype for NVFP4)
    fp4 = {"kv_cache_scheme": {"num_bits": 4, "type": "float"}}
    mixed = flat(tmp_path / "m", "MIXED_PRECISION", fp4, scales((8,)), "sglang")
    assert codes(mixed) == ["kv-cache-ignored", *["kv-scale-shape"] * 4]
    (ignored,) = [f for f in mixed.warnings if f.code == "kv-cache-ignored"]
    assert "its KV-cache method is still built and loads the shipped scales" in ignored.message


# vLLM 0.30-0.33 DeepSeek V2/V3 with multi-head latent attention: the ModelOpt KV-cache method
# is built on MLAAttention (self_attn.mla_attn.mla_attn), but AutoWeightsLoader maps every
# KV-scale name through QuantizationConfig.get_cache_scale_mapper (layers/quantization/
# base_config.py) to .attn.<k|v>_scale, and DeepseekV2Model.load_weights' own
# maybe_remap_kv_scale_name (model_loader/weight_utils.py) then adds another .attn: the scale is
# skipped as "... is not loaded." and the KV cache runs with scales of 1.0.


def modelopt_deepseek(
    root: Path,
    mla: bool = True,
    scale: tuple[int, ...] = (),
    architecture: str = "DeepseekV3ForCausalLM",
    kv_names: tuple[str, str] = ("k_scale", "v_scale"),
    kimi: bool = False,
    kv_value: float | None = None,
    config_extra: dict[str, Any] | None = None,
    kv_algo: str = "FP8",
) -> Path:
    from test_native_fp8 import deepseek_config, deepseek_v3

    tensors: dict[str, Any] = {}
    for name, (dtype, shape) in deepseek_v3().items():
        module, _, operand = name.rpartition(".")
        if operand == "weight_scale_inv":
            tensors[f"{module}.weight_scale"] = ("F32", ())
            tensors[f"{module}.input_scale"] = ("F32", ())
        else:
            tensors[name] = (dtype, shape)
    for n in (0, 1):
        for kv_name in kv_names:
            spec = ("F32", scale) if kv_value is None else ("F32", scale, np.float32(kv_value))
            tensors[f"model.layers.{n}.self_attn.{kv_name}"] = spec
    config = deepseek_config()
    del config["quantization_config"]
    config["architectures"] = [architecture]
    config.update(config_extra or {})
    if not mla:
        del config["kv_lora_rank"]
    quant = {
        "producer": {"name": "modelopt", "version": "0.47.0"},
        "quantization": {
            "quant_algo": "FP8",
            "kv_cache_quant_algo": kv_algo,
            "exclude_modules": ["lm_head", "model.layers.1.mlp.gate"],
        },
    }
    documents = {"config.json": config, "hf_quant_config.json": quant}
    if kimi:
        tensors, documents = as_kimi_k25(tensors, documents)
    return write_checkpoint(root, {"model.safetensors": tensors}, documents)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_drops_the_kv_scales_of_deepseek_mla(tmp_path: Path, engine: str) -> None:
    report = audit(str(modelopt_deepseek(tmp_path / "mla")), engine=engine, gpu="sm90")
    assert codes(report) == ["kv-scales-unloaded"]
    message = report.warnings[0].message
    assert "loads no shipped KV scale into its multi-head latent attention" in message
    assert "4 k/v scales are shipped" in message
    # SGLang is not modelled so; a config without kv_lora_rank is not MLA here
    assert "kv-scales-unloaded" not in codes(
        audit(str(modelopt_deepseek(tmp_path / "sg")), engine="sglang", gpu="sm90")
    )
    no_mla = audit(str(modelopt_deepseek(tmp_path / "mha", mla=False)), engine=engine, gpu="sm90")
    assert "kv-scales-unloaded" not in codes(no_mla)
    # a scale the loader would refuse is never loaded either
    misshapen = audit(str(modelopt_deepseek(tmp_path / "shape", scale=(8,))), engine=engine)
    assert codes(misshapen) == ["kv-scales-unloaded"]


# DeepSeek V3.2 and GLM-5 (vllm/models/deepseek_v32 on CUDA) build their sparse MLA attention at
# self_attn itself; the same mapper and maybe_remap_kv_scale_name leave every scale unloaded,
# including the self_attn.k_proj.k_scale that ModelOpt writes for any attention module
# (modelopt/torch/export/quant_utils.py _KV_CACHE_REPLACEMENTS, nvidia-modelopt 0.47.0). What
# a scale of 1.0 means depends on the backend's cache format, which the warning says.
@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("architecture", ["GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"])
@pytest.mark.parametrize("kv_names", [("k_proj.k_scale", "v_proj.v_scale"), ("k_scale", "v_scale")])
def test_vllm_drops_the_kv_scales_of_sparse_mla(
    tmp_path: Path, engine: str, architecture: str, kv_names: tuple[str, str]
) -> None:
    root = modelopt_deepseek(tmp_path / "dsa", architecture=architecture, kv_names=kv_names)
    report = audit(str(root), engine=engine, gpu="sm100")
    assert codes(report) == ["kv-scales-unloaded"]
    message = report.warnings[0].message
    assert "loads no shipped KV scale into its sparse multi-head latent attention" in message
    assert "DeepseekV32Model.load_weights" in message
    assert "4 k/v scales are shipped" in message
    assert "standard fp8 (FlashInfer's sparse MLA" in message
    assert "fp8_ds_mla format" in message
    assert "default scales of 1.0" not in message  # the entry's own effect, not the rule's
    no_mla = audit(str(modelopt_deepseek(tmp_path / "mha", mla=False, architecture=architecture)))
    assert "kv-scales-unloaded" not in codes(no_mla)


def as_kimi_k25(
    tensors: dict[str, Any], documents: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A DeepSeek-V3 checkpoint as Kimi K2.5 ships its text model: every tensor under
    ``language_model.``, the DeepSeek config as ``text_config``, the declaration where it was."""
    config = dict(documents["config.json"])
    kimi: dict[str, Any] = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
    }
    if "quantization_config" in config:
        kimi["quantization_config"] = config.pop("quantization_config")
    kimi["text_config"] = config
    renamed = {f"language_model.{name}": tensor for name, tensor in tensors.items()}
    return renamed, {**documents, "config.json": kimi}


# Kimi K2.5 (kimi_k25.py) builds its text model as DeepseekV2ForCausalLM: the same MLA attention,
# the same loader, through an AutoWeightsLoader of its own that applies the mapper first.
@pytest.mark.parametrize("engine", VLLM)
def test_vllm_reads_the_kv_cache_of_kimi_k25_as_of_deepseek_mla(
    tmp_path: Path, engine: str
) -> None:
    modelopt = audit(str(modelopt_deepseek(tmp_path / "mo", kimi=True)), engine=engine)
    assert codes(modelopt) == ["kv-scales-unloaded"]
    assert "language_model" not in modelopt.warnings[0].message
    ct = audit(str(ct_deepseek(tmp_path / "ct", kimi=True)), engine=engine, gpu="sm90")
    assert codes(ct) == ["kv-cache-ignored"]


def ct_deepseek(
    root: Path, kimi: bool = False, architecture: str = "DeepseekV3ForCausalLM"
) -> Path:
    """The same DeepSeek-V3 with compressed-tensors FP8 weights and an FP8 KV cache, its scales
    on the attention module as llm-compressor writes them."""
    from conftest import CT_FP8
    from test_native_fp8 import deepseek_config, deepseek_v3

    tensors: dict[str, Any] = {}
    for name, (dtype, shape) in deepseek_v3().items():
        module, _, operand = name.rpartition(".")
        tensors[f"{module}.weight_scale" if operand == "weight_scale_inv" else name] = (
            ("F32", ()) if operand == "weight_scale_inv" else (dtype, shape)
        )
    for n in (0, 1):
        tensors[f"model.layers.{n}.self_attn.k_scale"] = ("F32", ())
        tensors[f"model.layers.{n}.self_attn.v_scale"] = ("F32", ())
    config = deepseek_config()
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": CT_FP8}},
        "ignore": ["lm_head", "re:.*mlp\\.gate$"],
        "kv_cache_scheme": {**CT_FP8, "dynamic": False},
    }
    config["architectures"] = [architecture]
    documents: dict[str, Any] = {"config.json": config}
    if kimi:
        tensors, documents = as_kimi_k25(tensors, documents)
    return write_checkpoint(root, {"model.safetensors": tensors}, documents)


@pytest.mark.parametrize("engine", VLLM)
def test_vllm_keeps_a_compressed_tensors_kv_cache_of_deepseek_mla_unquantized(
    tmp_path: Path, engine: str
) -> None:
    report = audit(str(ct_deepseek(tmp_path / "ct")), engine=engine, gpu="sm90")
    assert codes(report) == ["kv-cache-ignored"]
    message = report.warnings[0].message
    assert "builds no KV-cache method on its multi-head latent attention" in message
    assert "the KV cache is the model's dtype" in message


# GLM-4.7-Flash (Glm4MoeLiteForCausalLM) builds DeepseekV2MLAAttention and ends its own loader in
# the same maybe_remap_kv_scale_name; MistralLarge3ForCausalLM is DeepseekV3ForCausalLM with a
# mapper of Mistral names that maps no KV-scale name: a checkpoint of either in transformers'
# names fares as DeepSeek-V3's.
@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("architecture", ["Glm4MoeLiteForCausalLM", "MistralLarge3ForCausalLM"])
def test_vllm_reads_the_kv_cache_of_other_deepseek_mla_models_alike(
    tmp_path: Path, engine: str, architecture: str
) -> None:
    root = modelopt_deepseek(
        tmp_path / "mo", architecture=architecture, kv_names=("k_proj.k_scale", "v_proj.v_scale")
    )
    modelopt = audit(str(root), engine=engine, gpu="sm90")
    assert codes(modelopt) == ["kv-scales-unloaded"]
    assert "self_attn.mla_attn.mla_attn" in modelopt.warnings[0].message
    ct = audit(str(ct_deepseek(tmp_path / "ct", architecture=architecture)), engine=engine)
    assert codes(ct) == ["kv-cache-ignored"]


# DeepSeek V3.2 and GLM-5 under a compressed-tensors config: no KV-cache method on the sparse MLA
# attention and no cache dtype from the kv_cache_scheme, so the KV cache is the model's dtype,
# except on sm12x, where the sparse backend stores even an auto cache as fp8_ds_mla.
@pytest.mark.parametrize("engine", VLLM)
@pytest.mark.parametrize("architecture", ["GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"])
def test_vllm_keeps_a_compressed_tensors_kv_cache_of_sparse_mla_unquantized_below_sm120(
    tmp_path: Path, engine: str, architecture: str
) -> None:
    root = str(ct_deepseek(tmp_path / "ct", architecture=architecture))
    for gpu in ("sm90", "sm100", None):
        report = audit(root, engine=engine, gpu=gpu)
        assert codes(report) == ["kv-cache-ignored"], gpu
        assert "DeepseekV32Attention is an MLAAttention" in report.warnings[0].message
    assert codes(audit(root, engine=engine, gpu="sm120")) == []
