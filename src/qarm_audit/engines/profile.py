"""Engine profiles: data files that say which arm an engine executes for each module.

A profile is an ordered list of rules; the first rule whose conditions all hold names the arm.
Conditions look at the declared scheme (and where and how it was declared), the shipped spelling
and operands, the module's name, the engine's settings (flags, variables) and the GPU's compute
capability. A rule may also quote the error the engine raises at load (``error``), and a profile
may attach the engine's own wording to refusals qarm finds by other means (``load_errors``).
"""

from __future__ import annotations

import json
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from ..errors import ProfileError
from ..frozen import frozen_config
from .entries import (
    DeclarationError,
    DequantizedOnLoad,
    GroupSkipped,
    KvDtypeError,
    KvDtypeFromGpu,
    KvError,
    KvScaleOnLogits,
    KvScalesDropped,
    KvTaken,
    KvUnbuilt,
    LayerError,
    LoaderDrop,
    LoadError,
    Source,
    UnquantizedLayer,
)

ROUTINGS = ("declared", "probe")


class EnvVar(BaseModel):
    """One engine setting a profile's rules may condition on (a flag or a variable)."""

    model_config = frozen_config(extra="forbid")
    default: str
    description: str = ""
    choices: list[str] | None = None
    """The values the engine accepts; ``--env`` outside them is a usage error."""
    aliases: list[str] = Field(default_factory=list)
    """Other names ``--env`` accepts for this setting (the engine's own spelling)."""

    @model_validator(mode="after")
    def _default_is_a_choice(self) -> EnvVar:
        if self.choices is not None and self.default not in self.choices:
            raise ValueError(f"default {self.default!r} is not one of {self.choices}")
        return self


class Rule(BaseModel):
    """One routing rule. Every condition given must hold; an empty rule matches everything."""

    model_config = frozen_config(extra="forbid")

    # --- conditions on the declaration -----------------------------------------------------
    declared_family: list[str] | None = None
    """Declared scheme families (``fp8``, ``nvfp4``, ...; ``unquantized`` for none)."""
    declared_algo: list[str] | None = None
    """Declared algorithm names, upper-cased (ModelOpt) or group names."""
    declared_algo_not: list[str] | None = None
    """Holds when the declared algorithm (upper-cased) is none of these."""
    declared_algo_contains: list[str] | None = None
    """Holds when the declared algorithm, as written, contains any of these (case-sensitive,
    as SGLang's ``"FP4" in quant_algo``)."""
    case_sensitive: bool = False
    """Compare ``declared_algo`` and ``declared_algo_not`` with the algorithm as written, not
    upper-cased (SGLang's tests are case-sensitive; vLLM upper-cases)."""
    declared_arm: list[str] | None = None
    """Declared arms, in the arm vocabulary (``W4A4-NVFP4``, ``W8A8-FP8``, ...)."""
    declared_strategy: list[str] | None = None
    """Declared weight strategies: ``tensor``, ``channel``, ``group``, ``block``,
    ``tensor_group``."""
    declared_activation: list[str] | None = None
    """The declared activations as ``<type> <dynamic|static> <strategy>`` (``float dynamic
    token``; a part not declared is ``-``), or ``none`` for a weight-only scheme; a value of
    fewer words holds for every description it begins (``float``: any float activations)."""
    declared_format: list[str] | None = None
    """The compressed-tensors ``format`` of the module's group (or the whole config):
    ``pack-quantized``, ``int-quantized``, ``float-quantized``, ...; ``""`` where none."""
    config_format: list[str] | None = None
    """The compressed-tensors ``format`` of the whole config, whatever the module's group
    says (``mixed-precision`` for groups of several formats; ``""`` where none): what
    SGLang's MoE schemes read."""
    declared_group_size: list[int] | None = None
    """Declared weight group sizes (0 where none is declared)."""
    declared_symmetric: bool | None = None
    """Holds when the declared weights are symmetric (True) or not (False)."""
    declared_actorder: bool | None = None
    """Holds when the declared weights have an ``actorder`` (any value) (True) or none
    (False)."""
    producer: list[str] | None = None
    """Who wrote the declaration: ``modelopt``, ``compressed-tensors`` or ``fp8`` (a native
    ``quant_method: fp8``)."""
    mixed: bool | None = None
    """True when the module's algorithm comes from a ModelOpt MIXED_PRECISION map."""
    mixed_nvfp4: bool | None = None
    """True when the module's MIXED_PRECISION map has an ``NVFP4`` or ``W4A16_NVFP4`` entry
    (any case)."""
    declaration_form: list[str] | None = None
    """``nested`` (a ``quantization`` block, as ``hf_quant_config.json`` writes it) or ``flat``."""
    declaration_file: list[str] | None = None
    """The file the declaration was read from: ``config.json`` (its ``quantization_config``,
    ``text_config`` or ``compression_config``) or ``hf_quant_config.json``."""
    groups_weight_only: bool | None = None
    """True when a ModelOpt declaration carries ``config_groups`` and every group has
    ``input_activations: null``."""
    module_contains: list[str] | None = None
    """Holds when the module's name contains any of these strings."""
    # --- conditions on what is shipped ------------------------------------------------------
    shipped: list[str] | None = None
    """Shipped spelling families."""
    operands_present: list[str] = Field(default_factory=list)
    operands_absent: list[str] = Field(default_factory=list)
    # --- conditions on the engine and the GPU -----------------------------------------------
    env: dict[str, str | list[str]] = Field(default_factory=dict)
    """Setting -> the value (or any of the values) it must have."""
    env_not: dict[str, str | list[str]] = Field(default_factory=dict)
    """Setting -> the value (or values) it must not have: a value the profile does not model."""
    gpu_min: int | None = None
    """Lowest compute capability (as 80, 90, 100 ...) the rule applies to, inclusive."""
    gpu_max: int | None = None
    """Highest compute capability, inclusive."""
    # --- what the rule says -----------------------------------------------------------------
    arm: str
    """The executed arm, in the arm vocabulary; ``none`` when the engine has no arm (it refuses
    to load), ``unknown`` when the profile does not model the engine's choice."""
    kernel: str | None = None
    """Kernel detail beside the arm, e.g. ``Marlin``; never part of the arm name."""
    reason: str
    log: str | None = None
    """The line the engine itself prints for this arm, where there is one."""
    note: str | None = None
    """A recorded defect or caveat of this arm, shown beside the arm line."""
    error: str | None = None
    """The engine's own error text when it refuses to load (arm ``none``). Placeholders:
    ``{algo}`` (the declared algorithm), ``{gpu}`` (the capability)."""
    drops: list[str] = Field(default_factory=list)
    """Operands this arm does not read even when they are shipped (e.g. ``input_scale``)."""
    source: Source = None
    """Where the rule comes from in the engine's source: ``owner/repo path@commit``."""

    @model_validator(mode="after")
    def _consistent(self) -> Rule:
        if self.error is not None and self.arm != "none":
            raise ValueError("error is the engine's refusal text: only for arm 'none'")
        if self.gpu_min is not None and self.gpu_max is not None and self.gpu_min > self.gpu_max:
            raise ValueError(f"gpu_min {self.gpu_min} is above gpu_max {self.gpu_max}")
        return self


class Profile(BaseModel):
    model_config = frozen_config(extra="forbid")

    name: str
    engine: str
    version: str = ""
    commit: str = ""
    description: str
    routing: Literal["declared", "probe"]
    """``declared`` (the engine routes by the declaration) or ``probe`` (by tensor names)."""
    layers: str = ""
    """The layer-tree facts the engine builds (``vllm-0.33.0``: ``layers/facts/``); empty: the
    generic rules (q/k/v and gate/up fused, a MoE router without the quant config, every other
    2-D weight a Linear)."""
    env: dict[str, EnvVar] = Field(default_factory=dict)
    rules: list[Rule]
    load_errors: list[LoadError] = Field(default_factory=list)
    declaration_errors: list[DeclarationError] = Field(default_factory=list)
    layer_errors: list[LayerError] = Field(default_factory=list)
    kv_taken: list[KvTaken] = Field(default_factory=list)
    kv_errors: list[KvError] = Field(default_factory=list)
    kv_dtype_errors: list[KvDtypeError] = Field(default_factory=list)
    kv_unbuilt: list[KvUnbuilt] = Field(default_factory=list)
    kv_scales_dropped: list[KvScalesDropped] = Field(default_factory=list)
    kv_dtype_from_gpu: list[KvDtypeFromGpu] = Field(default_factory=list)
    kv_scale_on_logits: list[KvScaleOnLogits] = Field(default_factory=list)
    unquantized_layers: list[UnquantizedLayer] = Field(default_factory=list)
    dequantized_on_load: list[DequantizedOnLoad] = Field(default_factory=list)
    loader_drops: list[LoaderDrop] = Field(default_factory=list)
    groups_skipped: list[GroupSkipped] = Field(default_factory=list)
    reads_transform_config: bool = True
    """Whether the engine reads a compressed-tensors ``transform_config`` at all (SGLang does
    not: its online transforms are never applied)."""
    transform_layer_kinds: list[str] | None = None
    """The engine layer kinds it applies online ``input`` and ``output`` transforms on, where
    built with its quant config (vLLM: its Linear layers, fused or not); None: not modelled."""
    kv_scales_filled_in: list[str] = Field(default_factory=list)
    """Declaration families whose KV-cache method keeps 1.0 for any scale not shipped; the
    others keep ``BaseKVCacheMethod``'s rules (``v`` takes a lone ``k_scale``, a lone
    ``v_scale`` fails an assert)."""

    @model_validator(mode="after")
    def _rules_name_known_settings(self) -> Profile:
        for i, rule in enumerate(self.rules):
            for key, wanted in [*rule.env.items(), *rule.env_not.items()]:
                if key not in self.env:
                    raise ValueError(f"rules[{i}] conditions on unknown setting {key!r}")
                choices = self.env[key].choices
                values = [wanted] if isinstance(wanted, str) else wanted
                if choices is not None and any(v not in choices for v in values):
                    raise ValueError(f"rules[{i}]: {key} takes {choices}, not {values}")
        return self

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}".strip()


BUILTIN = ("vllm", "sglang", "name-probe")

RELEASE_FORMAT = "qarm-engine-release/1"


def _version_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in release.split("."))


def modelled_releases(name: str) -> list[str]:
    """The releases of a built-in engine profile that ``engines/releases/`` holds facts for,
    oldest first (empty for a profile without releases, such as ``name-probe``)."""
    root = resources.files("qarm_audit.engines.releases")
    found = [
        p.name[len(name) + 1 : -len(".json")]
        for p in root.iterdir()
        if p.name.startswith(f"{name}-") and p.name.endswith(".json")
    ]
    return sorted(found, key=_version_key)


def _release_facts(name: str, release: str) -> dict[str, Any]:
    text = (
        resources.files("qarm_audit.engines.releases")
        .joinpath(f"{name}-{release}.json")
        .read_text(encoding="utf-8")
    )
    data: dict[str, Any] = json.loads(text)
    if data.get("format") != RELEASE_FORMAT:
        raise ProfileError(f"{name}=={release}", f"release facts format {data.get('format')!r}")
    return data


def _fill(text: str, release: str, commit: str) -> str:
    return text.replace("{release}", release).replace("{commit}", commit)


CITED_SECTIONS = (
    "rules",
    "load_errors",
    "declaration_errors",
    "layer_errors",
    "kv_taken",
    "kv_errors",
    "kv_dtype_errors",
    "kv_unbuilt",
    "kv_scales_dropped",
    "kv_dtype_from_gpu",
    "kv_scale_on_logits",
    "unquantized_layers",
    "dequantized_on_load",
    "loader_drops",
    "groups_skipped",
)
"""The profile's lists of engine facts: each entry cites the engine's source and is kept for
a release only where its anchors are in that release's wheel."""


def _for_release(data: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """A profile template (``{release}``, ``{commit}``, rules gated on ``facts``, citations by
    ``anchor``) made into one release's profile."""
    release, commit = facts["release"], facts["commit"]
    known = facts.get("facts", {})
    anchors = facts.get("anchors", {})
    where = f"{data.get('name')}=={release}"

    def item(entry: dict[str, Any]) -> dict[str, Any] | None:
        entry = dict(entry)
        gate = entry.pop("facts", {})
        wanted = entry.pop("anchor", [])
        if any(known.get(key) != value for key, value in gate.items()):
            return None
        # a list that differs per release (``text_model_types_fact``) is the release's fact
        for key in [k for k in entry if k.endswith("_fact")]:
            fact = entry.pop(key)
            if not isinstance(known.get(fact), list):
                raise ProfileError(where, f"the release facts have no list {fact!r}")
            entry[key.removesuffix("_fact")] = known[fact]
        for key in ("reason", "note", "log", "error", "text"):
            if isinstance(entry.get(key), str):
                entry[key] = _fill(entry[key], release, commit)
        source = entry.get("source")
        if isinstance(source, str):
            path = source.split(" ", 2)[1].split("@", 1)[0] if " " in source else ""
            lines = [anchors.get(f"{path}#{a}") for a in wanted]
            if any(line is None for line in lines):
                missing = [a for a, line in zip(wanted, lines, strict=True) if line is None]
                raise ProfileError(
                    where, f"{path} has no {missing}: the rule is not this release's"
                )
            entry["source"] = " ".join(
                [_fill(source, release, commit), ", ".join(map(str, lines))]
            ).strip()
        return entry

    out = {k: v for k, v in data.items() if k not in CITED_SECTIONS}
    # a setting whose values differ per release takes them from the release's facts
    out["env"] = {
        key: _release_choices(setting, known, where) for key, setting in data.get("env", {}).items()
    }
    for key in ("description", "layers"):
        if isinstance(out.get(key), str):
            out[key] = _fill(out[key], release, commit)
    if out.get("layers") and out["layers"] not in _layer_facts_available():
        out["layers"] = ""
    out["version"] = f"v{release}"
    out["commit"] = commit
    out["rules"] = [r for r in map(item, data.get("rules", [])) if r is not None]
    out["load_errors"] = [q for q in map(item, data.get("load_errors", [])) if q is not None]
    for key in CITED_SECTIONS[2:]:
        out[key] = [d for d in map(item, data.get(key, [])) if d is not None]
    return out


def _release_choices(setting: dict[str, Any], known: dict[str, Any], where: str) -> Any:
    setting = dict(setting)
    fact = setting.pop("choices_fact", None)
    if fact is not None:
        if not isinstance(known.get(fact), list):
            raise ProfileError(where, f"the release facts have no list {fact!r}")
        setting["choices"] = known[fact]
    return setting


def _layer_facts_available() -> set[str]:
    root = resources.files("qarm_audit.layers").joinpath("facts")
    return {p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json")}


def split_spec(spec: str) -> tuple[str, str | None]:
    """``vllm==0.32.0`` -> (``vllm``, ``0.32.0``); ``vllm`` -> (``vllm``, None)."""
    name, sep, release = spec.partition("==")
    return name.strip(), (release.strip().removeprefix("v") if sep else None)


def load_profile(name_or_path: str, release: str | None = None) -> Profile:
    """A shipped profile by name (``vllm``, ``vllm==0.32.0``; a bare name is the newest
    modelled release, or ``release`` when given), or a user's ``.toml`` file by path."""
    name, asked = split_spec(name_or_path)
    if name in BUILTIN:
        return _builtin(name, asked or release)
    path = Path(name_or_path)
    if not path.is_file():
        raise ProfileError(name_or_path, f"no such profile; built in: {', '.join(BUILTIN)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(name_or_path, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(name_or_path, f"not valid TOML: not UTF-8 (byte {exc.start})") from None
    return _parse(text, name_or_path)


@cache
def _builtin(name: str, release: str | None) -> Profile:
    text = (
        resources.files("qarm_audit.engines.profiles")
        .joinpath(f"{name}.toml")
        .read_text(encoding="utf-8")
    )
    known = modelled_releases(name)
    if not known:
        if release is not None:
            raise ProfileError(f"{name}=={release}", f"{name} has no releases to choose from")
        return _parse(text, f"profile {name}")
    chosen = release or known[-1]
    if chosen not in known:
        listed = ", ".join(f"{name}=={r}" for r in known)
        raise ProfileError(
            f"{name}=={chosen}", f"release {chosen} is not modelled; modelled: {listed}"
        )
    return _parse(text, f"profile {name}=={chosen}", _release_facts(name, chosen))


def _parse(text: str, where: str, facts: dict[str, Any] | None = None) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(where, f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise ProfileError(where, "not valid TOML: nested too deeply") from None
    if facts is not None:
        data = _for_release(data, facts)
    try:
        return Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path_ = ".".join(str(p) for p in first["loc"])
        raise ProfileError(where, f"{path_ or '(top level)'}: {first['msg']}") from None


def resolve_env(profile: Profile, overrides: dict[str, str]) -> dict[str, str]:
    alias = {a: key for key, var in profile.env.items() for a in var.aliases}
    named: dict[str, str] = {}
    for key, value in overrides.items():
        canonical = alias.get(key, key)
        if canonical in named and named[canonical] != value:
            raise ProfileError(
                profile.name, f"{key}={value} contradicts {canonical}={named[canonical]}"
            )
        named[canonical] = value
    overrides = named
    unknown = sorted(set(overrides) - set(profile.env))
    if unknown:
        raise ProfileError(
            profile.name,
            f"no setting {', '.join(unknown)}; it knows {', '.join(sorted(profile.env)) or 'none'}",
        )
    for key, value in sorted(overrides.items()):
        choices = profile.env[key].choices
        if choices is not None and value not in choices:
            raise ProfileError(profile.name, f"{key}={value}: it takes {', '.join(choices)}")
    return {k: overrides.get(k, v.default) for k, v in sorted(profile.env.items())}


class View(BaseModel):
    """What the rules see of one module: the declaration's side and the shipped side."""

    model_config = frozen_config(extra="forbid")

    declared_family: str
    declared_algo: str
    declared_arm: str
    declared_strategy: str = ""
    declared_activation: str = "none"
    declared_format: str = ""
    config_format: str = ""
    declared_group_size: int = 0
    declared_symmetric: bool = True
    declared_actorder: bool = False
    producer: str = ""
    mixed: bool = False
    mixed_nvfp4: bool = False
    declaration_form: str = "flat"
    declaration_file: str = ""
    groups_weight_only: bool = False
    module: str = ""
    shipped: str
    operands: frozenset[str]


def _env_holds(env: dict[str, str], key: str, wanted: str | list[str]) -> bool:
    value = env.get(key)
    return value == wanted if isinstance(wanted, str) else value in wanted


def holds(rule: Rule, view: View, env: dict[str, str], gpu: int | None) -> bool:
    """Whether every condition of ``rule`` holds. A GPU condition never holds without a GPU."""
    algo = view.declared_algo if rule.case_sensitive else view.declared_algo.upper()
    # in order, each only when the ones before it hold: most rules fail on the first
    if not (
        (rule.declared_family is None or view.declared_family in rule.declared_family)
        and (rule.declared_algo is None or algo in rule.declared_algo)
        and (rule.declared_algo_not is None or algo not in rule.declared_algo_not)
        and (
            rule.declared_algo_contains is None
            or any(part in view.declared_algo for part in rule.declared_algo_contains)
        )
        and (rule.declared_arm is None or view.declared_arm in rule.declared_arm)
        and (rule.declared_strategy is None or view.declared_strategy in rule.declared_strategy)
        and (
            rule.declared_activation is None
            or any(
                f"{view.declared_activation} ".startswith(f"{words} ")
                for words in rule.declared_activation
            )
        )
        and (rule.declared_format is None or view.declared_format in rule.declared_format)
        and (rule.config_format is None or view.config_format in rule.config_format)
        and (
            rule.declared_group_size is None or view.declared_group_size in rule.declared_group_size
        )
        and (rule.declared_symmetric is None or view.declared_symmetric == rule.declared_symmetric)
        and (rule.declared_actorder is None or view.declared_actorder == rule.declared_actorder)
        and (rule.producer is None or view.producer in rule.producer)
        and (rule.mixed is None or view.mixed == rule.mixed)
        and (rule.mixed_nvfp4 is None or view.mixed_nvfp4 == rule.mixed_nvfp4)
        and (rule.declaration_form is None or view.declaration_form in rule.declaration_form)
        and (rule.declaration_file is None or view.declaration_file in rule.declaration_file)
        and (rule.groups_weight_only is None or view.groups_weight_only == rule.groups_weight_only)
        and (rule.module_contains is None or any(s in view.module for s in rule.module_contains))
        and (rule.shipped is None or view.shipped in rule.shipped)
        and all(op in view.operands for op in rule.operands_present)
        and not any(op in view.operands for op in rule.operands_absent)
        and all(_env_holds(env, k, v) for k, v in rule.env.items())
        and not any(_env_holds(env, k, v) for k, v in rule.env_not.items())
    ):
        return False
    if rule.gpu_min is None and rule.gpu_max is None:
        return True
    return (
        gpu is not None
        and (rule.gpu_min is None or gpu >= rule.gpu_min)
        and (rule.gpu_max is None or gpu <= rule.gpu_max)
    )


def select(profile: Profile, view: View, env: dict[str, str], gpu: int | None) -> Rule | None:
    """The first rule that holds, or None."""
    for rule in profile.rules:
        if holds(rule, view, env, gpu):
            return rule
    return None


def uses_gpu(profile: Profile) -> bool:
    """Whether any rule looks at the GPU (a profile that does not predicts one arm for all)."""
    return any(r.gpu_min is not None or r.gpu_max is not None for r in profile.rules)
