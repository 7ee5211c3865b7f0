"""``qarm explain``: the trace agrees with the resolver everywhere, and says which rule decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    MANIFESTS,
    REPO,
    fp8_modelopt,
    llama,
    modelopt_file,
    nvfp4_modelopt,
    write_checkpoint,
)
from qarm_audit.commands.closest import most_alike
from qarm_audit.commands.explain import (
    Explanation,
    NameNotFoundError,
    explain,
    trace,
)
from qarm_audit.declarations import read_declaration
from qarm_audit.errors import ExitCode
from qarm_audit.modules.inventory import build_inventory
from qarm_audit.resolve import resolve
from qarm_audit.sources import open_source
from qarm_audit.sources.checkpoint import TensorEntry

MTP = str(MANIFESTS / "seed-mtp-w4a16.manifest.json")
SIBLING = str(MANIFESTS / "seed-sibling-w4a16.manifest.json")
LM = "model.language_model.layers"

# --- the trace is the resolver, module by module ---------------------------------------------


def entries(*modules: str) -> list[TensorEntry]:
    out = []
    for module in modules:
        out.append(TensorEntry(f"{module}.weight", "F8_E4M3", (8, 8), 0, 0))
        out.append(TensorEntry(f"{module}.weight_scale", "F32", (), 0, 0))
    return out


def modelopt(algo: str = "NVFP4", excludes: list[str] | None = None, layers: Any = None) -> str:
    q: dict[str, Any] = {"quant_algo": algo, "exclude_modules": excludes or []}
    if layers is not None:
        q["quantized_layers"] = {k: {"quant_algo": v} for k, v in layers.items()}
    return json.dumps({"producer": {"name": "modelopt"}, "quantization": q})


def ct(groups: dict[str, list[str]], ignore: list[str] | None = None) -> str:
    weights = {"num_bits": 8, "type": "float", "strategy": "tensor"}
    return json.dumps(
        {
            "quantization_config": {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {g: {"weights": weights, "targets": t} for g, t in groups.items()},
                "ignore": ignore or [],
            }
        }
    )


def fp8(ignored: list[str], key: str = "ignored_layers") -> str:
    q = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    return json.dumps({"quantization_config": {**q, key: ignored}})


ATTN = [
    f"model.layers.{i}.self_attn.{p}" for i in (0, 1, 10) for p in ("q_proj", "k_proj", "v_proj")
]
MLP = [
    f"model.layers.{i}.mlp.{p}" for i in (0, 1, 10) for p in ("gate_proj", "up_proj", "down_proj")
]
EXPERTS = [f"model.layers.0.mlp.experts.{e}.{p}" for e in range(3) for p in ("w1", "w2", "w3")]
BASE = [*ATTN, *MLP, "lm_head", "model.embed_tokens"]
HF = "hf_quant_config.json"

SCENARIOS: dict[str, tuple[str, str, list[str]]] = {
    "exclude-exact": (HF, modelopt(excludes=["lm_head"]), BASE),
    "exclude-dot-star": (HF, modelopt(excludes=["model.layers.1.*"]), BASE),
    "exclude-star-expanded": (HF, modelopt(excludes=["model.layers.1*", "lm_head*"]), BASE),
    "exclude-substring": (HF, modelopt(excludes=["gate", "embed"]), BASE),
    "exclude-wildcard-shards": (HF, modelopt(excludes=["*q_proj"]), BASE),
    "exclude-one-shard": (HF, modelopt(excludes=["model.layers.0.self_attn.q_proj"]), BASE),
    "exclude-all-shards": (HF, modelopt(excludes=ATTN[:3]), BASE),
    "exclude-one-expert": (HF, modelopt(excludes=["model.layers.0.mlp.experts.1.w2"]), EXPERTS),
    "exclude-language-model": (
        HF,
        modelopt(excludes=["model.layers.0.mlp"]),
        [f"language_model.{m}" for m in MLP],
    ),
    "mixed-every-strategy": (
        HF,
        modelopt(
            "MIXED_PRECISION",
            excludes=["lm_head"],
            layers={
                "model.layers.0.self_attn.q_proj": "FP8",
                "model.layers.1.self_attn.qkv_proj": "NVFP4",
                "model.layers.0.mlp.experts": "NVFP4",
                "model.layers.1.attn.z_proj": "NVFP4",
                "model.layers.1.attn.a_proj": "FP8",
                "model.layers.2.mlp.shared_expert.down_proj": "FP8",
                "language_model.model.layers.10.mlp.down_proj": "FP8",
                "lm_head": "NVFP4",
            },
        ),
        [
            *ATTN,
            *EXPERTS,
            "model.layers.1.attn",
            "model.layers.1.attn.z_proj",
            "model.layers.1.attn.a_proj",
            *[f"model.layers.2.mlp.experts.{e}.w1" for e in range(2)],
            "model.layers.2.mlp.shared_expert.down_proj",
            "model.language_model.layers.10.mlp.down_proj",
            "lm_head",
        ],
    ),
    "ct-ignore-and-class": (
        "config.json",
        ct({"g": ["Linear"]}, ["lm_head", "re:.*mlp.gate_proj$", "re:.*qkv_proj$"]),
        BASE,
    ),
    "ct-regex-before-exact": (
        "config.json",
        ct({"a": ["re:.*down_proj"], "b": ["model.layers.0.mlp.down_proj", "Embedding"]}),
        BASE,
    ),
    "ct-exact-before-regex": (
        "config.json",
        ct({"b": ["model.layers.0.mlp.down_proj"], "a": ["re:.*_proj", "Linear"]}),
        BASE,
    ),
    "no-declaration": ("config.json", json.dumps({"model_type": "llama"}), BASE),
    "fp8-fused-shards": (
        "config.json",
        fp8(["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.qkv_proj"]),
        BASE,
    ),
    "fp8-every-shard": (
        "config.json",
        fp8([f"model.layers.0.mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")]),
        BASE,
    ),
    "fp8-experts-and-lm-head": (
        "config.json",
        fp8(["lm_head", "model.layers.0.mlp.experts.1.w2"], key="modules_to_not_convert"),
        [*BASE, *EXPERTS],
    ),
}


def _agree(declaration, modules) -> None:
    memberships = resolve(declaration, modules).memberships
    for name in modules:
        attempts, decided = trace(declaration, modules, name)
        assert decided == memberships[name], name
        assert [a.outcome for a in attempts].count("decided") == 1, name


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_trace_decides_as_the_resolver_does(scenario: str) -> None:
    document, text, modules = SCENARIOS[scenario]
    _agree(read_declaration({document: text}), build_inventory(entries(*modules)))


def test_the_trace_agrees_on_every_fixture() -> None:
    sources = sorted(p for p in (REPO / "fixtures" / "producers").iterdir() if p.is_dir())
    sources += sorted(MANIFESTS.glob("*.json"))
    assert len(sources) > 20
    for source in sources:
        checkpoint = open_source(str(source))
        tensors = [e for s in checkpoint.shards for e in s.tensors]
        _agree(read_declaration(checkpoint.documents), build_inventory(tensors))


def outcomes(attempts) -> dict[str, str]:
    return {a.step: a.outcome for a in attempts}


def test_each_strategy_is_named_with_what_it_matched() -> None:
    document, text, names = SCENARIOS["mixed-every-strategy"]
    declaration = read_declaration({document: text})
    modules = build_inventory(entries(*names))
    attempts, decided = trace(declaration, modules, "model.layers.1.self_attn.k_proj")
    assert (decided.how, decided.rule) == ("fused", "model.layers.1.self_attn.qkv_proj")
    attempts, decided = trace(declaration, modules, "model.layers.0.mlp.experts.2.w3")
    assert outcomes(attempts)["quantized_layers: experts"] == "decided"
    attempts, decided = trace(declaration, modules, "model.layers.1.attn")
    (prefix,) = [a for a in attempts if a.step == "quantized_layers: prefix"]
    assert prefix.outcome == "decided"
    assert "first listed child 'model.layers.1.attn.z_proj' (of 2 listed" in prefix.detail
    assert "children declare ['FP8', 'NVFP4']" in prefix.detail
    attempts, decided = trace(declaration, modules, "model.layers.2.mlp.experts.1.w1")
    assert outcomes(attempts)["quantized_layers: experts-parent"] == "decided"
    attempts, decided = trace(declaration, modules, "model.language_model.layers.10.mlp.down_proj")
    assert (decided.how, decided.rule) == ("exact", "language_model.model.layers.10.mlp.down_proj")
    # lm_head: excluded, and its quantized_layers entry is shadowed, not silently ignored
    attempts, decided = trace(declaration, modules, "lm_head")
    assert decided.bucket == "excluded"
    assert outcomes(attempts)["quantized_layers: exact"] == "shadowed"


def test_a_module_that_is_no_linear_is_said_so_by_its_kind() -> None:
    from conftest import REPO
    from qarm_audit.sources import open_source

    checkpoint = open_source(str(REPO / "fixtures" / "producers" / "modelopt-deepseek-v3-fp8kv"))
    declaration = read_declaration(checkpoint.documents)
    modules = build_inventory(t for shard in checkpoint.shards for t in shard.tensors)
    attempts, decided = trace(declaration, modules, "model.layers.0.self_attn.k_proj")
    (linear,) = [a for a in attempts if a.step == "class: Linear"]
    assert linear.detail == "a module of kind 'other' is no Linear"  # its k_scale alone
    assert decided.bucket == "unlisted"


def test_exclude_stages_and_a_split_fused_module() -> None:
    document, text, names = SCENARIOS["exclude-one-shard"]
    modules = build_inventory(entries(*names))
    attempts, decided = trace(read_declaration({document: text}), modules, ATTN[0])
    assert outcomes(attempts)["exclude: fused shards"] == "split"
    assert decided.bucket == "NVFP4"
    document, text, names = SCENARIOS["exclude-substring"]
    modules = build_inventory(entries(*names))
    attempts, decided = trace(read_declaration({document: text}), modules, MLP[1])
    assert (decided.how, decided.rule) == ("substring", "gate")  # up_proj, fused with gate_proj
    assert next(a for a in attempts if a.outcome == "decided").tried.endswith("gate_up_proj")


def test_compressed_tensors_target_order_decides_between_exact_and_regex() -> None:
    for scenario, how, shadowed in (
        ("ct-regex-before-exact", "regex", "targets: exact"),
        ("ct-exact-before-regex", "exact", "targets: regex"),
    ):
        document, text, names = SCENARIOS[scenario]
        modules = build_inventory(entries(*names))
        down = next(n for n in names if n.endswith("down_proj"))  # not a fused shard
        attempts, decided = trace(read_declaration({document: text}), modules, down)
        assert decided.how == how
        assert outcomes(attempts)[shadowed] == "shadowed"
    document, text, names = SCENARIOS["ct-ignore-and-class"]
    modules = build_inventory(entries(*names))
    attempts, decided = trace(read_declaration({document: text}), modules, ATTN[1])
    assert (decided.bucket, decided.rule) == ("excluded", "re:.*qkv_proj$")
    assert outcomes(attempts)["ignore: regex (fused module)"] == "decided"
    assert outcomes(attempts)["targets: class"] == "shadowed"


# --- explain() on checkpoints ---------------------------------------------------------------


def test_a_container_resolves_by_prefix_scan_via_its_listed_child() -> None:
    explanation = explain(MTP, f"{LM}.0.linear_attn")
    (m,) = explanation.modules
    assert explanation.matched == "module"
    assert (m.bucket, m.how, m.rule) == ("FP8", "prefix", f"{LM}.0.linear_attn.in_proj_qkv")
    assert m.kind == "other" and m.arms == [] and "not a Linear" in m.arm_note
    assert {o.operand for o in m.operands} == {"A_log", "dt_bias"}
    assert m.verdict == "clean" and m.findings == []


def test_a_tensor_name_explains_its_module_with_operands_and_arm() -> None:
    explanation = explain(SIBLING, "lm_head.input_scale")
    assert (explanation.matched, explanation.tensor) == ("tensor", "lm_head.input_scale")
    (m,) = explanation.modules
    assert (m.bucket, m.how, m.shipped) == ("W4A16_NVFP4", "exact", "nvfp4")
    operands = {o.operand: (o.dtype, o.shape, o.family) for o in m.operands}
    assert operands["input_scale"] == ("F32", [], "activation")
    assert operands["weight_scale"] == ("F8_E4M3", [248320, 320], "scale")
    assert m.arms and all(r.declared == "W4A16-NVFP4" for r in m.arms)
    assert m.scheme.startswith("W4A16-NVFP4")


def test_a_wildcard_exclude_decides_and_the_substring_stage_is_shadowed() -> None:
    (m,) = explain(SIBLING, "model.visual.blocks.0.attn.qkv").modules
    assert (m.bucket, m.how, m.rule) == ("excluded", "wildcard", "model.visual*")
    steps = outcomes(m.attempts)
    assert steps["exclude: wildcard"] == "decided" and steps["exclude: substring"] == "shadowed"


def test_an_engine_module_name_explains_each_shard() -> None:
    explanation = explain(MTP, f"{LM}.3.self_attn.qkv_proj")
    assert explanation.matched == "engine module"
    assert [m.module.rpartition(".")[2] for m in explanation.modules] == [
        "k_proj",
        "q_proj",
        "v_proj",
    ]
    assert all(m.engine_name == f"{LM}.3.self_attn.qkv_proj" for m in explanation.modules)


def test_a_refused_module_carries_its_refusal(tmp_path: Path) -> None:
    tensors = llama(layers=1, spell=fp8_modelopt, lm_head=fp8_modelopt("lm_head", 256, 64))
    root = write_checkpoint(
        tmp_path / "c", {"model.safetensors": tensors}, {HF: modelopt_file("FP8", ["lm_head"])}
    )
    (m,) = explain(str(root), "lm_head").modules
    assert m.verdict == "refused"
    assert [f.code for f in m.findings] == ["unquantized-ships-quantized"]
    assert m.arm_note.startswith("excluded")


def test_the_closest_names_are_best_first_and_ties_in_name_order(tmp_path: Path) -> None:
    """Six experts score alike against a typo of a seventh: the five shown are the best one,
    then the tied ones in name order, however the process hashes strings."""
    tensors = {
        f"model.layers.0.mlp.experts.{e}.gate_proj.weight": ("BF16", (4, 4)) for e in range(8)
    }
    documents = {"config.json": {"model_type": "llama"}}
    root = write_checkpoint(tmp_path / "c", {"model.safetensors": tensors}, documents)
    query = "model.layers.0.mlp.experts.7.gate_prj"
    with pytest.raises(NameNotFoundError) as caught:
        explain(str(root), query)
    assert caught.value.suggestions == [
        "model.layers.0.mlp.experts.7.gate_proj",
        *[f"model.layers.0.mlp.experts.{e}.gate_proj" for e in range(4)],
    ]
    # whatever order the names come in (a set's order varies with the process's hashing)
    names = [f"x.{e}.gate_proj" for e in range(7)]
    assert most_alike("x.7.gate_prj", names[::-1], cutoff=60) == names[:5]
    # five tied at 85.714...: rapidfuzz's extract, given that score as its cutoff, kept none
    names = [f"{letter}.gate_proj" for letter in "abcdef"]
    assert most_alike("a.gate_prj", names[::-1], cutoff=60) == names[:5]


def test_an_unknown_name_exits_2_with_the_closest_names(run, tmp_path: Path) -> None:
    with pytest.raises(NameNotFoundError) as caught:
        explain(MTP, "model.layers.0.mlp.gate_proj")
    assert f"{LM}.0.mlp.gate_proj" in caught.value.suggestions[:2]
    result = run("explain", MTP, "lm_head.weight_scale3")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert result.stderr.count("\n") == 1
    assert "closest: lm_head.weight_scale, lm_head.weight_scale_2" in result.stderr
    tensors = llama(layers=1, spell=nvfp4_modelopt)
    root = write_checkpoint(
        tmp_path / "c",
        {"model.safetensors": tensors},
        {HF: modelopt_file("NVFP4", ["model.layers.7.mlp.down_proj"])},
    )
    missing = run("explain", root, "model.layers.7.mlp.down_proj")
    assert missing.exit_code == ExitCode.BAD_INPUT
    assert "the declaration names it, and no tensor of it is shipped" in missing.stderr


def test_formats(run) -> None:
    name = f"{LM}.0.mlp.gate_proj"
    document = json.loads(run("explain", MTP, name, "-f", "json").stdout)
    Explanation.model_validate(document)
    assert document["modules"][0]["rule"] == name
    markdown = run("explain", MTP, name, "-f", "markdown")
    assert markdown.exit_code == ExitCode.CLEAN
    assert f"| **→ decided** | quantized_layers: exact | `{name}, " in markdown.stdout
    assert "| `weight_scale_2` |" in markdown.stdout
    table = run("explain", MTP, name)
    assert table.exit_code == ExitCode.CLEAN
    assert "→ decided" in table.stdout and "Operands shipped" in table.stdout
    assert run("explain", MTP, name, "--gpu", "sm999").exit_code == ExitCode.BAD_INPUT


def test_explain_names_the_engine_layer_and_its_class() -> None:
    folder = Path(__file__).parent.parent / "fixtures" / "producers" / "modelopt-nvfp4"
    explained = explain(str(folder), "model.layers.0.self_attn.k_proj")
    (module,) = explained.modules
    assert (module.engine_name, module.layer_kind, module.layer_class) == (
        "model.layers.0.self_attn.qkv_proj",
        "fused",
        "QKVParallelLinear",
    )
    assert module.layer_tree == "vllm 0.34.0"
    (head,) = explain(str(folder), "lm_head").modules
    assert (head.layer_kind, head.layer_class) == ("lm_head", "ParallelLMHead")
    from qarm_audit.report.render_explain import render_explain_markdown

    text = render_explain_markdown(explained)
    assert "engine layer: fused QKVParallelLinear, with the quant config (vllm 0.34.0)" in text
