"""Native FP8 declarations: ``quant_method: fp8`` (DeepSeek-V3/R1/V4, Qwen3-FP8, transformers'
``FineGrainedFP8Config``).

The keys are the ones vLLM's ``Fp8Config.from_config`` reads: ``activation_scheme`` (required),
``weight_block_size`` (absent: one scale per tensor), ``ignored_layers`` and, only where that is
empty or absent, ``modules_to_not_convert``. ``fmt`` and ``scale_fmt`` are kept as written;
vLLM's ``Fp8Config`` reads neither (``scale_fmt: ue8m0`` only turns on DeepGEMM's power-of-two
scale rounding when the config is loaded).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, Strict

from ..frozen import frozen_config
from .schemes import Scheme

BlockDim = Annotated[int, Strict(), Field(gt=0)]


class Fp8Config(BaseModel):
    """The ``quantization_config`` block of a native FP8 checkpoint."""

    model_config = frozen_config(extra="allow")

    quant_method: str
    activation_scheme: Literal["dynamic", "static"]
    """vLLM: ``get_from_keys(config, ["activation_scheme"])`` raises when it is missing, and
    anything but these two is ``Unsupported activation scheme``."""
    weight_block_size: Annotated[list[BlockDim], Field(min_length=2, max_length=2)] | None = None
    """[block_n, block_k]: one scale per block_n output rows by block_k input columns."""
    ignored_layers: list[str] | None = None
    modules_to_not_convert: list[str] | None = None
    fmt: str | None = None
    scale_fmt: str | None = None

    @property
    def ignored(self) -> tuple[str, tuple[str, ...]]:
        """The key vLLM takes the list from, and the list: ``ignored_layers``, or where that is
        empty or absent, ``modules_to_not_convert``."""
        if self.ignored_layers:
            return "ignored_layers", tuple(self.ignored_layers)
        if self.modules_to_not_convert:
            return "modules_to_not_convert", tuple(self.modules_to_not_convert)
        return "ignored_layers", ()


def to_scheme(config: Fp8Config) -> Scheme:
    """The one scheme every quantized module of a native FP8 checkpoint holds."""
    block = config.weight_block_size
    dynamic = config.activation_scheme == "dynamic"
    common: dict[str, Any] = dict(
        producer="fp8",
        family="fp8",
        weight_bits=8,
        weight_type="float",
        activation_bits=8,
        activation_type="float",
        activation_dynamic=dynamic,
        scale_format=config.scale_fmt,
        algo="fp8",
    )
    if block is not None:
        n, k = block
        return Scheme(
            name=f"FP8_BLOCK_{n}x{k}",
            weight_strategy="block",
            activation_strategy="group" if dynamic else "tensor",
            block=(n, k),
            **common,
        )
    return Scheme(
        name="FP8",
        weight_strategy="tensor",
        activation_strategy=None if dynamic else "tensor",
        **common,
    )
