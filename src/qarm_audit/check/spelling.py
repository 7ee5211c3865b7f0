"""What a module's shipped operands spell: which scheme family wrote these bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ..modules.inventory import ModuleInfo
from ..modules.operands import (
    KV_OPERANDS,
    MXFP4_BLOCKS,
    MXFP4_SCALES,
    OperandKind,
    classify_operand,
)
from ..sources.checkpoint import TensorEntry

FLOAT_DTYPES = frozenset({"BF16", "F16", "F32", "F64"})
FP8_DTYPES = frozenset({"F8_E4M3", "F8_E5M2"})
E8M0_DTYPES = frozenset({"U8", "F8_E8M0"})
MXFP4_OPERANDS = frozenset({*MXFP4_BLOCKS, *MXFP4_SCALES})


@dataclass(frozen=True, slots=True)
class Spelling:
    family: str
    """``none``, ``fp8``, ``nvfp4``, ``mxfp8``, ``mxfp4``, ``int``, ``awq``, ``awq-gptq``,
    ``sparse``, ``marlin-24``, ``gpt-oss-mxfp4`` (``_blocks``/``_scales`` experts),
    ``bnb-nf4``, ``bnb-fp4``, ``bnb-4bit`` (bitsandbytes 4-bit with
    no one quant state), ``bnb-int8`` or ``scales-only`` (scales on a plain weight)."""
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
    bnb = _bnb(ops, quant)
    if bnb is not None:
        return bnb
    mx = sorted(quant & MXFP4_OPERANDS)
    if mx:
        return Spelling("gpt-oss-mxfp4", "", f"gpt-oss MXFP4 experts ({', '.join(mx)})")
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


BNB_4BIT = frozenset(
    {
        "weight.absmax",
        "weight.quant_map",
        "weight.nested_absmax",
        "weight.nested_quant_map",
        "weight.quant_state.bitsandbytes__nf4",
        "weight.quant_state.bitsandbytes__fp4",
    }
)
BNB_8BIT = frozenset({"SCB", "weight_format"})


def _bnb(ops: dict[str, TensorEntry], quant: set[str]) -> Spelling | None:
    """bitsandbytes: the quant state's name says the 4-bit type (``bitsandbytes__nf4``);
    4-bit operands with no quant state spell ``bnb-4bit``, which no type can be read from."""
    if not BNB_4BIT.isdisjoint(quant):
        weight = ops.get("weight")
        dtype = weight.dtype if weight else "no"
        types = sorted(n.rpartition("__")[2] for n in quant if n.startswith("weight.quant_state."))
        nested = " + nested absmax" if "weight.nested_absmax" in quant else ""
        if len(types) == 1:
            detail = f"weight {dtype} + quant_state.bitsandbytes__{types[0]}{nested}"
            return Spelling(f"bnb-{types[0]}", "", detail)
        if types:
            return Spelling("bnb-4bit", "", f"weight {dtype} with quant states {', '.join(types)}")
        return Spelling("bnb-4bit", "", f"weight {dtype} + absmax, no quant_state")
    if not BNB_8BIT.isdisjoint(quant):
        weight = ops.get("weight")
        return Spelling("bnb-int8", "", f"weight {weight.dtype if weight else 'no'} + SCB")
    return None


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
    # a 4-bit module with no (or two) quant states is refused by the contract, by operand
    "bnb-nf4": frozenset({"bnb-nf4", "bnb-4bit"}),
    "bnb-fp4": frozenset({"bnb-fp4", "bnb-4bit"}),
    "bnb-int8": frozenset({"bnb-int8"}),
    "gptq": frozenset({"awq-gptq"}),
    "autoawq": frozenset({"awq-gptq"}),
    "gpt-oss-mxfp4": frozenset({"gpt-oss-mxfp4"}),
}
"""Declared scheme family -> shipped spelling families that can carry it."""
