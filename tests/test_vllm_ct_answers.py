"""Differential: qarm's vLLM rules for compressed-tensors layers against vLLM 0.30-0.33's own
``get_scheme`` (a dense Linear) and ``get_moe_method`` (routed experts).

tests/data/vllm-<release>-ct-answers.json holds, for the declarations of
scripts/engine_source.py's ``cases`` on a dense Linear and on routed experts and the GPUs sm80,
sm90, sm100, sm120, the scheme vLLM builds or the error it raises;
scripts/derive_vllm_ct_answers.py derived them by running those functions, compiled from the
release wheel's own source, on declarations parsed by compressed-tensors 0.17.0 (the release's
pin). The answers stop at the scheme's construction, and vLLM's arm is decided further by its
kernel selection, which the rules model: so where vLLM raises, qarm's rule must refuse in
vLLM's words; where it builds, qarm's rule must not refuse unless it names a refusal past the
build (``PAST_THE_BUILD``).
"""

from __future__ import annotations

from typing import Any

import pytest

from ct_answers import answers, rule_for, unexplained
from qarm_audit.engines.profile import Profile, load_profile

RELEASES = ["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
ANSWERS = {release: answers("vllm", release) for release in RELEASES}
PROFILES: dict[str, Profile] = {release: load_profile(f"vllm=={release}") for release in RELEASES}
PAST_THE_BUILD = (
    # the weight loader: an int-quantized W4AFP8 ships `weight`, the scheme registers
    # `weight_packed`
    "registers the int4 weight as weight_packed",
    # 0.30's CompressedTensorsW4A8Int for FP8 activations: Humming asserts after the load, or
    # the loader's shape check fails on a pack-quantized weight
    "asserts eight values to an int32 as the weights are processed after loading",
    "the weight loader's shape assertion fails after the scheme is built",
)
"""Words of the rules' reasons for a refusal that comes after the scheme is built."""


def difference(item: dict[str, Any], profile: Profile) -> str | None:
    answer, rule = (
        item["answer"],
        rule_for(
            item,
            profile,
            ["weight_packed" if "pack-quantized" in (item["case"]["format"] or "") else "weight"],
        ),
    )
    if rule is None:
        return "no rule holds"
    if "raises" in answer:
        if rule.arm != "none":
            return f"vLLM raises {answer['raises']}, the rule says {rule.arm}"
        said = (rule.error or "").split("<", 1)[0].split("{", 1)[0]
        message = f"{answer['raises']}: {answer['message']}"
        return (
            None
            if said in message
            else f"vLLM raises {message[:160]!r}, the rule says {rule.error!r}"
        )
    if rule.arm == "none" and not any(words in rule.reason for words in PAST_THE_BUILD):
        return f"vLLM builds {answer['scheme']}, the rule refuses: {rule.reason[:120]}"
    return None


@pytest.mark.parametrize("release", RELEASES)
def test_qarm_refuses_where_vllm_does_and_only_there(release: str) -> None:
    profile = PROFILES[release]
    differences = unexplained(ANSWERS[release], lambda item: difference(item, profile))
    assert differences == [], "\n".join(differences)


def test_fp8_activations_build_w4a8_int_in_0_30_only_and_fail_past_the_build() -> None:
    """0.30's _is_dynamic_token_w4a8_int tests no activation type: what it builds for FP8
    activations is refused for a failure after the build, in that release only."""
    built = {
        release
        for release in RELEASES
        for item in ANSWERS[release]
        if item["answer"].get("scheme") == "CompressedTensorsW4A8Int"
        and item["case"]["input_activations"]["type"] == "float"
    }
    assert built == {"0.30.0"}
    reasons = {
        rule.reason
        for item in ANSWERS["0.30.0"]
        if item["answer"].get("scheme") == "CompressedTensorsW4A8Int"
        and item["case"]["input_activations"]["type"] == "float"
        and (rule := rule_for(item, PROFILES["0.30.0"], ["weight"])) is not None
    }
    assert len(reasons) == 1 and "CompressedTensorsW4A8Int" in reasons.pop()
