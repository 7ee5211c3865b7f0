"""Engine profiles: every rule's conditions, the arm each engine runs per GPU and flag, the
engine's own refusals, the routing A/B, and user profiles."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    INTER,
    MANIFESTS,
    PROJ,
    REALWORLD,
    REPO,
    H,
    fp8_modelopt,
    llama,
    modelopt_file,
    nvfp4_modelopt,
    plain,
    write_checkpoint,
)
from qarm_audit import audit
from qarm_audit.commands.audit import DEFAULT_ENGINE
from qarm_audit.engines.arms import STANDARD_GPUS, gpu_label, parse_gpu
from qarm_audit.engines.entries import SOURCE_FORMAT
from qarm_audit.engines.profile import (
    BUILTIN,
    Profile,
    Rule,
    View,
    holds,
    load_profile,
    modelled_releases,
    select,
)
from qarm_audit.errors import ExitCode, ProfileError, QarmError
from qarm_audit.report import render_json, render_markdown
from qarm_audit.report.model import ArmRow, Report

SIBLING = MANIFESTS / "seed-sibling-w4a16.manifest.json"
MTP = MANIFESTS / "seed-mtp-w4a16.manifest.json"
W4A4 = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


# --- helpers -------------------------------------------------------------------------------------


def nvfp4_static(module: str, out: int, inp: int) -> dict[str, Any]:
    return nvfp4_modelopt(module, out, inp, input_scale=True)


def single(tmp_path: Path, algo: str, spell: Any, extra: dict[str, Any] | None = None) -> Path:
    """A non-mixed ModelOpt checkpoint declared in hf_quant_config.json (the nested form)."""
    tensors = llama(spell=spell)
    tensors.update(extra or {})
    documents = {"hf_quant_config.json": modelopt_file(algo, ["lm_head"])}
    return write_checkpoint(tmp_path / algo.lower(), {"model.safetensors": tensors}, documents)


def inline(tmp_path: Path, block: dict[str, Any], spell: Any, name: str = "inline") -> Path:
    """A checkpoint declared in config.json quantization_config (the flat form)."""
    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    return write_checkpoint(tmp_path / name, {"model.safetensors": llama(spell=spell)}, documents)


def modelopt_flat(algo: str, **extra: Any) -> dict[str, Any]:
    block = {
        "quant_method": "modelopt",
        "quant_algo": algo,
        "ignore": ["lm_head"],
        "producer": {"name": "modelopt", "version": "0.39.0"},
    }
    if "FP4" in algo:
        block["group_size"] = 16
    block.update(extra)
    return block


def layers_map(fp8_attn: bool = True, mlp: str = "W4A16_NVFP4") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in range(2):
        for proj in PROJ:
            group = "self_attn" if proj in ATTN else "mlp"
            algo = "FP8" if proj in ATTN and fp8_attn else mlp
            entry: dict[str, Any] = {"quant_algo": algo}
            if "FP4" in algo:
                entry["group_size"] = 16
            out[f"model.layers.{n}.{group}.{proj}"] = entry
    return out


def spell_mixed(module: str, out: int, inp: int) -> dict[str, Any]:
    if module.rsplit(".", 1)[1] in ATTN:
        return fp8_modelopt(module, out, inp)
    return nvfp4_modelopt(module, out, inp)


def mixed(tmp_path: Path, tensors: dict[str, Any], layers: dict[str, Any], name: str = "m") -> Path:
    documents = {
        "config.json": {"model_type": "llama"},
        "hf_quant_config.json": modelopt_file("MIXED_PRECISION", None, None, layers),
    }
    return write_checkpoint(tmp_path / name, {"model.safetensors": tensors}, documents)


def ct_nvfp4(module: str, out: int, inp: int) -> dict[str, Any]:
    return {
        f"{module}.weight_packed": ("U8", (out, inp // 2)),
        f"{module}.weight_scale": ("F8_E4M3", (out, inp // 16)),
        f"{module}.weight_global_scale": ("F32", (1,)),
        f"{module}.input_global_scale": ("F32", (1,)),
    }


NVFP4_ARGS = {
    "num_bits": 4,
    "type": "float",
    "strategy": "tensor_group",
    "group_size": 16,
    "symmetric": True,
    "dynamic": False,
}


def ct_block(groups: dict[str, Any], ignore: list[str] | None = None) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": groups,
        "ignore": ignore if ignore is not None else ["lm_head"],
    }


def w4a4_group(targets: list[str]) -> dict[str, Any]:
    return {
        "targets": targets,
        "weights": NVFP4_ARGS,
        "input_activations": {**NVFP4_ARGS, "dynamic": "local"},
    }


def arms(report: Report) -> dict[tuple[str, str | None], ArmRow]:
    out = {(a.scheme, a.gpu): a for a in report.arms}
    assert len(out) == len(report.arms), report.arms
    return out


def executed(report: Report) -> dict[tuple[str, str | None], str]:
    return {key: row.executed for key, row in arms(report).items()}


def codes(report: Report) -> list[str]:
    return [f.code for f in report.refusals]


def message(report: Report, code: str) -> str:
    hits = [f.message for f in [*report.refusals, *report.warnings] if f.code == code]
    assert hits, (report.refusals, report.warnings)
    return hits[0]


# --- the profiles themselves -----------------------------------------------------------------


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_profile_validates(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.rules
    if name == "name-probe":
        return
    assert profile.routing == "declared"
    pin = {"vllm": "@62d4bc3c7", "sglang": "@v0.5.23"}[name]
    for rule in profile.rules:
        if rule.arm == "unknown":
            continue  # the catch-all: says the profile does not model the choice
        assert rule.source and SOURCE_FORMAT.match(rule.source), rule
        assert pin in rule.source, rule.source
        assert rule.arm in VOCABULARY, rule.arm
        assert (rule.error is not None) == (rule.arm == "none"), rule
    for quote in profile.load_errors:
        assert quote.source and pin in quote.source


VOCABULARY = {
    "W4A4-NVFP4",
    "W4A16-NVFP4",
    "W8A8-FP8",
    "W8A16-FP8",
    "W8A8-MXFP8",
    "W8A16-MXFP8",
    "W4A4-MXFP4",
    "W4A16-MXFP4",
    "W4A16-INT",
    "W8A16-INT",
    "W8A8-INT",
    "W4A8-INT",
    "W4A16-BNB-NF4",
    "W4A16-BNB-FP4",
    "W8A8-BNB-INT8",
    "unquantized",
    "none",
    "unknown",
}
"""Executed arms the shipped profiles use: the declared vocabulary (schemes.declared_arm) plus
``unquantized``, ``none`` and ``unknown``."""


def test_default_engine_is_vllm(run) -> None:
    assert DEFAULT_ENGINE == "vllm"
    report = audit(str(W4A4))
    assert (report.engine.name, report.engine.version, report.engine.routing) == (
        "vllm",
        "v0.34.0",
        "declared",
    )
    help_text = run("audit", "--help").stdout
    assert "[default: vllm]" in help_text and "--routing" in help_text


@pytest.mark.parametrize(
    "text, where",
    [
        ("name = 'x'\n[[rules]\n", "not valid TOML"),
        (
            "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\nbogus=1\n"
            "[[rules]]\narm='none'\nreason='r'\n",
            "bogus",
        ),
        ("name='x'\nengine='e'\ndescription='d'\nrouting='sideways'\nrules=[]\n", "routing"),
        (
            "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\n"
            "[[rules]]\narm='W4A4-NVFP4'\nreason='r'\nerror='boom'\n",
            "only for arm 'none'",
        ),
        (
            "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\n"
            "[[rules]]\narm='none'\nreason='r'\nenv={FLAG='1'}\n",
            "unknown setting 'FLAG'",
        ),
        (
            "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\n"
            "[[rules]]\narm='none'\nreason='r'\nsource='modelopt.py line 3'\n",
            "owner/repo path@commit",
        ),
        (
            "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\n"
            "[[rules]]\narm='none'\nreason='r'\ngpu_min=100\ngpu_max=90\n",
            "gpu_min 100 is above gpu_max 90",
        ),
        *(
            (
                "name='x'\nengine='e'\ndescription='d'\nrouting='declared'\n"
                "[[rules]]\narm='unknown'\nreason='r'\n"
                "[[kv_errors]]\nproducer=['compressed-tensors']\nreads='type_bits'\n"
                f"accepts=[['float', 8]]\ntext='received {text}'\n",
                where,
            )
            for text, where in (
                ("{nope}", "names {nope}; it may name only {num_bits}"),
                ("{num_bits.__class__}", "names {num_bits.__class__}"),
                ("{num_bits:>4}", "formats {num_bits} with '>4'"),
                ("{", "is no format template"),
            )
        ),
    ],
)
def test_a_malformed_user_profile_is_a_named_profile_error(
    tmp_path: Path, run, text: str, where: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as raised:
        load_profile(str(path))
    assert where in str(raised.value) and str(path) in str(raised.value)
    result = run("audit", W4A4, "--engine", path)
    assert result.exit_code == ExitCode.BAD_INPUT == 2
    assert result.stderr.startswith("qarm: error: ") and where in result.stderr


def test_a_user_profile_by_path_predicts_its_own_arms(tmp_path: Path, run) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        "name = 'mine'\nengine = 'my engine'\nversion = 'v1'\n"
        "description = 'NVFP4 native from sm90'\nrouting = 'declared'\n"
        "[[rules]]\ndeclared_family = ['nvfp4']\ngpu_min = 90\narm = 'W4A4-NVFP4'\n"
        "reason = 'my kernel'\nsource = 'me/engine src/gemm.py@abc123'\n"
        "[[rules]]\ndeclared_family = ['nvfp4']\narm = 'none'\nreason = 'too old'\n"
        "error = 'needs sm90, got {gpu}'\n"
        "[[rules]]\narm = 'unknown'\nreason = 'not modelled'\n"
    )
    report = audit(str(W4A4), engine=str(path), gpu="sm90")
    assert executed(report)[("NVFP4", "sm90")] == "W4A4-NVFP4"
    assert executed(report)[("FP8", "sm90")] == "unknown"
    old = run("audit", W4A4, "--engine", path, "--gpu", "A100", "-f", "json")
    assert old.exit_code == 1
    refusal = json.loads(old.stdout)["refusals"][0]
    assert refusal["code"] == "no-arm" and '"needs sm90, got 80"' in refusal["message"]


@pytest.mark.parametrize("choice", ["bogus", ""])
def test_a_setting_outside_its_choices_is_a_usage_error(run, choice: str) -> None:
    result = run("audit", W4A4, "--env", f"linear_backend={choice}")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "linear_backend" in result.stderr


# --- every condition of every shipped rule flips it --------------------------------------------

FAMILY_OF_ARM = {"NVFP4": "nvfp4", "MXFP8": "mxfp8", "FP8": "fp8", "INT": "int"}
ARM_OF_ALGO = {
    "NVFP4": "W4A4-NVFP4",
    "NVFP4_AWQ": "W4A4-NVFP4",
    "W4A16_NVFP4": "W4A16-NVFP4",
    "MXFP8": "W8A8-MXFP8",
}
DEFAULT_ALGO = {
    "W4A4-NVFP4": "NVFP4",
    "W4A16-NVFP4": "W4A16_NVFP4",
    "W8A8-FP8": "FP8",
    "W8A16-FP8": "FP8",
    "W8A8-MXFP8": "MXFP8",
    "unquantized": "",
}


def candidates(profile: Profile, rule: Rule) -> list[tuple[View, dict[str, str], int | None]]:
    """Views, settings and GPUs under which ``rule`` holds, as plausible as its conditions
    allow; the search tries each in turn for one the rule is the first match of."""
    algo = rule.declared_algo[0] if rule.declared_algo else None
    arm = rule.declared_arm[0] if rule.declared_arm else None
    if arm is None and algo is not None:
        arm = ARM_OF_ALGO.get(algo, "W8A8-FP8" if algo.startswith("FP8") else "W4A4-NVFP4")
    family = (
        rule.declared_family[0]
        if rule.declared_family
        else next((f for k, f in FAMILY_OF_ARM.items() if arm and k in arm), "other")
    )
    if arm is None:
        arm = {
            "nvfp4": "W4A4-NVFP4",
            "fp8": "W8A8-FP8",
            "mxfp8": "W8A8-MXFP8",
            "unquantized": "unquantized",
        }.get(family, "W9A9-OTHER")
    if algo is None and rule.declared_algo_contains:
        algo = "MX" + rule.declared_algo_contains[0]
    if algo is None:
        algo = DEFAULT_ALGO.get(arm, "OTHER_ALGO")
    if rule.declared_algo_not and algo in rule.declared_algo_not:
        algo = "OTHER_ALGO"
    producers = rule.producer or (
        [""] if family == "unquantized" else ["modelopt", "compressed-tensors"]
    )
    mixes = [rule.mixed] if rule.mixed is not None else [False, True]
    lo = rule.gpu_min if rule.gpu_min is not None else 0
    hi = rule.gpu_max if rule.gpu_max is not None else 999
    gpus = [g for g in (*STANDARD_GPUS, rule.gpu_min, rule.gpu_max) if g is not None]
    gpus = [g for g in dict.fromkeys(gpus) if lo <= g <= hi] or [100]
    envs: list[dict[str, str]] = [{}]
    for key, setting in profile.env.items():
        wanted = rule.env.get(key)
        values = (
            [wanted]
            if isinstance(wanted, str)
            else wanted
            if wanted is not None
            else [setting.default, *(c for c in setting.choices or () if c != setting.default)]
        )
        unwanted = rule.env_not.get(key, [])
        unwanted = [unwanted] if isinstance(unwanted, str) else unwanted
        values = [v for v in values if v not in unwanted] or ["zzz"]
        envs = [{**e, key: v} for e in envs for v in values]
    kinds = [(family, arm, algo)]
    if not (rule.declared_family or rule.declared_arm or rule.declared_algo):
        kinds = [("nvfp4", "W4A4-NVFP4", "NVFP4"), (family, arm, algo)]
    files = rule.declaration_file or ["hf_quant_config.json", "config.json"]
    # weight-only first; activations of each type where the rule names none
    activations = rule.declared_activation or ["none", "int static tensor", "float dynamic token"]
    views = []
    for (family, arm, algo), producer, mixed_, file, activation in itertools.product(
        kinds, producers, mixes, files, activations[:3]
    ):
        if rule.declared_algo_not and algo in rule.declared_algo_not:
            algo = "OTHER_ALGO"
        module = (
            f"model.{rule.module_contains[0]}.0.proj"
            if rule.module_contains
            else "model.layers.0.mlp.down_proj"
        )
        view = View(
            declared_family=family,
            declared_algo=algo,
            declared_arm=arm,
            declared_strategy=rule.declared_strategy[0] if rule.declared_strategy else "tensor",
            declared_activation=activation,
            declared_format=rule.declared_format[0] if rule.declared_format else "",
            config_format=rule.config_format[0] if rule.config_format else "",
            declared_group_size=rule.declared_group_size[0] if rule.declared_group_size else 0,
            declared_symmetric=rule.declared_symmetric is not False,
            declared_actorder=bool(rule.declared_actorder),
            producer=producer,
            mixed=bool(mixed_),
            mixed_nvfp4=rule.mixed_nvfp4 if rule.mixed_nvfp4 is not None else True,
            declaration_form=rule.declaration_form[0] if rule.declaration_form else "flat",
            declaration_file=file,
            groups_weight_only=bool(rule.groups_weight_only),
            module=module,
            shipped=rule.shipped[0] if rule.shipped else family,
            operands=frozenset(["weight", *rule.operands_present]),
        )
        views.append(view)
    # each declaration with the first settings first: the settings are the product of every
    # variable's values (half a million cases for sglang), and an earlier rule that shadows
    # this one on a declaration does so for most settings
    return [(view, env, gpu) for env in envs for gpu in gpus for view in views]


def satisfying(profile: Profile, rule: Rule) -> tuple[View, dict[str, str], int | None]:
    """The first candidate whose first matching rule is ``rule``."""
    tried = candidates(profile, rule)
    for view, env, gpu in tried:
        if select(profile, view, env, gpu) is rule:
            return view, env, gpu
    raise AssertionError(f"shadowed by an earlier rule on every one of {len(tried)} candidates")


def flips(
    profile: Profile, rule: Rule, view: View, env: dict[str, str], gpu: int | None
) -> list[tuple[str, View, dict[str, str], int | None]]:
    """For each condition the rule sets, the satisfying case (``view``, ``env``, ``gpu``: found
    once, by a search of up to half a million candidates) with that one condition broken."""
    out = []

    def with_(**change: Any) -> View:
        return view.model_copy(update=change)

    if rule.declared_family is not None:
        out.append(("declared_family", with_(declared_family="zzz"), env, gpu))
    if rule.declared_algo is not None:
        out.append(("declared_algo", with_(declared_algo="ZZZ"), env, gpu))
    if rule.declared_algo_not is not None:
        out.append(("declared_algo_not", with_(declared_algo=rule.declared_algo_not[0]), env, gpu))
    if rule.declared_algo_contains is not None:
        out.append(("declared_algo_contains", with_(declared_algo="ZZZ"), env, gpu))
    if rule.declared_arm is not None:
        out.append(("declared_arm", with_(declared_arm="zzz"), env, gpu))
    if rule.declared_strategy is not None:
        out.append(("declared_strategy", with_(declared_strategy="zzz"), env, gpu))
    if rule.declared_format is not None:
        out.append(("declared_format", with_(declared_format="zzz"), env, gpu))
    if rule.config_format is not None:
        out.append(("config_format", with_(config_format="zzz"), env, gpu))
    if rule.declared_group_size is not None:
        out.append(("declared_group_size", with_(declared_group_size=-1), env, gpu))
    if rule.declared_symmetric is not None:
        symmetric = not rule.declared_symmetric
        out.append(("declared_symmetric", with_(declared_symmetric=symmetric), env, gpu))
    if rule.declared_actorder is not None:
        actorder = not rule.declared_actorder
        out.append(("declared_actorder", with_(declared_actorder=actorder), env, gpu))
    if rule.declared_activation is not None:
        out.append(("declared_activation", with_(declared_activation="zzz"), env, gpu))
    if rule.producer is not None:
        out.append(("producer", with_(producer="zzz"), env, gpu))
    if rule.mixed is not None:
        out.append(("mixed", with_(mixed=not rule.mixed), env, gpu))
    if rule.mixed_nvfp4 is not None:
        out.append(("mixed_nvfp4", with_(mixed_nvfp4=not rule.mixed_nvfp4), env, gpu))
    if rule.declaration_file is not None:
        out.append(("declaration_file", with_(declaration_file="zzz"), env, gpu))
    if rule.declaration_form is not None:
        out.append(("declaration_form", with_(declaration_form="zzz"), env, gpu))
    if rule.groups_weight_only is not None:
        out.append(
            ("groups_weight_only", with_(groups_weight_only=not rule.groups_weight_only), env, gpu)
        )
    if rule.module_contains is not None:
        out.append(("module_contains", with_(module="model.layers.0.mlp.down_proj"), env, gpu))
    if rule.shipped is not None:
        out.append(("shipped", with_(shipped="zzz"), env, gpu))
    out.extend(
        (f"operand {op}", with_(operands=view.operands - {op}), env, gpu)
        for op in rule.operands_present
    )
    out.extend(
        (f"no operand {op}", with_(operands=view.operands | {op}), env, gpu)
        for op in rule.operands_absent
    )
    for key, wanted in rule.env.items():
        values = [wanted] if isinstance(wanted, str) else wanted
        choices = profile.env[key].choices or ["0", "1", "zzz"]
        other = next(c for c in choices if c not in values)
        out.append((f"env {key}", view, {**env, key: other}, gpu))
    for key, unwanted in rule.env_not.items():
        values = [unwanted] if isinstance(unwanted, str) else unwanted
        out.append((f"env_not {key}", view, {**env, key: values[0]}, gpu))
    if rule.gpu_min is not None:
        out.append(("gpu_min", view, env, rule.gpu_min - 1))
    if rule.gpu_max is not None:
        out.append(("gpu_max", view, env, rule.gpu_max + 1))
    if rule.gpu_min is not None or rule.gpu_max is not None:
        out.append(("no gpu", view, env, None))
    return out


SPECS = [
    f"{name}=={release}" if release else name
    for name in BUILTIN
    for release in modelled_releases(name) or [None]
]
RULES = [
    pytest.param(spec, i, id=f"{spec}-{i}")
    for spec in SPECS
    for i in range(len(load_profile(spec).rules))
]


@pytest.mark.parametrize("name, index", RULES)
def test_each_rule_is_reachable_and_each_condition_flips_it(name: str, index: int) -> None:
    profile = load_profile(name)
    rule = profile.rules[index]
    view, env, gpu = satisfying(profile, rule)
    assert holds(rule, view, env, gpu)
    for condition, broken, broken_env, broken_gpu in flips(profile, rule, view, env, gpu):
        assert not holds(rule, broken, broken_env, broken_gpu), condition


# --- GPUs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, cap",
    [
        ("sm80", 80),
        ("sm89", 89),
        ("sm90", 90),
        ("sm100", 100),
        ("sm120", 120),
        ("sm121", 121),
        ("A100", 80),
        ("L40S", 89),
        ("H100", 90),
        ("H200", 90),
        ("B200", 100),
        ("RTX 5090", 120),
        ("GB10", 121),
        ("9.0", 90),
    ],
)
def test_gpu_by_capability_or_name(text: str, cap: int) -> None:
    assert parse_gpu(text) == cap


def test_gpu_ranges_over_the_standard_set() -> None:
    assert STANDARD_GPUS == (80, 89, 90, 100, 120, 121)
    assert gpu_label([80, 89, 90]) == "sm80-sm90"
    assert gpu_label([100, 120, 121]) == "sm100+"
    assert gpu_label([80]) == "sm80"
    assert gpu_label([89, 90, 100, 120, 121]) == "sm89+"
    assert gpu_label([80, 89, 90, 120, 121]) == "sm80-sm90, sm120+"
    assert gpu_label([100]) == "sm100"
    assert gpu_label(list(STANDARD_GPUS)) is None


def test_without_a_gpu_the_arm_line_gives_each_range(run) -> None:
    report = audit(str(W4A4))
    assert executed(report) == {
        ("FP8", "sm80"): "W8A16-FP8",
        ("FP8", "sm89+"): "W8A8-FP8",
        ("NVFP4", "sm80-sm89"): "W4A16-NVFP4",
        ("NVFP4", "sm90"): "W4A16-NVFP4",
        ("NVFP4", "sm100+"): "W4A4-NVFP4",
    }
    marlin = arms(report)[("NVFP4", "sm80-sm89")]
    assert marlin.kernel == "Marlin" and marlin.modules == 193
    assert "no native FP4 below sm100" in marlin.reason
    assert "input_scale shipped on 193/193 but not read on this arm" in marlin.reason
    assert marlin.log == "Using MarlinNvFp4LinearKernel for NVFP4 GEMM"
    assert "native support for FP4" in (marlin.note or "")
    assert marlin.source and "@62d4bc3c7" in marlin.source
    assert "input_scale shipped" not in arms(report)[("NVFP4", "sm100+")].reason
    assert marlin.line().startswith(
        "NVFP4: declared W4A4-NVFP4, input_scale on 193/193 -> executed W4A16-NVFP4 (Marlin) "
        "on sm80-sm89 [193 modules]"
    )
    # what holds on part of the range only is a note; the checkpoint itself is not warned for it
    assert not [w for w in report.warnings if w.code == "declared-arm-differs"]
    differs = [n.message for n in report.notes if n.code == "arm-differs-on-some-gpus"]
    assert any("NVFP4" in m and "on sm80-sm89" in m and "give --gpu" in m for m in differs)
    assert report.refusals == []
    text = run("audit", W4A4).stdout
    assert "on sm80-sm89" in text and "on sm100+" in text


def test_humming_outranks_marlin_on_sm90_from_0_32_0() -> None:
    hopper = arms(audit(str(W4A4), gpu="H200"))[("NVFP4", "sm90")]
    assert (hopper.executed, hopper.kernel) == ("W4A16-NVFP4", "Humming")
    assert hopper.log == "Using HummingNvFp4LinearKernel for NVFP4 GEMM"
    assert "native support for FP4" not in (hopper.log or "")
    assert "input-schema fallback" in hopper.reason
    assert hopper.source and "humming/priority.py@62d4bc3c7" in hopper.source
    for release in ("0.30.0", "0.31.0"):
        old = arms(audit(str(W4A4), engine=f"vllm=={release}", gpu="H200"))[("NVFP4", "sm90")]
        assert (old.executed, old.kernel) == ("W4A16-NVFP4", "Marlin")
    new = arms(audit(str(W4A4), engine="vllm==0.32.0", gpu="H200"))[("NVFP4", "sm90")]
    assert new.kernel == "Humming" and "@5df63a720" in (new.source or "")
    # Humming does not change sm80/sm89: it is preferred on sm90 only
    assert arms(audit(str(W4A4), gpu="sm89"))[("NVFP4", "sm89")].kernel == "Marlin"


def test_with_a_gpu_the_arm_line_gives_one_arm() -> None:
    report = audit(str(W4A4), gpu="H100")
    assert executed(report) == {("FP8", "sm90"): "W8A8-FP8", ("NVFP4", "sm90"): "W4A16-NVFP4"}
    assert executed(audit(str(W4A4), gpu="B200")) == {
        ("FP8", "sm100"): "W8A8-FP8",
        ("NVFP4", "sm100"): "W4A4-NVFP4",
    }


def test_json_is_deterministic_and_carries_the_gpu_column(run) -> None:
    first = run("audit", W4A4, "-f", "json").stdout
    assert first == run("audit", W4A4, "-f", "json").stdout
    rows = json.loads(first)["arms"]
    assert [r["gpu"] for r in rows] == ["sm80", "sm89+", "sm80-sm89", "sm90", "sm100+"]
    assert json.loads(first)["routing_moves"] is None
    Report.model_validate(json.loads(first))


# --- vLLM v0.33.0 -----------------------------------------------------------------------------


def test_vllm_nvfp4_w4a4_capability_and_linear_backend(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)
    assert executed(audit(str(path), gpu="sm90"))[("NVFP4", "sm90")] == "W4A16-NVFP4"
    assert executed(audit(str(path), gpu="sm100"))[("NVFP4", "sm100")] == "W4A4-NVFP4"
    marlin = audit(str(path), gpu="sm100", env={"linear_backend": "marlin"})
    assert executed(marlin)[("NVFP4", "sm100")] == "W4A16-NVFP4"
    cutlass = audit(str(path), gpu="sm90", env={"linear_backend": "cutlass"})
    assert set(codes(cutlass)) == {"no-arm"}
    assert "Failed to find a kernel that can implement the NVFP4 linear layer." in message(
        cutlass, "no-arm"
    )
    ok = audit(str(path), gpu="sm100", env={"linear_backend": "cutlass"})
    assert executed(ok)[("NVFP4", "sm100")] == "W4A4-NVFP4" and codes(ok) == []


def test_vllm_shipped_input_scale_is_noted_only_when_shipped(tmp_path: Path) -> None:
    block = modelopt_flat("W4A16_NVFP4")
    static = audit(str(inline(tmp_path, block, nvfp4_static, "s")), gpu="sm90")
    bare = audit(str(inline(tmp_path, block, nvfp4_modelopt, "b")), gpu="sm90")
    row = arms(static)[("W4A16_NVFP4", "sm90")]
    assert "input_scale shipped on 14/14 but not read on this arm" in row.reason
    assert "shipped" not in arms(bare)[("W4A16_NVFP4", "sm90")].reason
    assert row.executed == arms(bare)[("W4A16_NVFP4", "sm90")].executed == "W4A16-NVFP4"


def vision(module: str) -> dict[str, Any]:
    return nvfp4_static(f"{module}", H, H)


def test_vllm_vision_tower_bypass_module_excluded_and_mixed_flip_it(tmp_path: Path) -> None:
    tower = "model.vision_tower.blocks.0.attn.proj"
    path = single(tmp_path, "NVFP4", nvfp4_static, extra=vision(tower))
    report = audit(str(path), gpu="sm100")
    rows = [a for a in report.arms if a.scheme == "NVFP4"]
    assert {(a.executed, a.modules) for a in rows} == {("W4A4-NVFP4", 14), ("unquantized", 1)}
    bypass = next(a for a in rows if a.executed == "unquantized")
    assert "vision_tower" in bypass.reason and "L253-258" in (bypass.source or "")
    # excluded: it leaves the arm line (an unquantized module is no declared arm)
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head", tower])}
    tensors = {**llama(spell=nvfp4_static), **vision(tower)}
    excluded = write_checkpoint(tmp_path / "ex", {"model.safetensors": tensors}, documents)
    rows = [a for a in audit(str(excluded), gpu="sm100").arms if a.scheme == "NVFP4"]
    assert {(a.executed, a.modules) for a in rows} == {("W4A4-NVFP4", 14)}
    # MIXED_PRECISION has no such bypass: the tower keeps its declared arm
    layers = layers_map(mlp="NVFP4")
    layers[tower] = {"quant_algo": "NVFP4", "group_size": 16}
    tensors = {**llama(spell=lambda m, o, i: spell_mixed_static(m, o, i)), **vision(tower)}
    report = audit(str(mixed(tmp_path, tensors, layers)), gpu="sm100")
    assert executed(report)[("NVFP4", "sm100")] == "W4A4-NVFP4"
    assert [a.modules for a in report.arms if a.scheme == "NVFP4"] == [7]  # 6 MLP + the tower


def test_vllm_modules_alike_split_by_each_name_string_a_rule_reads(tmp_path: Path) -> None:
    """Two towers named by two of the strings the rules read, alike to the language model's
    modules: each is decided by its own name, not by the first module alike to it."""
    towers = ["model.vision_tower.blocks.0.attn.proj", "model.vision_model.blocks.0.attn.proj"]
    path = single(tmp_path, "NVFP4", nvfp4_static, extra={**vision(towers[0]), **vision(towers[1])})
    rows = [a for a in audit(str(path), gpu="sm100").arms if a.scheme == "NVFP4"]
    assert {(a.executed, a.modules) for a in rows} == {("W4A4-NVFP4", 14), ("unquantized", 2)}


def spell_mixed_static(module: str, out: int, inp: int) -> dict[str, Any]:
    if module.rsplit(".", 1)[1] in ATTN:
        return fp8_modelopt(module, out, inp)
    return nvfp4_static(module, out, inp)


def test_vllm_relabels_nvfp4_whose_groups_are_weight_only(tmp_path: Path) -> None:
    weights = {"num_bits": 4, "type": "float", "group_size": 16}
    weight_only = modelopt_flat(
        "NVFP4", config_groups={"g": {"targets": ["Linear"], "weights": weights}}
    )
    with_acts = modelopt_flat(
        "NVFP4",
        config_groups={
            "g": {"targets": ["Linear"], "weights": weights, "input_activations": weights}
        },
    )
    relabelled = audit(str(inline(tmp_path, weight_only, nvfp4_static, "a")), gpu="sm100")
    native = audit(str(inline(tmp_path, with_acts, nvfp4_static, "b")), gpu="sm100")
    row = arms(relabelled)[("NVFP4", "sm100")]
    assert (row.declared, row.executed, row.kernel) == (
        "W4A4-NVFP4",
        "W4A16-NVFP4",
        "FlashInfer CuTe-DSL W4A16",
    )
    assert "re-labels NVFP4 as W4A16_NVFP4" in row.reason
    assert executed(native)[("NVFP4", "sm100")] == "W4A4-NVFP4"
    on_hopper = audit(str(inline(tmp_path, weight_only, nvfp4_static, "a")), gpu="sm90")
    assert arms(on_hopper)[("NVFP4", "sm90")].kernel == "Humming"
    on_ampere = audit(str(inline(tmp_path, weight_only, nvfp4_static, "a")), gpu="sm80")
    assert arms(on_ampere)[("NVFP4", "sm80")].kernel == "Marlin"


def test_vllm_refuses_a_legacy_file_algo_and_accepts_it_in_config_json(tmp_path: Path) -> None:
    legacy = audit(str(single(tmp_path, "W4A16_NVFP4", nvfp4_modelopt)), gpu="sm90")
    assert set(codes(legacy)) == {"no-arm"}
    assert '"Unknown ModelOpt quant algo: W4A16_NVFP4"' in message(legacy, "no-arm")
    flat = audit(str(inline(tmp_path, modelopt_flat("W4A16_NVFP4"), nvfp4_modelopt)), gpu="sm90")
    assert codes(flat) == []
    assert executed(flat)[("W4A16_NVFP4", "sm90")] == "W4A16-NVFP4"


def test_vllm_refuses_an_algo_outside_quant_algos_with_its_list(tmp_path: Path, run) -> None:
    def awq(module: str, out: int, inp: int) -> dict[str, Any]:
        return {**nvfp4_static(module, out, inp), f"{module}.pre_quant_scale": ("BF16", (inp,))}

    path = inline(tmp_path, modelopt_flat("NVFP4_AWQ"), awq)
    result = run("audit", path, "-f", "json")
    assert result.exit_code == 1
    refusals = json.loads(result.stdout)["refusals"]
    assert {r["code"] for r in refusals} == {"no-arm"}
    assert (
        "ModelOpt currently only supports: ['FP8', 'FP8_PER_CHANNEL_PER_TOKEN', 'FP8_PB_WO', "
        "'NVFP4', 'W4A16_NVFP4', 'MXFP8', 'MIXED_PRECISION'] quantizations in vLLM."
    ) in refusals[0]["message"]
    # the same algorithm as one entry of a MIXED_PRECISION map: silently unquantized
    layers = layers_map()
    m = "model.layers.0.mlp.down_proj"
    layers[m] = {"quant_algo": "NVFP4_AWQ", "group_size": 16}
    t = llama(spell=spell_mixed)
    t.update(awq(m, H, INTER))
    report = audit(str(mixed(tmp_path, t, layers)), gpu="sm90")
    assert executed(report)[("NVFP4_AWQ", "sm90")] == "unquantized"
    assert "no-arm" not in codes(report)


def test_vllm_fp8_capability_strategy_and_mixed(tmp_path: Path) -> None:
    path = single(tmp_path, "FP8", fp8_modelopt)
    assert executed(audit(str(path), gpu="A100"))[("FP8", "sm80")] == "W8A16-FP8"
    assert executed(audit(str(path), gpu="L40S"))[("FP8", "sm89")] == "W8A8-FP8"
    turing = audit(str(path), gpu="sm75")
    assert "Minimum capability: 80. Current capability: 75." in message(turing, "no-arm")
    # inside MIXED_PRECISION (minimum 75) the same FP8 runs Marlin on sm75
    layers = layers_map()
    report = audit(str(mixed(tmp_path, llama(spell=spell_mixed), layers)), gpu="sm75")
    assert executed(report)[("FP8", "sm75")] == "W8A16-FP8" and codes(report) == []

    def block(module: str, out: int, inp: int) -> dict[str, Any]:
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("F32", (-(-out // 128), 1, -(-inp // 128), 1)),
        }

    blocked = inline(tmp_path, modelopt_flat("FP8_PB_WO"), block, "blk")
    assert executed(audit(str(blocked), gpu="L40S"))[("FP8_PB_WO", "sm89")] == "W8A16-FP8"
    assert executed(audit(str(blocked), gpu="H100"))[("FP8_PB_WO", "sm90")] == "W8A8-FP8"
    forced = audit(str(path), gpu="H100", env={"linear_backend": "marlin"})
    assert executed(forced)[("FP8", "sm90")] == "W8A16-FP8"


def test_vllm_mxfp8_is_weight_only_below_sm100(tmp_path: Path) -> None:
    def mx(module: str, out: int, inp: int) -> dict[str, Any]:
        return {
            f"{module}.weight": ("F8_E4M3", (out, inp)),
            f"{module}.weight_scale": ("U8", (out, inp // 32)),
        }

    path = inline(tmp_path, modelopt_flat("MXFP8"), mx)
    assert executed(audit(str(path), gpu="H100"))[("MXFP8", "sm90")] == "W8A16-MXFP8"
    assert executed(audit(str(path), gpu="B200"))[("MXFP8", "sm100")] == "W8A8-MXFP8"


def test_vllm_compressed_tensors_nvfp4(tmp_path: Path) -> None:
    block = ct_block({"group_0": w4a4_group(["Linear"])})
    path = inline(tmp_path, block, ct_nvfp4)
    report = audit(str(path))
    assert executed(report) == {
        ("group_0", "sm80-sm89"): "W4A16-NVFP4",
        ("group_0", "sm90"): "W4A16-NVFP4",
        ("group_0", "sm100+"): "W4A4-NVFP4",
    }
    assert "input_global_scale shipped on 14/14" in arms(report)[("group_0", "sm80-sm89")].reason


# --- the engine's wording for fused-shard refusals -------------------------------------------


def test_fused_shards_partly_excluded_quote_the_engine(tmp_path: Path) -> None:
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["model.layers.0.mlp.gate_proj"])}
    t = llama(spell=nvfp4_static)
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    for engine, quoted in (("vllm", "vllm v0.34.0"), ("sglang", "sglang v0.5.23")):
        msg = message(audit(str(path), engine=engine), "fused-shards-disagree")
        assert (
            f'{quoted} raises at load: "Detected some but not all shards of '
            "model.layers.0.mlp.gate_up_proj are quantized. All shards of fused layers to have "
            'the same precision."'
        ) in msg
    probe = message(audit(str(path), engine="name-probe"), "fused-shards-disagree")
    assert "raises at load" not in probe


def _bucket(report: Report, module: str) -> str:
    return next(m["bucket"] for m in report.modules if m["module"] == module)


def test_a_mixed_fused_layer_takes_its_listed_shards_algorithm_for_an_unlisted_shard(
    tmp_path: Path,
) -> None:
    """vLLM looks the fused qkv_proj up once: one algorithm among its listed shards decides
    for all (modelopt.py _resolve_quant_algo, strategy 2). An unlisted shard that ships that
    algorithm's tensors loads; one that ships BF16 does not fit the quantized parameters."""
    layers = layers_map()
    unlisted = "model.layers.1.self_attn.v_proj"
    del layers[unlisted]
    t = llama(spell=spell_mixed)
    report = audit(str(mixed(tmp_path, t, layers, "ships-fp8")))
    assert [r.code for r in report.refusals] == []
    assert _bucket(report, unlisted) == "FP8"
    for k in [k for k in t if k.startswith(unlisted + ".")]:
        del t[k]
    t.update(plain(unlisted, H, H))
    report = audit(str(mixed(tmp_path, t, layers, "ships-bf16")))
    assert [(r.code, r.module) for r in report.refusals] == [
        ("quantized-ships-unquantized", unlisted)
    ]


def test_a_mixed_experts_layer_is_looked_up_once(tmp_path: Path) -> None:
    """An expert missing from quantized_layers takes the layer's algorithm: vLLM looks the
    experts layer up by the first key under it (strategy 3); no expert-by-expert answer."""
    experts = [
        f"model.layers.0.mlp.experts.{e}.{p}" for e in range(3) for p in ("up_proj", "down_proj")
    ]
    shared = "model.layers.0.mlp.shared_expert.down_proj"
    t = {k: v for e in experts for k, v in nvfp4_static(e, H, H).items()}
    t.update(fp8_modelopt(shared))
    # listed first: the experts' parent holds an FP8 key, which an expert-by-expert lookup
    # (the parent fallback) would give the unlisted expert
    layers = {shared: {"quant_algo": "FP8"}}
    layers.update({e: {"quant_algo": "NVFP4", "group_size": 16} for e in experts if ".2." not in e})
    report = audit(str(mixed(tmp_path, t, layers)))
    assert [f.code for f in report.refusals] == []
    assert {_bucket(report, e) for e in experts} == {"NVFP4"}


def test_fused_shards_declared_differently_quote_the_engine(tmp_path: Path) -> None:
    layers = layers_map()
    layers["model.layers.1.self_attn.k_proj"] = {"quant_algo": "W4A16_NVFP4", "group_size": 16}
    t = llama(spell=spell_mixed)
    for k in [k for k in t if k.startswith("model.layers.1.self_attn.k_proj.")]:
        del t[k]
    t.update(nvfp4_modelopt("model.layers.1.self_attn.k_proj"))
    msg = message(audit(str(mixed(tmp_path, t, layers))), "fused-shards-disagree")
    assert (
        'raises at load: "Mixed quant_algo within fused layer model.layers.1.self_attn.qkv_proj: '
        "{'FP8', 'W4A16_NVFP4'}. All shards must use the same quantization.\""
    ) in msg


def test_compressed_tensors_shards_quote_or_say_the_engine_raises_nothing(tmp_path: Path) -> None:
    ignored = ct_block(
        {"group_0": w4a4_group(["Linear"])}, ignore=["lm_head", "model.layers.0.self_attn.q_proj"]
    )
    msg = message(audit(str(inline(tmp_path, ignored, ct_nvfp4, "i"))), "fused-shards-disagree")
    assert '"Found different quantization schemes for the shards of ' in msg
    sgl = message(
        audit(str(inline(tmp_path, ignored, ct_nvfp4, "i")), engine="sglang"),
        "fused-shards-disagree",
    )
    assert "\"Found different quantization schemes for ['q_proj', 'k_proj', 'v_proj'] in " in sgl
    two = ct_block(
        {
            "group_0": w4a4_group(["model.layers.0.self_attn.q_proj"]),
            "group_1": w4a4_group(["Linear"]),
        }
    )
    msg = message(audit(str(inline(tmp_path, two, ct_nvfp4, "t"))), "fused-shards-disagree")
    assert "raises nothing here" in msg and "first shard's target" in msg
    # q and k named, v not: the fused layer matches no target and gets no scheme
    some = ct_block(
        {"group_0": w4a4_group([f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj")])}
    )
    msg = message(audit(str(inline(tmp_path, some, ct_nvfp4, "s"))), "fused-shards-disagree")
    assert "raises nothing here" in msg and "the layer gets no scheme" in msg


# --- SGLang v0.5.23 ---------------------------------------------------------------------------


def test_sglang_modelopt_nvfp4_backend_and_capability(tmp_path: Path) -> None:
    path = single(tmp_path, "NVFP4", nvfp4_static)

    def arm(gpu: str, **env: str) -> str:
        report = audit(str(path), engine="sglang", gpu=gpu, env=env)
        return executed(report)[("NVFP4", f"sm{parse_gpu(gpu)}")]

    assert arm("sm90") == "W4A16-NVFP4"
    assert arm("sm100") == "W4A4-NVFP4"
    assert arm("sm120") == "W4A4-NVFP4"
    assert arm("sm100", fp4_gemm_backend="marlin") == "W4A16-NVFP4"
    assert arm("sm100", SGLANG_FLASHINFER_CUTEDSL_NVFP4_W4A16="1") == "W4A16-NVFP4"
    assert arm("sm120", SGLANG_FLASHINFER_CUTEDSL_NVFP4_W4A16="1") == "W4A4-NVFP4"
    native = audit(
        str(path), engine="sglang", gpu="H100", env={"fp4_gemm_backend": "flashinfer_cutlass"}
    )
    assert set(codes(native)) == {"no-arm"}
    assert (
        '"ModelOpt NVFP4 native dense GEMM backends require SM100+. '
        'Use --fp4-gemm-backend marlin on SM80-SM90."'
    ) in message(native, "no-arm")
    kernels = {
        a.gpu: a.kernel for a in audit(str(path), engine="sglang").arms if a.scheme == "NVFP4"
    }
    assert kernels == {
        "sm80-sm90": "Marlin",
        "sm100": "FlashInfer CuTe-DSL",
        "sm120+": "FlashInfer CUTLASS",
    }


def test_sglang_pure_fp8_needs_sm89_unless_mixed(tmp_path: Path, run) -> None:
    path = single(tmp_path, "FP8", fp8_modelopt)
    ampere = run("audit", path, "--engine", "sglang", "--gpu", "A100", "-f", "json")
    assert ampere.exit_code == 1
    refusal = json.loads(ampere.stdout)["refusals"][0]
    assert (
        '"The quantization method modelopt_fp8 is not supported for the current GPU. '
        'Minimum capability: 89. Current capability: 80."'
    ) in refusal["message"]
    # no GPU given: the refusal holds on sm80 only, so it is a note that asks for --gpu
    unknown = audit(str(path), engine="sglang")
    assert codes(unknown) == [] and unknown.verdict == "clean"
    notes = [n.message for n in unknown.notes if n.code == "no-arm-on-some-gpus"]
    assert notes and "give --gpu to decide" in notes[0]
    assert executed(unknown) == {("FP8", "sm80"): "none", ("FP8", "sm89+"): "W8A8-FP8"}
    assert run("audit", path, "--engine", "sglang").exit_code == 0
    forced = audit(str(path), engine="sglang", gpu="H100", env={"SGLANG_FORCE_FP8_MARLIN": "1"})
    assert executed(forced)[("FP8", "sm90")] == "W8A16-FP8"
    layers = layers_map()
    inside = audit(
        str(mixed(tmp_path, llama(spell=spell_mixed), layers)), engine="sglang", gpu="A100"
    )
    assert executed(inside)[("FP8", "sm80")] == "W8A16-FP8" and codes(inside) == []


def test_sglang_compressed_tensors_nvfp4_falls_back_with_its_warning(tmp_path: Path) -> None:
    path = inline(tmp_path, ct_block({"group_0": w4a4_group(["Linear"])}), ct_nvfp4)
    hopper = arms(audit(str(path), engine="sglang", gpu="H100"))[("group_0", "sm90")]
    assert hopper.executed == "W4A16-NVFP4"
    assert "NVFP4 w4a4 requires compute capability >= 10.0" in (hopper.log or "")
    blackwell = audit(str(path), engine="sglang", gpu="B200")
    assert executed(blackwell)[("group_0", "sm100")] == "W4A4-NVFP4"
    marlin = audit(str(path), engine="sglang", gpu="B200", env={"fp4_gemm_backend": "marlin"})
    row = arms(marlin)[("group_0", "sm100")]
    assert row.executed == "W4A16-NVFP4" and "is weight-only" in (row.log or "")


def test_sglang_refuses_fp4_algorithms_it_does_not_list(tmp_path: Path) -> None:
    report = audit(
        str(inline(tmp_path, modelopt_flat("W4A8_NVFP4_FP8"), nvfp4_static)), engine="sglang"
    )
    assert set(codes(report)) == {"no-arm"}
    assert "ModelOpt currently only supports: FP8, NVFP4, NVFP4_AWQ, W4A16_NVFP4" in message(
        report, "no-arm"
    )


# --- routing A/B ------------------------------------------------------------------------------


def test_routing_both_lists_exactly_the_193_modules_the_flag_moves(run) -> None:
    report = audit(str(SIBLING), engine="name-probe", env={"W4A4": "1"}, routing="both")
    assert report.engine.routing == "probe"
    (move,) = report.routing_moves or []
    assert (move.from_arm, move.to_arm, move.from_routing, move.to_routing, move.gpu) == (
        "W4A4-NVFP4",
        "W4A16-NVFP4",
        "probe",
        "declared",
        None,
    )
    nvfp4 = sorted(m["module"] for m in report.modules if m["bucket"] == "W4A16_NVFP4")
    assert move.modules == 193 == len(nvfp4) and move.module_names == nvfp4
    # without the flag nothing moves, and the arm line is the declared one
    assert audit(str(SIBLING), engine="name-probe", routing="both").routing_moves == []
    # the arm line under routing by the declaration is the move's destination
    declared = audit(str(SIBLING), engine="name-probe", env={"W4A4": "1"}, routing="declared")
    assert executed(declared)[("W4A16_NVFP4", None)] == "W4A16-NVFP4"
    probed = audit(str(SIBLING), engine="name-probe", env={"W4A4": "1"})
    assert executed(probed)[("W4A16_NVFP4", None)] == "W4A4-NVFP4"
    assert probed.routing_moves is None
    args = ("audit", SIBLING, "--engine", "name-probe", "--env", "W4A4=1", "--routing", "both")
    as_json = json.loads(run(*args, "-f", "json").stdout)["routing_moves"]
    assert [(m["from_arm"], m["to_arm"], m["modules"]) for m in as_json] == [
        ("W4A4-NVFP4", "W4A16-NVFP4", 193)
    ]
    markdown = run(*args, "-f", "markdown").stdout
    assert "**Routing moves** (routing by probe -> by declared)" in markdown
    assert "| W4A4-NVFP4 | W4A16-NVFP4 | all | 193 |" in markdown
    assert "- `lm_head`" in markdown
    table = run(*args).stdout
    assert "Routing moves (by probe -> by declared)" in table and "193" in table


def test_routing_both_is_empty_when_declaration_and_tensors_agree(run) -> None:
    report = audit(str(MTP), engine="name-probe", env={"W4A4": "1"}, routing="both")
    assert report.routing_moves == []
    assert audit(str(MTP), engine="name-probe", routing="both").routing_moves == []
    md = run("audit", MTP, "--engine", "name-probe", "--routing", "both", "-f", "markdown")
    assert "**Routing moves**: none" in md.stdout
    # vLLM routes by the declaration: its rules never look at tensor names
    assert audit(str(SIBLING), routing="both").routing_moves == []


def test_routing_both_moves_an_unlisted_module_that_ships_scales(tmp_path: Path) -> None:
    t = llama(spell=spell_mixed, lm_head=fp8_modelopt("lm_head", 256, H))
    report = audit(str(mixed(tmp_path, t, layers_map())), engine="name-probe", routing="both")
    assert [(m.from_arm, m.to_arm, m.module_names) for m in report.routing_moves or []] == [
        ("W8A8-FP8", "unquantized", ["lm_head"])
    ]


def test_routing_is_a_choice(run) -> None:
    assert run("audit", W4A4, "--routing", "sideways").exit_code == ExitCode.BAD_INPUT
    with pytest.raises(QarmError):
        audit(str(W4A4), routing="sideways")


# --- real-world declarations ----------------------------------------------------------------

REALWORLD_FILES = sorted(p for p in REALWORLD.glob("*/*.json"))


def test_the_realworld_corpus_is_all_here() -> None:
    assert len(REALWORLD_FILES) == 20


@pytest.mark.parametrize("path", REALWORLD_FILES, ids=lambda p: p.parent.name)
def test_every_realworld_declaration_audits_under_vllm(path: Path, run) -> None:
    try:
        report = audit(str(path), engine="vllm")
    except QarmError as exc:  # a named error, never a crash
        assert type(exc).__name__.endswith("Error") and str(exc)
        return
    assert report.verdict in ("clean", "warnings", "refused")
    if report.declaration.family in ("modelopt", "compressed-tensors"):
        assert report.arms, "a declaration alone still gets an arm line"
        assert all(a.modules == 0 and a.reason.startswith("declaration only") for a in report.arms)
    result = run("audit", path, "-f", "json")
    assert result.exit_code in (0, 1)
    assert json.loads(result.stdout)["engine"]["name"] == "vllm"


def test_a_realworld_nvfp4_declaration_gets_both_ranges() -> None:
    report = audit(str(REALWORLD / "trtllm-deepseek-r1-nvfp4" / "hf_quant_config.json"))
    assert executed(report) == {
        ("NVFP4", "sm80-sm89"): "W4A16-NVFP4",
        ("NVFP4", "sm90"): "W4A16-NVFP4",
        ("NVFP4", "sm100+"): "W4A4-NVFP4",
    }
    assert (
        "input_scale (declared static) is not read" in arms(report)[("NVFP4", "sm80-sm89")].reason
    )


def test_a_lone_legacy_w4a16_declaration_is_refused_by_vllm(tmp_path: Path) -> None:
    path = tmp_path / "hf_quant_config.json"
    path.write_text(json.dumps(modelopt_file("W4A16_NVFP4", ["lm_head"])))
    report = audit(str(path))
    assert [f.code for f in report.refusals] == ["no-arm"]
    assert '"Unknown ModelOpt quant algo: W4A16_NVFP4"' in report.refusals[0].message
    assert audit(str(path), engine="sglang").refusals == []
    assert audit(str(path), engine="name-probe").arms == []  # a probe needs tensor names


def test_markdown_shows_the_engine_version_routing_and_log(run) -> None:
    text = run("audit", W4A4, "--gpu", "sm90", "-f", "markdown").stdout
    assert (
        "engine profile `vllm` v0.34.0 (routing by declared) "
        "(linear_backend=auto, moe_backend=auto), GPU sm90" in text
    )
    assert "  - engine log: `Using HummingNvFp4LinearKernel for NVFP4 GEMM`" in text
    assert render_markdown(audit(str(W4A4))) == render_markdown(audit(str(W4A4)))
    assert render_json(audit(str(W4A4), gpu="sm90")).count('"gpu": "sm90"') == 3


def test_plain_modules_never_reach_the_arm_line(tmp_path: Path) -> None:
    t = {**llama(spell=nvfp4_static), **plain("model.extra_proj", H, H)}
    documents = {"hf_quant_config.json": modelopt_file("NVFP4", ["lm_head", "model.extra_proj"])}
    path = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    assert sum(a.modules for a in audit(str(path), gpu="sm100").arms) == 14


def test_the_docs_list_every_rule_with_its_citation() -> None:
    """The rule tables and release matrices of docs/engines.md are generated from the
    profiles (scripts/engine_docs.py) and not stale."""
    spec = importlib.util.spec_from_file_location(
        "engine_docs", REPO / "scripts" / "engine_docs.py"
    )
    assert spec and spec.loader
    engine_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(engine_docs)
    text = (REPO / "docs" / "engines.md").read_text()
    assert engine_docs.render(text) == text, "run python scripts/engine_docs.py"
    for name in BUILTIN:
        profile = load_profile(name)
        for rule in profile.rules:
            assert rule.reason.replace("|", "\\|") in text, (name, rule.reason)
            if rule.source:
                assert f"`{rule.source}`" in text, rule.source
        for quote in profile.load_errors:
            assert f"`{quote.source}`" in text


# --- layers the arm line does not cover -----------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "operands", "refused"),
    [
        (
            {"num_bits": 8, "type": "float", "strategy": "tensor"},
            {"weight": ("F8_E4M3", (256, H)), "weight_scale": ("F32", (1,))},
            True,
        ),
        (
            {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 16},
            {
                "weight_packed": ("I32", (256, H // 8)),
                "weight_scale": ("BF16", (256, H // 16)),
                "weight_shape": ("I64", (2,)),
            },
            False,
        ),
    ],
    ids=["fp8", "int4-group"],
)
def test_vllm_takes_a_compressed_tensors_embedding_only_as_int_by_group_or_channel(
    tmp_path: Path, weights: dict[str, Any], operands: dict[str, Any], refused: bool
) -> None:
    """vLLM's VocabParallelEmbedding under compressed-tensors: CompressedTensorsEmbeddingWNA16Int
    or a ValueError at load (compressed_tensors.py get_quant_method)."""
    t = llama()
    del t["model.embed_tokens.weight"]
    t.update({f"model.embed_tokens.{k}": v for k, v in operands.items()})
    fmt = "float-quantized" if weights["type"] == "float" else "pack-quantized"
    block = ct_block({"g": {"targets": ["Embedding"], "weights": weights}}, ignore=[])
    block["format"] = fmt
    documents = {"config.json": {"model_type": "llama", "quantization_config": block}}
    folder = write_checkpoint(tmp_path / "c", {"model.safetensors": t}, documents)
    report = audit(str(folder))
    found = [(r.code, r.module) for r in report.refusals]
    assert found == ([("no-arm", "model.embed_tokens")] if refused else [])
    if refused:
        assert "embeddings only support weight-only INT" in report.refusals[0].message
