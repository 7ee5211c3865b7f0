"""Engine releases: choosing one, the facts that differ between them, the kernels and flags
each selects, and SGLang's routing of ModelOpt algorithms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    MANIFESTS,
    PROJ,
    REPO,
    fp8_modelopt,
    llama,
    modelopt_file,
    nvfp4_modelopt,
    plain,
    write_checkpoint,
)
from qarm_audit import audit
from qarm_audit.engines.profile import BUILTIN, load_profile, modelled_releases
from qarm_audit.errors import ExitCode, ProfileError
from qarm_audit.report.model import Report

W4A4 = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
RELEASES = REPO / "src" / "qarm_audit" / "engines" / "releases"


def arm(report: Report, scheme: str, gpu: str | None) -> Any:
    rows = [a for a in report.arms if a.scheme == scheme and a.gpu == gpu]
    assert len(rows) == 1, report.arms
    return rows[0]


def nvfp4_static(module: str, out: int, inp: int) -> dict[str, Any]:
    return nvfp4_modelopt(module, out, inp, input_scale=True)


def single(tmp_path: Path, algo: str, spell: Any) -> Path:
    documents = {"hf_quant_config.json": modelopt_file(algo, ["lm_head"])}
    return write_checkpoint(tmp_path / algo, {"model.safetensors": llama(spell=spell)}, documents)


# --- choosing a release --------------------------------------------------------------------------


def test_the_modelled_releases() -> None:
    assert modelled_releases("vllm") == ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    assert modelled_releases("sglang") == ["0.5.22", "0.5.23"]
    assert modelled_releases("name-probe") == []
    assert load_profile("vllm").version == "v0.34.0"
    assert load_profile("sglang").version == "v0.5.23"
    old = load_profile("vllm==0.31.0")
    assert (old.version, old.commit, old.layers) == ("v0.31.0", "db9527a46", "vllm-0.31.0")
    assert "vLLM v0.31.0" in old.description


@pytest.mark.parametrize("spec", ["vllm==0.29.0", "sglang==0.5.21", "name-probe==1"])
def test_an_unmodelled_release_is_a_usage_error_listing_the_modelled(run, spec: str) -> None:
    with pytest.raises(ProfileError):
        load_profile(spec)
    result = run("audit", W4A4, "--engine", spec)
    assert result.exit_code == ExitCode.BAD_INPUT == 2
    assert result.stderr.startswith("qarm: error: ")
    if not spec.startswith("name-probe"):
        name = spec.split("==")[0]
        assert all(f"{name}=={r}" in result.stderr for r in modelled_releases(name))


def test_every_rule_of_every_release_cites_its_own_commit() -> None:
    for name in BUILTIN:
        for release in modelled_releases(name):
            profile = load_profile(f"{name}=={release}")
            facts = json.loads((RELEASES / f"{name}-{release}.json").read_text())
            assert facts["release"] == release
            for item in [*profile.rules, *profile.load_errors]:
                if item.source:
                    assert f"@{profile.commit} L" in item.source, item.source


def test_the_linear_backend_choices_are_the_release_s_own() -> None:
    for release in modelled_releases("vllm"):
        facts = json.loads((RELEASES / f"vllm-{release}.json").read_text())["facts"]
        choices = load_profile(f"vllm=={release}").env["linear_backend"].choices
        assert choices == facts["linear_backends"]


def test_humming_priority_is_a_fact_of_0_32_0_on() -> None:
    for release in modelled_releases("vllm"):
        facts = json.loads((RELEASES / f"vllm-{release}.json").read_text())["facts"]
        newer = release >= "0.32.0"
        assert facts["humming_priority"] is newer
        assert facts["humming_preferred"] == ([90] if newer else [])
        assert facts["humming_nvfp4_input_schema"] is (release >= "0.31.0")


def test_the_engine_flag_in_the_cli(run) -> None:
    old = run("audit", W4A4, "--engine", "vllm==0.30.0", "--gpu", "H100", "-f", "json")
    data = json.loads(old.stdout)
    assert data["engine"]["version"] == "v0.30.0"
    nvfp4 = next(a for a in data["arms"] if a["scheme"] == "NVFP4")
    assert nvfp4["kernel"] == "Marlin" and "@ced6857af" in nvfp4["source"]
    assert "vllm==0.32.0" in run("audit", "--help").stdout


# --- vLLM kernels and flags ------------------------------------------------------------------


def test_vllm_unmodelled_backends_are_unknown_never_a_confident_arm(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    for backend in ("flashinfer_trtllm", "flashinfer_cudnn", "fbgemm"):
        report = audit(str(path), gpu="sm90", env={"linear_backend": backend})
        row = arm(report, "NVFP4", "sm90")
        assert row.executed == "unknown" and "not modelled" in row.reason
        # no prediction is no clean: the arm not modelled is a warning
        assert report.verdict == "warnings"
        assert [f.code for f in report.warnings] == ["arm-unknown"]


def test_vllm_flashinfer_cutedsl_runs_w4a4_weight_only_on_sm12x(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    env = {"linear_backend": "flashinfer_cutedsl"}
    sm120 = arm(audit(str(path), gpu="RTX 5090", env=env), "NVFP4", "sm120")
    assert (sm120.executed, sm120.kernel) == ("W4A16-NVFP4", "FlashInfer CuTe-DSL W4A16")
    assert arm(audit(str(path), gpu="B200", env=env), "NVFP4", "sm100").executed == "W4A4-NVFP4"
    hopper = audit(str(path), gpu="H100", env=env)
    assert [f.code for f in hopper.refusals] and hopper.verdict == "refused"


@pytest.mark.parametrize("backend", ["b12x", "flashinfer_b12x"])
def test_vllm_b12x_backends_refuse_below_sm120(tmp_path: Path, backend: str) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    for gpu in ("H100", "B200"):
        report = audit(str(path), gpu=gpu, env={"linear_backend": backend})
        assert {f.code for f in report.refusals} == {"no-arm"}
        assert "Blackwell 12x" in report.refusals[0].message
    sm120 = audit(str(path), gpu="sm120", env={"linear_backend": backend})
    assert arm(sm120, "NVFP4", "sm120").executed == "unknown"


def test_vllm_emulation_runs_emulated_w4a4_everywhere(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    report = audit(str(path), env={"linear_backend": "emulation"})
    row = arm(report, "NVFP4", None)
    assert row.executed == "W4A4-NVFP4" and row.kernel and row.kernel.startswith("Emulation")
    assert report.verdict == "clean"


def test_vllm_humming_backend_follows_its_input_schema_fallback(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    env = {"linear_backend": "humming"}
    assert arm(audit(str(path), gpu="sm120", env=env), "NVFP4", "sm120").executed == "W4A4-NVFP4"
    low = arm(audit(str(path), gpu="B200", env=env), "NVFP4", "sm100")
    assert low.executed == "W4A16-NVFP4" and "input-schema fallback" in low.reason
    old = audit(str(path), gpu="sm120", env=env, engine="vllm==0.30.0")
    assert arm(old, "NVFP4", "sm120").executed == "W4A16-NVFP4"


def test_vllm_backends_without_an_nvfp4_kernel_fall_back_to_auto(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    auto = arm(audit(str(path), gpu="H100"), "NVFP4", "sm90")
    triton = arm(audit(str(path), gpu="H100", env={"linear_backend": "triton"}), "NVFP4", "sm90")
    assert (
        (triton.executed, triton.kernel)
        == (auto.executed, auto.kernel)
        == (
            "W4A16-NVFP4",
            "Humming",
        )
    )


def test_vllm_hopper_runs_humming_for_nvfp4_moe_and_weight_only_nvfp4_from_0_32_0() -> None:
    """prioritize_humming on sm90: the NVFP4 MoE oracle and the weight-only registry too."""
    producers = REPO / "fixtures" / "producers"
    for release, kernel in (
        ("0.31.0", "Marlin"),
        ("0.32.0", "Humming"),
        ("0.33.0", "Humming"),
        ("0.34.0", "Humming"),
    ):
        moe = audit(str(producers / "modelopt-moe-nvfp4"), gpu="H100", engine=f"vllm=={release}")
        (experts,) = [a for a in moe.arms if a.kernel and a.kernel.endswith(" MoE")]
        assert (experts.executed, experts.kernel) == ("W4A16-NVFP4", f"{kernel} MoE")
        # 0.34.0's oracle logs through MoEKernelOracle, the backend unquoted
        named = kernel.upper() if release == "0.34.0" else f"'{kernel.upper()}'"
        assert f"Using {named} NvFp4 MoE backend" in (experts.log or "")
        dense = audit(
            str(producers / "modelopt-w4a16-nvfp4"), gpu="H100", engine=f"vllm=={release}"
        )
        (row,) = dense.arms
        assert (row.declared, row.executed, row.kernel) == ("W4A16-NVFP4", "W4A16-NVFP4", kernel)
        assert row.log == f"Using {kernel}NvFp4LinearKernel for NVFP4 GEMM"
    # a W4A4 checkpoint on sm90: Marlin's FP4 warning is promised only where Marlin runs, and
    # its note says the log cannot tell the fallback from a genuine W4A16 checkpoint
    humming = arm(audit(str(W4A4), gpu="H100"), "NVFP4", "sm90")
    assert humming.note == "no 'native support for FP4' warning is printed: that is Marlin's"
    marlin = arm(audit(str(W4A4), gpu="H100", engine="vllm==0.31.0"), "NVFP4", "sm90")
    assert "Your GPU does not have native support for FP4" in (marlin.note or "")
    assert "a genuine W4A16 checkpoint on Marlin prints the same two lines" in (marlin.note or "")


def test_vllm_moe_backend_other_than_auto_makes_the_experts_unknown(run) -> None:
    """--moe-backend is a vLLM flag the profile models only as auto: any other value (of the
    release's own MoEBackend) leaves the experts without a prediction, never a confident arm;
    the dense layers keep theirs."""
    moe = REPO / "fixtures" / "producers" / "modelopt-moe-nvfp4"
    auto = audit(str(moe), gpu="B200")
    assert {a.executed for a in auto.arms} == {"W4A4-NVFP4"}
    assert auto.engine.env["moe_backend"] == "auto"
    marlin = audit(str(moe), gpu="B200", env={"moe_backend": "marlin"})
    (experts,) = [a for a in marlin.arms if a.executed == "unknown"]
    assert "--moe-backend other than auto are not modelled" in experts.reason
    assert experts.source and "vllm/config/kernel.py@62d4bc3c7 L" in experts.source
    (dense,) = [a for a in marlin.arms if a.executed != "unknown"]
    assert dense.executed == "W4A4-NVFP4" and "MoE" not in (dense.kernel or "MoE")
    assert marlin.verdict == "warnings" and [f.code for f in marlin.warnings] == ["arm-unknown"]
    assert "--moe-backend other than auto are not modelled" in marlin.warnings[0].message
    # the choices are each release's own: 0.33.0 added aiter_triton_mxfp4_mxfp4
    newest = run("audit", moe, "--env", "moe_backend=aiter_triton_mxfp4_mxfp4", "-f", "json")
    assert newest.exit_code == 0, newest.stderr
    old = run("audit", moe, "--engine", "vllm==0.31.0", "--env", "moe_backend=aiter_mega_moe")
    assert old.exit_code == ExitCode.BAD_INPUT and "moe_backend=aiter_mega_moe" in old.stderr
    for release in modelled_releases("vllm"):
        facts = json.loads((RELEASES / f"vllm-{release}.json").read_text())["facts"]
        choices = load_profile(f"vllm=={release}").env["moe_backend"].choices
        assert choices == facts["moe_backends"] and choices and choices[0] == "auto"


def test_vllm_weight_only_fp8_runs_humming_on_every_gpu(tmp_path: Path) -> None:
    weights = {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
        "ignore": ["lm_head"],
    }

    def spell(module: str, out: int, inp: int) -> dict[str, Any]:
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("F32", (out, 1)),
        }

    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    path = write_checkpoint(
        tmp_path / "w8a16", {"model.safetensors": llama(spell=spell)}, documents
    )
    row = arm(audit(str(path)), "group_0", None)
    assert (row.executed, row.kernel) == ("W8A16-FP8", "Humming")
    marlin = audit(str(path), env={"linear_backend": "marlin"})
    assert arm(marlin, "group_0", None).kernel == "Marlin"


def test_vllm_mxfp8_on_hopper_runs_humming_from_0_32_0(tmp_path: Path) -> None:
    def mxfp8(module: str, out: int, inp: int) -> dict[str, Any]:
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("U8", (out, inp // 32)),
        }

    documents = {
        "config.json": {
            "model_type": "llama",
            "quantization_config": {
                "quant_method": "modelopt",
                "quant_algo": "MXFP8",
                "ignore": ["lm_head"],
            },
        }
    }
    path = write_checkpoint(tmp_path / "mx", {"model.safetensors": llama(spell=mxfp8)}, documents)
    new = arm(audit(str(path), gpu="H100"), "MXFP8", "sm90")
    assert (new.executed, new.kernel) == ("W8A16-MXFP8", "Humming")
    old = arm(audit(str(path), gpu="H100", engine="vllm==0.31.0"), "MXFP8", "sm90")
    assert old.kernel == "Marlin"


# --- SGLang ------------------------------------------------------------------------------------


def flat(tmp_path: Path, algo: str, spell: Any, name: str) -> Path:
    block = {"quant_method": "modelopt", "quant_algo": algo, "ignore": ["lm_head"]}
    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    return write_checkpoint(tmp_path / name, {"model.safetensors": llama(spell=spell)}, documents)


def declared_only(tmp_path: Path, name: str, document: str, data: dict[str, Any]) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / document).write_text(json.dumps(data))
    return str(folder / document)


def test_sglang_algorithm_routing_is_case_sensitive(tmp_path: Path) -> None:
    def config(algo: str) -> dict[str, Any]:
        block = {"quant_method": "modelopt", "quant_algo": algo, "ignore": ["lm_head"]}
        return {"model_type": "llama", "quantization_config": block}

    upper = audit(declared_only(tmp_path, "u", "config.json", config("MXFP4")), engine="sglang")
    assert "ModelOpt currently only supports: FP8, NVFP4" in upper.refusals[0].message
    lower = audit(declared_only(tmp_path, "l", "config.json", config("mxfp4")), engine="sglang")
    assert (
        "ModelOptFp8Config only supports regular FP8 quantization, but found 'mxfp4'"
        in lower.refusals[0].message
    )
    nested = declared_only(tmp_path, "n", "hf_quant_config.json", modelopt_file("mxfp4", []))
    report = audit(nested, engine="sglang")
    assert {a.executed for a in report.arms} == {"unquantized"}
    assert "without a quantization config" in report.arms[0].reason


def test_sglang_modelopt_mxfp8_needs_sm100(tmp_path: Path) -> None:
    def mxfp8(module: str, out: int, inp: int) -> dict[str, Any]:
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("U8", (out, inp // 32)),
        }

    path = flat(tmp_path, "MXFP8", mxfp8, "mx")
    hopper = audit(str(path), engine="sglang", gpu="H100")
    assert {f.code for f in hopper.refusals} == {"no-arm"}
    assert "Minimum capability: 100. Current capability: 90." in hopper.refusals[0].message
    assert arm(audit(str(path), engine="sglang", gpu="B200"), "MXFP8", "sm100").executed == (
        "W8A8-MXFP8"
    )


def test_sglang_runner_backends_other_than_auto_are_unknown(run) -> None:
    """--moe-runner-backend and --fp8-gemm-backend are modelled as auto only: any other value
    of the release's choices gives the experts (or FP8 linears on sm89+) no prediction."""
    producers = REPO / "fixtures" / "producers"
    moe = str(producers / "modelopt-moe-nvfp4")
    auto = audit(moe, engine="sglang", gpu="B200")
    assert "unknown" not in {a.executed for a in auto.arms}
    triton = audit(moe, engine="sglang", gpu="B200", env={"moe_runner_backend": "triton"})
    (experts,) = [a for a in triton.arms if a.executed == "unknown"]
    assert "--moe-runner-backend other than auto are not modelled" in experts.reason
    assert experts.source and "arg_groups/choices.py@v0.5.23 L" in experts.source
    assert {a.executed for a in triton.arms} == {"unknown", "W4A4-NVFP4"}
    fp8 = str(producers / "modelopt-fp8")
    assert {a.executed for a in audit(fp8, engine="sglang", gpu="H100").arms} == {"W8A8-FP8"}
    cutlass = audit(fp8, engine="sglang", gpu="H100", env={"fp8_gemm_backend": "cutlass"})
    assert {a.executed for a in cutlass.arms} == {"unknown"}
    assert "--fp8-gemm-backend other than auto" in cutlass.arms[0].reason
    marlin = {"fp8_gemm_backend": "cutlass", "SGLANG_FORCE_FP8_MARLIN": "1"}
    forced = audit(fp8, engine="sglang", gpu="H100", env=marlin)
    assert {a.executed for a in forced.arms} == {"W8A16-FP8"}
    # the choices are each release's own: 0.5.23 added the LoRA runners
    new = run("audit", moe, "--engine", "sglang", "--env", "moe_runner_backend=lora_triton")
    assert new.exit_code == 0, new.stderr
    old = run("audit", moe, "--engine", "sglang==0.5.22", "--env", "moe_runner_backend=lora_triton")
    assert old.exit_code == ExitCode.BAD_INPUT and "moe_runner_backend=lora_triton" in old.stderr
    for release in modelled_releases("sglang"):
        facts = json.loads((RELEASES / f"sglang-{release}.json").read_text())["facts"]
        env = load_profile(f"sglang=={release}").env
        assert env["moe_runner_backend"].choices == facts["moe_runner_backends"]
        assert env["fp8_gemm_backend"].choices == facts["fp8_gemm_backends"]
        assert facts["moe_runner_backends"][0] == facts["fp8_gemm_backends"][0] == "auto"


def mixed_map(algo_of: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in range(2):
        for proj in PROJ:
            group = "self_attn" if proj in ATTN else "mlp"
            algo = algo_of.get(proj)
            if algo is None:
                continue
            entry: dict[str, Any] = {"quant_algo": algo}
            if "FP4" in algo:
                entry["group_size"] = 16
            out[f"model.layers.{n}.{group}.{proj}"] = entry
    return out


def mixed_checkpoint(tmp_path: Path, layers: dict[str, Any], spell: Any, name: str) -> Path:
    documents = {
        "config.json": {"model_type": "llama"},
        "hf_quant_config.json": modelopt_file("MIXED_PRECISION", None, None, layers),
    }
    return write_checkpoint(tmp_path / name, {"model.safetensors": llama(spell=spell)}, documents)


def test_sglang_mixed_precision_without_nvfp4_is_w4afp8(tmp_path: Path) -> None:
    layers = mixed_map(dict.fromkeys(PROJ, "FP8"))
    path = mixed_checkpoint(tmp_path, layers, lambda m, o, i: fp8_modelopt(m, o, i), "fp8only")
    ampere = audit(str(path), engine="sglang", gpu="sm89")
    assert "The quantization method w4afp8 is not supported" in ampere.refusals[0].message
    hopper = audit(str(path), engine="sglang", gpu="H100")
    assert {a.executed for a in hopper.arms} == {"unknown"} and hopper.refusals == []
    assert "w4afp8" in hopper.arms[0].reason
    # with an NVFP4 entry it is modelopt_mixed, as before
    layers = mixed_map(
        {
            **dict.fromkeys(ATTN, "FP8"),
            "gate_proj": "NVFP4",
            "up_proj": "NVFP4",
            "down_proj": "NVFP4",
        }
    )

    def spell(module: str, out: int, inp: int) -> dict[str, Any]:
        if module.rsplit(".", 1)[1] in ATTN:
            return fp8_modelopt(module, out, inp)
        return nvfp4_modelopt(module, out, inp)

    both = audit(
        str(mixed_checkpoint(tmp_path, layers, spell, "both")), engine="sglang", gpu="H100"
    )
    assert "unknown" not in {a.executed for a in both.arms}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_one_listed_algorithm_beside_an_unlisted_shard_raises_no_mixed_error(
    tmp_path: Path, engine: str
) -> None:
    layers = mixed_map({p: "FP8" for p in PROJ if p != "v_proj"})

    def spell(module: str, out: int, inp: int) -> dict[str, Any]:
        if module.endswith("v_proj"):
            return plain(module, out, inp)
        return fp8_modelopt(module, out, inp)

    report = audit(str(mixed_checkpoint(tmp_path, layers, spell, "unl")), engine=engine)
    # the one listed algorithm decides the fused layer (no "Mixed quant_algo" error); the
    # unlisted shard's BF16 weight is then what fails, on the quantized layer's shapes
    assert {f.code for f in report.refusals} == {"quantized-ships-unquantized"}
    assert {f.module.rsplit(".", 1)[-1] for f in report.refusals} == {"v_proj"}
    findings = [*report.refusals, *report.warnings, *report.notes]
    assert all("Mixed quant_algo" not in f.message for f in findings)


# --- the seed engine -----------------------------------------------------------------------------


def test_name_probe_takes_the_seed_s_own_flag_name(run) -> None:
    flag = audit(str(W4A4), engine="name-probe", env={"W4A4": "1"})
    alias = audit(str(W4A4), engine="name-probe", env={"VT_MODELOPT_W4A4": "1"})
    assert [a.executed for a in alias.arms] == [a.executed for a in flag.arms]
    assert alias.engine.env == {"W4A4": "1"}
    assert "W4A4-NVFP4" in {a.executed for a in alias.arms}
    both = run(
        "audit", W4A4, "--engine", "name-probe", "--env", "W4A4=1", "--env", "VT_MODELOPT_W4A4=0"
    )
    assert both.exit_code == ExitCode.BAD_INPUT and "contradicts" in both.stderr


# --- the machine: installed engine and GPU ---------------------------------------------------


def fake_distribution(root: Path, name: str, version: str) -> None:
    """An installed distribution as importlib.metadata finds it: a dist-info on sys.path."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def fake_nvidia_smi(root: Path, output: str, code: int = 0) -> Path:
    """An nvidia-smi executable that prints ``output`` for any query."""
    root.mkdir(parents=True, exist_ok=True)
    exe = root / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")
    exe.chmod(0o755)
    return root


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Turn detection on, with a tmp dir on sys.path for distributions."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("QARM_DETECT_ENGINE", "1")
    return site


def test_an_installed_modelled_release_is_used_and_named(machine: Path) -> None:
    fake_distribution(machine, "vllm", "0.31.0")
    report = audit(str(W4A4), gpu="H100")
    assert (report.engine.version, report.engine.installed) == ("v0.31.0", "0.31.0")
    assert report.engine.release_from == "installed"
    assert arm(report, "NVFP4", "sm90").kernel == "Marlin"  # 0.31.0 has no Humming priority
    assert [n.code for n in report.notes if n.code.startswith("engine-")] == ["engine-installed"]
    asked = audit(str(W4A4), engine="vllm==0.33.0", gpu="H100")
    assert asked.engine.release_from == "asked" and asked.engine.version == "v0.33.0"
    note = next(n.message for n in asked.notes if n.code == "engine-release-not-modelled")
    assert "vLLM 0.31.0 is installed here and another release was asked for" in note
    same = audit(str(W4A4), engine="vllm==0.31.0")
    assert [n.code for n in same.notes if n.code.startswith("engine-")] == ["engine-installed"]
    # sglang is not installed: its profile is the newest, and nothing is said about vllm
    other = audit(str(W4A4), engine="sglang")
    assert other.engine.installed is None and other.engine.release_from == "newest"


def test_an_installed_local_build_takes_its_release_s_profile(machine: Path) -> None:
    """A wheel built locally or for a CUDA variant carries a local label: 0.31.0+cu129."""
    fake_distribution(machine, "vllm", "0.31.0+cu129")
    report = audit(str(W4A4), gpu="H100")
    assert (report.engine.version, report.engine.installed) == ("v0.31.0", "0.31.0+cu129")
    assert report.engine.release_from == "installed"
    assert [n.code for n in report.notes if n.code.startswith("engine-")] == ["engine-installed"]
    same = audit(str(W4A4), engine="vllm==0.31.0")
    assert [n.code for n in same.notes if n.code.startswith("engine-")] == ["engine-installed"]


def test_an_installed_unmodelled_release_is_said_plainly(machine: Path, run) -> None:
    fake_distribution(machine, "vllm", "0.29.1")
    report = audit(str(W4A4))
    assert (report.engine.version, report.engine.installed) == ("v0.34.0", "0.29.1")
    note = next(n.message for n in report.notes if n.code == "engine-release-not-modelled")
    assert "vLLM 0.29.1 is installed here and is not modelled" in note
    assert "vllm v0.34.0, not for the installed engine" in note
    data = json.loads(run("audit", W4A4, "-f", "json").stdout)
    assert data["engine"]["installed"] == "0.29.1" and data["engine"]["release_from"] == "newest"


def test_engine_detection_can_be_turned_off(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(machine, "vllm", "0.31.0")
    monkeypatch.setenv("QARM_DETECT_ENGINE", "0")
    report = audit(str(W4A4))
    assert report.engine.installed is None and report.engine.version == "v0.34.0"


def test_the_gpu_from_nvidia_smi_when_none_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run
) -> None:
    bin_dir = fake_nvidia_smi(tmp_path / "bin", "9.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("QARM_GPU", "nvidia-smi")
    report = audit(str(W4A4))
    assert (report.engine.gpu, report.engine.gpu_from) == ("sm90", "detected")
    assert arm(report, "NVFP4", "sm90").kernel == "Humming"
    assert "GPU sm90 detected (nvidia-smi)" in next(
        n.message for n in report.notes if n.code == "gpu-detected"
    )
    # on the detected GPU the weight-only fallback is what will go wrong: a warning
    assert "declared-arm-differs" in {w.code for w in report.warnings}
    given = audit(str(W4A4), gpu="B200")
    assert (given.engine.gpu, given.engine.gpu_from) == ("B200", "given")
    assert not [n for n in given.notes if n.code == "gpu-detected"]
    text = run("audit", W4A4, "-f", "markdown").stdout
    assert "GPU sm90" in text and "detected (nvidia-smi)" in text


@pytest.mark.parametrize("output, code", [("", 0), ("garbage", 0), ("9.0", 9)])
def test_a_failing_nvidia_smi_means_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str, code: int
) -> None:
    bin_dir = fake_nvidia_smi(tmp_path / "bin", output, code)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("QARM_GPU", "nvidia-smi")
    report = audit(str(W4A4))
    assert report.engine.gpu is None and report.engine.gpu_from == ""
    assert report.verdict != "refused"


def test_qarm_gpu_overrides_and_turns_detection_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run
) -> None:
    bin_dir = fake_nvidia_smi(tmp_path / "bin", "9.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("QARM_GPU", "none")
    assert audit(str(W4A4)).engine.gpu is None
    monkeypatch.setenv("QARM_GPU", "A100")
    report = audit(str(W4A4))
    assert (report.engine.gpu, report.engine.gpu_from) == ("A100", "detected")
    monkeypatch.setenv("QARM_GPU", "sm9000")
    bad = run("audit", W4A4)
    assert bad.exit_code == ExitCode.BAD_INPUT and "QARM_GPU" in bad.stderr


def test_the_fp4_gemm_backend_choices_are_the_release_s_own() -> None:
    for release in modelled_releases("sglang"):
        facts = json.loads((RELEASES / f"sglang-{release}.json").read_text())["facts"]
        choices = load_profile(f"sglang=={release}").env["fp4_gemm_backend"].choices
        assert sorted(choices or []) == sorted(facts["fp4_gemm_backends"])


def test_vllm_b12x_weight_only_kernel_exists_from_0_32_0(tmp_path: Path) -> None:
    block = {
        "quant_method": "modelopt",
        "quant_algo": "W4A16_NVFP4",
        "group_size": 16,
        "ignore": ["lm_head"],
    }
    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    path = write_checkpoint(
        tmp_path / "a16", {"model.safetensors": llama(spell=nvfp4_modelopt)}, documents
    )
    env = {"linear_backend": "b12x"}
    new = audit(str(path), gpu="H100", env=env)
    assert {f.code for f in new.refusals} == {"no-arm"}
    old = audit(str(path), gpu="H100", env=env, engine="vllm==0.31.0")
    assert old.refusals == [] and arm(old, "W4A16_NVFP4", "sm90").executed == "W4A16-NVFP4"


def test_vllm_relabelled_weight_only_nvfp4_never_takes_a_w4a4_rule(tmp_path: Path) -> None:
    weights = {"num_bits": 4, "type": "float", "group_size": 16}
    block = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "ignore": ["lm_head"],
        "config_groups": {"g": {"targets": ["Linear"], "weights": weights}},
    }
    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    path = write_checkpoint(
        tmp_path / "rl", {"model.safetensors": llama(spell=nvfp4_static)}, documents
    )
    report = audit(str(path), gpu="B200", env={"linear_backend": "flashinfer_cutedsl"})
    assert arm(report, "NVFP4", "sm100").executed == "unknown"


def test_vllm_0_34_0_runs_nvfp4_experts_weight_only_on_the_sm110_family() -> None:
    """0.34.0's CutlassExpertsFp4 leaves out the sm110 family, the one native FP4 MoE kernel
    0.33.0 ran there: the MoE oracle falls through to weight-only Marlin."""
    producers = REPO / "fixtures" / "producers"
    seen = {}
    for release in ("0.33.0", "0.34.0"):
        moe = audit(str(producers / "modelopt-moe-nvfp4"), gpu="sm110", engine=f"vllm=={release}")
        (experts,) = [a for a in moe.arms if a.source and "/fused_moe/" in a.source]
        seen[release] = (experts.executed, experts.kernel, experts.log)
    assert seen["0.33.0"][:2] == (
        "W4A4-NVFP4",
        "FlashInfer TRT-LLM / CuTe-DSL / CUTLASS MoE (first available)",
    )
    assert seen["0.34.0"] == (
        "W4A16-NVFP4",
        "Marlin MoE",
        "Using MARLIN NvFp4 MoE backend out of potential backends: [...]",
    )
