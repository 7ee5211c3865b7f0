"""Engine profiles: data files that say which arm an engine executes for each module.

A profile is an ordered list of rules; the first rule whose conditions all hold names the arm.
Conditions look at the declared scheme, the shipped spelling and operands, the engine's
environment (flags, variables) and the GPU's compute capability.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ProfileError


class EnvVar(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    default: str
    description: str = ""


class Rule(BaseModel):
    """One routing rule. Every condition given must hold; an empty rule matches everything."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    declared_family: list[str] | None = None
    """Declared scheme families (``fp8``, ``nvfp4``, ...; ``unquantized`` for none)."""
    declared_algo: list[str] | None = None
    """Declared algorithm names, upper-cased (ModelOpt) or group formats."""
    declared_arm: list[str] | None = None
    shipped: list[str] | None = None
    """Shipped spelling families."""
    operands_present: list[str] = Field(default_factory=list)
    operands_absent: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    gpu_min: int | None = None
    """Lowest compute capability (as 80, 90, 100 ...) the rule applies to, inclusive."""
    gpu_max: int | None = None
    """Highest compute capability, inclusive."""
    arm: str
    """The executed arm, in the arm vocabulary; ``none`` when the engine has no arm."""
    reason: str
    log: str | None = None
    """The line the engine itself prints for this arm, where there is one."""
    note: str | None = None
    """A recorded defect or caveat of this arm, shown beside the arm line."""
    source: str | None = None
    """Where the rule comes from in the engine's source: ``owner/repo path@commit``."""


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    engine: str
    version: str = ""
    description: str
    routing: str
    """``declared`` (the engine routes by the declaration) or ``probe`` (by tensor names)."""
    env: dict[str, EnvVar] = Field(default_factory=dict)
    rules: list[Rule]


BUILTIN = ("name-probe",)


def load_profile(name_or_path: str) -> Profile:
    """A shipped profile by name, or a user's ``.toml`` file by path."""
    if name_or_path in BUILTIN:
        text = (
            resources.files("qarm_audit.engines.profiles")
            .joinpath(f"{name_or_path}.toml")
            .read_text()
        )
        where = f"profile {name_or_path}"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ProfileError(name_or_path, f"no such profile; built in: {', '.join(BUILTIN)}")
        text = path.read_text(encoding="utf-8")
        where = name_or_path
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(where, f"not valid TOML: {exc}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path_ = ".".join(str(p) for p in first["loc"])
        raise ProfileError(where, f"{path_}: {first['msg']}") from None


def resolve_env(profile: Profile, overrides: dict[str, str]) -> dict[str, str]:
    unknown = sorted(set(overrides) - set(profile.env))
    if unknown:
        raise ProfileError(
            profile.name,
            f"no setting {', '.join(unknown)}; it knows {', '.join(sorted(profile.env)) or 'none'}",
        )
    return {k: overrides.get(k, v.default) for k, v in sorted(profile.env.items())}


def select(
    profile: Profile,
    *,
    declared_family: str,
    declared_algo: str,
    declared_arm: str,
    shipped: str,
    operands: frozenset[str],
    env: dict[str, str],
    gpu: int | None,
) -> Rule | None:
    """The first rule that holds. A GPU condition never holds when no GPU is given."""
    for rule in profile.rules:
        if rule.declared_family is not None and declared_family not in rule.declared_family:
            continue
        if rule.declared_algo is not None and declared_algo.upper() not in rule.declared_algo:
            continue
        if rule.declared_arm is not None and declared_arm not in rule.declared_arm:
            continue
        if rule.shipped is not None and shipped not in rule.shipped:
            continue
        if not all(op in operands for op in rule.operands_present):
            continue
        if any(op in operands for op in rule.operands_absent):
            continue
        if any(env.get(k) != v for k, v in rule.env.items()):
            continue
        if (rule.gpu_min is not None or rule.gpu_max is not None) and (
            gpu is None
            or (rule.gpu_min is not None and gpu < rule.gpu_min)
            or (rule.gpu_max is not None and gpu > rule.gpu_max)
        ):
            continue
        return rule
    return None
