"""Differential: qarm's SGLang rules for compressed-tensors layers against SGLang 0.5.23's own
``get_linear_scheme`` and ``get_moe_scheme``.

tests/data/sglang-0.5.23-ct-answers.json (and the same for 0.5.22) holds, for declarations of
one config group (integer, FP8, NVFP4 and MX schemes, each group format and config format, a
``Linear`` or a regex target), on a dense Linear and on a routed-experts layer, and on the GPUs
sm80, sm90, sm100, sm120, what SGLang does: the scheme it builds, ``Mxfp4MoEMethod`` (where
``get_quant_method`` sends an experts layer first), or the error it raises.
scripts/derive_sglang_ct_answers.py derived them by running those functions, compiled from the
release wheel's own source, on declarations parsed by compressed-tensors 0.18.0 (the release's
pin); this test needs no SGLang. For every answer, qarm's rule for the same declaration, layer
and GPU must give that scheme's arm, or ``none`` with the engine's words, or ``unknown`` where
the rules say they do not model the runner; each allowed difference is named below with its
reason. Regenerate with ``python scripts/derive_sglang_ct_answers.py --wheel
sglang-0.5.23-...whl`` in a venv holding compressed-tensors 0.18.0 (``--check`` compares).
"""

from __future__ import annotations

from typing import Any

import pytest

from ct_answers import answers, rule_for, unexplained
from qarm_audit.engines.profile import Profile, load_profile

RELEASES = ["0.5.22", "0.5.23"]
ANSWERS = {release: answers("sglang", release) for release in RELEASES}
PROFILES: dict[str, Profile] = {release: load_profile(f"sglang=={release}") for release in RELEASES}

ARMS = {
    "CompressedTensorsWNA16TritonMoE": ("W{bits}A16-INT", "Triton WNA16 MoE"),
    "CompressedTensorsWNA16MoE": ("W{bits}A16-INT", "Marlin MoE"),
    "CompressedTensorsW4A16Nvfp4MoE": ("W4A16-NVFP4", None),
    "CompressedTensorsW4A4Nvfp4MoE": ("W4A4-NVFP4", None),
    "CompressedTensorsW8A8Fp8MoE": ("W8A8-FP8", None),
    "CompressedTensorsWNA16": ("W{bits}A16-INT", "GPTQ Marlin"),
    "CompressedTensorsW4A16Fp4": ("W4A16-NVFP4", None),
    "CompressedTensorsW4A4Fp4": ("W4A4-NVFP4", None),
    "CompressedTensorsW8A8Fp8": ("W8A8-FP8", None),
    "CompressedTensorsW8A16Fp8": ("W8A16-FP8", None),
    "CompressedTensorsW8A8Int8": ("W8A8-INT", None),
}
"""The arm (and kernel, where the rules name one) of each scheme SGLang builds."""
NOT_MODELLED = {"Mxfp4MoEMethod", "CompressedTensorsW4AFP8MoE"}
"""Schemes whose runner the rules leave ``unknown``."""

RUNTIME_ASSERT = (
    "CompressedTensorsWNA16MoE builds asymmetric INT8 experts, and fused_marlin_moe's "
    "get_scalar_type asserts 4 bits for a zero point at the first forward, past the build "
    "these answers stop at: the rules refuse them"
)
BELOW_SM89 = (
    "CompressedTensorsW8A8Fp8MoE is built for FP8 experts whatever the GPU; whether its FP8 "
    "fused-MoE kernel runs below sm89 is not in the wheel's Python: unknown"
)
MXFP4_TARGET = (
    "in a config whose format does not name mxfp4, MXFP4 experts take Mxfp4MoEMethod only "
    "where the config's 'Linear' target holds fp4 groups of 32, which the rules do not model: "
    "unknown"
)
CREATE_WEIGHTS = (
    "below sm89 a dense block-FP8 layer takes CompressedTensorsW8A16Fp8, whose create_weights, "
    "past the build these answers stop at, raises for the block strategy: the rules refuse it"
)
INT8_GEMM = (
    "CompressedTensorsW8A8Int8's GEMM above sm90 is sgl_kernel's compiled int8_scaled_mm, whose "
    "coverage the wheel's Python does not show: unknown"
)
LINEAR_TARGET = (
    "CompressedTensorsW4AFP8MoE reads the scheme of the config's 'Linear' target (a KeyError "
    "where there is none), which the rules do not model: unknown"
)


def difference(item: dict[str, Any], profile: Profile) -> str | None:
    """Why qarm's rule does not give SGLang's answer; None where it does."""
    answer, case, gpu, rule = (
        item["answer"],
        item["case"],
        item["gpu"],
        rule_for(item, profile, ["weight"]),
    )
    if rule is None:
        return "no rule holds"
    mxfp4 = case["weights"]["type"] == "float" and case["weights"]["num_bits"] == 4
    experts = item["layer"] == "experts"
    if experts and rule.arm == "unknown" and mxfp4 and "mxfp4" not in (case["config_format"] or ""):
        return MXFP4_TARGET
    if "raises" in answer:
        if rule.arm == "unknown" and answer["raises"] == "KeyError":
            return LINEAR_TARGET
        if rule.arm != "none":
            return f"SGLang raises {answer['raises']}, the rule says {rule.arm}"
        said = (rule.error or "").split("<", 1)[0]
        message = (
            f"{answer['raises']}: {answer['message']}" if answer["message"] else answer["raises"]
        )
        if said not in message:
            return f"SGLang raises {message!r}, the rule says {rule.error!r}"
        return None
    built = answer.get("scheme") or answer.get("method")
    if built in NOT_MODELLED:
        return (
            None if rule.arm == "unknown" else f"{built} is not modelled, the rule says {rule.arm}"
        )
    arm, kernel = ARMS[built]
    arm = arm.format(bits=case["weights"]["num_bits"])
    if rule.arm == "none" and "get_scalar_type asserts" in rule.reason:
        return RUNTIME_ASSERT
    block = case["weights"]["strategy"] == "block"
    if built == "CompressedTensorsW8A16Fp8" and block and rule.arm == "none":
        return CREATE_WEIGHTS
    if built == "CompressedTensorsW8A8Int8" and gpu > 90:
        # the build alone does not say the GEMM runs there: the rules must not claim it
        return INT8_GEMM if rule.arm == "unknown" else f"above sm90 the rule says {rule.arm}"
    if built == "CompressedTensorsW8A8Fp8MoE" and gpu < 89:
        # the build alone does not say the kernel runs there: the rules must not claim it
        return BELOW_SM89 if rule.arm == "unknown" else f"below sm89 the rule says {rule.arm}"
    if (rule.arm, rule.kernel if kernel else None) != (arm, kernel):
        return f"SGLang builds {built} ({arm}, {kernel}), the rule says {rule.arm} ({rule.kernel})"
    return None


ALLOWED = (RUNTIME_ASSERT, LINEAR_TARGET, BELOW_SM89, MXFP4_TARGET, CREATE_WEIGHTS, INT8_GEMM)


@pytest.mark.parametrize("release", RELEASES)
def test_qarm_gives_sglangs_answer_for_every_declaration_layer_and_gpu(release: str) -> None:
    profile = PROFILES[release]
    differences = unexplained(ANSWERS[release], lambda item: difference(item, profile), ALLOWED)
    assert differences == [], "\n".join(differences)


@pytest.mark.parametrize("reason", ALLOWED)
def test_each_allowed_difference_occurs(reason: str) -> None:
    """An allowance no answer needs any more is stale."""
    profile = PROFILES[RELEASES[-1]]
    assert any(difference(item, profile) == reason for item in ANSWERS[RELEASES[-1]])
