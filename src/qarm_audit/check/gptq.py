"""GPTQ shapes: what vLLM's ``AutoGPTQLinearMethod.create_weights`` makes for a layer of
``in`` input and ``out`` output columns, ``bits`` a weight, ``pack = 32 // bits`` weights an
int32 word and ``groups = in / group_size`` (one group where ``group_size`` is -1):

- ``qweight`` I32 ``[in / pack, out]`` (packed along the input, not ``[out, in]``);
- ``qzeros`` I32 ``[groups, out / pack]``;
- ``scales`` ``[groups, out]`` (GPTQModel writes F16);
- ``g_idx`` I32 ``[in]``: GPTQModel writes it with or without ``desc_act``; vLLM's checkpoint
  mapper drops it (``get_checkpoint_weight_mapper``: ``.g_idx`` to None).

``out`` is the packed weight's second dimension, ``in`` the ``g_idx`` length where shipped, else
what the packed weight holds; every other operand must agree with them.
"""

from __future__ import annotations

from ..declarations import Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from .groups import partial_group


def gptq_shapes(info: ModuleInfo, scheme: Scheme) -> list[Finding]:
    """Every GPTQ operand whose shape disagrees with the packed weight and the scheme."""
    qweight = info.operands.get("qweight")
    bits = scheme.weight_bits or 4
    if qweight is None or qweight.dtype != "I32" or len(qweight.shape) != 2:
        return []  # refused by the contract by operand
    rows, out = qweight.shape
    g_idx = info.operands.get("g_idx")
    shipped_in = g_idx.shape[0] if g_idx is not None and len(g_idx.shape) == 1 else None
    inner = shipped_in if shipped_in is not None else rows * 32 // bits
    group = scheme.group_size or inner
    groups = -(-inner // group)
    pack = 32 // bits
    expected = {
        "qweight": (
            (inner * bits // 32, out),
            f"packs {pack} {bits}-bit weights an int32 word along the input: "
            f"[in/{pack}, out] for in={inner} (g_idx's length), out={out}",
        ),
        "qzeros": ((groups, out * bits // 32), f"writes [groups, out/{pack}]"),
        "scales": ((groups, out), "writes [groups, out]"),
    }
    return _partial_group(info, scheme, inner) + _disagreeing(info, scheme, inner, out, expected)


def awq_shapes(info: ModuleInfo, scheme: Scheme) -> list[Finding]:
    """AWQ (vLLM's ``AutoAWQMarlinLinearMethod`` / ``AutoAWQLinearMethod.create_weights``):
    ``qweight`` I32 ``[in, out / pack]`` (packed along the output), ``qzeros`` I32
    ``[groups, out / pack]``, ``scales`` ``[groups, out]``; ``in`` is the packed weight's first
    dimension, ``out`` the scales' second where shipped."""
    qweight = info.operands.get("qweight")
    bits = scheme.weight_bits or 4
    if qweight is None or qweight.dtype != "I32" or len(qweight.shape) != 2:
        return []
    inner, cols = qweight.shape
    scales = info.operands.get("scales")
    out = scales.shape[1] if scales is not None and len(scales.shape) == 2 else cols * 32 // bits
    group = scheme.group_size or inner
    groups = -(-inner // group)
    pack = 32 // bits
    expected = {
        "qweight": (
            (inner, out * bits // 32),
            f"packs {pack} weights an int32 word along the output: [in, out/{pack}]",
        ),
        "qzeros": ((groups, out * bits // 32), f"writes [groups, out/{pack}]"),
        "scales": ((groups, out), "writes [groups, out]"),
    }
    return _partial_group(info, scheme, inner) + _disagreeing(info, scheme, inner, out, expected)


def _partial_group(info: ModuleInfo, scheme: Scheme, inner: int) -> list[Finding]:
    """A layer whose input is no multiple of the group (vLLM 0.33 allocates ``in // group``
    groups: vllm-project/vllm vllm/model_executor/layers/quantization/auto_gptq.py@v0.33.0
    L368-L373; Marlin refuses such a layer, and AutoAWQ's fallback raises, auto_awq.py@v0.33.0
    L819-L824)."""
    found = partial_group(info.name, inner, scheme, f"{info.name}.scales")
    return [found] if found is not None else []


def _disagreeing(
    info: ModuleInfo,
    scheme: Scheme,
    inner: int,
    out: int,
    expected: dict[str, tuple[tuple[int, int], str]],
) -> list[Finding]:
    """An ``operand-shape`` refusal for each shipped operand not of its expected shape."""
    found: list[Finding] = []
    for operand, (shape, why) in expected.items():
        entry = info.operands.get(operand)
        if entry is None or tuple(entry.shape) == shape:
            continue
        grouping = f"group {scheme.group_size}" if scheme.group_size else "one group"
        found.append(
            finding(
                "operand-shape",
                f"{entry.name} has shape {list(entry.shape)}; {scheme.name} ({grouping}) with a "
                f"layer of in={inner}, out={out} {why}: {list(shape)}",
                module=info.name,
                tensor=entry.name,
            )
        )
    return found
