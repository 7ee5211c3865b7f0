"""What a module's shipped operands spell: which scheme family wrote these bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ..modules.inventory import ModuleInfo
from ..modules.operands import KV_OPERANDS, OperandKind, classify_operand

FLOAT_DTYPES = frozenset({"BF16", "F16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})
E8M0_DTYPES = frozenset({"U8", "F8_E8M0"})


@dataclass(frozen=True, slots=True)
class Spelling:
    family: str
    """``none``, ``fp8``, ``nvfp4``, ``mxfp8``, ``mxfp4``, ``int``, ``awq``, ``awq-gptq``,
    ``sparse``, ``marlin-24`` or ``scales-only`` (scales on a plain weight)."""
    producer: str
    """``modelopt`` or ``compressed-tensors`` spelling where the two differ, else ``""``."""
    detail: str

    @property
    def quantized(self) -> bool:
        return self.family != "none"


NONE = Spelling("none", "", "plain weight")


def spell(info: ModuleInfo) -> Spelling:
    ops = {
        name: entry
        for name, entry in info.operands.items()
        if name not in KV_OPERANDS and classify_operand(name) is not OperandKind.UNCLASSIFIED
    }
    quant = {name for name in ops if classify_operand(name) is OperandKind.QUANT}
    if not quant:
        weight = ops.get("weight")
        if weight is not None and weight.dtype not in FLOAT_DTYPES:
            return Spelling(_bare(weight.dtype), "", f"weight {weight.dtype} with no scale")
        return NONE
    scale = ops.get("weight_scale")
    scale_dtype = scale.dtype if scale else None
    if quant & {"qweight", "qzeros", "scales", "g_idx"}:
        return Spelling("awq-gptq", "", "qweight/qzeros/scales")
    if quant & {"compressed", "bitmask", "row_offsets"}:
        return Spelling("sparse", "compressed-tensors", "sparse bitmask (compressed, bitmask)")
    if quant & {"scale_packed", "meta"}:
        return Spelling("marlin-24", "compressed-tensors", "marlin-24 (scale_packed, meta)")
    packed = ops.get("weight_packed")
    if packed is not None:
        if packed.dtype == "U8" and scale_dtype == "F8_E4M3":
            return Spelling(
                "nvfp4",
                "compressed-tensors",
                "weight_packed U8 + weight_scale F8_E4M3 + weight_global_scale",
            )
        if packed.dtype == "U8" and scale_dtype in E8M0_DTYPES:
            return Spelling("mxfp4", "compressed-tensors", "weight_packed U8 + E8M0 weight_scale")
        if packed.dtype == "I32":
            return Spelling("int", "compressed-tensors", "weight_packed I32 (pack-quantized)")
        return Spelling("unknown", "", f"weight_packed {packed.dtype}")
    weight = ops.get("weight")
    wdtype = weight.dtype if weight else None
    if "weight_scale_inv" in quant and wdtype in FP8_DTYPES:
        return Spelling("fp8", "native", "F8 weight + block weight_scale_inv")
    if wdtype in FP8_DTYPES:
        if scale_dtype in E8M0_DTYPES:
            return Spelling("mxfp8", "", "F8 weight + E8M0 weight_scale")
        if "weight_scale_2" in quant:
            return Spelling("unknown", "", "F8 weight with a weight_scale_2")
        return Spelling("fp8", "", f"{wdtype} weight + weight_scale")
    if wdtype in ("U8", "F4"):
        if scale_dtype == "F8_E4M3":
            if "weight_scale_2" in quant:
                return Spelling(
                    "nvfp4", "modelopt", "weight U8 + weight_scale F8_E4M3 + weight_scale_2"
                )
            return Spelling("nvfp4", "", "weight U8 + weight_scale F8_E4M3, no global scale")
        if scale_dtype in E8M0_DTYPES:
            return Spelling("mxfp4", "", "weight U8 + E8M0 weight_scale")
        if scale_dtype in FLOAT_DTYPES:
            return Spelling("awq", "modelopt", "weight U8 (int4 pairs) + float weight_scale")
    if wdtype == "I8":
        return Spelling("int", "", "weight I8 + weight_scale")
    if wdtype in FLOAT_DTYPES or wdtype is None:
        names = ", ".join(sorted(quant))
        return Spelling("scales-only", "", f"{wdtype or 'no'} weight with {names}")
    return Spelling("unknown", "", f"weight {wdtype} with {', '.join(sorted(quant))}")


def _bare(dtype: str) -> str:
    """A non-float weight with no scale at all: quantized bytes nothing can dequantize."""
    return {"F8_E4M3": "fp8", "F8_E5M2": "fp8", "U8": "unknown", "I8": "int"}.get(dtype, "unknown")


COMPATIBLE: dict[str, frozenset[str]] = {
    "fp8": frozenset({"fp8"}),
    "nvfp4": frozenset({"nvfp4"}),
    "mxfp8": frozenset({"mxfp8"}),
    "mxfp4": frozenset({"mxfp4"}),
    "int": frozenset({"int"}),
    "awq": frozenset({"awq"}),
}
"""Declared scheme family -> shipped spelling families that can carry it."""
