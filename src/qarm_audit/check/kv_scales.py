"""KV-cache scales as the engine loads them: one of k and one of v for each attention layer.

vLLM 0.33 (vllm-project/vllm vllm/model_executor/layers/quantization/kv_cache.py@v0.33.0):
``KVCacheScaleParameter`` is a scalar whose loader raises on a tensor of more than one element
(L32-L42, L69-L73); after loading, a layer with neither scale gets 1.0 for both, one with only
``k_scale`` gets it for ``v`` too, and one with only ``v_scale`` fails ``assert layer.k_scale >
0.0`` (L117-L141). compressed-tensors allocates one scale per KV head under ``strategy:
attn_head`` and a scalar otherwise, and keeps 1.0 where none is loaded
(quantization/compressed_tensors/compressed_tensors.py@v0.33.0 L1157-L1268): its per-head
loader flattens the scale (llm-compressor writes ``[heads, 1, 1]``, vllm-project/
compressed-tensors quantization/lifecycle/initialize.py@0.20.1 L249-L254) and copies the
rank's slice of it. SGLang 0.5.22 and 0.5.23 keep BaseKVCacheMethod's rules for
compressed-tensors too: which families fill in is the engine profile's ``kv_scales_filled_in``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from math import prod

from ..declarations import Declaration
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..sources.checkpoint import TensorEntry

SCALES = ("k_scale", "v_scale")
LOAD_FAILS_KV = frozenset({"kv-scale-shape", "kv-k-scale-missing"})
"""The findings of a scale that fails the load, whatever the KV cache's dtype."""
PROJECTIONS = (".k_proj", ".v_proj")
"""Where ModelOpt writes the scales (``self_attn.k_proj.k_scale``): the attention layer is the
projection's parent, as vLLM's ``maybe_remap_kv_scale_name`` maps it."""


def kv_scale_findings(
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    filled_in: Collection[str],
    kv_heads: int | None = None,
) -> list[Finding]:
    """Refusals for a KV scale the engine cannot load, warnings for one it fills in itself;
    only where a quantized KV cache is declared (else the scales are not read). ``filled_in``:
    the declaration families whose KV-cache method keeps 1.0 for a scale not shipped (the
    engine profile's ``kv_scales_filled_in``); ``kv_heads``: config.json's count of KV heads,
    where it states one."""
    kv = declaration.kv
    if kv is None:
        return []
    attentions: dict[str, dict[str, TensorEntry]] = {}
    known: set[str] = set()
    for name, info in modules.items():
        if name.endswith(".k_proj"):
            known.add(name[: -len(".k_proj")])
        operands = info.operands
        if "k_scale" in operands or "v_scale" in operands:
            attention = name.rpartition(".")[0] if name.endswith(PROJECTIONS) else name
            held = attentions.setdefault(attention, {})
            held.update((s, operands[s]) for s in SCALES if s in operands)
    if not attentions:
        return []  # none shipped: kv-scales-missing says so
    per_head = kv.strategy == "attn_head"
    base = declaration.family not in filled_in  # BaseKVCacheMethod's rules
    out = [
        _shape(attention, entry, kv.algo, kv_heads if per_head else None)
        for attention, held in sorted(attentions.items())
        for entry in held.values()
        if not _loadable(entry, per_head, kv_heads)
    ]
    only_v = sorted(a for a, held in attentions.items() if "k_scale" not in held)
    only_k = sorted(a for a, held in attentions.items() if "v_scale" not in held)
    if base and only_v:
        out.extend(
            finding(
                "kv-k-scale-missing",
                f"{attention} ships a v_scale and no k_scale",
                module=attention,
            )
            for attention in only_v
        )
    unscaled = sorted(known - attentions.keys())
    said = []
    if unscaled:
        said.append(f"{_layers(unscaled)} no KV scale ({_first(unscaled)})")
    if only_k:
        said.append(f"{_layers(only_k)} a k_scale and no v_scale ({_first(only_k)})")
    if only_v and not base:
        said.append(f"{_layers(only_v)} a v_scale and no k_scale ({_first(only_v)})")
    if said:
        fills = (
            "v takes the layer's k_scale and a layer without either takes 1.0"
            if base
            else "a scale not shipped is 1.0"
        )
        out.append(
            finding(
                "kv-scales-partial",
                f"a {kv.algo} KV cache is declared in {kv.where}, and {'; '.join(said)}; the "
                f"engine fills in what is missing without a word ({fills})",
            )
        )
    return out


def _loadable(entry: TensorEntry, per_head: bool, kv_heads: int | None) -> bool:
    """Per head, the loader flattens the scale (llm-compressor writes ``[heads, 1, 1]``) and
    takes the KV heads' slice of it: one scale broadcasts, as many as the heads fill them,
    fewer fail the copy and more are cut without a word."""
    count = prod(entry.shape)
    if per_head:
        return count == 1 or kv_heads is None or count == kv_heads
    return count == 1


def _shape(attention: str, entry: TensorEntry, algo: str, kv_heads: int | None) -> Finding:
    if kv_heads is not None:
        said = (
            f"under compressed-tensors' strategy attn_head the engine allocates one scale per "
            f"KV head (config.json: {kv_heads}) and copies the flattened scale's first "
            f"{kv_heads}: fewer fail the load, more are cut without a word"
        )
    else:
        said = (
            f"for a {algo} KV cache the engine allocates one scale per attention layer (per KV "
            "head only under compressed-tensors' strategy attn_head) and its loader raises on "
            "any other"
        )
    return finding(
        "kv-scale-shape",
        f"{entry.name} has shape {list(entry.shape)}; {said}",
        module=attention,
        tensor=entry.name,
    )


def kv_heads_of(values: Mapping[str, object]) -> int | None:
    """config.json's KV-head count: ``num_key_value_heads``, else ``num_attention_heads``
    (multi-head attention), as a positive integer; None where it states neither."""
    for key in ("num_key_value_heads", "num_attention_heads"):
        value = values.get(key)
        if type(value) is int and value > 0:
            return value
    return None


def _layers(names: list[str]) -> str:
    return "1 attention layer ships" if len(names) == 1 else f"{len(names)} attention layers ship"


def _first(names: list[str]) -> str:
    return names[0] + (f" and {len(names) - 1} more" if len(names) > 1 else "")
