"""Differential: qarm's engine view against vLLM 0.34.0's own decision functions.

tests/data/vllm-0.34.0-answers.json holds, for each case (a declaration on one of vLLM's layer
trees: Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 with ``q_lora_rank``, Mixtral, Llava with either
checkpoint naming, Kimi-K2.5, DeepSeek-V4, GLM-5, Laguna, Qwen3.5 and Qwen2-VL under
transformers 5 names, whose mapper's order decides them and whose language model alone fuses
q/k/v and gate/up, by the packed mapping its nested model gives the quant config), the answer
vLLM gives every engine layer: compressed-tensors ``should_ignore_layer`` /
``find_matched_target`` (ignored, the group of the matched target, none), ModelOpt
``is_layer_excluded`` / ``_resolve_quant_algo`` (excluded, the algorithm, none), the error vLLM
raises, or that the layer never reaches a quant method (built without a quant config, or a class
no method applies to). scripts/derive_vllm_answers.py derived them by running those functions,
compiled from the release wheel's own source; this test needs no vLLM. For every case it ships
the checkpoint modules each engine layer is loaded from, builds qarm's layer tree
(``layers.build_tree`` on the release's facts) and resolves, and compares per engine layer.

Agreement (160 cases of 116 declarations, 17 of them from tests/data/realworld): qarm's
resolution gives vLLM's answer for 3345 of 3380 engine layers (99.0%); on the 1926 layers where
vLLM's matching functions decide (leaving out norms, routers, vision layers and other layers
that never reach them) for 1910 (99.2%). Every one of the 35 differences is in ``EXPECTED``
with its reason: vision layers vLLM bypasses, which qarm decides at the arm stage (19); vLLM
loading silently wrong where qarm refuses (a MoE layer decided from one expert, a fused layer
whose targets miss a shard: 11); an engine-arm rule outside resolution (non-WNA16 embeddings:
4); and an ignore entry vLLM leaves unmapped (``lm_head``, no dot) where both leave the layer
unquantized. Regenerate with
``python scripts/derive_vllm_answers.py --wheel vllm-0.34.0-...whl`` (``--check`` compares).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from qarm_audit.declarations import Declaration, read_declaration
from qarm_audit.engines.profile import load_profile
from qarm_audit.errors import QarmError
from qarm_audit.layers import LayerTree, build_tree
from qarm_audit.layers.facts import load_facts
from qarm_audit.layers.model_config import ModelConfig
from qarm_audit.modules.inventory import ModuleInfo, build_inventory
from qarm_audit.resolve import resolve
from qarm_audit.resolve.resolver import EXCLUDED, UNLISTED
from qarm_audit.sources.checkpoint import TensorEntry

DATA = Path(__file__).parent / "data"
ANSWERS = json.loads((DATA / "vllm-0.34.0-answers.json").read_text("utf-8"))
FACTS = load_facts("vllm-0.34.0")
SHAPES = {"norm": (16,), "conv": (16, 3, 2, 2), "embedding": (32, 16), "linear": (16, 16)}
REFUSING = {"fused-shards-disagree", "experts-disagree"}


EXPERTS_ONCE = (
    "vLLM decides a MoE layer once (compressed-tensors: from expert 0's projections; "
    "MIXED_PRECISION: the first quantized_layers key under the layer) and loads every other "
    "expert with that scheme, without an error; qarm refuses (experts-disagree) because those "
    "experts ship another scheme's weights, which vLLM would read wrongly"
)
PARTIAL_TARGET = (
    "targets name some shards of a fused layer but not all (q_proj and k_proj without v_proj, "
    "gate_proj without up_proj): vLLM builds the fused layer unquantized without an error; the "
    "producer quantized the named shards, so qarm refuses (fused-shards-disagree) rather than "
    "let vLLM read quantized shards as plain weights"
)
EMBEDDING_ARM = (
    "qarm resolves the embedding to its group as vLLM's find_matched_target does; vLLM then "
    "refuses a compressed-tensors embedding scheme that is not weight-only INT group/channel "
    "(get_quant_method, compressed_tensors.py line 197): an engine rule, not a resolution; the "
    "vllm profile's layer_errors refuse it as no-arm (tests/test_engines.py)"
)
UNMAPPED_IGNORE = (
    "vLLM maps only dotted ignore entries through the model's mapper (apply_vllm_mapper), so "
    "'lm_head' does not name its language_model.lm_head and no target matches it either; qarm "
    "matches the checkpoint's own lm_head and says ignored: both leave it unquantized"
)
VISION_ARM = (
    "vLLM's single-algorithm ModelOpt config builds a layer named under vision_tower, "
    "vision_model or vit_large_projector with UnquantizedLinearMethod (modelopt.py lines "
    "241-251); qarm resolves it to the declared algorithm and its vllm engine profile routes it "
    "to the unquantized arm (profiles/vllm.toml, hard-coded bypass): the same outcome, decided "
    "at the arm stage, where the report shows it"
)
VISION_NAMES = ("vision_tower", "vision_model", "vit_large_projector")
VISION_LAYERS = [
    f"vision_tower.vision_model.encoder.layers.0.{leaf}"
    for leaf in ("mlp.fc1", "mlp.fc2", "self_attn.out_proj", "self_attn.qkv_proj")
]
EVERY_LAYER = "*"
EXPECTED: dict[tuple[str, str], str] = {
    ("ct-expert1-differs@qwen3_moe", "model.layers.0.mlp.experts"): EXPERTS_ONCE,
    ("ct-expert1-differs@qwen3_moe", "model.layers.1.mlp.experts"): EXPERTS_ONCE,
    ("mixed-experts-prefix@qwen3_moe", "model.layers.0.mlp.experts"): EXPERTS_ONCE,
    ("ct-q-and-k-only@llama", "model.layers.0.self_attn.qkv_proj"): PARTIAL_TARGET,
    ("ct-q-and-k-only@llama", "model.layers.1.self_attn.qkv_proj"): PARTIAL_TARGET,
    ("ct-gate-only@llama", "model.layers.0.mlp.gate_up_proj"): PARTIAL_TARGET,
    ("ct-gate-only@llama", "model.layers.1.mlp.gate_up_proj"): PARTIAL_TARGET,
    ("ct-gate-only@deepseek_v3", "model.layers.0.mlp.gate_up_proj"): PARTIAL_TARGET,
    ("ct-gate-only@deepseek_v3", "model.layers.3.mlp.shared_experts.gate_up_proj"): PARTIAL_TARGET,
    ("ct-glm5-indexer@glm5", "model.layers.0.self_attn.fused_qkv_a_proj"): PARTIAL_TARGET,
    ("ct-glm5-indexer@glm5", "model.layers.3.self_attn.fused_qkv_a_proj"): PARTIAL_TARGET,
    ("ct-ignore-class@llava", "language_model.model.embed_tokens"): EMBEDDING_ARM,
    ("rw-llmc-fakequant@llama", "model.embed_tokens"): EMBEDDING_ARM,
    ("rw-llmc-fakequant@llava", "language_model.model.embed_tokens"): EMBEDDING_ARM,
    ("rw-llmc-fakequant@llava_hf", "language_model.model.embed_tokens"): EMBEDDING_ARM,
    ("ct-new-style-names@llava_hf", "language_model.lm_head"): UNMAPPED_IGNORE,
    **{
        (f"{case}@{tree}", layer): VISION_ARM
        for case in ("mo-vision", "mo-language-model-prefix")
        for tree in ("llava", "llava_hf")
        for layer in VISION_LAYERS
    },
    # its *v_proj entry excludes the vision qkv_proj: the other three take the bypass
    **{("mo-v-proj-wildcard@llava", layer): VISION_ARM for layer in VISION_LAYERS[:3]},
}
"""(case id, engine layer or ``*`` for every layer of the case) -> why qarm deliberately
answers otherwise than vLLM. Nothing else may differ."""


def documents(decl: dict[str, Any]) -> dict[str, str]:
    """The declaration as the checkpoint ships it (as scripts/derive_vllm_answers.py reads it)."""
    if "realworld" in decl:
        path = DATA / "realworld" / decl["realworld"]
        text = path.read_text("utf-8")
        if decl.get("wrap"):
            return {"config.json": json.dumps({"quantization_config": json.loads(text)})}
        name = "hf_quant_config.json" if path.name == "hf_quant_config.json" else "config.json"
        return {name: text}
    return {decl["file"]: json.dumps(decl["document"], sort_keys=True)}


def _expected(case_id: str, layer: str) -> bool:
    return (case_id, layer) in EXPECTED or (case_id, EVERY_LAYER) in EXPECTED


def _inputs(case: dict[str, Any]) -> tuple[Declaration, dict[str, ModuleInfo], LayerTree]:
    """The checkpoint modules each engine layer of the case's tree is loaded from, annotated
    with qarm's layer tree, and the declaration."""
    tree = ANSWERS["trees"][case["tree"]]
    entries = [
        TensorEntry(f"{module}.weight", "BF16", SHAPES[row["kind"]], 0, 0)
        for row in tree["layers"]
        for module in row["modules"]
    ]
    modules = build_inventory(entries)
    config = ModelConfig((tree["architecture"],), "", tuple(sorted(tree["config"].items())))
    layer_tree = build_tree(modules, config, FACTS)
    assert layer_tree.modelled, tree["architecture"]
    return read_declaration(documents(case["declaration"])), modules, layer_tree


def _qarm(case: dict[str, Any]) -> dict[str, list[str]]:
    """qarm's answer per engine layer, in the recorded answers' vocabulary."""
    layers = ANSWERS["trees"][case["tree"]]["layers"]
    declaration, modules, layer_tree = _inputs(case)
    try:
        resolution = resolve(declaration, modules, layer_tree)
    except QarmError as exc:
        return {row["name"]: ["refused", type(exc).__name__] for row in layers}
    refused = {f.module for f in resolution.findings if f.code in REFUSING}
    out: dict[str, list[str]] = {}
    for row in layers:
        members = [modules[m] for m in row["modules"]]
        if members[0].engine_name in refused:
            out[row["name"]] = ["error"]
            continue
        answers = {tuple(_word(resolution.memberships[m.name], case)) for m in members}
        out[row["name"]] = list(answers.pop()) if len(answers) == 1 else ["split"]
    return out


def _word(membership: Any, case: dict[str, Any]) -> list[str]:
    if membership.how in ("not-a-linear", "no-quant-config"):
        return ["unquantized"]
    if membership.bucket == EXCLUDED:
        return ["excluded" if case["family"] == "modelopt" else "ignored"]
    if membership.bucket == UNLISTED:
        return ["none"]
    return ["algo" if case["family"] == "modelopt" else "group", membership.bucket]


def _agrees(mine: list[str], vllm: list[str]) -> bool:
    if vllm[0] == "unquantized":
        # the layer never reaches a quant method: any answer that does not quantize it
        return mine[0] in ("unquantized", "none", "ignored", "excluded")
    if vllm[0] == "error":
        return mine[0] == "error"
    return mine == vllm[:2]


def _differences(case: dict[str, Any]) -> dict[str, tuple[list[str], list[str]]]:
    mine = _qarm(case)
    return {
        layer: (mine[layer], vllm)
        for layer, vllm in case["answers"].items()
        if not _agrees(mine[layer], vllm)
    }


CASES = {case["id"]: case for case in ANSWERS["cases"]}


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_qarm_gives_vllms_answer(case_id: str) -> None:
    case = CASES[case_id]
    wrong = {
        layer: answers
        for layer, answers in _differences(case).items()
        if not _expected(case_id, layer)
    }
    assert wrong == {}


def test_every_expected_difference_still_differs() -> None:
    """An allowlisted difference that qarm has since fixed is removed from the list."""
    stale = []
    for case_id, layer in EXPECTED:
        differing = _differences(CASES[case_id])
        if (layer == EVERY_LAYER and len(differing) != len(CASES[case_id]["answers"])) or (
            layer != EVERY_LAYER and layer not in differing
        ):
            stale.append((case_id, layer))
    assert stale == []


def test_the_agreement_stated_above_and_in_docs_semantics() -> None:
    layers = [(c, layer) for c in ANSWERS["cases"] for layer in c["answers"]]
    differing = sum(len(_differences(c)) for c in ANSWERS["cases"])
    assert (len(ANSWERS["cases"]), len(layers), len(layers) - differing) == (160, 3380, 3345)


def test_the_answers_cover_the_trees_and_the_families() -> None:
    assert ANSWERS["release"] == "0.34.0"
    assert {c["tree"] for c in ANSWERS["cases"]} == {
        "llama",
        "qwen3",
        "qwen3_moe",
        "deepseek_v3",
        "mixtral",
        "llava",
        "llava_hf",
        "kimi_k25",
        "deepseek_v4",
        "glm5",
        "laguna",
        "qwen3_5",
        "qwen2_vl_hf",
    }
    words = {a[0] for c in ANSWERS["cases"] for a in c["answers"].values()}
    assert words >= {"group", "ignored", "none", "algo", "excluded", "error", "unquantized"}


def test_the_vision_bypass_is_the_engine_profiles_arm() -> None:
    """The reason given for the vision layers in ``EXPECTED`` holds: the vllm profile routes a
    single-algorithm ModelOpt module named under a vision tower to the unquantized arm."""
    rules = [
        r
        for r in load_profile("vllm").rules
        if r.module_contains and set(VISION_NAMES) <= set(r.module_contains)
    ]
    assert [(r.producer, r.mixed, r.arm) for r in rules] == [(["modelopt"], False, "unquantized")]
