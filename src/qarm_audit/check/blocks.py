"""Block FP8 layers whose shapes the engine cannot split into whole blocks.

vLLM's ``validate_fp8_block_shape`` (``Fp8LinearMethod.create_weights``) raises for a fused
layer when a shard's output size, other than the last shard's, is not a multiple of ``block_n``;
``validate_fp8_block_shape_moe`` raises for a MoE layer when the experts' intermediate size is
not (``vllm/model_executor/layers/quantization/utils/fp8_utils.py``). Checked here without
tensor parallelism (one GPU): each split across GPUs adds divisibility the checkpoint does not
decide.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..declarations import Declaration
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..resolve.resolver import Membership


def block_refusals(
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
) -> list[Finding]:
    if declaration.fp8 is None or declaration.fp8.scheme.block is None:
        return []
    scheme = declaration.fp8.scheme
    assert scheme.block is not None
    block_n = scheme.block[0]
    groups: dict[str, list[ModuleInfo]] = {}
    for info in modules.values():
        if memberships[info.name].bucket == scheme.name and info.engine_name != info.name:
            groups.setdefault(info.engine_name, []).append(info)
    out: list[Finding] = []
    for engine_name, members in groups.items():
        if engine_name.endswith(".experts"):
            sizes = {
                m.weight.shape[-2]
                for m in members
                if m.leaf in ("gate_proj", "up_proj", "w1", "w3")
                and m.weight is not None
                and len(m.weight.shape) >= 2  # a weight of another rank is refused elsewhere
            }
            out.extend(
                finding(
                    "block-shape-indivisible",
                    f"{engine_name}: the output_size of gate's and up's weight = {size} is "
                    f"not divisible by weight quantization block_n = {block_n} "
                    f"({scheme.name}); vLLM raises at load",
                    module=engine_name,
                )
                for size in sorted(s for s in sizes if s % block_n)
            )
            continue
        order = members[0].fused_shards  # the engine's shard order, as the layer tree has it
        by_name = {m.name: m for m in members}
        shards = [by_name[name] for name in order if name in by_name]
        for shard in shards[:-1]:  # the last shard may end in a partial block
            weight = shard.weight
            if weight is not None and len(weight.shape) >= 2 and weight.shape[-2] % block_n:
                out.append(
                    finding(
                        "block-shape-indivisible",
                        f"{engine_name}: shard {shard.leaf}'s weight output_partition_size = "
                        f"{weight.shape[-2]} is not divisible by weight quantization block_n "
                        f"= {block_n} ({scheme.name}); vLLM raises at load",
                        module=engine_name,
                        tensor=weight.name,
                    )
                )
    return out
