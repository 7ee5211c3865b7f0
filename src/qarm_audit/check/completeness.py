"""Every layer and every routed expert the config counts is shipped.

vLLM checks that a checkpoint filled every parameter only for an unquantized model
(``DefaultModelLoader.load_weights``, vllm-project/vllm
vllm/model_executor/model_loader/default_loader.py@v0.33.0 L510-L523), and even there leaves
out the parameters of linear, MoE and embedding layers (L537-L539): a quantized checkpoint
that lacks a decoder layer, a routed expert or one projection of an expert loads without an
error, an unquantized one that lacks an expert or a projection too, and the engine computes
with memory it allocated and never filled. Nothing else in the audit notices a module that is
not there, so the names are counted here.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping

from ..findings import Finding, finding
from ..layers.model_config import ModelConfig
from ..modules.inventory import ModuleInfo

EXPERT_COUNTS = ("n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")
"""config.json keys (or text_config's) that count a MoE layer's routed experts, in the order
they are read: DeepSeek, Mixtral and Llama 4, Qwen MoE, and ERNIE."""

_LAYER = re.compile(r"^((?:.*?\.)?layers)\.([0-9]+)(?:\.|$)")
"""A module's decoder-layer container and index: the first ``layers.<n>`` in its name."""

DECODERS = frozenset(
    {
        "model.layers",
        "language_model.layers",
        "language_model.model.layers",
        "model.language_model.layers",
        "model.language_model.model.layers",
        "model.text_model.layers",
        "backbone.layers",
        "gpt_neox.layers",
    }
)
"""The containers of the decoder layers that ``num_hidden_layers`` counts, whole names only:
other ``layers`` containers (Llama 4's ``vision_model.model.layers``, an MTP block's) are
checked for gaps only."""

SHOWN = 8


def completeness_refusals(modules: Mapping[str, ModuleInfo], config: ModelConfig) -> list[Finding]:
    """Refusals for a routed expert, a decoder layer or a projection of a layer that is not
    shipped while the config or the other layers say it should be."""
    values = dict(config.values)
    # a routed expert's projections by the expert (X.experts.N): one dict store per module
    parents: dict[str, list[str]] = {}
    others: list[str] = []
    for info in modules.values():
        if info.experts:
            parent, _, leaf = info.name.rpartition(".")
            leaves = parents.get(parent)
            if leaves is None:
                leaves = parents[parent] = []
            leaves.append(leaf)
        else:
            others.append(info.name)
    experts: dict[str, dict[int, set[str]]] = defaultdict(dict)
    numbers: dict[str, int] = {}  # a few hundred distinct expert numbers in every layer
    for parent, leaves in parents.items():
        layer, _, digits = parent.rpartition(".")
        number = numbers.get(digits)
        if number is None:
            number = numbers[digits] = _number(digits)
        experts[layer].setdefault(number, set()).update(leaves)
    # an experts layer stands for its experts in the layer count (one name, not thousands)
    placed = [found for name in [*experts, *others] if (found := _LAYER.match(name))]
    return [
        *_experts(experts, values),
        *_layers(placed, values),
        *_projections([found for found in placed if found.end() < len(found.string)]),
    ]


def _number(digits: str) -> int:
    """A layer's or expert's number; one of more than 18 digits reads as 10**18 (Python
    refuses to read one of thousands, and any such name is refused for the gap before it)."""
    return int(digits) if len(digits) <= 18 else 10**18


def _count(values: Mapping[str, object], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        value = values.get(key)
        if type(value) is int and value > 0:
            return key, value
    return None


def _experts(
    layers: Mapping[str, Mapping[int, set[str]]], values: Mapping[str, object]
) -> list[Finding]:
    stated = _count(values, EXPERT_COUNTS)
    out = []
    for layer, experts in layers.items():
        leaves = set().union(*experts.values())
        count = stated[1] if stated else max(experts) + 1
        lacking: dict[int, list[str]] = {}
        if not all(map(leaves.__eq__, experts.values())):  # in C: most layers are whole
            lacking = {n: sorted(leaves - held) for n, held in sorted(experts.items())}
            lacking = {n: gone for n, gone in lacking.items() if gone and n < count}
        absent, absent_count = _absent(set(experts), count)
        beyond = sorted(n for n in experts if n >= count)
        if not lacking and not absent_count and not beyond:
            continue
        said = f"config.json's {stated[0]} is {count}" if stated else f"experts 0 to {count - 1}"
        parts = []
        if absent_count:
            ships = "ships" if absent_count == 1 else "ship"
            parts.append(f"{_expert_s(absent, absent_count)} {ships} no tensor")
        for n, gone in list(lacking.items())[:SHOWN]:
            parts.append(f"expert {n} ships no {', '.join(gone)}")
        if len(lacking) > SHOWN:
            parts.append(f"{len(lacking) - SHOWN} more experts lack a projection")
        if beyond:
            parts.append(f"experts {_listed(beyond, len(beyond))} are beyond that count")
        out.append(
            finding(
                "experts-incomplete",
                f"{layer}: {said}, and {'; '.join(parts)}",
                module=layer,
            )
        )
    return out


def _layers(placed: list[re.Match[str]], values: Mapping[str, object]) -> list[Finding]:
    containers: dict[str, set[int]] = defaultdict(set)
    for found in placed:
        containers[found[1]].add(_number(found[2]))
    stated = _count(values, ("num_hidden_layers",))
    out = []
    for container, numbers in containers.items():
        decoder = stated is not None and container in DECODERS
        count = max(stated[1] if stated and decoder else 0, max(numbers) + 1)
        absent, absent_count = _absent(numbers, count)
        if not absent_count:
            continue
        said = (
            f"config.json's num_hidden_layers is {count}"
            if stated and decoder and count == stated[1]
            else f"it ships layers up to {max(numbers)}"
        )
        plural = absent_count > 1
        out.append(
            finding(
                "layers-incomplete",
                f"{container}: {said}, and layer{'s' * plural} {_listed(absent, absent_count)} "
                f"ship{'' if plural else 's'} no tensor",
                module=container,
            )
        )
    return out


def _projections(placed: list[re.Match[str]]) -> list[Finding]:
    """A module missing from one layer beside modules that every layer like it ships: the
    children of one parent (the layer itself, its ``self_attn``) are a set, and a set that only
    one layer has, short of a larger set that at least two layers have (or every other layer
    with that parent), lacks what the larger one holds. Layers of different kinds (dense and
    MoE, full and linear attention) differ by sets that many layers share, so they are not
    mistaken for this; a kind that only one layer has is, which is why this is a warning."""
    sets: dict[tuple[str, str], dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for found in placed:
        # at every level: a layer without its whole self_attn lacks a child of the layer
        parts = found.string[found.end() :].split(".")
        for depth, child in enumerate(parts):
            sets[found[1], ".".join(parts[:depth])][_number(found[2])].add(child)
    out = []
    for (container, parent), layers in sets.items():
        held = Counter(frozenset(leaves) for leaves in layers.values())
        for number, leaves in sorted(layers.items()):
            own = frozenset(leaves)
            if held[own] > 1:
                continue
            others = len(layers) - 1
            fuller = sorted(
                (
                    shared
                    for shared, count in held.items()
                    if shared > own and (count > 1 or count == others)
                ),
                key=lambda shared: (-held[shared], sorted(shared)),
            )
            if not fuller:
                continue
            where = f"{container}.{number}" + (f".{parent}" if parent else "")
            gone = ", ".join(sorted(fuller[0] - own))
            out.append(
                finding(
                    "layer-modules-differ",
                    f"{where} ships no {gone}, which {_other_layers(held[fuller[0]], container)} "
                    f"beside the same modules ({', '.join(sorted(own))}); unless the model builds "
                    "this one layer without them (a layer of a kind of its own: Gemma's "
                    "KV-shared layers, one full-attention layer among sliding ones), they are "
                    "missing",
                    module=where,
                )
            )
    return out


def _other_layers(count: int, container: str) -> str:
    if count == 1:
        return f"1 other layer of {container} ships"
    return f"{count} other layers of {container} ship"


def _absent(numbers: set[int], count: int) -> tuple[list[int], int]:
    """The first :data:`SHOWN` of ``0 .. count - 1`` not in ``numbers``, and how many there
    are; found in at most ``len(numbers) + SHOWN`` steps, whatever ``count`` a hostile name or
    config gives."""
    total = count - sum(1 for n in numbers if n < count)
    first: list[int] = []
    n = 0
    while len(first) < min(total, SHOWN):
        if n not in numbers:
            first.append(n)
        n += 1
    return first, total


def _expert_s(first: list[int], total: int) -> str:
    return f"expert{'s' * (total > 1)} {_listed(first, total)}"


def _listed(first: list[int], total: int) -> str:
    shown = ", ".join(map(str, first[:SHOWN]))
    return shown + (f" and {total - SHOWN} more" if total > SHOWN else "")
