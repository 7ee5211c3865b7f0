"""GPTQ declarations: ``quant_method: gptq``, as GPTQModel and transformers' ``GPTQConfig`` write
them and vLLM's ``AutoGPTQConfig.from_config`` reads them.

vLLM reads ``bits``, ``group_size``, ``desc_act`` and ``sym`` with ``get_from_keys`` (a missing
one is its ``ValueError``: "Cannot find any of ['bits'] in the model's quantization config."),
``lm_head`` (absent: false), ``dynamic`` (absent or null: none) and
``modules_in_block_to_quantize`` (absent: taken from the checkpoint's dtypes) with
``get_from_keys_or``. transformers' ``GPTQConfig`` takes ``bits`` in [2, 3, 4, 8] only ("Only
support quantization to [2,3,4,8] bits but found {bits}") and ``group_size`` -1 or positive;
qarm refuses the same values by name. What vLLM itself refuses of a readable declaration (bits
other than 4 and 8, ``sym: false``, ``desc_act`` with groups, a group size Marlin lacks) is the
engine profile's ``declaration_errors``, quoted.

``dynamic`` maps a regex to per-module overrides (``bits``, ``group_size``, ``desc_act``,
``sym``): ``-:pattern`` skips the module, ``+:pattern`` or a bare pattern overrides; the first
pattern that ``re.match``-es the engine's layer name decides (vLLM ``get_dynamic_override``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, StrictBool, StrictInt, field_validator

from ..frozen import frozen_config
from .schemes import Scheme

BITS = (2, 3, 4, 8)
"""What transformers' ``GPTQConfig.post_init`` (and ``AwqConfig``'s) accepts."""


def checked_bits(value: int) -> int:
    if value not in BITS:
        raise ValueError(f"Only support quantization to [2,3,4,8] bits but found {value}")
    return value


def checked_group_size(value: int) -> int:
    if value != -1 and value <= 0:
        raise ValueError("group_size must be greater than 0 or equal to -1")
    return value


PackedBits = Annotated[StrictInt, AfterValidator(checked_bits)]
"""``bits`` of a GPTQ or AWQ declaration."""
GroupSize = Annotated[StrictInt, AfterValidator(checked_group_size)]
"""``group_size`` of a GPTQ or AWQ declaration: -1 (one group per channel) or positive."""
_OVERRIDE_CHECKS = {"bits": checked_bits, "group_size": checked_group_size}


class GptqConfig(BaseModel):
    """The ``quantization_config`` block of a GPTQ checkpoint."""

    # GPTQModel writes model_name_or_path: a field of ours, not pydantic's namespace
    model_config = frozen_config(extra="allow", protected_namespaces=())

    quant_method: str
    bits: PackedBits
    group_size: GroupSize
    desc_act: StrictBool
    sym: StrictBool
    lm_head: StrictBool = False
    dynamic: dict[str, dict[str, Any]] | None = None
    """Pattern -> overrides; vLLM reads ``bits``, ``group_size``, ``desc_act``, ``sym`` of them
    (GPTQModel may write others, such as ``damp_percent``, which vLLM ignores)."""
    modules_in_block_to_quantize: list[str] | list[list[str]] | None = None
    checkpoint_format: str | None = None
    """GPTQModel: ``gptq`` (v1 zero points, what vLLM reads) or ``gptq_v2``."""
    format: str | None = None
    pack_dtype: Literal["int32"] | None = None
    """GPTQModel's packing word; vLLM creates ``qweight`` as int32 only."""
    method: str | None = None
    meta: dict[str, object] | None = None
    damp_percent: float | None = None
    true_sequential: StrictBool | None = None
    static_groups: StrictBool | None = None
    model_name_or_path: str | None = None
    model_file_base_name: str | None = None
    is_marlin_format: StrictBool | None = None

    @field_validator("dynamic")
    @classmethod
    def _dynamic(cls, value: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]] | None:
        for pattern, overrides in (value or {}).items():
            for key, override in overrides.items():
                number = isinstance(override, int) and not isinstance(override, bool)
                if key in ("bits", "group_size") and not number:
                    raise ValueError(f"dynamic {pattern!r}: {key} is {override!r}, not a number")
                if key in ("desc_act", "sym") and not isinstance(override, bool):
                    raise ValueError(f"dynamic {pattern!r}: {key} is {override!r}, not a bool")
                check = _OVERRIDE_CHECKS.get(key)
                try:
                    if check is not None:
                        check(override)
                except ValueError as exc:
                    raise ValueError(f"dynamic {pattern!r}: {exc}") from None
        return value

    @property
    def quantize_list(self) -> tuple[str, ...] | None:
        """``modules_in_block_to_quantize`` flattened (vLLM ``maybe_update_config``), or None."""
        entries = self.modules_in_block_to_quantize
        if not entries:
            return None
        out: list[str] = []
        for entry in entries:
            out.extend(entry if isinstance(entry, list) else [entry])
        return tuple(out)


def scheme_name(bits: int, group_size: int, sym: bool, desc_act: bool) -> str:
    """``GPTQ_W4_G128`` (``_ASYM``, ``_ACT`` where so); ``GPTQ_W4_CH``: one group a column."""
    group = f"G{group_size}" if group_size != -1 else "CH"
    return (
        f"GPTQ_W{bits}_{group}{'' if sym else '_ASYM'}"
        f"{'_ACT' if desc_act and group_size != -1 else ''}"
    )


def to_scheme(bits: int, group_size: int, sym: bool, desc_act: bool) -> Scheme:
    return Scheme(
        name=scheme_name(bits, group_size, sym, desc_act),
        producer="gptq",
        family="gptq",
        weight_bits=bits,
        weight_type="int",
        weight_strategy="group" if group_size != -1 else "channel",
        group_size=group_size if group_size != -1 else None,
        weight_symmetric=sym,
        algo="gptq",
        act_order=desc_act and group_size != -1,
    )


def base_scheme(config: GptqConfig) -> Scheme:
    return to_scheme(config.bits, config.group_size, config.sym, config.desc_act)


def override_scheme(config: GptqConfig, overrides: dict[str, Any]) -> Scheme:
    """vLLM ``override_config``: the module's bits, group size, desc_act and sym."""
    bits = overrides.get("bits", config.bits)
    group = overrides.get("group_size", config.group_size)
    desc_act = overrides.get("desc_act", config.desc_act)
    sym = overrides.get("sym", config.sym)
    return to_scheme(
        int(bits) if not isinstance(bits, bool) else config.bits,
        int(group) if not isinstance(group, bool) else config.group_size,
        sym if isinstance(sym, bool) else config.sym,
        desc_act if isinstance(desc_act, bool) else config.desc_act,
    )
