"""A bias shipped where config.json builds none: the decoder's attention and MLP projections
when ``attention_bias`` or ``mlp_bias`` is false.

The model the config describes has no bias parameter there, so a loader has nowhere to put
it and drops it (engines ignore an unexpected ``.bias``, as GPTQ exporters write zero ones):
a zero bias loses nothing, any other is lost without a word. Only the decoder containers
``num_hidden_layers`` counts are read, where the flags apply; a vision tower beside them
keeps its own biases. On the layouts transformers 5.25 saves for 125 tiny models (83 with
``attention_bias: false``) the check finds none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..findings import Finding, finding
from ..layers.model_config import ModelConfig
from ..modules.inventory import ModuleInfo
from .completeness import DECODERS

_PROJECTION = re.compile(
    r"^((?:.*?\.)?layers)\.[0-9]+\.(?:(self_attn)\.([qkvo])_proj|(mlp)\.(?:gate|up|down)_proj)$"
)


def unbuilt_bias_warnings(modules: Mapping[str, ModuleInfo], config: ModelConfig) -> list[Finding]:
    """One ``bias-not-configured`` warning per flag, counting the modules and naming the first."""
    attention, mlp = config.get("attention_bias"), config.get("mlp_bias")
    if attention is not False and mlp is not False:
        return []
    # Llama's loaders honour two other switches: ``bias`` (every projection, Smaug) and
    # ``qkv_bias`` (q, k and v only, InternLM 3)
    every = config.get("bias") is True
    qkv = config.get("qkv_bias") is True
    found: dict[str, list[str]] = {"attention_bias": [], "mlp_bias": []}
    for info in modules.values():
        if "bias" not in info.operands:
            continue
        match = _PROJECTION.match(info.name)
        if match is None or match.group(1) not in DECODERS:
            continue
        if match.group(2):
            if attention is False and not every and not (qkv and match.group(3) != "o"):
                found["attention_bias"].append(info.operands["bias"].name)
        elif mlp is False:
            found["mlp_bias"].append(info.operands["bias"].name)
    out = []
    for flag, names in found.items():
        if not names:
            continue
        names.sort()
        out.append(
            finding(
                "bias-not-configured",
                f"config.json's {flag} is false and {len(names)} decoder "
                f"{'modules ship' if len(names) != 1 else 'module ships'} a bias ({names[0]}): "
                "the model it configures has no bias there, so a nonzero one is lost at load",
            )
        )
    return out
