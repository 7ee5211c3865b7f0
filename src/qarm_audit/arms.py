"""The declared-versus-executed arm line: for each declared scheme, what an engine would run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .declarations import Declaration
from .engines.profile import Profile, select
from .findings import Finding, finding
from .inventory import ModuleInfo
from .report.model import ArmRow
from .resolver import Membership
from .spelling import Spelling

DECIDING_OPERANDS = ("input_scale", "input_global_scale")
"""Operands whose presence moves an arm (static activation scales)."""

GPU_NAMES = {
    "a100": 80,
    "a10": 86,
    "a10g": 86,
    "rtx3090": 86,
    "l4": 89,
    "l40": 89,
    "l40s": 89,
    "rtx4090": 89,
    "h100": 90,
    "h200": 90,
    "gh200": 90,
    "b200": 100,
    "gb200": 100,
    "b300": 103,
    "gb300": 103,
    "rtx5090": 120,
    "rtxpro6000": 120,
    "gb10": 121,
    "dgxspark": 121,
}


def parse_gpu(text: str) -> int:
    """``sm90``, ``90``, ``9.0`` or a common name (``H100``, ``RTX 5090``) -> 90."""
    key = text.lower().replace(" ", "").replace("-", "").replace("_", "")
    if key in GPU_NAMES:
        return GPU_NAMES[key]
    key = key.removeprefix("sm")
    if "." in key:
        major, _, minor = key.partition(".")
        key = major + minor
    if key.isdigit() and 70 <= int(key) <= 200:
        return int(key)
    raise ValueError(
        f"unknown GPU {text!r}: give sm80..sm121, or one of {', '.join(sorted(GPU_NAMES))}"
    )


@dataclass(frozen=True)
class ArmDecision:
    declared: str
    executed: str
    reason: str
    note: str | None
    log: str | None


def decide(
    profile: Profile,
    env: dict[str, str],
    gpu: int | None,
    declaration: Declaration,
    info: ModuleInfo,
    membership: Membership,
    spelling: Spelling,
) -> ArmDecision:
    scheme = declaration.schemes.get(membership.bucket) if membership.declared_quantized else None
    declared = scheme.declared_arm if scheme else "unquantized"
    rule = select(
        profile,
        declared_family=scheme.family if scheme else "unquantized",
        declared_algo=scheme.algo if scheme else "",
        declared_arm=declared,
        shipped=spelling.family,
        operands=frozenset(info.operands),
        env=env,
        gpu=gpu,
    )
    if rule is None:
        return ArmDecision(
            declared, "none", f"no rule of profile {profile.name} applies", None, None
        )
    return ArmDecision(declared, rule.arm, rule.reason, rule.note, rule.log)


def arm_rows(
    profile: Profile,
    env: dict[str, str],
    gpu: int | None,
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    spellings: Mapping[str, Spelling],
    refused: frozenset[str] = frozenset(),
) -> tuple[list[ArmRow], list[Finding]]:
    """One row per (scheme, declared arm, executed arm); refusals where no arm exists.

    A module already refused for what it ships is not refused again for having no arm.
    """
    groups: dict[tuple[str, ArmDecision], list[ModuleInfo]] = {}
    findings: list[Finding] = []
    for name, info in modules.items():
        membership = memberships[name]
        spelling = spellings.get(name)
        if not membership.declared_quantized or spelling is None or info.kind != "linear":
            continue
        decision = decide(profile, env, gpu, declaration, info, membership, spelling)
        groups.setdefault((membership.bucket, decision), []).append(info)
        if decision.executed == "none" and name not in refused:
            findings.append(
                finding(
                    "no-arm",
                    f"{name} is declared {membership.bucket} ({decision.declared}); engine profile "
                    f"{profile.name} has no arm for it: {decision.reason}",
                    module=name,
                    tensor=info.weight.name if info.weight else "",
                )
            )
    rows = []
    for (scheme, decision), members in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1].executed)
    ):
        coverage = {}
        for operand in DECIDING_OPERANDS:
            count = sum(1 for m in members if operand in m.operands)
            if count:
                coverage[operand] = f"{count}/{len(members)}"
        rows.append(
            ArmRow(
                scheme=scheme,
                modules=len(members),
                declared=decision.declared,
                executed=decision.executed,
                reason=decision.reason,
                note=decision.note,
                log=decision.log,
                operands=coverage,
            )
        )
        if decision.executed not in ("none", decision.declared):
            findings.append(
                finding(
                    "declared-arm-differs",
                    f"{scheme}: declared {decision.declared} -> executed {decision.executed} on "
                    f"{len(members)} modules under {profile.name} ({decision.reason})",
                    module=members[0].name,
                )
            )
    return rows, findings
