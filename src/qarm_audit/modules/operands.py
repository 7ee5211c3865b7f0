"""Split tensor names into module and operand, and name the operand's family.

A checkpoint's tensor names are the only evidence of what was written. Each name is
``<module>.<operand>``; the operand says which quantization family (if any) wrote it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cache


class OperandKind(StrEnum):
    PLAIN = "plain"
    """An ordinary parameter: weight, bias, A_log, dt_bias, ..."""
    QUANT = "quant"
    """A known quantization operand (scale, packed weight, zero point, ...)."""
    KV = "kv"
    """A KV-cache (or attention) scale: its own bucket, never a weight spelling."""
    UNCLASSIFIED = "unclassified"
    """Looks like a quantization operand but belongs to no family qarm knows."""


QUANT_OPERANDS: dict[str, str] = {
    # ModelOpt (FP8, NVFP4, MXFP8, AWQ) and compressed-tensors float/int formats
    "weight_scale": "scale",
    "weight_scale_2": "modelopt-global",
    "input_scale": "activation",
    "output_scale": "activation",
    "pre_quant_scale": "awq-smooth",
    "svdquant_lora_a": "svd",
    "svdquant_lora_b": "svd",
    # block-wise FP8 (DeepSeek native)
    "weight_scale_inv": "block-inv",
    # compressed-tensors packed formats
    "weight_packed": "ct-packed",
    "weight_shape": "ct-packed",
    "weight_zero_point": "zero-point",
    "input_zero_point": "zero-point",
    "output_zero_point": "zero-point",
    "weight_g_idx": "g-idx",
    "weight_global_scale": "ct-global",
    "input_global_scale": "ct-global",
    # AutoAWQ / GPTQ
    "qweight": "awq-gptq",
    "qzeros": "awq-gptq",
    "scales": "awq-gptq",
    "g_idx": "awq-gptq",
    # legacy compressed-tensors sparse and marlin-24 formats
    "compressed": "sparse-bitmask",
    "bitmask": "sparse-bitmask",
    "row_offsets": "sparse-bitmask",
    "scale_packed": "marlin-24",
    "meta": "marlin-24",
    # bitsandbytes 4-bit (Params4bit's quant state, written beside a packed U8 weight)
    "weight.absmax": "bnb",
    "weight.quant_map": "bnb",
    "weight.nested_absmax": "bnb",
    "weight.nested_quant_map": "bnb",
    "weight.quant_state.bitsandbytes__nf4": "bnb",
    "weight.quant_state.bitsandbytes__fp4": "bnb",
    # gpt-oss native MXFP4 (quant_method mxfp4): the routed experts of a layer as one module,
    # E2M1 pairs a byte in 16-byte blocks of 32 and one E8M0 scale a block (the biases are plain)
    "gate_up_proj_blocks": "gpt-oss-mxfp4",
    "gate_up_proj_scales": "gpt-oss-mxfp4",
    "down_proj_blocks": "gpt-oss-mxfp4",
    "down_proj_scales": "gpt-oss-mxfp4",
    # bitsandbytes 8-bit (LLM.int8: Int8Params' row scales and its layout byte)
    "SCB": "bnb-int8",
    "weight_format": "bnb-int8",
}
"""Operand name -> family. ``weight`` and ``bias`` are plain; their dtype says the rest."""

KV_OPERANDS = frozenset(
    {"k_scale", "v_scale", "kv_scale", "q_scale", "prob_scale", "k_bias", "v_bias"}
)

_LOOKS_QUANTIZED = re.compile(
    r"quant|_amax$|^amax$|zero_?point|(^|_)(zeros|zp|absmax|qweight|qzeros|g_idx|bitmask|codebook)($|_)"
    r"|(^|_)packed($|_)|_scale_inv|^(weight|input|output|act|activation|w|a|x)_\w*scale"
    r"|scales?_\d+$"
)


BNB_SUFFIXES: dict[str, frozenset[str]] = {
    "weight": frozenset({"absmax", "quant_map", "nested_absmax", "nested_quant_map"}),
    "weight.quant_state": frozenset({"bitsandbytes__nf4", "bitsandbytes__fp4"}),
}
"""Operand names with dots in them (bitsandbytes' ``weight.absmax``, ...), by the part a split
at the last dot leaves on the module's side: ``<module>.weight`` with ``absmax`` is operand
``weight.absmax`` of ``<module>``. Nothing else is joined."""

BNB_MODULE_TAILS = tuple(f".{tail}" for tail in BNB_SUFFIXES)


def split_name(name: str) -> tuple[str, str]:
    """``"a.b.c.weight"`` -> ``("a.b.c", "weight")``; a dotless name is its own operand."""
    module, _, operand = name.rpartition(".")
    for tail, operands in BNB_SUFFIXES.items():
        if operand in operands and module.endswith(f".{tail}"):
            return module[: -len(tail) - 1], f"{tail}.{operand}"
    return module, operand


@cache
def classify_operand(operand: str) -> OperandKind:
    if operand in QUANT_OPERANDS:
        return OperandKind.QUANT
    if operand in KV_OPERANDS:
        return OperandKind.KV
    if _LOOKS_QUANTIZED.search(operand):
        return OperandKind.UNCLASSIFIED
    return OperandKind.PLAIN


MXFP4_BLOCKS = ("gate_up_proj_blocks", "down_proj_blocks")
"""gpt-oss's packed expert weights: two E2M1 values a byte."""
MXFP4_SCALES = ("gate_up_proj_scales", "down_proj_scales")

WEIGHT_NAMES = ("weight", "weight_packed", "qweight")
"""Operands that carry the weight itself, in order of preference."""
