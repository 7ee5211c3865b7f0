"""What the engine-answer differentials share (tests/test_sglang_ct_answers.py,
tests/test_vllm_ct_answers.py): a declaration built from an answer's case, and the rule a
profile selects for it, and the differences no allowance explains."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from qarm_audit.declarations import Declaration, read_declaration
from qarm_audit.engines.arms import make_view
from qarm_audit.engines.profile import Profile, Rule, select

DATA = Path(__file__).parent / "data"
MODULES = {
    "dense": "model.layers.0.mlp.down_proj",
    "experts": "model.layers.0.mlp.experts.0.gate_proj",
}


def answers(engine: str, release: str) -> list[dict[str, Any]]:
    text = (DATA / f"{engine}-{release}-ct-answers.json").read_text("utf-8")
    found: list[dict[str, Any]] = json.loads(text)["answers"]
    return found


def unexplained(
    items: Iterable[dict[str, Any]],
    difference: Callable[[dict[str, Any]], str | None],
    allowed: tuple[str, ...] = (),
) -> list[str]:
    """Each answer where ``difference`` names a disagreement that is not ``allowed``, sorted,
    one line each: the layer, the case and the GPU, then the disagreement."""
    return sorted(
        {
            f"{item['layer']} {json.dumps(item['case'], sort_keys=True)} sm{item['gpu']}: {why}"
            for item in items
            if (why := difference(item)) not in (None, *allowed)
        }
    )


def declaration(case: dict[str, Any]) -> Declaration:
    """config.json of one compressed-tensors group, as the case states it."""
    group = {
        "targets": [case["target"]],
        "weights": case["weights"],
        "input_activations": case["input_activations"],
        "format": case["format"],
    }
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": case["config_format"],
            "config_groups": {"group_0": group},
        }
    }
    return read_declaration({"config.json": json.dumps(config)})


def rule_for(item: dict[str, Any], profile: Profile, operands: list[str]) -> Rule | None:
    """The profile's rule for the item's declaration, layer and GPU, with default settings."""
    found = declaration(item["case"])
    view = make_view(
        found,
        found.schemes["group_0"],
        routing="declared",
        module=MODULES[item["layer"]],
        shipped=None,
        operands=operands,
    )
    env = {key: setting.default for key, setting in profile.env.items()}
    return select(profile, view, env, item["gpu"])
