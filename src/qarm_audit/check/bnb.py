"""bitsandbytes 4-bit shapes: every count follows from the packed weight's rows.

``Params4bit`` stores a weight of ``n`` elements as ``[ceil(n/2), 1]`` U8 (two 4-bit codes a
byte), with one ``absmax`` per 64 elements, a 16-entry ``quant_map`` (the NF4 or FP4 code
book); double quant stores the absmax as U8 codes with one ``nested_absmax`` per 256 of them
and a 256-entry ``nested_quant_map``. The quant state's own bytes (the shape ``[out, in]``) are
never read: headers only.
"""

from __future__ import annotations

from ..declarations import Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo

NESTED_BLOCKSIZE = 256
"""The double-quant ``quantize_blockwise`` of the absmax: one nested absmax per 256."""


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def bnb_4bit_shapes(info: ModuleInfo, scheme: Scheme) -> list[Finding]:
    """Every 4-bit operand whose element count disagrees with the packed weight's: one absmax
    per the scheme's group (bitsandbytes' blocksize, read from the scheme so that an audit of
    another format never builds the bitsandbytes declaration's models)."""
    scheme_name, blocksize = scheme.name, scheme.group_size
    assert blocksize is not None  # a bitsandbytes 4-bit scheme is declared with its blocksize
    weight = info.operands.get("weight")
    if weight is None or weight.dtype != "U8":
        return []  # refused by the contract by operand
    if len(weight.shape) != 2 or weight.shape[1] != 1:
        return [
            finding(
                "operand-shape",
                f"{weight.name} has shape {list(weight.shape)}; {scheme_name} packs a weight of "
                "n elements as [n/2, 1]",
                module=info.name,
                tensor=weight.name,
            )
        ]
    blocks = -(-(weight.shape[0] * 2) // blocksize)
    expected = {
        "weight.absmax": blocks,
        "weight.quant_map": 16,
        "weight.nested_absmax": -(-blocks // NESTED_BLOCKSIZE),
        "weight.nested_quant_map": 256,
    }
    out: list[Finding] = []
    for operand, count in expected.items():
        entry = info.operands.get(operand)
        if entry is None or _numel(entry.shape) == count:
            continue
        out.append(
            finding(
                "operand-shape",
                f"{entry.name} has {_numel(entry.shape)} elements; {scheme_name} with a packed "
                f"weight of {weight.shape[0] * 2} elements writes {count}",
                module=info.name,
                tensor=entry.name,
            )
        )
    return out
