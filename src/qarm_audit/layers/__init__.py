"""Stage 4, layers: the engine's own layer tree, built from the checkpoint's modules.

An engine does not resolve the checkpoint's tensor-name modules: it builds its own layers
per architecture (fused ``qkv_proj`` from ``q/k/v_proj``, ``fused_qkv_a_proj`` in DeepSeek
MLA, routers built without a quant config, ``ParallelLMHead``, ``FusedMoE`` experts) and
matches targets and excludes against those. Takes the modules and ``config.json``; gives each
module its engine layer (name, class, kind, whether it is built with a quant config) and a
:class:`LayerTree` saying which architecture facts were used, or that none were.
"""

from __future__ import annotations

from typing import Protocol

from ..findings import Finding, finding
from .facts import EngineFacts, load_facts
from .model_config import ModelConfig, read_model_config
from .tree import LayerTree, build_tree, engine_rename, mark_transforms


class _NamesFacts(Protocol):
    @property
    def layers(self) -> str: ...


def layer_facts(profile: _NamesFacts) -> EngineFacts | None:
    """The facts an engine profile names, or None for the generic rules."""
    return load_facts(profile.layers) if profile.layers else None


def tree_findings(tree: LayerTree) -> list[Finding]:
    if not tree.note:
        return []
    return [finding("architecture-not-modelled", tree.note)]


__all__ = [
    "EngineFacts",
    "LayerTree",
    "ModelConfig",
    "build_tree",
    "engine_rename",
    "layer_facts",
    "mark_transforms",
    "read_model_config",
    "tree_findings",
]
