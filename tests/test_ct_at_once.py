"""compressed-tensors decided at once (one decision per distinct combination of what decides
it, every ``re:`` pattern tried on all names at once) gives what deciding module by module in
the engine's order gives: the same membership for every module, the same findings, and the
same refusal where a pattern refuses a name. Likewise the producer's view."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from qarm_audit.declarations import read_declaration
from qarm_audit.errors import PatternError
from qarm_audit.layers import build_tree
from qarm_audit.layers.facts import load_facts
from qarm_audit.layers.model_config import ModelConfig
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.resolve.compressed_tensors import CompressedTensorsResolver
from qarm_audit.resolve.producer import _CompressedTensorsProducer
from qarm_audit.sources.checkpoint import TensorEntry

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LEAVES = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "mlp.gate",
    "mlp.experts.0.gate_proj",
    "mlp.experts.0.up_proj",
    "mlp.experts.1.down_proj",
    "mlp.experts.12.up_proj",
    "input_layernorm",
    "mlp.\u00e9_proj",
]
MODULES = st.one_of(
    st.builds("model.layers.{}.{}".format, st.sampled_from("017"), st.sampled_from(LEAVES)),
    st.sampled_from(["lm_head", "model.embed_tokens", "mtp.layers.0.mlp.down_proj"]),
)
PATTERNS = [
    r"re:.*self_attn\..*",
    r"re:.*layers\.1\..*",
    r"re:.*mlp\.experts\.\d+\.(gate|up|down)_proj$",
    r"re:.*\.gate$",
    r"re:.*\w+_proj$",
    r"re:model\.layers\.0\.mlp\.down_proj",
    r"re:.*(q|k|v)_proj",
    r"re:.*",
    r"re:(?i).*GATE.*",
    r"re:.*layers\.7\.mlp\.experts\.1[0-9]\..*",
]
CLASSES = ["Linear", "Embedding", "linear"]
ENTRIES = st.one_of(st.sampled_from(PATTERNS), st.sampled_from(CLASSES), MODULES)
WITH_SCALE = ("weight", "weight_scale")
FACTS = load_facts("vllm-0.33.0")
TREES = [
    (None, ""),  # the generic layer tree
    ("Qwen3MoeForCausalLM", ""),  # vLLM compiles re: entries with the regex module
    ("Qwen2VLForConditionalGeneration", "model.language_model."),  # renamed by the engine
]


def declaration(groups: list[list[str]], ignore: list[str]) -> Any:
    config = {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {
                f"group_{i}": {
                    "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                    "targets": targets,
                }
                for i, targets in enumerate(groups)
            },
            "ignore": ignore,
        }
    }
    return read_declaration({"config.json": json.dumps(config)})


def outcome(call: Any) -> Any:
    try:
        return ("decided", call())
    except PatternError as exc:
        return ("refused", exc.where, exc.problem)


@PROPERTY
@given(
    st.lists(MODULES, min_size=1, max_size=14, unique=True),
    st.lists(st.lists(ENTRIES, min_size=1, max_size=4, unique=True), min_size=1, max_size=3),
    st.lists(ENTRIES, max_size=4, unique=True),
    st.integers(0, len(TREES) - 1),
)
@example(
    ["model.layers.0.mlp.\u00e9_proj", "model.layers.0.mlp.down_proj"],
    [["Linear"]],
    ["Linear", r"re:.*\w+_proj$"],
    0,
)
@example(
    ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "lm_head"],
    [[r"re:.*(q|k|v)_proj", "model.layers.0.self_attn.k_proj"]],
    [r"re:.*self_attn\..*"],
    2,
)
def test_at_once_is_module_by_module(
    modules: list[str], groups: list[list[str]], ignore: list[str], which: int
) -> None:
    rules = declaration(groups, ignore).compressed_tensors
    assert rules is not None
    architecture, prefix = TREES[which]
    names = [m.replace("model.", prefix, 1) if prefix else m for m in modules]
    tensors = [TensorEntry(f"{m}.{op}", "F32", (4, 4), 0, 0) for m in names for op in WITH_SCALE]
    inventory = build_inventory(tensors)
    tree = (
        build_tree(inventory, ModelConfig((architecture,), "", ()), FACTS) if architecture else None
    )

    def at_once() -> Any:
        out = CompressedTensorsResolver(rules, inventory, tree).run()
        return out.memberships, set(out.findings), out.unmatched

    def one_by_one() -> Any:
        resolver = CompressedTensorsResolver(rules, inventory, tree)
        resolver._one_by_one()
        resolver.out.unmatched = [
            t for t in resolver.target_exact if "." in t and t not in inventory
        ]
        out = resolver.out
        return out.memberships, set(out.findings), out.unmatched

    assert outcome(at_once) == outcome(one_by_one)

    def producer_at_once() -> Any:
        return _CompressedTensorsProducer(rules).resolve_all(inventory)

    def producer_one_by_one() -> Any:
        view = _CompressedTensorsProducer(rules)
        return {name: view.resolve(info) for name, info in inventory.items()}

    assert outcome(producer_at_once) == outcome(producer_one_by_one)
