"""gpt-oss native MXFP4 declarations: ``quant_method: mxfp4``, as transformers' ``Mxfp4Config``
writes them (openai/gpt-oss-20b and gpt-oss-120b) and vLLM's ``Mxfp4Config`` reads them.

transformers writes two keys only, ``quant_method`` and ``modules_to_not_convert``
(``Mxfp4Config.to_dict``; ``dequantize`` is a load-time attribute, never serialized:
``huggingface/transformers src/transformers/utils/quantization_config.py@v5.24.0``). vLLM reads
none of them: ``Mxfp4Config.from_config`` is ``return cls()``, so ``modules_to_not_convert`` is
kept as written, for the report, and decides nothing on the engine
(``vllm-project/vllm vllm/model_executor/layers/quantization/mxfp4.py@v0.33.0``, the same in
0.30.0-0.32.0). Block size 32 and E8M0 scales are implied by the method.

Which config class vLLM builds depends on config.json's ``model_type``:
``GptOssMxfp4Config.override_quantization_method`` claims a ``quant_method`` of ``mxfp4`` only
where ``model_type`` is ``gpt_oss`` (the method is then ``gpt_oss_mxfp4`` and the MoE layer
``GptOssMxfp4MoEMethod``); any other model type stays ``mxfp4`` (``Mxfp4MoEMethod``). The
scheme's ``algo`` is that method name, which the engine profile's rules test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel

from ..findings import Finding, finding
from ..frozen import frozen_config
from .schemes import Scheme

BLOCK = 32
"""Weights per E8M0 scale (``OCP_MX_BLOCK_SIZE``); two E2M1 values a byte, 16 bytes a block."""
GPT_OSS = "gpt_oss"
GPT_OSS_METHOD = "gpt_oss_mxfp4"
METHOD = "mxfp4"


class Mxfp4Config(BaseModel):
    """The ``quantization_config`` block of a gpt-oss MXFP4 checkpoint."""

    model_config = frozen_config(extra="allow")

    quant_method: str
    modules_to_not_convert: list[str] | None = None
    """transformers' skip list (regex, prefix or suffix per entry); vLLM never reads it."""


def method_for(model_type: str) -> str:
    """vLLM's quantization method for a ``quant_method: mxfp4`` checkpoint of this model type."""
    return GPT_OSS_METHOD if model_type == GPT_OSS else METHOD


SIZES = ("num_local_experts", "hidden_size", "intermediate_size")


def _sizes(config: Mapping[str, Any]) -> dict[str, object]:
    """Each of :data:`SIZES` as config.json gives it (its ``text_config`` where the top level
    lacks it); None where neither does."""
    text = config.get("text_config")
    out: dict[str, object] = {}
    for key in SIZES:
        value = config.get(key)
        if value is None and isinstance(text, dict):
            value = text.get(key)
        out[key] = value
    return out


def _usable(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def moe_dims(config: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(E, H, I) from the config, or None where any of them is missing or no positive count."""
    values = list(_sizes(config).values())
    if not all(map(_usable, values)):
        return None
    return cast(tuple[int, int, int], tuple(values))


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def sizes_unread(config: Mapping[str, Any], where: str) -> Finding | None:
    """The warning that the experts' shapes could not be checked against config.json."""
    bad = {key: value for key, value in _sizes(config).items() if not _usable(value)}
    if not bad:
        return None
    given = ", ".join(
        f"{key} {'missing' if value is None else 'is ' + _shown(value)}"
        for key, value in bad.items()
    )
    return finding(
        "config-sizes-unread",
        f"{where}: config.json gives no usable expert sizes ({given}): the routed experts' "
        "MXFP4 blocks, scales and biases were checked against each other only, not against "
        "the model the engine builds from config.json",
    )


def to_scheme(model_type: str, dims: tuple[int, int, int] | None = None) -> Scheme:
    """The one scheme of the routed experts: 4-bit E2M1 weights, one E8M0 scale per 32, BF16
    activations (``get_supported_act_dtypes`` is ``[torch.bfloat16]``)."""
    return Scheme(
        name="MXFP4",
        producer="mxfp4",
        family="gpt-oss-mxfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="group",
        group_size=BLOCK,
        algo=method_for(model_type),
        scale_format="e8m0",
        moe_dims=dims,
    )
