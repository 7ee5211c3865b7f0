"""bitsandbytes declarations: ``quant_method: bitsandbytes``, as transformers'
``BitsAndBytesConfig.to_dict`` writes them.

The keys are the ones transformers writes and SGLang's ``BitsAndBytesConfig.from_config``
reads: ``load_in_4bit`` (absent: true) or ``load_in_8bit``, ``bnb_4bit_quant_type`` (absent:
``fp4``), ``bnb_4bit_use_double_quant``, ``bnb_4bit_quant_storage`` (only ``uint8``),
``llm_int8_skip_modules``. transformers refuses both flags at once (``load_in_4bit and
load_in_8bit are both True, but only one can be used at the same time``); so does qarm.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, StrictBool, model_validator

from ..frozen import frozen_config
from .schemes import Scheme

BOTH_FLAGS = (
    "load_in_4bit and load_in_8bit are both True, but only one can be used at the same time"
)
"""transformers' ``BitsAndBytesConfig`` (utils/quantization_config.py) raises this."""

BLOCKSIZE = 64
"""bitsandbytes' ``quantize_4bit`` default: one absmax per 64 weights (transformers passes none)."""


class BnbConfig(BaseModel):
    """The ``quantization_config`` block of a bitsandbytes checkpoint."""

    model_config = frozen_config(extra="allow")

    quant_method: str
    load_in_4bit: StrictBool | None = None
    load_in_8bit: StrictBool | None = None
    bnb_4bit_quant_type: Literal["nf4", "fp4"] | None = None
    """transformers and SGLang take an absent type as ``fp4``."""
    bnb_4bit_use_double_quant: StrictBool | None = None
    bnb_4bit_quant_storage: Literal["uint8"] | None = None
    """SGLang: ``Unsupported bnb_4bit_quant_storage`` for anything else."""
    bnb_4bit_compute_dtype: str | None = None
    llm_int8_skip_modules: list[str] | None = None
    llm_int8_threshold: float | None = None
    llm_int8_has_fp16_weight: StrictBool | None = None
    llm_int8_enable_fp32_cpu_offload: StrictBool | None = None

    # transformers' to_dict also writes its private _load_in_4bit / _load_in_8bit copies
    @model_validator(mode="before")
    @classmethod
    def _private(cls, data: object) -> object:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("_load_in_4bit", "_load_in_8bit")}
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> BnbConfig:
        if self.load_in_4bit and self.load_in_8bit:
            raise ValueError(BOTH_FLAGS)
        return self

    @property
    def eight_bit(self) -> bool:
        return bool(self.load_in_8bit)

    @property
    def quant_type(self) -> str:
        return self.bnb_4bit_quant_type or "fp4"

    @property
    def skip_modules(self) -> tuple[str, ...]:
        return tuple(self.llm_int8_skip_modules or ())


def to_scheme(config: BnbConfig) -> Scheme:
    """The one scheme every quantized module of a bitsandbytes checkpoint holds."""
    if config.eight_bit:
        return Scheme(
            name="BNB_INT8",
            producer="bitsandbytes",
            family="bnb-int8",
            weight_bits=8,
            weight_type="int",
            weight_strategy="channel",
            activation_bits=8,
            activation_type="int",
            activation_dynamic=True,
            activation_strategy="token",
            algo="llm.int8",
        )
    double = bool(config.bnb_4bit_use_double_quant)
    quant_type = config.quant_type
    return Scheme(
        name=f"BNB_{quant_type.upper()}{'_DQ' if double else ''}",
        producer="bitsandbytes",
        family=f"bnb-{quant_type}",
        weight_bits=4,
        weight_type="float" if quant_type == "fp4" else quant_type,
        weight_strategy="group",
        group_size=BLOCKSIZE,
        algo=quant_type,
        format="double-quant" if double else None,
    )
