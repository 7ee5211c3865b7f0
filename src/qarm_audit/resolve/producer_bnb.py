"""The producer's view of a bitsandbytes declaration: which modules transformers' bitsandbytes
quantizer converted (transformers 5.24.0, ``quantizers/quantizer_bnb_4bit.py`` and
``quantizer_bnb_8bit.py`` over ``quantizers/base.py`` and ``quantizers_utils.py``).

- Only ``nn.Linear`` modules are converted: a linear, each shard of a fused engine layer, the
  head; not a MoE's experts (transformers 5 holds them as one 3-D parameter) nor a router
  built as its own module (``Qwen3MoeTopKRouter``).
- ``llm_int8_skip_modules`` absent: the default skips (``get_keys_to_not_convert``: the output
  embedding, ``lm_head``); given: only those entries, each skipping a module whose name it
  matches from the start up to a dot (``re.match(rf"(?:{key})(?:(?<=\\.)|(?=\\.|$))")``) or
  ends with (``should_convert_module``).

An entry holding a regular-expression character is not modelled (no producer view), rather
than matched by hand; a plain name is matched exactly as above.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..declarations import BnbRules
from ..modules.inventory import ModuleInfo
from .producer_classes import LINEAR_MRO, producer_classes
from .resolver import EXCLUDED, UNLISTED, Membership

_REGEX = re.compile(r"[\\^$*+?{}\[\]|()]")
"""A ``.`` is a regex character too, but in a dotted name it matches itself (and any one
character: ``model.layers.0`` also starts ``model_layers_0``, which no module is named)."""


def _skips(name: str, key: str) -> bool:
    """``should_convert_module`` is False for ``name`` under the plain entry ``key``."""
    if name.endswith(key):
        return True
    if not name.startswith(key):
        return False
    return len(name) == len(key) or name[len(key)] == "." or key.endswith(".")


def bnb_producer_view(
    rules: BnbRules, modules: Mapping[str, ModuleInfo]
) -> dict[str, Membership] | None:
    keys = rules.skip_modules
    if any(_REGEX.search(k) for k in keys):
        return None
    scheme = rules.scheme.name
    out: dict[str, Membership] = {}
    for name, info in modules.items():
        if (info.layer_kind or info.kind) == "experts":
            out[name] = Membership(UNLISTED, "not-a-linear", "a 3-D experts parameter")
            continue
        classes = producer_classes(info)
        if classes != LINEAR_MRO:
            out[name] = Membership(UNLISTED, "not-a-linear", classes[0])
            continue
        if not keys and info.leaf == "lm_head":
            out[name] = Membership(EXCLUDED, "default", "lm_head")
            continue
        key = next((k for k in keys if _skips(name, k)), None)
        if key is not None:
            out[name] = Membership(EXCLUDED, "exact", key)
            continue
        out[name] = Membership(scheme, "class", "Linear")
    return out
