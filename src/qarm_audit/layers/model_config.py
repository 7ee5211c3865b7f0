"""What the layer tree needs from ``config.json``: the architecture and the switches that
change which layers an engine builds (``q_lora_rank``, ``tie_word_embeddings``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..errors import HeaderError
from ..sources.header import loads_strict

TextState = Literal["null", "falsy", "truthy"]


@dataclass(frozen=True)
class ModelConfig:
    architectures: tuple[str, ...] = ()
    model_type: str = ""
    values: tuple[tuple[str, Any], ...] = ()
    """Top-level scalars, with ``text_config``'s filling what the top level lacks."""
    text_model_type: str = ""
    """The text model's ``model_type``: ``text_config``'s where there is one (a multimodal
    model's), else the top level's; what vLLM's ``hf_text_config`` reads."""
    text_states: tuple[tuple[str, TextState], ...] = ()
    """Every key of the text model's config (``text_config``, else the top level), as Python
    tests its value: ``null``, ``falsy`` (false, 0, "", [] ...) or ``truthy``."""

    def get(self, key: str) -> Any:
        return dict(self.values).get(key)

    def text_state(self, key: str) -> TextState | Literal["absent"]:
        """How the text model's config states ``key``: as :attr:`text_states`, or ``absent``."""
        return dict(self.text_states).get(key, "absent")

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
    text_model = text_config if isinstance(text_config, dict) else data
    text_model_type = text_model.get("model_type")
    return ModelConfig(
        architectures=names,
        model_type=model_type if isinstance(model_type, str) else "",
        values=tuple(sorted(merged.items())),
        text_model_type=text_model_type if isinstance(text_model_type, str) else "",
        text_states=tuple(sorted((key, _state(value)) for key, value in text_model.items())),
    )


def _state(value: Any) -> TextState:
    return "null" if value is None else "truthy" if value else "falsy"
