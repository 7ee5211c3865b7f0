"""What the layer tree needs from ``config.json``: the architecture and the switches that
change which layers an engine builds (``q_lora_rank``, ``tie_word_embeddings``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import HeaderError
from ..sources.header import loads_strict


@dataclass(frozen=True)
class ModelConfig:
    architectures: tuple[str, ...] = ()
    model_type: str = ""
    values: tuple[tuple[str, Any], ...] = ()
    """Top-level scalars, with ``text_config``'s filling what the top level lacks."""

    def get(self, key: str) -> Any:
        return dict(self.values).get(key)

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else ""


def read_model_config(documents: dict[str, str]) -> ModelConfig:
    """The config's architecture facts; an absent or unreadable config.json gives none (the
    declaration stage reports an unreadable one by name)."""
    text = documents.get("config.json")
    if text is None:
        return ModelConfig()
    try:
        data = loads_strict(text, "config.json")
    except HeaderError:
        return ModelConfig()
    if not isinstance(data, dict):
        return ModelConfig()
    merged: dict[str, Any] = {}
    text_config = data.get("text_config")
    for source in (text_config if isinstance(text_config, dict) else {}, data):
        merged.update({k: v for k, v in source.items() if isinstance(v, (str, int, float, bool))})
    architectures = data.get("architectures")
    names = (
        tuple(a for a in architectures if isinstance(a, str))
        if isinstance(architectures, list)
        else ()
    )
    model_type = data.get("model_type")
    return ModelConfig(
        architectures=names,
        model_type=model_type if isinstance(model_type, str) else "",
        values=tuple(sorted(merged.items())),
    )
