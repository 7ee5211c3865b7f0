"""Differential: qarm's SGLang rules for compressed-tensors routed experts against SGLang 0.5.23's
own ``get_moe_scheme``.

tests/data/sglang-0.5.23-moe-answers.json holds, for declarations of one config group over the
routed experts (integer, FP8, NVFP4 and MX schemes, each group format and config format, a
``Linear`` or a regex target) and the GPUs sm80, sm90, sm100, sm120, what SGLang does:
the MoE scheme its ``get_moe_scheme`` builds, ``Mxfp4MoEMethod`` (where ``get_quant_method``
sends the layer before it), or the error it raises. scripts/derive_sglang_moe_answers.py derived
them by running those functions, compiled from the release wheel's own source, on declarations
parsed by compressed-tensors 0.18.0 (the release's pin); this test needs no SGLang. For every
answer, qarm's rules for the same declaration and GPU must give that scheme's arm, or ``none``
with the engine's words, or ``unknown`` where the rules say they do not model it; the
differences are in ``EXPECTED`` with their reason. Regenerate with
``python scripts/derive_sglang_moe_answers.py --wheel sglang-0.5.23-...whl`` in a venv holding
compressed-tensors 0.18.0 (``--check`` compares).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qarm_audit.declarations import read_declaration
from qarm_audit.engines.arms import make_view
from qarm_audit.engines.profile import Rule, load_profile, select

DATA = Path(__file__).parent / "data" / "sglang-0.5.23-moe-answers.json"
ANSWERS: list[dict[str, Any]] = json.loads(DATA.read_text("utf-8"))["answers"]
PROFILE = load_profile("sglang==0.5.23")
MODULE = "model.layers.0.mlp.experts.0.gate_proj"

ARMS = {
    "CompressedTensorsWNA16TritonMoE": ("W{bits}A16-INT", "Triton WNA16 MoE"),
    "CompressedTensorsWNA16MoE": ("W{bits}A16-INT", "Marlin MoE"),
    "CompressedTensorsW4A16Nvfp4MoE": ("W4A16-NVFP4", None),
    "CompressedTensorsW4A4Nvfp4MoE": ("W4A4-NVFP4", None),
    "CompressedTensorsW8A8Fp8MoE": ("W8A8-FP8", None),
}
"""The arm (and kernel, where the rules name one) of each MoE scheme SGLang builds."""
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
LINEAR_TARGET = (
    "CompressedTensorsW4AFP8MoE reads the scheme of the config's 'Linear' target (a KeyError "
    "where there is none), which the rules do not model: unknown"
)


def declaration(case: dict[str, Any]) -> Any:
    group: dict[str, Any] = {
        "targets": [case["target"]],
        "weights": case["weights"],
        "input_activations": case["input_activations"],
        "format": case["format"],
    }
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": case["config_format"],
            "config_groups": {"group_0": group},
        }
    }
    return read_declaration({"config.json": json.dumps(config)})


def rule_for(case: dict[str, Any], gpu: int) -> Rule | None:
    found = declaration(case)
    scheme = found.schemes["group_0"]
    view = make_view(
        found, scheme, routing="declared", module=MODULE, shipped=None, operands=["weight"]
    )
    return select(
        PROFILE, view, PROFILE.env and {k: v.default for k, v in PROFILE.env.items()}, gpu
    )


def difference(
    answer: dict[str, Any], case: dict[str, Any], gpu: int, rule: Rule | None
) -> str | None:
    """Why the rule does not give SGLang's answer; None where it does."""
    if rule is None:
        return "no rule holds"
    mxfp4 = case["weights"]["type"] == "float" and case["weights"]["num_bits"] == 4
    if rule.arm == "unknown" and mxfp4 and "mxfp4" not in case["config_format"]:
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
    if built == "CompressedTensorsW8A8Fp8MoE" and gpu < 89:
        # the build alone does not say the kernel runs there: the rules must not claim it
        return BELOW_SM89 if rule.arm == "unknown" else f"below sm89 the rule says {rule.arm}"
    if (rule.arm, rule.kernel if kernel else None) != (arm, kernel):
        return f"SGLang builds {built} ({arm}, {kernel}), the rule says {rule.arm} ({rule.kernel})"
    return None


def test_qarm_gives_sglangs_answer_for_every_routed_experts_declaration() -> None:
    allowed = {RUNTIME_ASSERT, LINEAR_TARGET, BELOW_SM89, MXFP4_TARGET}
    unexplained = sorted(
        {
            f"{json.dumps(item['case'], sort_keys=True)} sm{item['gpu']}: {why}"
            for item in ANSWERS
            if (
                why := difference(
                    item["answer"], item["case"], item["gpu"], rule_for(item["case"], item["gpu"])
                )
            )
            not in (None, *allowed)
        }
    )
    assert unexplained == [], "\n".join(unexplained)


@pytest.mark.parametrize("reason", [RUNTIME_ASSERT, LINEAR_TARGET, BELOW_SM89, MXFP4_TARGET])
def test_each_expected_difference_occurs(reason: str) -> None:
    """An allowance no answer needs any more is stale."""
    found = [
        item
        for item in ANSWERS
        if difference(
            item["answer"], item["case"], item["gpu"], rule_for(item["case"], item["gpu"])
        )
        == reason
    ]
    assert found
