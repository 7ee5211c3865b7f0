"""gpt-oss MXFP4 experts: the operands and shapes one ``model.layers.N.mlp.experts`` module
ships, with E = ``num_local_experts``, H = ``hidden_size``, I = ``intermediate_size``:

- ``gate_up_proj_blocks`` U8 ``[E, 2I, H/32, 16]``, ``gate_up_proj_scales`` U8 ``[E, 2I, H/32]``,
  ``gate_up_proj_bias`` ``[E, 2I]``;
- ``down_proj_blocks`` U8 ``[E, H, I/32, 16]``, ``down_proj_scales`` U8 ``[E, H, I/32]``,
  ``down_proj_bias`` ``[E, H]``.

Blocks are the scales' shape plus 16 bytes (32 E2M1 values): transformers'
``Mxfp4ReverseDeserialize`` saves ``blocks.reshape(*scales.shape, -1)`` and its dequantizer
asserts ``blocks.shape[:-1] == scales.shape``
(``huggingface/transformers src/transformers/integrations/mxfp4.py@v5.24.0``). vLLM's
``GptOssMxfp4MoEMethod.create_weights`` makes ``w13_weight`` U8 ``[E, 2I, H/2]``,
``w13_weight_scale`` U8 ``[E, 2I, H/32]``, ``w2_weight`` U8 ``[E, H, I/2]``, ``w2_weight_scale``
U8 ``[E, H, I/32]`` and BF16 biases, and ``_load_weights_mxfp4`` views the blocks as
``(E, 2I, -1)`` and ``(E, -1, I/2)`` by the config's sizes
(``vllm-project/vllm vllm/model_executor/layers/quantization/mxfp4.py@v0.33.0``,
``vllm/model_executor/models/gpt_oss.py@v0.33.0``).
"""

from __future__ import annotations

from ..declarations import Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..resolve.resolver import Membership

BYTES = 16
"""Bytes a block of 32 E2M1 values takes."""
PROJECTIONS = ("gate_up_proj", "down_proj")


def _expected(proj: str, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    """(E, rows, blocks a row) of one projection, from the config's sizes."""
    experts, hidden, inter = dims
    if proj == "gate_up_proj":
        return experts, 2 * inter, -(-hidden // 32)
    return experts, hidden, -(-inter // 32)


def mxfp4_shapes(info: ModuleInfo, scheme: Scheme) -> list[Finding]:
    """Every blocks, scales or bias operand whose shape disagrees with its siblings, or with
    the sizes config.json gives the engine."""
    found: list[Finding] = []
    for proj in PROJECTIONS:
        blocks = info.operands.get(f"{proj}_blocks")
        scales = info.operands.get(f"{proj}_scales")
        bias = info.operands.get(f"{proj}_bias")
        if blocks is None or scales is None:
            continue  # refused by the contract by operand
        if scheme.moe_dims is not None:
            e, rows, per_row = _expected(proj, scheme.moe_dims)
            sizes = "E={}, H={}, I={}".format(*scheme.moe_dims)
            wanted = {
                blocks: ((e, rows, per_row, BYTES), f"with config.json's {sizes} writes"),
                scales: ((e, rows, per_row), f"with config.json's {sizes} writes"),
            }
            if bias is not None:
                wanted[bias] = ((e, rows), f"with config.json's {sizes} writes")
        else:
            lead = tuple(scales.shape)
            wanted = {blocks: ((*lead, BYTES), "writes the scales' shape plus 16 bytes a block")}
            if bias is not None and len(lead) >= 2:
                wanted[bias] = (lead[:2], "writes one bias a row, [E, rows] of the scales")
        for entry, (shape, why) in wanted.items():
            if tuple(entry.shape) == shape:
                continue
            found.append(
                finding(
                    "operand-shape",
                    f"{entry.name} has shape {list(entry.shape)}; {scheme.name} {why} "
                    f"{list(shape)}",
                    module=info.name,
                    tensor=entry.name,
                )
            )
    return found


def unquantized_experts(info: ModuleInfo, scheme: Scheme, membership: Membership) -> Finding:
    """An experts layer vLLM builds MXFP4 that ships no ``_blocks``/``_scales``: the engine's
    view, which ``modules_to_not_convert`` does not move."""
    plain = ", ".join(f"{op} {e.dtype} {list(e.shape)}" for op, e in sorted(info.operands.items()))
    method = "GptOssMxfp4MoEMethod" if scheme.algo == "gpt_oss_mxfp4" else "Mxfp4MoEMethod"
    return finding(
        "quantized-ships-unquantized",
        f"{info.name} is declared {scheme.name} ({membership.how} {membership.rule!r}) but ships "
        f"no gate_up_proj_blocks/down_proj_blocks and no scales ({plain or 'no tensor'}); vLLM's "
        f"Mxfp4Config reads no modules_to_not_convert and builds {method} for every routed-"
        "experts layer, whose w13_weight/w2_weight are U8 MXFP4 parameters: the plain tensors "
        "have no BF16 layer to load into",
        module=info.name,
        tensor=next(iter(info.operands.values())).name if info.operands else "",
    )
