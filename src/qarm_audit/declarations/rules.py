"""What each declaration format decides with, as read: one rules object per format.

Every format's rules answer the same two questions for the report and the diff (how many rules
of each kind, which exclusions as written), so a format added here is reported as the others
are; the resolver of each format is registered in :mod:`qarm_audit.resolve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .schemes import Scheme


class FormatRules(Protocol):
    """The rules of one declaration format."""

    def rule_counts(self) -> dict[str, int]:
        """How many rules of each kind, under the key each was read from."""
        ...

    def excludes_declared(self) -> tuple[str, ...]:
        """The declaration's exclusion entries as written (``-:`` marks a GPTQ skip pattern)."""
        ...


@dataclass(frozen=True)
class ModelOptRules:
    algo: str
    default_scheme: Scheme | None
    """Non-mixed: every Linear not excluded gets this scheme."""
    layers: dict[str, str] | None
    """MIXED_PRECISION: module name -> scheme name, in the file's order."""
    excludes: tuple[str, ...]

    def rule_counts(self) -> dict[str, int]:
        counts = {} if self.layers is None else {"quantized_layers": len(self.layers)}
        return {**counts, "exclude_modules": len(self.excludes)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.excludes


@dataclass(frozen=True)
class CompressedTensorsRules:
    targets: dict[str, str]
    """Target string -> scheme name. The same string in two groups: the last group wins."""
    ignore: tuple[str, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Each config group's name and targets, in declaration order."""

    def without_groups(self, names: frozenset[str]) -> CompressedTensorsRules:
        """The rules of the other groups, their targets mapped as the declaration maps them."""
        targets = {t: name for name, group in self.groups if name not in names for t in group}
        kept = tuple((name, group) for name, group in self.groups if name not in names)
        return CompressedTensorsRules(targets=targets, ignore=self.ignore, groups=kept)

    def rule_counts(self) -> dict[str, int]:
        return {"targets": len(self.targets), "ignore": len(self.ignore)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.ignore


@dataclass(frozen=True)
class OnlineTransform:
    """One ``apply`` entry of a compressed-tensors ``transform_config`` that rotates activations
    at run time (``location`` ``input``, ``output``, ``k_cache`` or ``q_attn``)."""

    scheme: str
    location: str
    targets: tuple[str, ...]
    ignore: tuple[str, ...]


@dataclass(frozen=True)
class Fp8Rules:
    """A native ``quant_method: fp8`` declaration: one scheme for every Linear and MoE layer the
    engine builds with a quant method, but those ``ignored`` names."""

    scheme: Scheme
    ignored: tuple[str, ...]
    ignored_key: str
    """``ignored_layers`` or ``modules_to_not_convert``: the key the list was read from."""

    def rule_counts(self) -> dict[str, int]:
        return {self.ignored_key: len(self.ignored)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.ignored


@dataclass(frozen=True)
class BnbRules:
    """A ``quant_method: bitsandbytes`` declaration: one scheme for every Linear and MoE layer
    the engine builds with a quant method, but those ``llm_int8_skip_modules`` names."""

    scheme: Scheme
    skip_modules: tuple[str, ...]
    double_quant: bool
    eight_bit: bool

    def rule_counts(self) -> dict[str, int]:
        return {"llm_int8_skip_modules": len(self.skip_modules)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.skip_modules


@dataclass(frozen=True)
class GptqRules:
    """A ``quant_method: gptq`` declaration: the base scheme for every Linear and MoE layer the
    engine builds with a quant method, but those ``dynamic`` skips (``-:``) or overrides
    (``+:``), and, where ``modules_in_block_to_quantize`` is given, those no entry of it names;
    the head only with ``lm_head``."""

    scheme: Scheme
    lm_head: bool
    quantize_list: tuple[str, ...] | None
    """``modules_in_block_to_quantize`` flattened; None: vLLM takes the modules that ship a
    tensor of no float dtype."""
    dynamic: tuple[tuple[str, str | None], ...]
    """``(pattern, scheme name)`` in the declaration's order; None for a ``-:`` skip."""

    def rule_counts(self) -> dict[str, int]:
        counts = {"dynamic": len(self.dynamic)}
        if self.quantize_list is not None:
            counts["modules_in_block_to_quantize"] = len(self.quantize_list)
        return counts

    def excludes_declared(self) -> tuple[str, ...]:
        return tuple(f"-:{pattern}" for pattern, scheme in self.dynamic if scheme is None)


@dataclass(frozen=True)
class AwqRules:
    """A ``quant_method: awq`` declaration: one scheme for every Linear and MoE layer the engine
    builds with a quant method (the head only with ``lm_head``), but those a
    ``modules_to_not_convert`` entry occurs inside."""

    scheme: Scheme
    lm_head: bool
    not_convert: tuple[str, ...] | None
    """None: vLLM takes every module that ships only float tensors."""

    def rule_counts(self) -> dict[str, int]:
        return {} if self.not_convert is None else {"modules_to_not_convert": len(self.not_convert)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.not_convert or ()


@dataclass(frozen=True)
class Mxfp4Rules:
    """A gpt-oss ``quant_method: mxfp4`` declaration: the scheme for every routed-experts layer
    the engine builds with a quant method; every ``LinearBase`` unquantized, whatever the
    declaration says. ``modules_to_not_convert`` is kept as written: vLLM reads no key of it."""

    scheme: Scheme
    not_convert: tuple[str, ...] | None
    model_type: str
    """config.json's ``model_type``: ``gpt_oss`` makes vLLM's method ``gpt_oss_mxfp4``."""

    def rule_counts(self) -> dict[str, int]:
        return {} if self.not_convert is None else {"modules_to_not_convert": len(self.not_convert)}

    def excludes_declared(self) -> tuple[str, ...]:
        return self.not_convert or ()
