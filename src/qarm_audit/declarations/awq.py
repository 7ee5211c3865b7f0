"""AWQ declarations: ``quant_method: awq``, as AutoAWQ and transformers' ``AwqConfig`` write
them and vLLM's ``AutoAWQConfig.from_config`` reads them.

vLLM reads the bits from ``w_bit`` or ``bits`` and the group size from ``q_group_size`` or
``group_size`` (the first key present, in that order), ``zero_point`` with ``get_from_keys`` (a
missing one is its ``ValueError``: "Cannot find any of ['zero_point'] in the model's
quantization config."), ``lm_head`` (absent: false) and ``modules_to_not_convert`` (absent or
empty: every module that ships only F16/BF16/F32 tensors, ``maybe_update_config``). It reads no
``version``: the GEMM layout is the one its loader creates. transformers' ``AwqConfig`` takes
the bits ``GPTQConfig`` takes ([2, 3, 4, 8]); qarm refuses other values by name. What vLLM
refuses of a readable declaration (bits other than 4) is the engine profile's
``declaration_errors``, quoted.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, StrictBool, model_validator

from ..findings import Finding, finding
from ..frozen import frozen_config
from .gptq import GroupSize, PackedBits
from .schemes import Scheme

GEMM_LAYOUTS = frozenset({"gemm", "exllama", "ipex"})
"""AutoAWQ versions whose checkpoints hold the GEMM packing (``exllama`` and ``ipex`` pick
kernels for it after loading); ``gemv``, ``gemv_fast`` and ``marlin`` write layouts of their
own."""


class AwqConfig(BaseModel):
    """The ``quantization_config`` block of an AWQ checkpoint."""

    model_config = frozen_config(extra="allow")

    quant_method: str
    bits: PackedBits
    group_size: GroupSize
    zero_point: StrictBool
    lm_head: StrictBool = False
    modules_to_not_convert: list[str] | None = None
    version: str | None = None
    """AutoAWQ's kernel layout (``gemm``); vLLM does not read it."""
    format: str | None = None
    backend: str | None = None
    # GPTQModel's AWQ export also writes these; vLLM reads none of them
    checkpoint_format: str | None = None
    desc_act: StrictBool | None = None
    sym: StrictBool | None = None
    method: str | None = None
    pack_dtype: str | None = None
    meta: dict[str, object] | None = None

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        """``get_from_keys(config, ["w_bit", "bits"])``: the first key present wins."""
        if isinstance(data, dict):
            data = dict(data)
            for first, second in (("w_bit", "bits"), ("q_group_size", "group_size")):
                if first in data:
                    data[second] = data.pop(first)
        return data

    @property
    def not_convert(self) -> tuple[str, ...] | None:
        """``modules_to_not_convert``, or None where vLLM takes it from the checkpoint."""
        return tuple(self.modules_to_not_convert) if self.modules_to_not_convert else None


def to_scheme(config: AwqConfig) -> Scheme:
    group = f"G{config.group_size}" if config.group_size != -1 else "CH"
    return Scheme(
        name=f"AWQ_W{config.bits}_{group}{'' if config.zero_point else '_SYM'}",
        producer="awq",
        family="autoawq",
        weight_bits=config.bits,
        weight_type="int",
        weight_strategy="group" if config.group_size != -1 else "channel",
        group_size=config.group_size if config.group_size != -1 else None,
        weight_symmetric=not config.zero_point,
        algo="awq",
    )


def version_unread(config: AwqConfig, where: str) -> list[Finding]:
    """A warning for a ``version`` whose layout is not GEMM's: vLLM reads no version."""
    version = config.version
    if version is None or version.lower() in GEMM_LAYOUTS:
        return []
    return [
        finding(
            "awq-version-unread",
            f"{where} declares AWQ version {version!r}: vLLM reads no version and builds the "
            "GEMM layout (qweight [in, out/8], qzeros [in/group, out/8], scales [in/group, "
            f"out]); tensors packed for {version!r} fail those shapes, and AutoAWQ or "
            f"transformers would build {version!r}'s own layout from the same declaration",
        )
    ]
