"""The classes transformers builds a module as, as far as a compressed-tensors class target or
bitsandbytes' ``nn.Linear`` test can tell: what both producer views read (``producer.py``,
``producer_bnb.py``)."""

from __future__ import annotations

from ..modules.inventory import ModuleInfo

LINEAR_MRO = ("Linear", "Module")
EMBEDDING_MRO = ("Embedding", "Module")
QUANTIZABLE = frozenset({"linear", "fused", "lm_head", "experts", "embedding"})
"""Layer kinds transformers builds as ``nn.Linear`` / ``nn.Embedding`` (``lm_head`` is an
``nn.Linear``; llm-compressor unfuses experts into ``nn.Linear``s): since compressed-tensors
0.18 only those (and attention, for the KV cache) get a scheme; a matched norm, convolution or
router gets nothing, silently."""


def producer_classes(info: ModuleInfo) -> tuple[str, ...]:
    """The module's class and its bases in transformers, as far as a class target can tell."""
    kind = info.layer_kind or info.kind
    if kind == "router":
        # transformers 5 builds routers as their own nn.Module (Qwen3MoeTopKRouter), except
        # gates kept as nn.Linear (Qwen3-Next's shared_expert_gate)
        return LINEAR_MRO if info.leaf != "gate" else ("TopKRouter", "Module")
    if kind == "embedding":
        return EMBEDDING_MRO
    if kind in QUANTIZABLE:
        return LINEAR_MRO
    if kind == "norm":
        return ("RMSNorm", "Module")
    if kind == "conv":
        return ("Conv2d", "Module")
    return ("Module",)
