"""Record vLLM's own answers, per engine layer, for a set of declarations on vLLM's layer trees.

Reads the pinned vLLM release's source from its wheel at run time (``ast``, never imported, no
torch), takes out exactly the pure decision functions the quantization configs call, compiles
them in a namespace holding only what they use (``regex`` as vLLM imports it, ``fnmatch``,
``MappingProxyType``, ``dataclasses``) and feeds them layer prefixes as vLLM names them, each
with a stand-in object whose class name is the vLLM class. No vLLM code is written anywhere: the
output is the answers, with the release, the commit the wheel records and a citation per
function. tests/test_vllm_answers.py compares qarm's engine view with them.

    pip download --no-deps vllm==0.34.0 -d /tmp/rel
    python scripts/derive_vllm_answers.py --wheel /tmp/rel/vllm-0.34.0-*.whl          # write
    python scripts/derive_vllm_answers.py --wheel /tmp/rel/vllm-0.34.0-*.whl --check  # compare

The trees: layer names, classes and whether a layer is built with the quant config come from
``src/qarm_audit/layers/facts/vllm-0.34.0.json`` (derived from the same release by
``scripts/derive_engine_layers.py``); which layers each architecture builds follows its model
file, cited per tree. The dispatch on the layer's class (which config method a layer reaches)
follows each config's ``get_quant_method``, cited beside it. The packed mapping each layer is
decided with is the one the quant config holds when the layer is built: the release's own
``configure_quant_config`` and ``SupportsQuant._maybe_apply_model_mapping`` are run on stand-in
model classes (named, based and given their packed mapping and renames as the facts say) in
the order the model builds them (the facts' ``quant_packed`` order: the model class, then each
nested model), each followed by the entries its ``__init__`` adds to
``self.packed_modules_mapping``; replacing, updating and sharing a dict by reference are
vLLM's code's, not a reading of it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import fnmatch
import hashlib
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import engine_source

ROOT = Path(__file__).resolve().parent.parent
FACTS = ROOT / "src" / "qarm_audit" / "layers" / "facts" / "vllm-0.34.0.json"
REALWORLD = ROOT / "tests" / "data" / "realworld"
OUT = ROOT / "tests" / "data" / "vllm-0.34.0-answers.json"
RELEASE = "0.34.0"
FORMAT = "qarm-vllm-answers/2"

Q = "vllm/model_executor/layers/quantization/"
CT_UTILS = Q + "compressed_tensors/utils.py"
CT_CONFIG = Q + "compressed_tensors/compressed_tensors.py"
CT_MOE = Q + "compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py"
CONFIG_UTILS = Q + "utils/config_utils.py"
QUANT_UTILS = Q + "utils/quant_utils.py"
MODELOPT = Q + "modelopt.py"
MODEL_UTILS = "vllm/model_executor/models/utils.py"
LOADER = "vllm/model_executor/model_loader/utils.py"
INTERFACES = "vllm/model_executor/models/interfaces.py"

# (file, qualified name): the functions compiled and run, exactly as the release has them.
FUNCTIONS: list[tuple[str, str]] = [
    (CONFIG_UTILS, "is_equal_or_regex_match"),
    (CONFIG_UTILS, "find_matching_patterns"),
    (CT_UTILS, "should_ignore_layer"),
    (CT_UTILS, "find_matched_target"),
    (CT_UTILS, "_find_first_match"),
    (CT_UTILS, "_match_fused_layer"),
    (CT_CONFIG, "CompressedTensorsConfig.get_scheme_dict"),
    (CT_CONFIG, "CompressedTensorsConfig._add_fused_moe_to_target_scheme_map"),
    (CT_CONFIG, "CompressedTensorsConfig.apply_vllm_mapper"),
    (CT_CONFIG, "CompressedTensorsConfig._is_wNa16_group_channel"),
    (QUANT_UTILS, "is_layer_skipped"),
    (MODELOPT, "ModelOptQuantConfigBase.is_layer_excluded"),
    (MODELOPT, "ModelOptQuantConfigBase.apply_vllm_mapper"),
    (MODELOPT, "ModelOptMixedPrecisionConfig._resolve_quant_algo"),
    (MODELOPT, "ModelOptMixedPrecisionConfig._quantized_layer_prefix_candidates"),
    (MODELOPT, "ModelOptMixedPrecisionConfig.apply_vllm_mapper"),
    (MODEL_UTILS, "WeightsMapper"),
    # how the quant config learns each model's mapper and packed mapping as the model is built
    (LOADER, "configure_quant_config"),
    (INTERFACES, "SupportsQuant._maybe_apply_model_mapping"),
]
CONSTANTS: list[tuple[str, str]] = [(MODELOPT, "LINEAR_ALGOS"), (MODELOPT, "_BLOCK_FP8_MOE_ALGOS")]
# Where the driver below follows the release (not compiled: they import torch-bound classes).
FOLLOWED: list[tuple[str, str]] = [
    (CT_CONFIG, "CompressedTensorsConfig.get_quant_method"),
    (CT_CONFIG, "CompressedTensorsConfig.from_config"),
    (CT_MOE, "CompressedTensorsMoEMethod.get_moe_method"),
    (MODELOPT, "ModelOptQuantConfigBase.get_quant_method"),
    (MODELOPT, "ModelOptQuantConfigBase.from_config"),
    (MODELOPT, "ModelOptMixedPrecisionConfig.get_quant_method"),
    (LOADER, "initialize_model"),
    (MODEL_UTILS, "init_vllm_registered_model"),
    (INTERFACES, "SupportsQuant.__new__"),
]


class _Wheel(engine_source.Wheel):
    """The wheel's modules parsed once each, and the constants and commit it records."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.trees: dict[str, ast.Module] = {}

    def tree(self, name: str) -> ast.Module:
        if name not in self.trees:
            self.trees[name] = ast.parse(self.read(name), name)
        return self.trees[name]

    def find(self, name: str, qualname: str) -> ast.stmt:
        return engine_source.find(self.tree(name), qualname, name)

    def constant(self, name: str, target: str) -> Any:
        for node in self.tree(name).body:
            if isinstance(node, ast.Assign | ast.AnnAssign):
                names = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == target for t in names):
                    assert node.value is not None
                    return ast.literal_eval(node.value), node.lineno
        raise SystemExit(f"{target} not found in {name}")

    def commit(self) -> str:
        """The commit ``vllm/_version.py`` records (``__commit_id__ = commit_id = 'g...'``)."""
        for node in self.tree("vllm/_version.py").body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "__commit_id__" for t in node.targets)
            ):
                return str(node.value.value).removeprefix("g")
        raise SystemExit("vllm/_version.py records no commit")


class _Super(ast.NodeTransformer):
    """``super().f(...)`` -> ``_base_f(self, ...)``: the base class's own function, compiled
    beside it (an unbound function has no class cell for ``super``)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name)
            and f.value.func.id == "super"
        ):
            return ast.Call(
                ast.Name(f"_base_{f.attr}", ast.Load()),
                [ast.Name("self", ast.Load()), *node.args],
                node.keywords,
            )
        return node


class _Logger:
    def warning_once(self, *args: object) -> None:
        pass

    debug = warning = info = warning_once


def _re_module(wheel: _Wheel) -> types.ModuleType:
    """The module the release binds to ``re`` where its matching lives: ``regex`` when it
    writes ``import regex as re`` (0.33.0 and 0.34.0 do, in config_utils.py and models/utils.py)."""
    found: set[str] = set()
    for name in (CONFIG_UTILS, MODEL_UTILS):
        for node in wheel.tree(name).body:
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if (a.asname or a.name) == "re"}
    if found == {"regex"}:
        import regex

        return regex
    if found == {"re"}:
        import re

        return re
    raise SystemExit(f"the release binds re to {sorted(found)}: review the namespace")


def _namespace(re_module: types.ModuleType) -> dict[str, Any]:
    # a module of its own, so that ``dataclass`` finds the class's namespace
    module = types.ModuleType("vllm_decisions")
    sys.modules[module.__name__] = module
    ns: dict[str, Any] = module.__dict__
    ns.update(
        {
            "re": re_module,
            "fnmatch": fnmatch.fnmatch,
            "MappingProxyType": types.MappingProxyType,
            "dataclass": dataclasses.dataclass,
            "field": dataclasses.field,
            "replace": dataclasses.replace,
            "logger": _Logger(),
            # what configure_quant_config tests with issubclass: the stand-in model classes
            # below derive from it where the facts say the class is SupportsQuant
            "SupportsQuant": type("SupportsQuant", (), {"hf_to_vllm_mapper": None}),
            # compressed-tensors' enum, as far as _is_wNa16_group_channel reads it
            "QuantizationStrategy": types.SimpleNamespace(
                CHANNEL=types.SimpleNamespace(value="channel"),
                GROUP=types.SimpleNamespace(value="group"),
            ),
        }
    )
    return ns


def load_functions(wheel: _Wheel) -> tuple[dict[str, Any], dict[str, str]]:
    """The release's functions, compiled from its source, and where each one is."""
    ns = _namespace(_re_module(wheel))
    commit = wheel.commit()
    cites: dict[str, str] = {}
    import __future__

    flags = __future__.annotations.compiler_flag
    for name, qualname in FUNCTIONS:
        node = wheel.find(name, qualname)
        cites[qualname] = f"vllm-project/vllm {name}@{commit} line {node.lineno}"
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = [
                d
                for d in node.decorator_list
                if not (isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod"))
            ]
            node = _Super().visit(node)
        module = ast.Module([node], [])
        ast.fix_missing_locations(module)
        short = qualname.rsplit(".", 1)[-1]
        saved = ns.pop(short, None)
        code = compile(module, f"{name}:{qualname}", "exec", flags=flags, dont_inherit=True)
        exec(code, ns)
        obj = ns.pop(short)
        if saved is not None:
            ns[short] = saved
        key = qualname.replace(".", "__")
        ns[key] = obj
        ns.setdefault(short, obj)
    ns["_base_apply_vllm_mapper"] = ns["ModelOptQuantConfigBase__apply_vllm_mapper"]
    for name, target in CONSTANTS:
        value, line = wheel.constant(name, target)
        ns[target] = value
        cites[target] = f"vllm-project/vllm {name}@{commit} line {line}"
    for name, qualname in FOLLOWED:
        node = wheel.find(name, qualname)
        cites[qualname] = f"vllm-project/vllm {name}@{commit} line {node.lineno} (followed)"
    return ns, cites


# --- the trees -------------------------------------------------------------------------------
# Each layer: (vLLM prefix, checkpoint modules it holds, kind). The class and whether the layer
# is built with the quant config are looked up in the layer facts; kinds give the tensor shapes
# the test writes (norm: 1-D, conv: 4-D, else 2-D).


def _attn_llama(p: str) -> list[tuple[str, list[str], str]]:
    a = f"{p}.self_attn"
    return [
        (f"{a}.qkv_proj", [f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj"], "linear"),
        (f"{a}.o_proj", [f"{a}.o_proj"], "linear"),
    ]


def _mlp(p: str) -> list[tuple[str, list[str], str]]:
    return [
        (f"{p}.gate_up_proj", [f"{p}.gate_proj", f"{p}.up_proj"], "linear"),
        (f"{p}.down_proj", [f"{p}.down_proj"], "linear"),
    ]


def _norms(p: str, *leaves: str) -> list[tuple[str, list[str], str]]:
    return [(f"{p}.{leaf}", [f"{p}.{leaf}"], "norm") for leaf in leaves]


def _experts(p: str, projs: tuple[str, str, str], n: int = 3) -> list[tuple[str, list[str], str]]:
    return [(f"{p}.experts", [f"{p}.experts.{e}.{x}" for e in range(n) for x in projs], "linear")]


def _ends(root: str, lm_head: str = "lm_head") -> list[tuple[str, list[str], str]]:
    return [
        (f"{root}.embed_tokens", [f"{root}.embed_tokens"], "embedding"),
        (f"{root}.norm", [f"{root}.norm"], "norm"),
        (lm_head, [lm_head], "linear"),
    ]


def _llama(root: str = "model", lm_head: str = "lm_head", qk_norm: bool = False) -> list[Any]:
    out = []
    for i in (0, 1):
        p = f"{root}.layers.{i}"
        out += (
            _attn_llama(p)
            + _mlp(f"{p}.mlp")
            + _norms(p, "input_layernorm", "post_attention_layernorm")
        )
        if qk_norm:
            out += _norms(f"{p}.self_attn", "q_norm", "k_norm")
    return out + _ends(root, lm_head)


def _qwen3_moe() -> list[Any]:
    out = []
    for i in (0, 1):
        p = f"model.layers.{i}"
        out += _attn_llama(p) + _norms(f"{p}.self_attn", "q_norm", "k_norm")
        out += [(f"{p}.mlp.gate", [f"{p}.mlp.gate"], "linear")]
        out += _experts(f"{p}.mlp", ("gate_proj", "up_proj", "down_proj"))
        out += _norms(p, "input_layernorm", "post_attention_layernorm")
    return out + _ends("model")


def _deepseek_attn(p: str) -> list[Any]:
    a = f"{p}.self_attn"
    return [
        (f"{a}.fused_qkv_a_proj", [f"{a}.q_a_proj", f"{a}.kv_a_proj_with_mqa"], "linear"),
        (f"{a}.q_b_proj", [f"{a}.q_b_proj"], "linear"),
        (f"{a}.kv_b_proj", [f"{a}.kv_b_proj"], "linear"),
        (f"{a}.o_proj", [f"{a}.o_proj"], "linear"),
        *_norms(a, "q_a_layernorm", "kv_a_layernorm"),
    ]


def _deepseek(root: str = "model", lm_head: str = "lm_head", moe: int = 3) -> list[Any]:
    """A dense layer 0 and a MoE layer (``first_k_dense_replace``), MLA with ``q_lora_rank``."""
    out = [*_deepseek_attn(f"{root}.layers.0"), *_mlp(f"{root}.layers.0.mlp")]
    out += _norms(f"{root}.layers.0", "input_layernorm", "post_attention_layernorm")
    p = f"{root}.layers.{moe}"
    out += [*_deepseek_attn(p), (f"{p}.mlp.gate", [f"{p}.mlp.gate"], "linear")]
    out += _experts(f"{p}.mlp", ("gate_proj", "up_proj", "down_proj"))
    out += _mlp(f"{p}.mlp.shared_experts")
    out += _norms(p, "input_layernorm", "post_attention_layernorm")
    return out + _ends(root, lm_head)


def _kimi_k25() -> list[Any]:
    """Kimi-K2.5's DeepSeek-V3 language model under ``language_model.`` and its projector,
    which the checkpoint names ``mm_projector.proj.0`` / ``.2`` (kimi_k25.py's mapper)."""
    return [
        ("mm_projector.linear_1", ["mm_projector.proj.0"], "linear"),
        ("mm_projector.linear_2", ["mm_projector.proj.2"], "linear"),
        *_deepseek("language_model.model", "language_model.lm_head", moe=1),
    ]


def _mixtral() -> list[Any]:
    out = []
    for i in (0, 1):
        p = f"model.layers.{i}"
        gate = f"{p}.block_sparse_moe.gate"
        out += [*_attn_llama(p), (gate, [gate], "linear")]
        out += _experts(f"{p}.block_sparse_moe", ("w1", "w3", "w2"))
        out += _norms(p, "input_layernorm", "post_attention_layernorm")
    return out + _ends("model")


def _llava() -> list[Any]:
    v = "vision_tower.vision_model"
    out: list[Any] = [
        (f"{v}.embeddings.patch_embedding", [f"{v}.embeddings.patch_embedding"], "conv"),
        (f"{v}.embeddings.position_embedding", [f"{v}.embeddings.position_embedding"], "embedding"),
        (f"{v}.pre_layrnorm", [f"{v}.pre_layrnorm"], "norm"),
    ]
    for i in (0,):
        p = f"{v}.encoder.layers.{i}"
        a = f"{p}.self_attn"
        out += [
            (f"{a}.qkv_proj", [f"{a}.q_proj", f"{a}.k_proj", f"{a}.v_proj"], "linear"),
            (f"{a}.out_proj", [f"{a}.out_proj"], "linear"),
            (f"{p}.mlp.fc1", [f"{p}.mlp.fc1"], "linear"),
            (f"{p}.mlp.fc2", [f"{p}.mlp.fc2"], "linear"),
            *_norms(p, "layer_norm1", "layer_norm2"),
        ]
    out += [
        (f"{v}.post_layernorm", [f"{v}.post_layernorm"], "norm"),
        ("multi_modal_projector.linear_1", ["multi_modal_projector.linear_1"], "linear"),
        ("multi_modal_projector.linear_2", ["multi_modal_projector.linear_2"], "linear"),
    ]
    return out + _llama("language_model.model", "language_model.lm_head")


def _transformers5(layers: list[Any]) -> list[Any]:
    """The same layers, loaded from a checkpoint that transformers 5 wrote (``model.
    language_model.``, ``model.vision_tower.``, ``lm_head``): what Llava's ``hf_to_vllm_mapper``
    maps back to vLLM's names (``orig_to_new_prefix``, llava.py)."""
    renames = [
        ("language_model.model.", "model.language_model."),
        ("language_model.lm_head", "lm_head"),
        ("vision_tower.", "model.vision_tower."),
        ("multi_modal_projector.", "model.multi_modal_projector."),
    ]

    def rename(module: str) -> str:
        for old, new in renames:
            if module.startswith(old):
                return new + module[len(old) :]
        return module

    return [(prefix, [rename(m) for m in modules], kind) for prefix, modules, kind in layers]


def _glm5() -> list[Any]:
    """GLM-5 (``GlmMoeDsaForCausalLM``, built as ``DeepseekV32ForCausalLM``): DeepSeek-V3's MLA
    and MoE, and per layer a sparse-attention indexer whose ``wk`` and ``weights_proj`` vLLM
    loads into one ``wk_weights_proj`` built with no quant config (deepseek_v32/attention.py,
    stacked in deepseek_v2.py's load_weights)."""
    out = []
    for i, moe in ((0, False), (3, True)):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        x = f"{a}.indexer"
        out += _deepseek_attn(p)
        out += [
            (f"{x}.wq_b", [f"{x}.wq_b"], "linear"),
            (f"{x}.wk_weights_proj", [f"{x}.wk", f"{x}.weights_proj"], "linear"),
            *_norms(x, "k_norm"),
        ]
        if moe:
            out += [(f"{p}.mlp.gate", [f"{p}.mlp.gate"], "linear")]
            out += _experts(f"{p}.mlp", ("gate_proj", "up_proj", "down_proj"))
            out += _mlp(f"{p}.mlp.shared_experts")
        else:
            out += _mlp(f"{p}.mlp")
        out += _norms(p, "input_layernorm", "post_attention_layernorm")
    return out + _ends("model")


def _deepseek_v4() -> list[Any]:
    """DeepSeek-V4 as its original checkpoints name it (``layers.N.attn.wq_a``, ``ffn``,
    ``embed``, ``head``), each module under the vLLM layer its ``hf_to_vllm_mapper`` and
    ``packed_modules_mapping`` load it into (deepseek_v4/nvidia/model.py): ``wq_a`` + ``wkv``
    into ``fused_wqa_wkv``; the compressor's ``wkv`` + ``wgate`` into ``fused_wkv_wgate``
    (no quant config); ``shared_experts.w1``/``w3`` into ``gate_up_proj`` and ``w2`` renamed
    ``down_proj``; routed experts ``w1``/``w3``/``w2`` (gate, up, down); ``head`` into
    ``lm_head`` (no quant config). Layer 0 has no compressor (``compress_ratios[0] == 0``),
    layer 2 a compressor and an indexer (ratio 4)."""
    out: list[Any] = [("model.embed_tokens", ["embed"], "embedding")]
    for i in (0, 2):
        c, p = f"layers.{i}", f"model.layers.{i}"
        out += [
            (f"{p}.attn.fused_wqa_wkv", [f"{c}.attn.wq_a", f"{c}.attn.wkv"], "linear"),
            *[(f"{p}.attn.{x}", [f"{c}.attn.{x}"], "linear") for x in ("wq_b", "wo_a", "wo_b")],
            *[(f"{p}.attn.{x}", [f"{c}.attn.{x}"], "norm") for x in ("q_norm", "kv_norm")],
        ]
        if i == 2:
            for comp in ("attn.compressor", "attn.indexer.compressor"):
                out += [
                    (
                        f"{p}.{comp}.fused_wkv_wgate",
                        [f"{c}.{comp}.wkv", f"{c}.{comp}.wgate"],
                        "linear",
                    ),
                    (f"{p}.{comp}.norm", [f"{c}.{comp}.norm"], "norm"),
                ]
            out += [
                (f"{p}.attn.indexer.{x}", [f"{c}.attn.indexer.{x}"], "linear")
                for x in ("wq_b", "weights_proj")
            ]
        f = f"{c}.ffn"
        out += [
            (f"{p}.ffn.gate", [f"{f}.gate"], "linear"),
            (
                f"{p}.ffn.experts",
                [f"{f}.experts.{e}.{x}" for e in range(3) for x in ("w1", "w3", "w2")],
                "linear",
            ),
            (
                f"{p}.ffn.shared_experts.gate_up_proj",
                [f"{f}.shared_experts.w1", f"{f}.shared_experts.w3"],
                "linear",
            ),
            (f"{p}.ffn.shared_experts.down_proj", [f"{f}.shared_experts.w2"], "linear"),
            (f"{p}.attn_norm", [f"{c}.attn_norm"], "norm"),
            (f"{p}.ffn_norm", [f"{c}.ffn_norm"], "norm"),
        ]
    return [*out, ("model.norm", ["norm"], "norm"), ("lm_head", ["head"], "linear")]


def _laguna() -> list[Any]:
    """Laguna (laguna.py): gated attention (``g_proj``), q/k/v fused, the MLP's ``gate_proj``
    and ``up_proj`` kept apart (no ``gate_up_proj`` in its packed mapping); layer 0 dense,
    layer 1 MoE with a router built without a quant config and one ``shared_expert``."""
    out = []
    for i in (0, 1):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        out += [*_attn_llama(p), (f"{a}.g_proj", [f"{a}.g_proj"], "linear")]
        out += _norms(a, "q_norm", "k_norm")
        mlp = f"{p}.mlp" if i == 0 else f"{p}.mlp.shared_expert"
        if i == 1:
            out += [(f"{p}.mlp.gate", [f"{p}.mlp.gate"], "linear")]
            out += _experts(f"{p}.mlp", ("gate_proj", "up_proj", "down_proj"))
        out += [
            (f"{mlp}.{x}", [f"{mlp}.{x}"], "linear") for x in ("gate_proj", "up_proj", "down_proj")
        ]
        out += _norms(p, "input_layernorm", "post_attention_layernorm")
    return out + _ends("model")


def _qwen3_5() -> list[Any]:
    """Qwen3.5 (``Qwen3_5ForConditionalGeneration``, the seed's architecture), named as its
    checkpoints are (``model.language_model.``, ``model.visual.``, ``lm_head``), which the
    model's mapper renames (qwen3_5.py): layer 0 Gated DeltaNet, whose ``in_proj_qkv`` +
    ``in_proj_z`` and ``in_proj_b`` + ``in_proj_a`` vLLM fuses and whose ``conv1d`` it builds
    with no quant config; layer 3 full attention; a dense MLP; the embedding built with no
    quant config; and the vision tower's blocks and merger. ``mtp.*`` the mapper drops (the
    MTP model loads it)."""
    lm, v = "model.language_model", "model.visual"
    out: list[Any] = [("language_model.model.embed_tokens", [f"{lm}.embed_tokens"], "embedding")]
    for i in (0, 3):
        c, p = f"{lm}.layers.{i}", f"language_model.model.layers.{i}"
        if i == 0:
            la, ca = f"{p}.linear_attn", f"{c}.linear_attn"
            out += [
                (f"{la}.in_proj_qkvz", [f"{ca}.in_proj_qkv", f"{ca}.in_proj_z"], "linear"),
                (f"{la}.in_proj_ba", [f"{ca}.in_proj_b", f"{ca}.in_proj_a"], "linear"),
                (f"{la}.conv1d", [f"{ca}.conv1d"], "conv"),
                (f"{la}.out_proj", [f"{ca}.out_proj"], "linear"),
                (f"{la}.norm", [f"{ca}.norm"], "norm"),
            ]
        else:
            sa, cs = f"{p}.self_attn", f"{c}.self_attn"
            out += [
                (f"{sa}.qkv_proj", [f"{cs}.q_proj", f"{cs}.k_proj", f"{cs}.v_proj"], "linear"),
                (f"{sa}.o_proj", [f"{cs}.o_proj"], "linear"),
                (f"{sa}.q_norm", [f"{cs}.q_norm"], "norm"),
                (f"{sa}.k_norm", [f"{cs}.k_norm"], "norm"),
            ]
        out += [
            (f"{p}.mlp.gate_up_proj", [f"{c}.mlp.gate_proj", f"{c}.mlp.up_proj"], "linear"),
            (f"{p}.mlp.down_proj", [f"{c}.mlp.down_proj"], "linear"),
            (f"{p}.input_layernorm", [f"{c}.input_layernorm"], "norm"),
            (f"{p}.post_attention_layernorm", [f"{c}.post_attention_layernorm"], "norm"),
        ]
    out += [
        ("language_model.model.norm", [f"{lm}.norm"], "norm"),
        ("language_model.lm_head", ["lm_head"], "linear"),
        ("visual.patch_embed.proj", [f"{v}.patch_embed.proj"], "conv"),
        ("visual.pos_embed", [f"{v}.pos_embed"], "embedding"),
    ]
    for j in (0,):
        b, cb = f"visual.blocks.{j}", f"{v}.blocks.{j}"
        out += [
            (f"{b}.{x}", [f"{cb}.{x}"], "linear")
            for x in ("attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2")
        ]
    out += [
        (f"visual.merger.{x}", [f"{v}.merger.{x}"], "linear") for x in ("linear_fc1", "linear_fc2")
    ]
    return out


def _qwen2_vl_hf() -> list[Any]:
    """Qwen2-VL named as a transformers 5 checkpoint names it (``model.visual.``,
    ``model.language_model.``, ``lm_head``). Its mapper's prefixes apply one after another in
    the order qwen2_vl.py writes them: ``model.visual.`` becomes ``visual.`` before the
    catch-all ``model.`` (``language_model.model.``) is tried, so the order decides every
    vision name. The model class's own packed mapping is empty (``SupportsLoRA``'s), so the
    vision tower is decided with none; its language model, ``Qwen2ForCausalLM`` built by
    ``init_vllm_registered_model``, is ``SupportsQuant`` and adds its ``qkv_proj`` and
    ``gate_up_proj`` to the quant config before its layers are built, so they are decided as
    fused layers of their shards."""
    v, lm = "model.visual", "model.language_model"
    out: list[Any] = [("visual.patch_embed.proj", [f"{v}.patch_embed.proj"], "conv")]
    b = "blocks.0"
    out += [
        (f"visual.{b}.{x}", [f"{v}.{b}.{x}"], "linear")
        for x in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    ]
    out += [(f"visual.merger.mlp.{j}", [f"{v}.merger.mlp.{j}"], "linear") for j in (0, 2)]
    p, c = "language_model.model.layers.0", f"{lm}.layers.0"
    out += [
        (
            f"{p}.self_attn.qkv_proj",
            [f"{c}.self_attn.{x}" for x in ("q_proj", "k_proj", "v_proj")],
            "linear",
        ),
        (f"{p}.mlp.gate_up_proj", [f"{c}.mlp.gate_proj", f"{c}.mlp.up_proj"], "linear"),
    ]
    out += [
        (f"language_model.model.layers.0.{x}", [f"{lm}.layers.0.{x}"], "linear")
        for x in ("self_attn.o_proj", "mlp.down_proj")
    ]
    out += [
        (
            "language_model.model.layers.0.input_layernorm",
            [f"{lm}.layers.0.input_layernorm"],
            "norm",
        ),
        ("language_model.lm_head", ["lm_head"], "linear"),
    ]
    return out


# name -> (architecture, config values, the layer facts' architecture for the nested language
# model, layers, model file cited)
TREES: dict[str, tuple[str, dict[str, Any], str, list[Any]]] = {
    "llama": ("LlamaForCausalLM", {"model_type": "llama"}, "", _llama()),
    "qwen3": ("Qwen3ForCausalLM", {"model_type": "qwen3"}, "", _llama(qk_norm=True)),
    "qwen3_moe": ("Qwen3MoeForCausalLM", {"model_type": "qwen3_moe"}, "", _qwen3_moe()),
    "deepseek_v3": (
        "DeepseekV3ForCausalLM",
        {"model_type": "deepseek_v3", "q_lora_rank": 8, "first_k_dense_replace": 3},
        "",
        _deepseek(),
    ),
    "mixtral": ("MixtralForCausalLM", {"model_type": "mixtral"}, "", _mixtral()),
    "llava": (
        "LlavaForConditionalGeneration",
        {"model_type": "llava"},
        "LlamaForCausalLM",
        _llava(),
    ),
    "kimi_k25": (
        "KimiK25ForConditionalGeneration",
        {"model_type": "kimi_k25", "q_lora_rank": 1536, "first_k_dense_replace": 1},
        "DeepseekV2ForCausalLM",
        _kimi_k25(),
    ),
    "llava_hf": (
        "LlavaForConditionalGeneration",
        {"model_type": "llava"},
        "LlamaForCausalLM",
        _transformers5(_llava()),
    ),
    "deepseek_v4": (
        "DeepseekV4ForCausalLM",
        {"model_type": "deepseek_v4", "q_lora_rank": 1024, "n_shared_experts": 1},
        "",
        _deepseek_v4(),
    ),
    "glm5": (
        "GlmMoeDsaForCausalLM",
        {"model_type": "glm_moe_dsa", "q_lora_rank": 8, "first_k_dense_replace": 3},
        "",
        _glm5(),
    ),
    "laguna": ("LagunaForCausalLM", {"model_type": "laguna"}, "", _laguna()),
    "qwen2_vl_hf": (
        "Qwen2VLForConditionalGeneration",
        {"model_type": "qwen2_vl"},
        "Qwen2ForCausalLM",
        _qwen2_vl_hf(),
    ),
    "qwen3_5": (
        "Qwen3_5ForConditionalGeneration",
        {"model_type": "qwen3_5"},
        "",
        _qwen3_5(),
    ),
}


def _leaf_fact(facts: dict[str, Any], arch: str, nested: str, prefix: str) -> dict[str, Any]:
    """The facts' variant of a layer at this prefix (indices as ``*``), in the architecture
    or, for a nested language model (``language_model.``), in its own architecture."""
    import re as stdre

    shape = stdre.sub(r"\.\d+(?=\.|$)", ".*", prefix)
    leaf = prefix.rsplit(".", 1)[-1]
    tried = [(arch, shape)]
    if nested and prefix.startswith("language_model."):
        tried.insert(0, (nested, shape.removeprefix("language_model.")))
    for name, path in tried:
        variants = facts["architectures"][name]["layers"].get(leaf, [])
        placed = [v for v in variants if any(fnmatch.fnmatchcase(path, p) for p in v["paths"] if p)]
        pick = placed or [v for v in variants if v["paths"] == [""]] or variants
        if pick:
            # the variant built in the common configuration: a quant config passed wins
            return next((v for v in pick if v["quant_config"] != "none"), pick[0])
    raise SystemExit(f"no layer fact for {prefix} in {arch}")


def _step(item: dict[str, Any], path: str, built_by: str, config: dict[str, Any]) -> Any:
    """One model class as the load sequence meets it: the class facts (its own packed mapping,
    null where no class defines one; its renames; whether it is ``SupportsQuant``) and the
    entries its ``__init__`` adds to ``self.packed_modules_mapping`` under this config."""
    adds = [
        [p["fused"], list(p["shards"])]
        for p in item.get("packed_when", [])
        if p.get("tests")
        and all(
            t["test"] == "is not None" and config.get(t["config"]) is not None for t in p["tests"]
        )
    ]
    mapper = item.get("mapper")
    return {
        "path": path,
        "class": item["model_class"],
        "built_by": built_by,
        "supports_quant": bool(item.get("supports_quant")),
        "packed_modules_mapping": item["packed_modules_mapping"]
        if item.get("packed_modules_mapping_at")
        else None,
        "init_adds": adds,
        "rename_mapper": mapper.get("rename_mapper", {}) if mapper else None,
    }


def _load_plan(facts: dict[str, Any], arch: str, nested: str, config: dict[str, Any]) -> Any:
    """The model classes that tell the quant config their mappings, in the order vLLM builds
    them (the facts' ``quant_packed`` order): the model class through ``initialize_model``,
    then each nested model (``init_vllm_registered_model`` runs ``initialize_model`` again; a
    ``SupportsQuant`` class built directly only its ``__new__``). An inner model chosen from
    the config at run time is the tree's nested architecture."""
    item = facts["architectures"][arch]
    plan = [_step(item, "", "initialize_model", config)]
    for scope in item.get("quant_packed", [])[1:]:
        inner = next(
            n
            for n in item.get("nested_models", [])
            if (n["path"], n["file"], n["line"]) == (scope["path"], scope["file"], scope["line"])
        )
        if "model_class" not in inner:
            inner = {**facts["architectures"][nested], "built_by": inner["built_by"]}
        built_by = "constructor" if inner["built_by"] == "constructor" else "initialize_model"
        plan.append(_step(inner, scope["path"], built_by, config))
    return plan


def load(ns: dict[str, Any], tree: dict[str, Any], qc: Any) -> dict[str, dict[str, list[str]]]:
    """Build the tree's model classes as stand-ins and tell ``qc`` about each as vLLM does,
    with the release's own ``configure_quant_config`` (``initialize_model``) and
    ``SupportsQuant._maybe_apply_model_mapping`` (``SupportsQuant.__new__``), then the entries
    each ``__init__`` adds to ``self.packed_modules_mapping``. Returns the mapping ``qc``
    holds after each step, by the step's path: what the layers built there are decided
    with. Replacing, updating and sharing a class's dict by reference are vLLM's code's."""
    configure = ns["configure_quant_config"]
    tell = ns["SupportsQuant___maybe_apply_model_mapping"]
    supports_quant = ns["SupportsQuant"]
    scopes: dict[str, dict[str, list[str]]] = {}
    for step in tree["load"]:
        attrs: dict[str, Any] = {}
        if step["packed_modules_mapping"] is not None:
            attrs["packed_modules_mapping"] = {
                k: list(v) for k, v in step["packed_modules_mapping"].items()
            }
        if step["rename_mapper"] is not None:
            attrs["hf_to_vllm_mapper"] = _weights_mapper(ns, step["rename_mapper"])
        bases = (supports_quant,) if step["supports_quant"] else ()
        cls = type(step["class"], bases, attrs)
        if step["built_by"] == "initialize_model":
            configure(qc, cls)
        model = cls()
        if step["supports_quant"]:
            model.quant_config = qc  # SupportsQuant.__new__ finds it in the vllm_config
            tell(model)
        for fused, shards in step["init_adds"]:
            model.packed_modules_mapping[fused] = list(shards)
        scopes[step["path"]] = {k: list(v) for k, v in qc.packed_modules_mapping.items()}
    return scopes


def packed_for(scopes: dict[str, dict[str, list[str]]], name: str) -> dict[str, list[str]]:
    """The mapping the quant config held when the layer ``name`` was built: its nested
    model's (the longest path holding it), else the model class's."""
    held = [p for p in scopes if p and (name == p or name.startswith(p + "."))]
    return scopes[max(held, key=len)] if held else scopes[""]


def build_trees(ns: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    commit = facts["commit"]
    out: dict[str, Any] = {}
    for name, (arch, config, nested, layers) in TREES.items():
        item = facts["architectures"][arch]
        rows = []
        for prefix, modules, kind in layers:
            fact = _leaf_fact(facts, arch, nested, prefix)
            rows.append(
                {
                    "name": prefix,
                    "class": fact["class"],
                    "quant_config": fact["quant_config"] != "none",
                    "kind": kind,
                    "modules": modules,
                    "cite": f"vllm-project/vllm {fact['file']}@{commit} line {fact['line']}"
                    if fact.get("file")
                    else item["cite"],
                }
            )
        tree: dict[str, Any] = {
            "architecture": arch,
            "config": config,
            "cite": item["cite"],
            "load": _load_plan(facts, arch, nested, config),
            "layers": rows,
        }
        blank = types.SimpleNamespace(packed_modules_mapping={}, apply_vllm_mapper=lambda m: None)
        tree["packed_modules_mapping"] = load(ns, tree, blank)
        out[name] = tree
    return out


# --- the drivers: which decision function a layer reaches, as get_quant_method dispatches ----


def _mro(facts: dict[str, Any], cls: str) -> set[str]:
    seen, todo = set(), [cls]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(facts["classes"].get(name, {}).get("mro", [])[1:])
    return seen


def _stand_in(cls: str) -> object:
    """A layer object whose class name is vLLM's (``find_matched_target`` tests the name)."""
    return type(cls, (), {})()


def _weights_mapper(ns: dict[str, Any], rename: dict[str, Any]) -> Any:
    """The model's ``hf_to_vllm_mapper`` as vLLM's ``WeightsMapper``, from its renames."""
    # the facts keep each table as [old, new] pairs in the model's order; a dict keeps it
    fields = {
        k: dict(v) if isinstance(v, list) and k != "orig_to_new_renaming" else v
        for k, v in rename.items()
    }
    if "orig_to_new_regex" in fields:
        # the facts write a compiled pattern as "re:" + its text; vLLM's module compiles it
        fields["orig_to_new_regex"] = {
            ns["re"].compile(k.removeprefix("re:")): v
            for k, v in fields["orig_to_new_regex"].items()
        }
    return ns["WeightsMapper"](**fields)


def _error(e: Exception) -> list[str]:
    return ["error", f"{type(e).__name__}: {e}"]


def ct_answers(
    ns: dict[str, Any], facts: dict[str, Any], tree: dict[str, Any], block: dict[str, Any]
) -> dict[str, list[str]]:
    groups = {
        k: v
        for k, v in (block.get("config_groups") or {}).items()
        # from_config drops a group whose one target is an attention class
        if not (len(v["targets"]) == 1 and v["targets"][0].endswith("Attention"))
    }
    target_scheme_map: dict[str, Any] = {}
    group_of: dict[int, str] = {}
    for g, v in groups.items():
        for t in v["targets"]:
            scheme = {
                "weights": v.get("weights"),
                "input_activations": v.get("input_activations"),
                "format": v.get("format"),
            }
            target_scheme_map[t] = scheme
            group_of[id(scheme)] = g
    self = types.SimpleNamespace(
        ignore=list(block.get("ignore") or []),
        target_scheme_map=target_scheme_map,
        quant_format=block.get("format"),
        kv_cache_scheme=None,
        packed_modules_mapping={},
    )
    self.apply_vllm_mapper = lambda m: ns["CompressedTensorsConfig__apply_vllm_mapper"](self, m)
    scopes = load(ns, tree, self)
    scheme_dict = ns["CompressedTensorsConfig__get_scheme_dict"]
    ignored = ns["should_ignore_layer"]

    def decide(layer: object, name: str) -> list[str]:
        if ignored(name, ignore=self.ignore, fused_mapping=packed):
            return ["ignored"]
        d = scheme_dict(self, layer, name)
        if d is None or d.get("weights") is None:
            return ["none"]
        target = ns["find_matched_target"](name, layer, self.target_scheme_map.keys(), packed)
        return ["group", group_of[id(d)], str(target)]

    out: dict[str, list[str]] = {}
    for row in tree["layers"]:
        name, cls = row["name"], row["class"]
        mro = _mro(facts, cls)
        layer = _stand_in(cls)
        packed = self.packed_modules_mapping = packed_for(scopes, name)
        try:
            if not row["quant_config"]:
                out[name] = ["unquantized", "built without a quant config"]
            elif "LinearBase" in mro:
                out[name] = decide(layer, name)
            elif "ParallelLMHead" in mro:
                try:
                    out[name] = decide(layer, name)
                except ValueError:
                    out[name] = ["none"]
            elif "VocabParallelEmbedding" in mro:
                answer = decide(layer, name)
                if answer[0] == "group":
                    d = scheme_dict(self, layer, name)
                    w = d["weights"]
                    strategy = w.get("strategy") or (
                        # QuantizationArgs infers a missing strategy from the group size
                        None
                        if w.get("group_size") is None
                        else "channel"
                        if w["group_size"] == -1
                        else "group"
                    )
                    wq = types.SimpleNamespace(strategy=strategy, dynamic=w.get("dynamic", False))
                    if not (
                        ns["CompressedTensorsConfig___is_wNa16_group_channel"](wq, None)
                        and w.get("type", "int") == "int"
                    ):
                        answer = [
                            "error",
                            "ValueError: compressed-tensors embeddings only "
                            "support weight-only INT group/channel (WNA16) quantization",
                        ]
                out[name] = answer
            elif "RoutedExperts" in mro or "FusedMoE" in mro:
                ns["CompressedTensorsConfig___add_fused_moe_to_target_scheme_map"](self)
                unfused = [f"{name}.0.{m.rsplit('.', 1)[-1]}" for m in row["modules"][:3]]
                dicts = [scheme_dict(self, layer, n) for n in unfused]
                last = dicts.pop()
                if not all(d == last for d in dicts):
                    out[name] = [
                        "error",
                        "ValueError: All MoE projections need to have same "
                        "quantization scheme but found multiple",
                    ]
                elif last is None or last.get("weights") is None:
                    out[name] = (
                        ["ignored"]
                        if ignored(unfused[-1], ignore=self.ignore, fused_mapping=packed)
                        else ["none"]
                    )
                else:
                    target = ns["find_matched_target"](
                        unfused[-1], layer, self.target_scheme_map.keys(), packed
                    )
                    out[name] = ["group", group_of[id(last)], str(target)]
            else:
                out[name] = ["unquantized", f"{cls} takes no compressed-tensors method"]
        except ValueError as e:
            out[name] = _error(e)
    return out


def _modelopt_block(doc: dict[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
    if "quantization" in doc:
        q = doc["quantization"]
        excludes = q.get("exclude_modules", [])
        layers = q.get("quantized_layers", {})
    else:
        q = doc
        excludes = q.get("ignore", q.get("exclude_modules", []))
        layers = q.get("quantized_layers", {})
    return str(q.get("quant_algo")).upper(), list(excludes or []), dict(layers or {})


def modelopt_answers(
    ns: dict[str, Any], facts: dict[str, Any], tree: dict[str, Any], doc: dict[str, Any]
) -> dict[str, list[str]]:
    algo, excludes, layers = _modelopt_block(doc)
    mixed = algo == "MIXED_PRECISION"
    self = types.SimpleNamespace(
        exclude_modules=excludes,
        quantized_layers=layers,
        packed_modules_mapping={},
        _quantized_layer_prefix_candidates=ns[
            "ModelOptMixedPrecisionConfig___quantized_layer_prefix_candidates"
        ],
    )
    key = "ModelOptMixedPrecisionConfig" if mixed else "ModelOptQuantConfigBase"
    self.apply_vllm_mapper = lambda m: ns[f"{key}__apply_vllm_mapper"](self, m)
    scopes = load(ns, tree, self)
    excluded = ns["ModelOptQuantConfigBase__is_layer_excluded"]
    resolve = ns["ModelOptMixedPrecisionConfig___resolve_quant_algo"]
    linear_algos, block_moe = ns["LINEAR_ALGOS"], ns["_BLOCK_FP8_MOE_ALGOS"]
    out: dict[str, list[str]] = {}
    for row in tree["layers"]:
        name, cls = row["name"], row["class"]
        mro = _mro(facts, cls)
        self.packed_modules_mapping = packed_for(scopes, name)
        linear = "LinearBase" in mro or "ParallelLMHead" in mro
        experts = "RoutedExperts" in mro or "FusedMoE" in mro
        try:
            if not row["quant_config"]:
                out[name] = ["unquantized", "built without a quant config"]
            elif excluded(self, name):
                out[name] = ["excluded"]
            elif not mixed:
                if any(s in name for s in ("vision_tower", "vision_model", "vit_large_projector")):
                    out[name] = ["unquantized", "vision layer"]
                elif linear or experts:
                    out[name] = ["algo", algo]
                else:
                    out[name] = ["unquantized", f"{cls} takes no ModelOpt method"]
            else:
                got = resolve(self, name)
                if linear:
                    out[name] = ["algo", got] if got in linear_algos else ["none"]
                elif experts:
                    moe = (*block_moe, "FP8", "NVFP4", "W4A16_NVFP4", "MXFP8")
                    out[name] = ["algo", got] if got in moe else ["none"]
                else:
                    out[name] = ["unquantized", f"{cls} takes no ModelOpt method"]
        except ValueError as e:
            out[name] = _error(e)
    return out


# --- the declarations ------------------------------------------------------------------------

FP8 = {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}}
INT8 = {"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}
W4A16 = {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}


def _g(targets: list[str], scheme: dict[str, Any] = FP8) -> dict[str, Any]:
    return {**scheme, "targets": targets}


def _ct(groups: dict[str, Any], ignore: list[str] | None = None) -> dict[str, Any]:
    block = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": groups,
        "ignore": ignore or [],
    }
    return {"file": "config.json", "document": {"quantization_config": block}}


def _mo(excludes: list[str], algo: str = "FP8", layers: dict[str, str] | None = None) -> Any:
    q: dict[str, Any] = {"quant_algo": algo, "exclude_modules": excludes}
    if layers is not None:
        q["quantized_layers"] = {k: {"quant_algo": v} for k, v in layers.items()}
    return {
        "file": "hf_quant_config.json",
        "document": {"producer": {"name": "modelopt"}, "quantization": q},
    }


def _real(path: str, wrap: bool = False) -> dict[str, Any]:
    return {"realworld": path, "wrap": wrap}


L0 = "model.layers.0"
SA = f"{L0}.self_attn"
VL0 = "model.language_model.layers.0"
VL = f"{VL0}.self_attn"
_SEED = "model.language_model.layers"
SEED_LAYERS = {
    # the seed's quantized_layers (fixtures/make_seed_manifests.py) on the tree's two layers
    **{f"{_SEED}.0.linear_attn.{x}": "FP8" for x in ("in_proj_qkv", "in_proj_z", "out_proj")},
    **{f"{_SEED}.3.self_attn.{x}": "FP8" for x in ("q_proj", "k_proj", "v_proj", "o_proj")},
    **{
        f"{_SEED}.{i}.mlp.{x}": "NVFP4"
        for i in (0, 3)
        for x in ("gate_proj", "up_proj", "down_proj")
    },
    "lm_head": "NVFP4",
}
SEED_SIBLING_EXCLUDES = [
    "model.visual*",
    "mtp*",
    "*linear_attn.conv1d",
    "*linear_attn.in_proj_a",
    "*linear_attn.in_proj_b",
]
SYNTHETIC: dict[str, tuple[list[str], dict[str, Any]]] = {
    # tests/test_differential.py's synthetic cases, on vLLM's trees
    "ct-class-linear": (
        ["qwen3_moe", "llama", "deepseek_v3", "mixtral", "kimi_k25"],
        _ct({"g": _g(["Linear"])}),
    ),
    "ct-router-regex": (["deepseek_v3", "qwen3_moe"], _ct({"g": _g(["re:.*mlp.*"])})),
    "ct-norms-under-regex": (["qwen3", "deepseek_v3"], _ct({"g": _g(["re:.*self_attn.*"])})),
    "ct-exact-before-regex": (
        ["llama"],
        _ct({"a": _g(["re:.*down_proj"]), "b": _g([f"{L0}.mlp.down_proj"], INT8)}),
    ),
    "ct-sorted-regexes": (
        ["llama"],
        _ct({"a": _g(["re:.*mlp.*"]), "b": _g(["re:.*down_proj"], INT8)}),
    ),
    "ct-regex-before-class": (
        ["llama"],
        _ct({"a": _g(["Linear"]), "b": _g(["re:.*o_proj"], INT8)}),
    ),
    "ct-class-case": (["llama"], _ct({"g": _g(["linear"])})),
    "ct-ignore-class": (["llava"], _ct({"g": _g(["Linear", "Embedding"])}, ["Embedding"])),
    "ct-embedding-target": (["llava", "llama"], _ct({"g": _g(["Embedding"], INT8)})),
    "ct-fused-name": (
        ["llama", "llava", "llava_hf", "qwen2_vl_hf"],
        _ct({"g": _g(["re:.*v_proj$"])}),
    ),
    "ct-last-group-wins": (["llama"], _ct({"a": _g(["Linear"]), "b": _g(["Linear"], INT8)})),
    # vLLM's own rules
    "ct-fused-target-name": (
        ["llama", "qwen3"],
        _ct({"g": _g(["re:.*qkv_proj$", "re:.*gate_up_proj$"])}),
    ),
    "ct-q-and-k-only": (["llama"], _ct({"g": _g(["re:.*[qk]_proj$"])})),
    "ct-shard-names-exact": (
        ["llama"],
        _ct({"g": _g([f"{SA}.q_proj", f"{SA}.k_proj", f"{SA}.v_proj"])}),
    ),
    "ct-ignore-one-shard": (["llama"], _ct({"g": _g(["Linear"])}, [f"{SA}.k_proj"])),
    "ct-ignore-all-shards": (
        ["llama"],
        _ct({"g": _g(["Linear"])}, [f"{SA}.q_proj", f"{SA}.k_proj", f"{SA}.v_proj"]),
    ),
    "ct-ignore-fused-name": (["llama"], _ct({"g": _g(["Linear"])}, [f"{SA}.qkv_proj"])),
    "ct-ignore-regex-shard": (["llama", "qwen3"], _ct({"g": _g(["Linear"])}, ["re:.*gate_proj$"])),
    "ct-class-parallel-linear": (["llama", "deepseek_v3"], _ct({"g": _g(["ParallelLinear"])})),
    "ct-class-lm-head": (["llama"], _ct({"g": _g(["Linear"]), "h": _g(["lm_head"], INT8)})),
    "ct-regex-inline-flag": (["llama"], _ct({"g": _g(["re:.*(?i)_PROJ$"])})),
    # the regex module's inline flag applies from where it stands to the end of its group,
    # later alternatives included, not to what comes before it
    "ct-regex-inline-flag-scope": (
        ["llama", "qwen3_5"],
        _ct(
            {
                "g": _g([r"re:MODEL\.(?i)LAYERS\.0\..*"]),
                "h": _g([r"re:.*mlp(?i)\.DOWN_proj$|.*O_PROJ$"], INT8),
            },
            [r"re:.*(?i:Q)_proj$(?i)|.*LM_HEAD"],
        ),
    ),
    "ct-embedding-wna16": (["llama"], _ct({"g": _g(["Linear"]), "e": _g(["Embedding"], W4A16)})),
    "ct-attention-group-dropped": (
        ["llama"],
        _ct({"attn": _g(["LlamaAttention"]), "g": _g(["re:.*down_proj$"])}),
    ),
    "ct-experts-by-regex": (["qwen3_moe", "mixtral"], _ct({"g": _g(["re:.*experts.*"])})),
    "ct-expert0-mixed": (
        ["qwen3_moe"],
        _ct({"g": _g(["Linear"]), "i": _g(["re:.*experts.0.down_proj$"], INT8)}),
    ),
    "ct-expert1-differs": (
        ["qwen3_moe"],
        _ct({"g": _g(["Linear"]), "i": _g(["re:.*experts.1.*"], INT8)}),
    ),
    "ct-ignore-experts": (["qwen3_moe"], _ct({"g": _g(["Linear"])}, ["re:.*experts.*"])),
    "ct-mla-one-shard": (
        ["deepseek_v3"],
        _ct({"g": _g(["Linear"])}, [f"{SA}.kv_a_proj_with_mqa"]),
    ),
    "ct-mla-fused-target": (["deepseek_v3"], _ct({"g": _g(["re:.*fused_qkv_a_proj$"])})),
    "ct-vision-regex": (["llava", "llava_hf"], _ct({"g": _g(["re:.*vision_tower.*"])})),
    # names as transformers 5 writes them, which vLLM maps to its own before matching
    "ct-new-style-names": (
        ["llava_hf"],
        _ct(
            {"g": _g(["model.language_model.layers.0.mlp.down_proj", "re:.*self_attn.*"])},
            ["lm_head", "re:.*vision_tower.*"],
        ),
    ),
    "ct-fused-exact-name": (["llama"], _ct({"g": _g([f"{SA}.qkv_proj", "re:.*down_proj$"])})),
    "ct-ignore-fused-regex": (["llama", "deepseek_v3"], _ct({"g": _g(["Linear"])}, ["re:.*qkv.*"])),
    "ct-gate-only": (["llama", "deepseek_v3"], _ct({"g": _g(["re:.*gate_proj$"])})),
    "ct-mixtral-w1-only": (["mixtral"], _ct({"g": _g(["re:.*w1$"])})),
    "ct-experts-regex-shared": (["deepseek_v3"], _ct({"g": _g(["re:.*experts.*"])})),
    "ct-ignore-router-regex": (
        ["mixtral", "qwen3_moe"],
        _ct({"g": _g(["Linear"])}, ["re:.*gate$", "re:.*lm_head"]),
    ),
    # ModelOpt: exclude stages
    "mo-exact": (["llama", "qwen3"], _mo([f"{L0}.mlp.down_proj", "lm_head"])),
    "mo-wildcard": (["llama", "deepseek_v3"], _mo(["*self_attn*", "model.layers.*.mlp.gate"])),
    "mo-substring": (["llama", "deepseek_v3", "qwen3_moe"], _mo(["o_proj", "mlp.gate"])),
    "mo-star-split": (
        ["llama", "deepseek_v3", "qwen3_moe"],
        _mo(["mlp.gate*", f"{L0}.self_attn*"]),
    ),
    "mo-fused-one-shard": (["llama"], _mo([f"{SA}.q_proj"])),
    "mo-fused-all-shards": (["llama"], _mo([f"{SA}.q_proj", f"{SA}.k_proj", f"{SA}.v_proj"])),
    "mo-fused-name": (["llama"], _mo([f"{SA}.qkv_proj"])),
    "mo-mla-one-shard": (["deepseek_v3"], _mo([f"{SA}.kv_a_proj_with_mqa"])),
    "mo-mla-both-shards": (["deepseek_v3"], _mo([f"{SA}.kv_a_proj_with_mqa", f"{SA}.q_a_proj"])),
    "mo-experts-exact": (["qwen3_moe", "mixtral"], _mo(["model.layers.0.mlp.experts.0.down_proj"])),
    "mo-experts-layer": (["qwen3_moe"], _mo(["model.layers.1.mlp.experts"])),
    "mo-empty-entry": (["llama"], _mo([""])),
    "mo-vision": (["llava", "llava_hf"], _mo(["language_model.lm_head"], "NVFP4")),
    "mo-language-model-prefix": (["llava", "llava_hf"], _mo(["model.layers.0.mlp.down_proj"])),
    "mo-question-mark": (["llama"], _mo(["model.layers.?.mlp.down_proj"])),
    "mo-fused-exact-name": (["llama", "qwen3"], _mo([f"{L0}.mlp.gate_up_proj"])),
    "mo-shard-wildcard": (["llama"], _mo(["model.layers.*.self_attn.q_proj"])),
    "mo-v-proj-wildcard": (["llama", "llava"], _mo(["*v_proj", "*gate_proj"])),
    "mo-gate-wildcard": (["qwen3_moe", "mixtral", "deepseek_v3"], _mo(["*gate*"])),
    "mo-experts-star": (["qwen3_moe", "deepseek_v3"], _mo(["model.layers.1.mlp.experts*"])),
    "mo-mixtral-substring": (["mixtral"], _mo(["block_sparse_moe.gate", "w2"])),
    # ModelOpt MIXED_PRECISION lookups
    "mixed-exact": (
        ["llama"],
        _mo([], "MIXED_PRECISION", {f"{L0}.mlp.down_proj": "NVFP4", f"{SA}.o_proj": "FP8"}),
    ),
    "mixed-fused-shards": (
        ["llama"],
        _mo(
            [],
            "MIXED_PRECISION",
            {f"{SA}.q_proj": "FP8", f"{SA}.k_proj": "FP8", f"{SA}.v_proj": "FP8"},
        ),
    ),
    "mixed-fused-missing-shard": (
        ["llama"],
        _mo([], "MIXED_PRECISION", {f"{SA}.q_proj": "FP8", f"{SA}.k_proj": "FP8"}),
    ),
    "mixed-fused-two-algos": (
        ["llama"],
        _mo(
            [],
            "MIXED_PRECISION",
            {f"{SA}.q_proj": "FP8", f"{SA}.k_proj": "NVFP4", f"{SA}.v_proj": "FP8"},
        ),
    ),
    "mixed-fused-name": (["llama"], _mo([], "MIXED_PRECISION", {f"{SA}.qkv_proj": "NVFP4"})),
    "mixed-experts-prefix": (
        ["qwen3_moe"],
        _mo(
            [],
            "MIXED_PRECISION",
            {
                "model.layers.0.mlp.experts.0.gate_proj": "NVFP4",
                "model.layers.0.mlp.experts.1.gate_proj": "FP8",
                "model.layers.1.mlp.experts.2.down_proj": "FP8",
            },
        ),
    ),
    "mixed-experts-parent": (
        ["qwen3_moe"],
        _mo([], "MIXED_PRECISION", {"model.layers.0.mlp.gate": "FP8"}),
    ),
    "mixed-mla": (
        ["deepseek_v3"],
        _mo([], "MIXED_PRECISION", {f"{SA}.q_a_proj": "FP8", f"{SA}.kv_a_proj_with_mqa": "NVFP4"}),
    ),
    "mixed-mla-one-shard": (["deepseek_v3"], _mo([], "MIXED_PRECISION", {f"{SA}.q_a_proj": "FP8"})),
    "mixed-exclude": (
        ["llama"],
        _mo([f"{L0}.mlp*"], "MIXED_PRECISION", {f"{L0}.mlp.down_proj": "NVFP4"}),
    ),
    "mixed-star-exclude-no-mapper": (
        ["deepseek_v3", "llama"],
        _mo(
            ["model.layers.0.self_attn*"],
            "MIXED_PRECISION",
            {"model.layers.0.mlp.down_proj": "FP8"},
        ),
    ),
    "mixed-shared-experts": (
        ["deepseek_v3"],
        _mo(
            [],
            "MIXED_PRECISION",
            {
                "model.layers.3.mlp.shared_experts.gate_proj": "FP8",
                "model.layers.3.mlp.experts.0.up_proj": "NVFP4",
            },
        ),
    ),
    "mixed-language-model": (
        ["llava", "llava_hf"],
        _mo(
            [],
            "MIXED_PRECISION",
            {"model.language_model.layers.0.mlp.down_proj": "NVFP4", "lm_head": "FP8"},
        ),
    ),
    # DeepSeek-V4, GLM-5, Laguna and Qwen3.5: their own layers
    "ct-v4-class-linear": (
        ["deepseek_v4", "glm5", "laguna", "qwen3_5"],
        _ct({"g": _g(["Linear"])}),
    ),
    "ct-v4-ffn-regex": (["deepseek_v4"], _ct({"g": _g(["re:.*ffn.*"])})),
    "ct-v4-fused-target": (["deepseek_v4"], _ct({"g": _g(["re:.*fused_wqa_wkv$", "re:.*w2$"])})),
    "ct-v4-wkv-ignored": (["deepseek_v4"], _ct({"g": _g(["Linear"])}, ["re:.*attn\\.wkv$"])),
    "ct-v4-compressor-regex": (
        ["deepseek_v4"],
        _ct({"g": _g(["re:.*compressor.*", "re:.*indexer.*"])}),
    ),
    "mo-v4-head": (["deepseek_v4"], _mo(["head", "*.attn.*"], "NVFP4")),
    "mixed-v4-shared-experts": (
        ["deepseek_v4"],
        _mo(
            ["layers.0.ffn.shared_experts.w2"],
            "MIXED_PRECISION",
            {
                "layers.0.ffn.shared_experts.w1": "FP8",
                "layers.0.ffn.shared_experts.w3": "FP8",
                "layers.2.ffn.shared_experts.w2": "FP8",
                "layers.2.ffn.experts.0.w1": "NVFP4",
            },
        ),
    ),
    "ct-glm5-indexer": (["glm5"], _ct({"g": _g(["re:.*indexer.*", "re:.*kv_a_proj_with_mqa$"])})),
    "mo-glm5-indexer-wildcard": (
        ["glm5"],
        _mo(["*indexer.wk", "model.layers.3.mlp.gate"], "NVFP4"),
    ),
    "ct-laguna-gate-proj": (["laguna"], _ct({"g": _g(["re:.*gate_proj$", "re:.*g_proj$"])})),
    "mo-laguna-shared-expert": (["laguna"], _mo(["*shared_expert*", "*q_proj"], "FP8")),
    "ct-qwen3-5-linear-attn": (
        ["qwen3_5"],
        _ct(
            {"g": _g(["re:.*linear_attn.*"]), "v": _g(["re:.*visual.*"], INT8)}, ["re:.*in_proj_a$"]
        ),
    ),
    # the order of the model's prefix renames: only applied in qwen2_vl.py's order does
    # model.visual.blocks.0 become visual.blocks.0, which these anchored entries name
    "ct-mapper-order": (
        ["qwen2_vl_hf"],
        _ct(
            {
                "v": _g([r"re:^visual\.blocks\..*"], INT8),
                "t": _g([r"re:^language_model\.model\..*"]),
            }
        ),
    ),
    "mo-mapper-order": (
        ["qwen2_vl_hf"],
        _mo(["visual.blocks.*", "language_model.model.layers.0.m*"]),
    ),
    # packed mappings a nested model gives the quant config: Qwen2-VL's language model fuses
    # q/k/v and gate/up (its model class's mapping is empty); Kimi-K2.5's DeepSeek language
    # model adds fused_qkv_a_proj (q_lora_rank) to its own dict, which the config holds
    "ct-vl-ignore-one-shard": (["qwen2_vl_hf"], _ct({"g": _g(["Linear"])}, [f"{VL}.k_proj"])),
    "ct-vl-shards-target": (
        ["qwen2_vl_hf"],
        _ct(
            {
                "g": _g([f"{VL}.q_proj", f"{VL}.k_proj", f"{VL}.v_proj"]),
                "i": _g([r"re:.*mlp\.gate_proj$", r"re:.*mlp\.up_proj$"], INT8),
            }
        ),
    ),
    "mo-vl-one-shard": (["qwen2_vl_hf"], _mo([f"{VL}.q_proj", f"{VL0}.mlp.up_proj"])),
    "mixed-vl-missing-shard": (
        ["qwen2_vl_hf"],
        _mo(
            [],
            "MIXED_PRECISION",
            {f"{VL}.q_proj": "FP8", f"{VL}.k_proj": "FP8", f"{VL0}.mlp.gate_proj": "NVFP4"},
        ),
    ),
    "ct-kimi-mla-one-shard": (
        ["kimi_k25"],
        _ct({"g": _g(["Linear"])}, [f"language_model.{SA}.kv_a_proj_with_mqa"]),
    ),
    "mo-kimi-mla-one-shard": (["kimi_k25"], _mo([f"language_model.{SA}.q_a_proj"])),
    # MIXED_PRECISION keys written in vLLM's own names (after the model's mapper), which
    # vLLM's lookup meets as they are: the mapper leaves them unchanged
    "mixed-engine-names": (
        ["qwen3_5", "qwen2_vl_hf", "llava_hf"],
        _mo(
            [],
            "MIXED_PRECISION",
            {
                "language_model.model.layers.0.mlp.down_proj": "NVFP4",
                "language_model.lm_head": "FP8",
                "visual.blocks.0.attn.proj": "FP8",
                "vision_tower.vision_model.encoder.layers.0.mlp.fc1": "FP8",
                "multi_modal_projector.linear_1": "NVFP4",
            },
        ),
    ),
    "mixed-engine-fused-names": (
        ["qwen2_vl_hf", "qwen3_5"],
        _mo(
            [],
            "MIXED_PRECISION",
            {
                "language_model.model.layers.0.self_attn.qkv_proj": "FP8",
                "language_model.model.layers.0.mlp.gate_up_proj": "NVFP4",
                "language_model.model.layers.0.linear_attn.in_proj_qkvz": "FP8",
                "language_model.model.layers.3.self_attn": "NVFP4",
            },
        ),
    ),
    "mixed-v4-engine-names": (
        ["deepseek_v4"],
        _mo(
            [],
            "MIXED_PRECISION",
            {
                "model.layers.0.ffn.shared_experts.down_proj": "FP8",
                "model.layers.0.ffn.shared_experts.gate_up_proj": "FP8",
                "model.layers.0.attn.fused_wqa_wkv": "NVFP4",
                "model.layers.2.ffn.experts": "NVFP4",
                "model.layers.2.attn.wo_a": "FP8",
                "lm_head": "FP8",
            },
        ),
    ),
    "mixed-kimi-engine-names": (
        ["kimi_k25"],
        _mo(
            [],
            "MIXED_PRECISION",
            {"mm_projector.linear_1": "FP8", "mm_projector.proj.2": "NVFP4"},
        ),
    ),
    "mixed-seed": (["qwen3_5"], _mo([], "MIXED_PRECISION", SEED_LAYERS)),
    "mixed-seed-sibling": (["qwen3_5"], _mo(SEED_SIBLING_EXCLUDES, "MIXED_PRECISION", SEED_LAYERS)),
    "mo-seed-single": (["qwen3_5"], _mo(SEED_SIBLING_EXCLUDES, "NVFP4")),
}

REAL: dict[str, tuple[list[str], dict[str, Any]]] = {
    "rw-kimi-k2.5": (["kimi_k25"], _real("aic-kimi-k2.5-nvfp4-named/config.json")),
    "rw-deepseek-v3-0324": (
        ["deepseek_v3"],
        _real("aic-deepseek-v3-0324-nvfp4/hf_quant_config.json"),
    ),
    "rw-trtllm-r1": (["deepseek_v3"], _real("trtllm-deepseek-r1-nvfp4/hf_quant_config.json")),
    "rw-qwen3-30b-a3b": (["qwen3_moe"], _real("aic-qwen3-30b-a3b-nvfp4/hf_quant_config.json")),
    "rw-qwen3-32b": (["qwen3"], _real("aic-qwen3-32b-nvfp4/hf_quant_config.json")),
    "rw-ct-int4": (["llama"], _real("ct-example-int4-w4a16/int4_config.json", True)),
    "rw-ct-int8": (["llama"], _real("ct-example-int8-w8a8/int8_config.json", True)),
    "rw-ct-mixed": (
        ["qwen3", "llama"],
        _real("ct-example-mixed-precision-fp8-nvfp4/mixed_precision_config.json", True),
    ),
    "rw-llmc-fakequant": (
        ["llava", "llava_hf", "llama"],
        _real("llmc-example-fakequant-int8/example_quant_config.json", True),
    ),
    "rw-tinyllama-fp8-kv": (
        ["llama"],
        _real("llmc-tinyllama-fp8-kv-legacy-compression-config/fp8-default-kv_config.json"),
    ),
    "rw-deepseek-v4-flash": (
        ["deepseek_v4"],
        _real("aic-deepseek-v4-flash-nvfp4/hf_quant_config.json"),
    ),
    "rw-deepseek-v4-pro": (
        ["deepseek_v4"],
        _real("aic-deepseek-v4-pro-nvfp4/hf_quant_config.json"),
    ),
    "rw-redhat-deepseek-v4": (
        ["deepseek_v4"],
        _real("aic-redhat-deepseek-v4-flash-nvfp4-fp8/config.json"),
    ),
    "rw-glm5": (["glm5"], _real("aic-glm5-nvfp4/hf_quant_config.json")),
    "rw-glm-5.3": (["glm5"], _real("aic-rh-glm-5.3-nvfp4-modelopt-in-config/config.json")),
    "rw-laguna": (["laguna"], _real("aic-poolside-laguna-xs2-fp8/config.json")),
    "rw-tinyllama-fp8-static": (
        ["llama"],
        _real("llmc-tinyllama-fp8-static-legacy-compression-config/fp8-config.json"),
    ),
}
"""Every tests/data/realworld declaration that fits one of the trees (the sparsity-only one
declares no quantization; the native DeepSeek fp8 one is neither family)."""


def documents(decl: dict[str, Any]) -> dict[str, str]:
    """The declaration as the checkpoint ships it: file name -> text (what qarm reads)."""
    if "realworld" in decl:
        path = REALWORLD / decl["realworld"]
        text = path.read_text("utf-8")
        if decl.get("wrap"):
            return {"config.json": json.dumps({"quantization_config": json.loads(text)})}
        name = "hf_quant_config.json" if path.name == "hf_quant_config.json" else "config.json"
        return {name: text}
    return {decl["file"]: json.dumps(decl["document"], sort_keys=True)}


def quant_block(docs: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """(family, the block vLLM's config class is built from)."""
    if "hf_quant_config.json" in docs:
        return "modelopt", json.loads(docs["hf_quant_config.json"])
    data = json.loads(docs["config.json"])
    text_config = data.get("text_config") or {}
    block = (
        data.get("quantization_config")
        or text_config.get("quantization_config")
        or data.get("compression_config")
    )
    assert isinstance(block, dict)
    if str(block.get("quant_method", "")).startswith("modelopt"):
        return "modelopt", block
    return "compressed-tensors", block


def derive(wheel_path: Path) -> dict[str, Any]:
    wheel = _Wheel(wheel_path)
    ns, cites = load_functions(wheel)
    facts = json.loads(FACTS.read_text("utf-8"))
    commit = wheel.commit()
    if not facts["commit"].startswith(commit[:9]) and not commit.startswith(facts["commit"]):
        raise SystemExit(f"layer facts are for {facts['commit']}, the wheel is {commit}")
    trees = build_trees(ns, facts)
    cases = []
    for case_id, (names, decl) in {**SYNTHETIC, **REAL}.items():
        docs = documents(decl)
        family, block = quant_block(docs)
        for tree_name in names:
            tree = trees[tree_name]
            if family == "modelopt":
                answers = modelopt_answers(ns, facts, tree, block)
            else:
                answers = ct_answers(ns, facts, tree, json.loads(json.dumps(block)))
            cases.append(
                {
                    "id": f"{case_id}@{tree_name}",
                    "tree": tree_name,
                    "family": family,
                    "declaration": decl,
                    "answers": answers,
                }
            )
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    return {
        "format": FORMAT,
        "engine": "vllm",
        "release": RELEASE,
        "wheel": wheel_path.name,
        "wheel_sha256": digest,
        "commit": commit,
        "commit_note": "the commit as the wheel's vllm/_version.py records it (abbreviated)",
        "functions": cites,
        "facts": "src/qarm_audit/layers/facts/vllm-0.34.0.json",
        "trees": trees,
        "cases": cases,
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # vLLM's messages print sets ("Mixed quant_algo ... {'FP8', 'NVFP4'}"): one hash seed
        # gives one text
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheel",
        type=Path,
        default=Path("/tmp/rel/vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl"),
    )
    parser.add_argument("--check", action="store_true", help="compare with the committed file")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    text = render(derive(args.wheel))
    if args.check:
        if not args.out.exists() or args.out.read_text("utf-8") != text:
            print(f"{args.out} differs from what vLLM {RELEASE}'s source gives", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date")
        return 0
    args.out.write_text(text, "utf-8")
    n = sum(len(c["answers"]) for c in json.loads(text)["cases"])
    print(f"wrote {args.out}: {len(json.loads(text)['cases'])} cases, {n} layer answers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
