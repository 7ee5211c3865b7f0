"""Derive vLLM's own layer tree per architecture from a released wheel, by reading its source.

Regenerate, once per modelled release (the JSON is committed under
``src/qarm_audit/layers/facts/``, one ``vllm-<release>.json`` each; the profile of a release
names its own with ``layers = "vllm-{release}"``)::

    pip download --no-deps vllm==X -d DIR && python scripts/derive_engine_layers.py DIR/vllm-X-*.whl
    python scripts/derive_engine_layers.py DIR/vllm-X-*.whl --check   # exit 1 and a diff if stale

The wheel (or an unpacked copy of it: a folder holding ``vllm/``) is read with :mod:`ast`
only: vLLM is never imported and none of its code is copied; only facts (names, classes,
line numbers) are written. The release and its commit come from the wheel's
``vllm/_version.py``, which holds only the abbreviated commit (``g4ba787ec9``); pass
``--commit`` with the full 40-hex commit of the release tag to cite it (it must start with the
abbreviation; ``--check`` keeps the full commit already in the committed file).

How it reads the source
    ``vllm/model_executor/models/registry.py``: the ``_VLLM_MODELS`` dict (merged in source
    order, later entries win) maps a config.json ``architectures`` name to (module, class).
    Package entry points that pick an implementation per platform (``if
    current_platform.is_cuda(): from .nvidia.model import ...``) are evaluated for
    ``--platform`` (default ``cuda``). From the model class, ``__init__`` is interpreted
    abstractly: ``super().__init__``, ``self._init_model(...)``, ``self.model_cls``,
    ``make_layers``/lambdas, factories such as ``FusedMoEFactory``, ``if``/``else`` branches
    and conditional expressions are followed across files; every ``torch.nn.Module`` subclass
    built with a ``prefix`` (or ``layer_name``) gets its prefix as a template, with ``*`` for
    any part computed at run time (the layer index). ``init_vllm_registered_model(...,
    architectures=[...])`` is resolved through the registry again.

JSON written (``--out``, default ``src/qarm_audit/layers/facts/vllm-<release>.json``; sorted
keys, indent 2, trailing newline)

``format``
    ``"qarm-engine-layers/2"`` (2: mapper tables as ordered ``[old, new]`` pairs).
``engine``, ``release``, ``platform``
    ``"vllm"``, the wheel's version, the platform the entry points were resolved for.
``commit``
    The full commit given with ``--commit`` (else the abbreviation from ``_version.py``);
    ``commit_short`` is always the abbreviation. Citations are
    ``vllm-project/vllm <path>@<commit>`` with line numbers.
``registry``
    ``{"file", "line"}``: where ``_VLLM_MODELS`` is.
``absent``
    Requested architecture names the release does not register.
``pattern_module``
    ``{"module", "file", "line"}``: the module the quant configs compile ``re:`` targets and
    ignores with (what ``utils/config_utils.py`` binds to ``re``: ``regex`` in 0.30 to 0.33).
``architectures.<name>``: one entry per config.json ``architectures`` name.
    ``registry_entry``: ``[module, class]`` as registered; ``registry_line``.
    ``model_file``, ``model_class``, ``model_line``: the class that is built (after the
    platform entry point). ``cite``: ``vllm-project/vllm <model_file>@<commit>``.
    ``mro``: the class's method resolution order (vLLM classes by name, others dotted).
    ``supports_quant``: the class derives from ``SupportsQuant``; vLLM then *updates* the
    quant config's ``packed_modules_mapping`` with the class's in ``__new__`` (and applies the
    mapper there); otherwise ``configure_quant_config`` *replaces* it with the class's.
    ``packed_modules_mapping``: the class attribute (fused name -> shard names), after
    ``|``/``**`` merges and references to other classes; ``packed_modules_mapping_at``:
    ``{"file", "line"}`` of the assignment that defines it (absent when no class defines it).
    ``packed_when``: entries ``__init__`` adds to ``self.packed_modules_mapping``:
    ``{"fused", "shards", "condition", "file", "line"}`` plus, when the condition tests
    config keys, ``tests`` (``[{"config", "test"}]``) and, when it is exactly one
    ``config.<key> is not None`` test, ``config`` and ``test`` at top level.
    ``mapper``: ``null`` or the class's ``hf_to_vllm_mapper`` (a ``WeightsMapper``):
    ``orig_to_new_prefix``/``_substr``/``_suffix``/``_regex`` (pattern text) are lists of
    ``[old, new]`` pairs in source order (``WeightsMapper`` applies every matching entry of a
    table in turn, in dict order), ``new`` a string or ``null`` (drop the weight);
    ``orig_to_new_stacked`` pairs map to ``[name, shard]``,
    ``orig_to_new_renaming`` lists expressions, ``file``/``line`` where it is assigned;
    ``rename_mapper`` is what ``get_rename_mapper()`` keeps and what the quant config sees
    (``null`` targets and all stacked entries dropped).
    ``load_fused``: layers ``load_weights`` loads from several checkpoint modules, from the
    ``(param_name, shard_name, shard_id)`` literals in the ``load_weights`` of the model class,
    its bases and every class it builds: ``{"fused", "shards", "file", "line"}`` (names as
    written, possibly dotted); also those the packed mapping never names (DeepSeek-V3.2's
    indexer ``wk_weights_proj``).
    ``nested_models``: inner models whose mapper and packed mapping reach the quant config
    again: ``built_by`` ``init_vllm_registered_model`` (runs ``configure_quant_config``)
    or ``constructor`` (a ``SupportsQuant`` class built directly; its ``__new__`` applies
    them), ``path`` (the prefix), ``architectures`` (null when taken from the inner hf
    config at run time: then the inner layers are unknown), ``hf_config`` (expression or
    null), ``condition``, ``model_class``, ``model_file``, ``supports_quant``,
    ``packed_modules_mapping`` (and ``packed_modules_mapping_at`` where a class defines
    it), ``packed_when``, ``mapper``, ``file``, ``line``. Their
    layers are in ``layers``.
    ``quant_packed``: the ``packed_modules_mapping`` the quant config holds while each part of
    the model is built, in build order: first the model class's own (``path`` ``""``), then
    one per nested model that tells the quant config (``path`` its prefix). ``how``:
    ``replaced`` (``configure_quant_config``: a class that is not ``SupportsQuant`` and has
    the attribute, even ``{}``, gives the config its own dict, so the entries its ``__init__``
    adds reach the config by reference), ``updated`` (``SupportsQuant.__new__`` copies a
    non-empty class mapping in before ``__init__``: what ``__init__`` adds never reaches it),
    ``kept`` (neither) or ``unknown`` (the inner model is chosen from the config at run time:
    the mapping before it stands); ``by`` the class, ``rule`` ``{"function", "file", "line"}``
    of the vLLM function that applies it, ``file``/``line`` where the model is built,
    ``packed_modules_mapping`` the entries then held and ``packed_when`` the conditional
    entries (``packed_when``'s format) that reach the config. A layer under a nested
    model's path is decided with its scope (the longest path that holds it), every other
    layer with the model class's; the script refuses a release where a layer of the model
    class that takes a quant config is built after a nested model changed the mapping.
    ``layers.<leaf>``: a list of variants, one per distinct way a layer whose prefix ends in
    ``<leaf>`` is built: ``class`` (a key of ``classes``), ``quant_config`` (``passed``: the
    model's quant config reaches the layer; ``none``: it is built with None, by an explicit
    ``None``, an omitted argument defaulting to None or a class that takes no quant config;
    ``other``: anything else, see ``quant_config_expr``), ``quant_config_expr`` (the argument
    as written, ``(omitted)`` or ``(not a parameter)``), ``condition`` (the enclosing
    ``if``/conditional-expression tests as source text joined with `` and ``; empty when
    unconditional), ``in`` (the class or function whose code builds it), ``file`` and
    ``line`` of the call, ``paths`` (prefix templates as vLLM passes them, ``*`` where
    computed; the prefix a quant config is asked about) and, for a layer built without a
    prefix, ``prefix_passed: false`` and ``attr_paths`` (where the module sits; vLLM then
    asks the quant config about the default prefix, usually ``""``). Modules built
    without a prefix are listed only when their class takes one or looks like it owns
    weights (norm, conv, embedding, linear); decoder layers (``layers.*``) have no leaf.
    A leaf has several variants when vLLM builds it differently under different
    conditions, or in different places (a vision tower and the language model).
``classes_absent``
    Well-known layer classes looked up by dotted name that the release does not define
    (``vllm.model_executor.layers.fused_moe.FusedMoE`` in 0.33.0: MoE weights live in
    ``RoutedExperts``, built by ``FusedMoEFactory`` inside a ``MoERunner``).
``classes.<name>``
    Every class named in ``layers`` and all its vLLM ancestors: ``bases`` (direct bases: vLLM
    classes by key, others dotted), ``mro``, ``file``, ``line``; a class from outside vLLM
    (``torch.nn.Linear``) has ``external: true`` only. A name defined in several files is
    keyed ``Name@module`` after the first.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import difflib
import itertools
import json
import re
import sys
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "qarm-engine-layers/2"
REPO = "vllm-project/vllm"
ROOT = Path(__file__).resolve().parent.parent
FACTS_DIR = ROOT / "src" / "qarm_audit" / "layers" / "facts"
REGISTRY_MODULE = "vllm.model_executor.models.registry"
MODELS_PACKAGE = "vllm.model_executor.models"

DEFAULT_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "MixtralForCausalLM",
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "DeepseekV4ForCausalLM",
    "KimiK2ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "KimiK3ForConditionalGeneration",
    "Glm4MoeForCausalLM",
    "GlmMoeDsaForCausalLM",
    "LagunaForCausalLM",
    "GptOssForCausalLM",
    "LlavaForConditionalGeneration",
    "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
    # Draft models: registered names that SpeculativeConfig writes into the draft config.
    "DeepSeekMTPModel",
    "DeepseekV32MTPModel",
    "DeepSeekV4MTPModel",
    "Glm4MoeMTPModel",
    "Qwen3NextMTP",
    "Qwen3_5MTP",
    "Qwen3_5MoeMTP",
    "KimiK3MTPModel",
)

# Platform predicates of ``current_platform`` for each platform; others stay undecided.
PLATFORMS: dict[str, dict[str, bool | str]] = {
    "cuda": {
        "is_cuda": True,
        "is_cuda_alike": True,
        "is_rocm": False,
        "is_xpu": False,
        "is_cpu": False,
        "is_tpu": False,
        "is_out_of_tree": False,
        "device_type": "cuda",
    },
    "rocm": {
        "is_cuda": False,
        "is_cuda_alike": True,
        "is_rocm": True,
        "is_xpu": False,
        "is_cpu": False,
        "is_tpu": False,
        "is_out_of_tree": False,
        "device_type": "cuda",
    },
}

TORCH_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
# torch layers worth recording when a model builds them directly (never quantized by vLLM).
TORCH_LAYERS = frozenset(
    f"torch.nn.{n}"
    for n in ("Linear", "Conv1d", "Conv2d", "Conv3d", "Embedding", "LayerNorm", "GroupNorm")
)
NAME_PARAMS = ("prefix", "layer_name")
# Layers built without a prefix are kept when their class can own weights.
KEPT_UNNAMED = ("norm", "conv", "embed", "linear")
MAX_DEPTH = 48
MAX_STEPS = 400_000


class DeriveError(Exception):
    pass


# --------------------------------------------------------------------------- source access


class Source:
    """The files of a wheel (zip) or of a folder that holds ``vllm/``."""

    def __init__(self, path: Path) -> None:
        self._zip: zipfile.ZipFile | None = None
        self._dir: Path | None = None
        if path.is_file():
            self._zip = zipfile.ZipFile(path)
            self._names = frozenset(self._zip.namelist())
        elif (path / "vllm").is_dir():
            self._dir = path
        else:
            found = sorted(p.parent for p in path.glob("*/vllm/__init__.py"))
            if not found:
                raise DeriveError(f"{path}: neither a wheel nor a folder holding vllm/")
            self._dir = found[0].parent
        self._cache: dict[str, str | None] = {}

    def read(self, rel: str) -> str | None:
        if rel not in self._cache:
            text: str | None = None
            if self._zip is not None:
                if rel in self._names:
                    text = self._zip.read(rel).decode("utf-8")
            elif self._dir is not None:
                p = self._dir / rel
                if p.is_file():
                    text = p.read_text("utf-8")
            self._cache[rel] = text
        return self._cache[rel]

    def module_file(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if self.read(rel) is not None:
                return rel
        return None


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Ext:
    """Something from outside vLLM, by dotted name."""

    dotted: str


@dataclass(eq=False)
class ClassInfo:
    module: Module
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def qualname(self) -> str:
        return f"{self.module.name}.{self.node.name}"


@dataclass(eq=False)
class FuncInfo:
    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: ClassInfo | None = None
    closure: Env | None = None

    @property
    def qualname(self) -> str:
        owner = f"{self.owner.name}." if self.owner else ""
        return f"{owner}{self.node.name}"


@dataclass(frozen=True)
class ModRef:
    dotted: str


@dataclass(frozen=True)
class S:
    """A string; for prefixes a template with ``*`` for run-time parts."""

    t: str


@dataclass(frozen=True)
class Const:
    v: Any


@dataclass(frozen=True)
class QC:
    """The model's quant config (``vllm_config.quant_config``)."""


@dataclass(frozen=True)
class NoneV:
    pass


@dataclass(frozen=True)
class Unk:
    text: str


@dataclass(eq=False)
class ListV:
    items: list[Any]


@dataclass(eq=False)
class DictV:
    items: dict[str, Any]


@dataclass(eq=False)
class MapperV:
    fields: dict[str, Any]


@dataclass(eq=False)
class Packed:
    """``*args`` / ``**kwargs`` as received, so that forwarding them keeps the values."""

    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Regex:
    pattern: str


@dataclass(eq=False)
class Lam:
    node: ast.Lambda
    module: Module
    env: Env
    obj: Obj | None = None
    """The ``self`` of the frame the lambda was written in (a closure over it)."""
    owner: ClassInfo | None = None


@dataclass(eq=False)
class Bound:
    func: FuncInfo
    obj: Obj


@dataclass(eq=False)
class Obj:
    cls: ClassInfo
    prefix: S | None
    module_path: str = ""
    attrs: dict[str, list[Alt]] = field(default_factory=dict)
    attr_src: dict[str, ast.expr] = field(default_factory=dict)
    record: Record | None = None


@dataclass(eq=False)
class ExtObj:
    record: Record | None


Alt = tuple[tuple[str, ...], Any]
Args = list[tuple[list[Alt], ast.expr]]
Kwargs = dict[str, tuple[list[Alt], ast.expr]]


def one(v: Any) -> list[Alt]:
    return [((), v)]


@dataclass
class Record:
    path: str
    cls_key: str
    quant: str
    quant_expr: str
    conds: tuple[str, ...]
    where: str
    file: str
    line: int
    prefix_passed: bool
    nameable: bool = True
    attr_path: str | None = None


# --------------------------------------------------------------------------- modules


class Module:
    def __init__(self, world: World, name: str, rel: str, text: str) -> None:
        self.world, self.name, self.rel, self.text = world, name, rel, text
        self.tree = ast.parse(text, filename=rel)
        # ast counts lines at \n, \r\n and \r only (str.splitlines also splits at \f, ...)
        self.lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text)
        self.is_package = rel.endswith("__init__.py")
        self.symbols: dict[str, ast.AST | tuple[str, str, str | None]] = {}
        self._collect(self.tree.body)

    def _collect(self, body: Sequence[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                self.symbols[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        self.symbols[target.id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                if isinstance(stmt.target, ast.Name):
                    self.symbols[stmt.target.id] = stmt.value
            elif isinstance(stmt, ast.ImportFrom):
                base = self._absolute(stmt.module, stmt.level)
                for alias in stmt.names:
                    if alias.name != "*":
                        self.symbols[alias.asname or alias.name] = ("from", base, alias.name)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        self.symbols[alias.asname] = ("import", alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        self.symbols[top] = ("import", top, None)
            elif isinstance(stmt, ast.If):
                decided = self.world.decide(stmt.test, self)
                if decided is True:
                    self._collect(stmt.body)
                elif decided is False:
                    self._collect(stmt.orelse)
                else:  # undecided: both, the ``if`` branch winning
                    self._collect(stmt.orelse)
                    self._collect(stmt.body)
            elif isinstance(stmt, ast.Try):
                self._collect(stmt.body)

    def _absolute(self, module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        parts = self.name.split(".")
        if not self.is_package:
            parts = parts[:-1]
        if level > 1:
            parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, module] if module else parts)

    def segment(self, node: ast.AST) -> str:
        """The node's source text, whitespace collapsed (stable across Python versions)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if start is None or end is None:
            return ast.unparse(node)
        lines = [line.encode("utf-8") for line in self.lines[start - 1 : end]]
        lines[-1] = lines[-1][: node.end_col_offset]  # type: ignore[attr-defined]
        lines[0] = lines[0][node.col_offset :]  # type: ignore[attr-defined]
        return " ".join(b"".join(lines).decode("utf-8").split())


# --------------------------------------------------------------------------- the world


class World:
    def __init__(self, source: Source, platform: str) -> None:
        self.source = source
        self.platform = PLATFORMS[platform]
        self.modules: dict[str, Module | None] = {}
        self.classes: dict[int, ClassInfo] = {}
        self.mros: dict[int, list[ClassInfo | Ext]] = {}
        self.class_keys: dict[int, str] = {}
        self.key_owner: dict[str, ClassInfo] = {}

    # ---- modules and names

    def module(self, dotted: str) -> Module | None:
        if dotted not in self.modules:
            self.modules[dotted] = None
            rel = self.source.module_file(dotted) if dotted.startswith("vllm") else None
            if rel is not None:
                text = self.source.read(rel)
                assert text is not None
                self.modules[dotted] = Module(self, dotted, rel, text)
        return self.modules[dotted]

    def class_info(self, module: Module, node: ast.ClassDef) -> ClassInfo:
        key = id(node)
        if key not in self.classes:
            self.classes[key] = ClassInfo(module, node)
        return self.classes[key]

    def resolve(self, module: Module, name: str, depth: int = 0) -> Any:
        """A module-level name: ClassInfo, FuncInfo, ModRef, Ext, or ("value", module, expr)."""
        if depth > 30:
            return Ext(f"{module.name}.{name}")
        sym = module.symbols.get(name)
        if sym is None:
            if module.is_package and self.module(f"{module.name}.{name}") is not None:
                return ModRef(f"{module.name}.{name}")
            return Ext(name) if hasattr(builtins, name) else Ext(f"{module.name}.{name}")
        if isinstance(sym, ast.ClassDef):
            return self.class_info(module, sym)
        if isinstance(sym, ast.FunctionDef | ast.AsyncFunctionDef):
            return FuncInfo(module, sym)
        if isinstance(sym, tuple):
            kind, base, attr = sym
            if kind == "import":
                return ModRef(base) if self.module(base) is not None else Ext(base)
            assert attr is not None
            sub = f"{base}.{attr}"
            if self.module(sub) is not None:
                return ModRef(sub)
            target = self.module(base)
            if target is None:
                return Ext(sub)
            return self.resolve(target, attr, depth + 1)
        return ("value", module, sym)

    def attr_of(self, base: Any, attr: str) -> Any:
        if isinstance(base, ModRef):
            target = self.module(base.dotted)
            if target is None:
                return Ext(f"{base.dotted}.{attr}")
            return self.resolve(target, attr)
        if isinstance(base, Ext):
            return Ext(f"{base.dotted}.{attr}")
        return None

    def decide(self, test: ast.expr, module: Module) -> bool | None:
        """Platform and TYPE_CHECKING tests; None when undecided."""
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.decide(test.operand, module)
            return None if inner is None else not inner
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Attribute)
            and isinstance(test.func.value, ast.Name)
            and test.func.value.id == "current_platform"
            and not test.args
        ):
            value = self.platform.get(test.func.attr)
            return value if isinstance(value, bool) else None
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq)
            and isinstance(test.left, ast.Attribute)
            and isinstance(test.left.value, ast.Name)
            and test.left.value.id == "current_platform"
            and test.left.attr == "device_type"
            and isinstance(test.comparators[0], ast.Constant)
        ):
            same = self.platform["device_type"] == test.comparators[0].value
            return same if isinstance(test.ops[0], ast.Eq) else not same
        if isinstance(test, ast.BoolOp):
            values = [self.decide(v, module) for v in test.values]
            if isinstance(test.op, ast.And):
                if False in values:
                    return False
                return True if all(v is True for v in values) else None
            if True in values:
                return True
            return False if all(v is False for v in values) else None
        return None

    # ---- classes

    def bases(self, info: ClassInfo) -> list[ClassInfo | Ext]:
        out: list[ClassInfo | Ext] = []
        for base in info.node.bases:
            node = base.value if isinstance(base, ast.Subscript) else base
            ref = self.ref_of(info.module, node)
            if isinstance(ref, ClassInfo | Ext):
                out.append(ref)
        return out

    def ref_of(self, module: Module, node: ast.expr) -> Any:
        if isinstance(node, ast.Name):
            return self.resolve(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self.ref_of(module, node.value)
            if isinstance(base, ClassInfo):
                return None
            return self.attr_of(base, node.attr)
        return None

    def mro(self, info: ClassInfo) -> list[ClassInfo | Ext]:
        key = id(info.node)
        if key in self.mros:
            return self.mros[key]
        self.mros[key] = [info]  # cycle guard

        def lin(b: ClassInfo | Ext) -> list[ClassInfo | Ext]:
            return self.mro(b) if isinstance(b, ClassInfo) else [b]

        bases = self.bases(info)
        seqs = [list(lin(b)) for b in bases] + [list(bases)]
        result: list[ClassInfo | Ext] = [info]
        while True:
            seqs = [s for s in seqs if s]
            if not seqs:
                break
            for seq in seqs:
                head = seq[0]
                if not any(head in s[1:] for s in seqs):
                    break
            else:  # inconsistent hierarchy: fall back to depth-first order
                rest: list[ClassInfo | Ext] = []
                for s in seqs:
                    rest.extend(x for x in s if x not in rest and x not in result)
                result.extend(rest)
                break
            result.append(head)
            for s in seqs:
                if s and s[0] == head:
                    del s[0]
        self.mros[key] = result
        return result

    def is_module(self, info: ClassInfo) -> bool:
        return any(isinstance(c, Ext) and c.dotted in TORCH_MODULE for c in self.mro(info))

    def class_key(self, info: ClassInfo) -> str:
        key = id(info.node)
        if key not in self.class_keys:
            name = info.name
            owner = self.key_owner.get(name)
            if owner is not None and owner.node is not info.node:
                name = f"{info.name}@{info.module.name}"
            self.key_owner.setdefault(name, info)
            self.class_keys[key] = name
        return self.class_keys[key]

    @staticmethod
    def class_attr_node(info: ClassInfo, name: str) -> ast.AST | None:
        for stmt in info.node.body:
            if isinstance(stmt, ast.Assign):
                if any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    return stmt
            elif (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == name
                and stmt.value is not None
            ) or (isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name):
                return stmt
        return None

    def lookup(self, mro: Iterable[ClassInfo | Ext], name: str) -> tuple[ClassInfo, ast.AST] | None:
        for c in mro:
            if isinstance(c, Ext):
                continue
            node = self.class_attr_node(c, name)
            if node is not None:
                return c, node
        return None


# --------------------------------------------------------------------------- interpreter


class Env:
    def __init__(self, parent: Env | None = None) -> None:
        self.vars: dict[str, list[Alt]] = {}
        self.parent = parent

    def get(self, name: str) -> list[Alt] | None:
        env: Env | None = self
        while env is not None:
            if name in env.vars:
                return env.vars[name]
            env = env.parent
        return None


@dataclass
class Frame:
    module: Module
    env: Env
    obj: Obj | None
    owner: ClassInfo | None
    conds: tuple[str, ...]
    where: str
    depth: int
    returns: list[Alt] = field(default_factory=list)
    inline_all: bool = False
    pending_attr: str | None = None


def set_alt(
    table: dict[str, list[Alt]], name: str, conds: tuple[str, ...], alts: list[Alt]
) -> None:
    new = [(conds + c, v) for c, v in alts]
    if not conds:
        table[name] = new
    else:
        kept = [(c, v) for c, v in table.get(name, []) if c[: len(conds)] != conds]
        table[name] = kept + new


class Interpreter:
    def __init__(self, world: World) -> None:
        self.world = world
        self.records: list[Record] = []
        self.nested: list[dict[str, Any]] = []
        self.packed_when: list[dict[str, Any]] = []
        self.steps = 0
        self.stack: list[int] = []
        self.in_nested_call = False

    # ---- entry

    def build(self, info: ClassInfo) -> None:
        frame = Frame(info.module, Env(), None, None, (), "", 0)
        kwargs = {
            "prefix": (one(S("")), ast.Constant("")),
            "vllm_config": (one(Unk("vllm_config")), ast.Name("vllm_config")),
        }
        self.instantiate(info, [], kwargs, frame, None)

    # ---- statements

    def exec_block(self, body: Sequence[ast.stmt], frame: Frame) -> None:
        for stmt in body:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise DeriveError("interpretation budget exhausted")
            self.exec_stmt(stmt, frame)

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> None:
        if isinstance(stmt, ast.Assign):
            target0 = stmt.targets[0]
            if isinstance(target0, ast.Attribute) and self.is_self(target0.value, frame):
                frame.pending_attr = target0.attr
            try:
                value = self.eval(stmt.value, frame)
            finally:
                frame.pending_attr = None
            for target in stmt.targets:
                self.assign(target, value, stmt.value, frame)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, frame), stmt.value, frame)
        elif isinstance(stmt, ast.AugAssign | ast.Expr):
            self.eval(stmt.value, frame)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                for c, v in self.eval(stmt.value, frame):
                    frame.returns.append((frame.conds + c, v))
        elif isinstance(stmt, ast.If):
            decided = self.world.decide(stmt.test, frame.module)
            if decided is None:
                decided = self.truth(stmt.test, frame)
            self.eval(stmt.test, frame)
            text = frame.module.segment(stmt.test)
            if decided is not False:
                self.branch(stmt.body, frame, () if decided else (text,))
            if decided is not True:
                self.branch(stmt.orelse, frame, () if decided is False else (f"not ({text})",))
        elif isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            if isinstance(stmt, ast.For | ast.AsyncFor):
                self.eval(stmt.iter, frame)
                self.assign(stmt.target, one(Unk("*")), None, frame)
            self.exec_block(stmt.body, frame)
            self.exec_block(stmt.orelse, frame)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            self.exec_block(stmt.body, frame)
        elif isinstance(stmt, ast.Try):
            self.exec_block(stmt.body, frame)
            for handler in stmt.handlers:
                self.exec_block(handler.body, frame)
            self.exec_block(stmt.orelse, frame)
            self.exec_block(stmt.finalbody, frame)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            func = FuncInfo(frame.module, stmt, None, frame.env)
            set_alt(frame.env.vars, stmt.name, frame.conds, one(func))

    def branch(self, body: Sequence[ast.stmt], frame: Frame, cond: tuple[str, ...]) -> None:
        saved = frame.conds
        frame.conds = saved + cond
        try:
            self.exec_block(body, frame)
        finally:
            frame.conds = saved

    def assign(
        self, target: ast.expr, value: list[Alt], src: ast.expr | None, frame: Frame
    ) -> None:
        if isinstance(target, ast.Name):
            set_alt(frame.env.vars, target.id, frame.conds, value)
        elif isinstance(target, ast.Attribute) and self.is_self(target.value, frame):
            assert frame.obj is not None
            set_alt(frame.obj.attrs, target.attr, frame.conds, value)
            if src is not None and not frame.conds:
                frame.obj.attr_src[target.attr] = src
        elif isinstance(target, ast.Subscript):
            self.eval(target.value, frame)
            if (
                isinstance(target.value, ast.Attribute)
                and target.value.attr == "packed_modules_mapping"
                and self.is_self(target.value.value, frame)
            ):
                self.note_packing(target, value, frame)
        elif isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self.assign(elt, one(Unk("*")), None, frame)

    def is_self(self, node: ast.expr, frame: Frame) -> bool:
        return isinstance(node, ast.Name) and node.id == "self" and frame.obj is not None

    def note_packing(self, target: ast.Subscript, value: list[Alt], frame: Frame) -> None:
        key = self.eval(target.slice, frame)
        fused = key[0][1].t if key and isinstance(key[0][1], S) else None
        shards = [
            [s.t for s in v.items if isinstance(s, S)] for _, v in value if isinstance(v, ListV)
        ]
        if fused is None or not shards:
            return
        self.packed_when.append(
            {
                "fused": fused,
                "shards": shards[0],
                "conds": frame.conds,
                "frame": frame,
                "file": frame.module.rel,
                "line": target.lineno,
            }
        )

    def truth(self, test: ast.expr, frame: Frame) -> bool | None:
        """Decide ``if prefix`` / ``if not prefix`` on known strings."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.truth(test.operand, frame)
            return None if inner is None else not inner
        if isinstance(test, ast.Name):
            alts = frame.env.get(test.id)
            if alts and all(isinstance(v, S) for _, v in alts):
                truths = {bool(v.t.replace("*", "")) or (None if v.t else False) for _, v in alts}
                if len(truths) == 1:
                    return truths.pop()
            return None
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq)
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.left, ast.Name)
        ):
            known = self.known_str(test.left, frame)
            if known is None:
                return None
            same = known == test.comparators[0].value
            return same if isinstance(test.ops[0], ast.Eq) else not same
        return None

    @staticmethod
    def known_str(node: ast.Name, frame: Frame) -> str | None:
        alts = frame.env.get(node.id)
        if alts and len(alts) == 1 and isinstance(alts[0][1], S) and "*" not in alts[0][1].t:
            return alts[0][1].t
        return None

    # ---- expressions

    def eval(self, node: ast.expr, frame: Frame) -> list[Alt]:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return one(NoneV())
            if isinstance(node.value, str):
                return one(S(node.value))
            return one(Const(node.value))
        if isinstance(node, ast.JoinedStr):
            return self.eval_fstring(node, frame)
        if isinstance(node, ast.Name):
            return self.eval_name(node, frame)
        if isinstance(node, ast.Attribute):
            return self.eval_attribute(node, frame)
        if isinstance(node, ast.Call):
            return self.eval_call(node, frame)
        if isinstance(node, ast.IfExp):
            decided = self.world.decide(node.test, frame.module)
            if decided is None:
                decided = self.truth(node.test, frame)
            self.eval(node.test, frame)
            text = frame.module.segment(node.test)
            out: list[Alt] = []
            if decided is not False:
                out += [
                    ((() if decided else (text,)) + c, v) for c, v in self.eval(node.body, frame)
                ]
            if decided is not True:
                neg = () if decided is False else (f"not ({text})",)
                out += [(neg + c, v) for c, v in self.eval(node.orelse, frame)]
            return out
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left, frame), self.eval(node.right, frame)
            return self.binop(node, left, right, frame)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return one(ListV([self.first(self.eval(e, frame)) for e in node.elts]))
        if isinstance(node, ast.Dict):
            items: dict[str, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                value = self.first(self.eval(v, frame))
                if k is None:
                    if isinstance(value, DictV):
                        items.update(value.items)
                    continue
                key = self.first(self.eval(k, frame))
                if isinstance(key, S):
                    items[key.t] = value
                elif isinstance(key, Regex):
                    items["re:" + key.pattern] = value
                else:
                    items[frame.module.segment(k)] = value
            return one(DictV(items))
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp):
            inner = Frame(
                frame.module,
                Env(frame.env),
                frame.obj,
                frame.owner,
                frame.conds,
                frame.where,
                frame.depth,
            )
            for gen in node.generators:
                self.eval(gen.iter, inner)
                self.assign(gen.target, one(Unk("*")), None, inner)
            if isinstance(node, ast.DictComp):
                self.eval(node.key, inner)
                return one(ListV([self.first(self.eval(node.value, inner))]))
            return one(ListV([self.first(self.eval(node.elt, inner))]))
        if isinstance(node, ast.Lambda):
            return one(Lam(node, frame.module, frame.env, frame.obj, frame.owner))
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                self.eval(v, frame)
            return one(Unk(frame.module.segment(node)))
        if isinstance(node, ast.Subscript):
            self.eval(node.value, frame)
            return one(Unk(frame.module.segment(node)))
        if isinstance(node, ast.Starred):
            self.eval(node.value, frame)
            return one(Unk(frame.module.segment(node)))
        if isinstance(node, ast.Compare | ast.UnaryOp):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child, frame)
            return one(Unk(frame.module.segment(node)))
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, frame)
            self.assign(node.target, value, node.value, frame)
            return value
        return one(Unk(frame.module.segment(node)))

    @staticmethod
    def first(alts: list[Alt]) -> Any:
        return alts[0][1] if alts else Unk("?")

    def eval_fstring(self, node: ast.JoinedStr, frame: Frame) -> list[Alt]:
        parts: list[list[Alt]] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(one(S(str(value.value))))
            elif isinstance(value, ast.FormattedValue):
                alts = self.eval(value.value, frame)
                parts.append(
                    [(c, v if isinstance(v, S) else S("*")) for c, v in alts] or one(S("*"))
                )
            else:
                parts.append(one(S("*")))
        out: list[Alt] = []
        for combo in itertools.islice(itertools.product(*parts), 16):
            conds = tuple(itertools.chain.from_iterable(c for c, _ in combo))
            out.append((conds, S("".join(v.t for _, v in combo))))
        return out

    def eval_name(self, node: ast.Name, frame: Frame) -> list[Alt]:
        alts = frame.env.get(node.id)
        if alts is not None:
            return alts
        if node.id == "self" and frame.obj is not None:
            return one(frame.obj)
        return one(self.module_value(frame.module, node.id))

    def module_value(self, module: Module, name: str) -> Any:
        ref = self.world.resolve(module, name)
        if isinstance(ref, tuple):
            _, mod, expr = ref
            frame = Frame(mod, Env(), None, None, (), f"{mod.name}", MAX_DEPTH - 2)
            return self.first(self.eval(expr, frame))
        return ref

    def eval_attribute(self, node: ast.Attribute, frame: Frame) -> list[Alt]:
        if (
            isinstance(node.value, ast.Name)
            and node.value.id == "vllm_config"
            and node.attr == "quant_config"
            and all(isinstance(v, Unk) for _, v in frame.env.get("vllm_config") or [])
        ):
            return one(QC())
        base_alts = self.eval(node.value, frame)
        out: list[Alt] = []
        for c, base in base_alts:
            for c2, v in self.attr_value(base, node.attr, node, frame):
                out.append((c + c2, v))
        return out

    def attr_value(self, base: Any, attr: str, node: ast.expr, frame: Frame) -> list[Alt]:
        if isinstance(base, Obj):
            if attr in base.attrs:
                return base.attrs[attr]
            found = self.world.lookup(self.world.mro(base.cls), attr)
            if found is not None:
                owner, stmt = found
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    if any(
                        isinstance(d, ast.Name) and d.id == "property" for d in stmt.decorator_list
                    ):
                        return one(Unk(frame.module.segment(node)))
                    return one(Bound(FuncInfo(owner.module, stmt, owner), base))
                return one(self.class_attr(owner, stmt))
            return one(Unk(frame.module.segment(node)))
        if isinstance(base, ClassInfo):
            found = self.world.lookup(self.world.mro(base), attr)
            if found is not None:
                owner, stmt = found
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    return one(FuncInfo(owner.module, stmt, owner))
                return one(self.class_attr(owner, stmt))
            return one(Unk(frame.module.segment(node)))
        if isinstance(base, ModRef | Ext):
            ref = self.world.attr_of(base, attr)
            if isinstance(ref, tuple):
                _, mod, expr = ref
                sub = Frame(mod, Env(), None, None, (), mod.name, MAX_DEPTH - 2)
                return one(self.first(self.eval(expr, sub)))
            return one(ref)
        return one(Unk(frame.module.segment(node)))

    def class_attr(self, owner: ClassInfo, stmt: ast.AST) -> Any:
        assert isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None
        frame = Frame(owner.module, Env(), None, None, (), owner.name, MAX_DEPTH - 4)
        frame.inline_all = True
        return self.first(self.eval(stmt.value, frame))

    def binop(self, node: ast.BinOp, left: list[Alt], right: list[Alt], frame: Frame) -> list[Alt]:
        lv, rv = self.first(left), self.first(right)
        if isinstance(node.op, ast.Add) and isinstance(lv, S) and isinstance(rv, S):
            return [
                (cl + cr, S(a.t + b.t))
                for cl, a in left
                for cr, b in right
                if isinstance(a, S) and isinstance(b, S)
            ]
        if isinstance(node.op, ast.Add) and (isinstance(lv, S) or isinstance(rv, S)):
            ls = lv.t if isinstance(lv, S) else "*"
            rs = rv.t if isinstance(rv, S) else "*"
            return one(S(ls + rs))
        if isinstance(node.op, ast.BitOr):
            if isinstance(lv, DictV) and isinstance(rv, DictV):
                return one(DictV({**lv.items, **rv.items}))
            if isinstance(lv, MapperV) and isinstance(rv, MapperV):
                return one(merge_mappers(lv, rv))
        return one(Unk(frame.module.segment(node)))

    # ---- calls

    def eval_call(self, node: ast.Call, frame: Frame) -> list[Alt]:
        func = node.func
        # super().__init__(...) / super(X, self).__init__(...)
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
        ):
            args, kwargs = self.eval_args(node, frame)
            after = frame.owner
            if func.value.args:  # super(Cls, self): the search starts after Cls
                first = self.first(self.eval(func.value.args[0], frame))
                after = first if isinstance(first, ClassInfo) else None
            if frame.obj is not None and after is not None:
                return self.call_super(func.attr, args, kwargs, frame, after)
            return one(Unk(frame.module.segment(node)))
        if isinstance(func, ast.Call):  # ``pick_cls(cfg)(...)``: the factory must be followed
            saved_inline, frame.inline_all = frame.inline_all, True
            try:
                callee = self.eval(func, frame)
            finally:
                frame.inline_all = saved_inline
        else:
            callee = self.eval(func, frame)
        args, kwargs = self.eval_args(node, frame)
        out: list[Alt] = []
        for c, target in callee:
            saved = frame.conds
            frame.conds = saved + c
            try:
                for c2, v in self.call(target, args, kwargs, node, frame):
                    out.append((c + c2, v))
            finally:
                frame.conds = saved
        return out or one(Unk(frame.module.segment(node)))

    def eval_args(
        self, node: ast.Call, frame: Frame
    ) -> tuple[list[tuple[list[Alt], ast.expr]], dict[str, tuple[list[Alt], ast.expr]]]:
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                packed = self.first(self.eval(a.value, frame))
                if isinstance(packed, Packed):
                    args.extend(packed.args)
                continue
            args.append((self.eval(a, frame), a))
        kwargs = {}
        for kw in node.keywords:
            value = self.eval(kw.value, frame)
            if kw.arg is not None:
                kwargs[kw.arg] = (value, kw.value)
            elif isinstance(self.first(value), Packed):
                kwargs.update(self.first(value).kwargs)
        return args, kwargs

    def call_super(
        self, name: str, args: Args, kwargs: Kwargs, frame: Frame, after: ClassInfo
    ) -> list[Alt]:
        assert frame.obj is not None
        mro = self.world.mro(frame.obj.cls)
        try:
            start = mro.index(after) + 1
        except ValueError:
            return one(Unk("super()"))
        for c in mro[start:]:
            if isinstance(c, Ext):
                return one(Unk("super()"))
            stmt = self.world.class_attr_node(c, name)
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                return self.run_function(
                    FuncInfo(c.module, stmt, c), frame.obj, args, kwargs, frame
                )
        return one(Unk("super()"))

    def call(
        self, target: Any, args: Args, kwargs: Kwargs, node: ast.Call, frame: Frame
    ) -> list[Alt]:
        world = self.world
        if isinstance(target, ClassInfo):
            if target.name == "WeightsMapper":
                return one(make_mapper(kwargs))
            if world.is_module(target):
                return self.instantiate(target, args, kwargs, frame, node)
            return one(Unk(frame.module.segment(node)))
        if isinstance(target, Ext):
            if target.dotted == "type" and len(args) == 1:
                obj = self.first(args[0][0])
                if isinstance(obj, Obj):
                    return one(obj.cls)
            if (
                target.dotted in ("re.compile", "regex.compile")
                and args
                and isinstance(self.first(args[0][0]), S)
            ):
                return one(Regex(self.first(args[0][0]).t))
            if target.dotted in TORCH_LAYERS:
                return one(ExtObj(self.record_external(target, kwargs, node, frame)))
            return one(Unk(frame.module.segment(node)))
        if isinstance(target, Bound):
            return self.run_function(target.func, target.obj, args, kwargs, frame, node)
        if isinstance(target, FuncInfo):
            fname = target.node.name
            if fname == "init_vllm_registered_model" and target.module.name.startswith(
                MODELS_PACKAGE
            ):
                return self.nested_model(kwargs, node, frame)
            if target.owner is not None and fname == "__init__" and args:
                # ``Base.__init__(self, ...)``
                first = self.first(args[0][0])
                if isinstance(first, Obj):
                    return self.run_function(target, first, args[1:], kwargs, frame, node)
                return one(Unk(frame.module.segment(node)))
            if frame.inline_all or self.worth_inlining(target, args, kwargs):
                return self.run_function(target, None, args, kwargs, frame, node)
            return one(Unk(frame.module.segment(node)))
        if isinstance(target, Lam):
            return self.run_lambda(target, args, kwargs, frame)
        if isinstance(target, ExtObj | Obj):
            return one(Unk(frame.module.segment(node)))
        return one(Unk(frame.module.segment(node)))

    def worth_inlining(self, func: FuncInfo, args: Args, kwargs: Kwargs) -> bool:
        params = {a.arg for a in func.node.args.args + func.node.args.kwonlyargs}
        if params & {"prefix", "layer_name", "quant_config", "layer_fn"}:
            return True
        values = [self.first(v) for v, _ in args] + [self.first(v) for v, _ in kwargs.values()]
        return any(isinstance(v, Lam | ClassInfo) for v in values)

    def bind(
        self, func: FuncInfo, args: Args, kwargs: Kwargs, skip_self: bool
    ) -> tuple[dict[str, list[Alt]], dict[str, str]]:
        spec = func.node.args
        positional = [a.arg for a in spec.posonlyargs + spec.args]
        if skip_self and positional:
            positional = positional[1:]
        defaults: dict[str, ast.expr] = {}
        pos_defaults = spec.defaults
        all_pos = spec.posonlyargs + spec.args
        for a, d in zip(all_pos[len(all_pos) - len(pos_defaults) :], pos_defaults, strict=True):
            defaults[a.arg] = d
        for a, kd in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if kd is not None:
                defaults[a.arg] = kd
        bound: dict[str, list[Alt]] = {}
        exprs: dict[str, str] = {}
        for name, (value, expr) in zip(positional, args, strict=False):
            bound[name] = value
            exprs[name] = ast.unparse(expr)
        names = positional + [a.arg for a in spec.kwonlyargs]
        extra_kwargs: dict[str, Any] = {}
        for name, (value, expr) in kwargs.items():
            if name in names:
                bound[name] = value
                exprs[name] = ast.unparse(expr)
            else:
                extra_kwargs[name] = (value, expr)
        dframe = Frame(func.module, Env(), None, None, (), func.qualname, MAX_DEPTH - 2)
        for name in names:
            if name not in bound and name in defaults:
                bound[name] = self.eval(defaults[name], dframe)
                exprs[name] = "(omitted)"
        if spec.vararg is not None:
            bound[spec.vararg.arg] = one(Packed(list(args[len(positional) :]), {}))
        if spec.kwarg is not None:
            bound[spec.kwarg.arg] = one(Packed([], extra_kwargs))
            for name, (_, expr) in extra_kwargs.items():
                exprs.setdefault(name, ast.unparse(expr))
        return bound, exprs

    def run_function(
        self,
        func: FuncInfo,
        obj: Obj | None,
        args: Args,
        kwargs: Kwargs,
        frame: Frame,
        node: ast.Call | None = None,
    ) -> list[Alt]:
        if frame.depth >= MAX_DEPTH or self.stack.count(id(func.node)) >= 2:
            return one(Unk(func.qualname))
        is_method = func.owner is not None or obj is not None
        bound, _ = self.bind(func, args, kwargs, skip_self=is_method)
        env = Env(func.closure)
        env.vars.update(bound)
        inner = Frame(
            func.module, env, obj, func.owner, frame.conds, func.qualname, frame.depth + 1
        )
        self.stack.append(id(func.node))
        try:
            self.exec_block(func.node.body, inner)
        finally:
            self.stack.pop()
        return [(c[len(frame.conds) :], v) for c, v in inner.returns] or one(NoneV())

    def run_lambda(self, lam: Lam, args: Args, kwargs: Kwargs, frame: Frame) -> list[Alt]:
        env = Env(lam.env)
        params = [a.arg for a in lam.node.args.args]
        for name, (value, _) in zip(params, args, strict=False):
            env.vars[name] = value
        for name, (value, _) in kwargs.items():
            env.vars[name] = value
        obj, owner = (lam.obj, lam.owner) if lam.obj is not None else (frame.obj, frame.owner)
        inner = Frame(lam.module, env, obj, owner, frame.conds, frame.where, frame.depth + 1)
        return self.eval(lam.node.body, inner)

    # ---- building modules

    def instantiate(
        self, info: ClassInfo, args: Args, kwargs: Kwargs, frame: Frame, node: ast.Call | None
    ) -> list[Alt]:
        world = self.world
        mro = world.mro(info)
        init: FuncInfo | None = None
        for c in mro:
            if isinstance(c, Ext):
                break
            stmt = world.class_attr_node(c, "__init__")
            if isinstance(stmt, ast.FunctionDef):
                init = FuncInfo(c.module, stmt, c)
                break
        bound, exprs = self.bind(init, args, kwargs, skip_self=True) if init else ({}, {})
        # ``def __init__(self, *args, **kwargs): super().__init__(*args, **kwargs)``: read the
        # prefix and quant config off the first ``__init__`` up the MRO that names them.
        sig, sig_bound, sig_exprs = init, bound, exprs
        while (
            sig is not None
            and (sig.node.args.vararg is not None or sig.node.args.kwarg is not None)
            and not {a.arg for a in sig.node.args.args + sig.node.args.kwonlyargs}
            & {*NAME_PARAMS, "quant_config"}
        ):
            sig = self.next_init(info, sig.owner)
            if sig is not None:
                sig_bound, sig_exprs = self.bind(sig, args, kwargs, skip_self=True)
        name_param = next((p for p in NAME_PARAMS if p in sig_bound), None)
        prefixes = sig_bound.get(name_param, []) if name_param else []
        passed = (
            name_param is not None
            and name_param in sig_exprs
            and sig_exprs[name_param] != "(omitted)"
        )
        s_prefixes: list[tuple[tuple[str, ...], S | None]] = [
            (c, v) for c, v in prefixes if isinstance(v, S)
        ] or [((), None)]
        if node is not None and supports_quant(world, info) and not self.in_nested_call:
            self.nested.append(
                {
                    "path": self.first(prefixes).t if isinstance(self.first(prefixes), S) else "*",
                    "architectures": None,
                    "built_by": "constructor",
                    "hf_config": None,
                    "file": frame.module.rel,
                    "line": node.lineno,
                    "condition": frame.conds,
                    "info": info,
                    "at": len(self.records),
                }
            )
        self.in_nested_call = False
        out: list[Alt] = []
        for pc, prefix in s_prefixes:
            module_path = prefix.t if passed and prefix is not None else self.attr_path_here(frame)
            for qc, qv, qexpr in self.quant_of(sig, sig_bound, sig_exprs):
                record = None
                if node is not None:
                    record = Record(
                        path=prefix.t if prefix is not None else "",
                        cls_key=world.class_key(info),
                        quant=qv,
                        quant_expr=qexpr,
                        conds=frame.conds + pc + qc,
                        where=frame.where,
                        file=frame.module.rel,
                        line=node.lineno,
                        prefix_passed=passed,
                        nameable=name_param is not None,
                        attr_path=None if passed else module_path,
                    )
                    self.records.append(record)
                obj = Obj(info, prefix, module_path, record=record)
                if supports_quant(world, info):
                    # SupportsQuant.__new__ stores the quant config found in the arguments
                    obj.attrs["quant_config"] = one(QC())
                if init is not None and id(init.node) not in self.stack[-6:]:
                    call_bound = dict(bound)
                    if name_param and name_param in bound:
                        call_bound[name_param] = one(prefix) if prefix is not None else prefixes
                    self.run_init(init, obj, call_bound, frame, pc + qc)
                out.append((pc + qc, obj))
        return out

    @staticmethod
    def attr_path_here(frame: Frame) -> str:
        """Where a module built without a prefix sits: its parent's path and attribute."""
        parent = frame.obj.module_path if frame.obj is not None else ""
        attr = frame.pending_attr or "?"
        return f"{parent}.{attr}" if parent else attr

    def next_init(self, info: ClassInfo, after: ClassInfo | None) -> FuncInfo | None:
        mro = self.world.mro(info)
        if after not in mro:
            return None
        for c in mro[mro.index(after) + 1 :]:
            if isinstance(c, Ext):
                return None
            stmt = self.world.class_attr_node(c, "__init__")
            if isinstance(stmt, ast.FunctionDef):
                return FuncInfo(c.module, stmt, c)
        return None

    def quant_of(
        self, init: FuncInfo | None, bound: dict[str, list[Alt]], exprs: dict[str, str]
    ) -> list[tuple[tuple[str, ...], str, str]]:
        if init is None or "quant_config" not in bound:
            return [((), "none", "(not a parameter)")]
        expr = exprs.get("quant_config", "(omitted)")
        out = []
        for c, v in bound["quant_config"]:
            kind = "passed" if isinstance(v, QC) else "none" if isinstance(v, NoneV) else "other"
            out.append((c, kind, expr))
        return out or [((), "other", expr)]

    def run_init(
        self,
        init: FuncInfo,
        obj: Obj,
        bound: dict[str, list[Alt]],
        frame: Frame,
        conds: tuple[str, ...],
    ) -> None:
        if frame.depth >= MAX_DEPTH:
            return
        env = Env(None)
        env.vars.update(bound)
        inner = Frame(
            init.module,
            env,
            obj,
            init.owner,
            frame.conds + conds,
            f"{obj.cls.name}.__init__" if init.owner is obj.cls else init.qualname,
            frame.depth + 1,
        )
        self.stack.append(id(init.node))
        try:
            self.exec_block(init.node.body, inner)
        finally:
            self.stack.pop()

    def record_external(self, target: Ext, kwargs: Kwargs, node: ast.Call, frame: Frame) -> Record:
        prefix = kwargs.get("prefix")
        path = ""
        if prefix is not None and isinstance(self.first(prefix[0]), S):
            path = self.first(prefix[0]).t
        record = Record(
            path=path,
            cls_key=target.dotted,
            quant="none",
            quant_expr="(not a parameter)",
            conds=frame.conds,
            where=frame.where,
            file=frame.module.rel,
            line=node.lineno,
            prefix_passed=prefix is not None,
            attr_path=None if prefix is not None else self.attr_path_here(frame),
        )
        self.records.append(record)
        return record

    def nested_model(self, kwargs: Kwargs, node: ast.Call, frame: Frame) -> list[Alt]:
        prefix = self.first(kwargs["prefix"][0]) if "prefix" in kwargs else S("")
        archs_v = self.first(kwargs["architectures"][0]) if "architectures" in kwargs else None
        archs = (
            [s.t for s in archs_v.items if isinstance(s, S)] if isinstance(archs_v, ListV) else None
        )
        entry: dict[str, Any] = {
            "path": prefix.t if isinstance(prefix, S) else "*",
            "built_by": "init_vllm_registered_model",
            "architectures": archs,
            "hf_config": ast.unparse(kwargs["hf_config"][1]) if "hf_config" in kwargs else None,
            "file": frame.module.rel,
            "line": node.lineno,
            "condition": frame.conds,
            "at": len(self.records),
        }
        self.nested.append(entry)
        if not archs:
            return one(Unk("init_vllm_registered_model"))
        resolved = resolve_architecture(self.world, archs[0])
        if resolved is None:
            return one(Unk("init_vllm_registered_model"))
        info = resolved["info"]
        entry["info"] = info
        inner_kwargs: Kwargs = {
            "prefix": (one(prefix), kwargs["prefix"][1] if "prefix" in kwargs else node),
            "vllm_config": (one(Unk("vllm_config")), node),
        }
        self.in_nested_call = True
        return self.instantiate(info, [], inner_kwargs, frame, node)


def make_mapper(kwargs: Kwargs) -> MapperV:
    fields: dict[str, Any] = {}
    for name, (value, _) in kwargs.items():
        fields[name] = Interpreter.first(value)
    return MapperV(fields)


def merge_mappers(a: MapperV, b: MapperV) -> MapperV:
    fields: dict[str, Any] = {}
    for name in sorted(set(a.fields) | set(b.fields)):
        x, y = a.fields.get(name), b.fields.get(name)
        if isinstance(x, DictV) and isinstance(y, DictV):
            fields[name] = DictV({**x.items, **y.items})
        elif isinstance(x, ListV) and isinstance(y, ListV):
            fields[name] = ListV(x.items + y.items)
        else:
            fields[name] = y if y is not None else x
    return MapperV(fields)


# --------------------------------------------------------------------------- registry


def registry(world: World) -> tuple[dict[str, tuple[str, str, int]], int]:
    module = world.module(REGISTRY_MODULE)
    if module is None:
        raise DeriveError(f"{REGISTRY_MODULE} not in the wheel")
    tables: dict[str, dict[str, tuple[str, str, int]]] = {}
    merged_line = 0
    merged: dict[str, tuple[str, str, int]] = {}
    for stmt in module.tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if not isinstance(target, ast.Name) or not isinstance(stmt.value, ast.Dict):
            continue
        table = registry_dict(stmt.value, tables)
        tables[target.id] = table
        if target.id == "_VLLM_MODELS":
            merged, merged_line = table, stmt.lineno
    if not merged:
        raise DeriveError("registry: no _VLLM_MODELS")
    return merged, merged_line


def registry_dict(
    node: ast.Dict, tables: dict[str, dict[str, tuple[str, str, int]]]
) -> dict[str, tuple[str, str, int]]:
    out: dict[str, tuple[str, str, int]] = {}
    for k, v in zip(node.keys, node.values, strict=True):
        if k is None:
            if isinstance(v, ast.Name) and v.id in tables:
                out.update(tables[v.id])
            elif isinstance(v, ast.DictComp):
                out.update(registry_comprehension(v, tables))
            continue
        if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) == 2:
            mod, cls = v.elts
            if isinstance(mod, ast.Constant) and isinstance(cls, ast.Constant):
                out[str(k.value)] = (str(mod.value), str(cls.value), k.lineno)
    return out


def registry_comprehension(
    node: ast.DictComp, tables: dict[str, dict[str, tuple[str, str, int]]]
) -> dict[str, tuple[str, str, int]]:
    """``{k: (mod, arch) for k, (mod, arch) in _TABLE.items() if arch == "X"}``."""
    gen = node.generators[0]
    if not (
        isinstance(gen.iter, ast.Call)
        and isinstance(gen.iter.func, ast.Attribute)
        and isinstance(gen.iter.func.value, ast.Name)
        and gen.iter.func.value.id in tables
    ):
        return {}
    table = tables[gen.iter.func.value.id]
    wanted: str | None = None
    for cond in gen.ifs:
        if (
            isinstance(cond, ast.Compare)
            and len(cond.comparators) == 1
            and isinstance(cond.comparators[0], ast.Constant)
            and isinstance(cond.ops[0], ast.Eq)
        ):
            wanted = str(cond.comparators[0].value)
    return {k: v for k, v in table.items() if wanted is None or v[1] == wanted}


_REGISTRY_CACHE: dict[int, dict[str, tuple[str, str, int]]] = {}


def resolve_architecture(world: World, arch: str) -> dict[str, Any] | None:
    table = _REGISTRY_CACHE.get(id(world))
    if table is None:
        table = _REGISTRY_CACHE[id(world)] = registry(world)[0]
    if arch not in table:
        return None
    mod_rel, cls_name, line = table[arch]
    dotted = mod_rel if mod_rel.startswith("vllm.") else f"{MODELS_PACKAGE}.{mod_rel}"
    module = world.module(dotted)
    if module is None:
        return {"entry": (mod_rel, cls_name), "line": line, "info": None}
    ref = world.resolve(module, cls_name)
    info = ref if isinstance(ref, ClassInfo) else None
    return {"entry": (mod_rel, cls_name), "line": line, "info": info}


# --------------------------------------------------------------------------- output


def jsonable(v: Any) -> Any:
    if isinstance(v, S):
        return v.t
    if isinstance(v, Const):
        return v.v
    if isinstance(v, NoneV):
        return None
    if isinstance(v, Regex):
        return v.pattern
    if isinstance(v, ListV):
        return [jsonable(x) for x in v.items]
    if isinstance(v, DictV):
        return {k: jsonable(x) for k, x in v.items.items()}
    if isinstance(v, ClassInfo):
        return v.name
    if isinstance(v, Unk):
        return {"expr": v.text}
    return {"expr": type(v).__name__}


def mapper_json(world: World, info: ClassInfo) -> dict[str, Any] | None:
    found = world.lookup(world.mro(info), "hf_to_vllm_mapper")
    if found is None:
        return None
    owner, stmt = found
    interp = Interpreter(world)
    value = interp.class_attr(owner, stmt)
    if isinstance(value, NoneV):
        return None
    out: dict[str, Any] = {"file": owner.module.rel, "line": getattr(stmt, "lineno", 0)}
    if not isinstance(value, MapperV):
        out["expr"] = jsonable(value)
        return out
    rename: dict[str, Any] = {}
    for name, field_value in sorted(value.fields.items()):
        if name == "orig_to_new_renaming" and isinstance(field_value, ListV):
            out[name] = [jsonable(x) for x in field_value.items]
            rename[name] = out[name]
            continue
        table = jsonable(field_value)
        if not isinstance(table, dict):
            out[name] = table
            continue
        # [old, new] pairs in source order: WeightsMapper applies every entry of a table that
        # matches, one after the other in dict order, so the order is part of the fact
        out[name] = [[k, v] for k, v in table.items()]
        kept = [[k, v] for k, v in table.items() if v is not None]
        if name != "orig_to_new_stacked" and kept:
            rename[name] = kept
    out["rename_mapper"] = rename
    return out


def packed_json(world: World, info: ClassInfo) -> tuple[dict[str, Any], dict[str, Any] | None]:
    found = world.lookup(world.mro(info), "packed_modules_mapping")
    if found is None:
        return {}, None
    owner, stmt = found
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        return {}, {"file": owner.module.rel, "line": stmt.lineno, "expr": "(method)"}
    value = Interpreter(world).class_attr(owner, stmt)
    at: dict[str, Any] = {"file": owner.module.rel, "line": getattr(stmt, "lineno", 0)}
    data = jsonable(value)
    if not isinstance(data, dict):
        at["expr"] = data
        return {}, at
    return data, at


def config_tests(node: ast.expr) -> list[dict[str, str]]:
    tests: list[dict[str, str]] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Compare) and len(sub.ops) == 1:
            key = config_key(sub.left)
            if key is not None:
                op = {
                    ast.Is: "is",
                    ast.IsNot: "is not",
                    ast.Eq: "==",
                    ast.NotEq: "!=",
                    ast.Gt: ">",
                    ast.GtE: ">=",
                    ast.Lt: "<",
                    ast.LtE: "<=",
                    ast.In: "in",
                    ast.NotIn: "not in",
                }.get(type(sub.ops[0]), "?")
                tests.append({"config": key, "test": f"{op} {ast.unparse(sub.comparators[0])}"})
    if not tests:
        key = config_key(node)
        if key is not None:
            tests.append({"config": key, "test": "truthy"})
    return tests


def config_key(node: ast.expr) -> str | None:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and "config" in node.value.id
    ):
        return node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
    ):
        return str(node.args[1].value)
    return None


def packed_when_json(interp: Interpreter, top: Obj | None) -> list[dict[str, Any]]:
    out = []
    for item in interp.packed_when:
        frame: Frame = item["frame"]
        if top is not None and frame.obj is not top:
            continue
        texts: list[str] = list(item["conds"])
        nodes: list[ast.expr] = []
        # expand ``self.X`` conditions to the expression assigned to X
        obj = frame.obj
        expanded = []
        for cond in texts:
            m = re.fullmatch(r"self\.(\w+)", cond)
            if m and obj is not None and m.group(1) in obj.attr_src:
                src = obj.attr_src[m.group(1)]
                expanded.append(frame.module.segment(src))
                nodes.append(src)
            else:
                expanded.append(cond)
                with contextlib.suppress(SyntaxError):
                    nodes.append(ast.parse(cond, mode="eval").body)
        entry: dict[str, Any] = {
            "fused": item["fused"],
            "shards": item["shards"],
            "condition": " and ".join(expanded),
            "file": item["file"],
            "line": item["line"],
        }
        tests = [t for n in nodes for t in config_tests(n)]
        if tests:
            entry["tests"] = tests
            real = [t for t in tests if not t["test"].startswith("truthy") or len(tests) == 1]
            if len(real) == 1 and real[0]["test"] == "is not None":
                entry["config"], entry["test"] = real[0]["config"], real[0]["test"]
        out.append(entry)
    return sorted(out, key=lambda e: (e["fused"], e["line"]))


def layers_json(records: list[Record]) -> dict[str, list[dict[str, Any]]]:
    variants: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        low = r.cls_key.lower()
        if not (r.prefix_passed or r.nameable or any(k in low for k in KEPT_UNNAMED)):
            continue  # helpers such as SiluAndMul or LogitsProcessor: no name, no weights
        path = r.path if r.prefix_passed or not r.attr_path else r.attr_path
        leaf = path.rsplit(".", 1)[-1] if path else ""
        if not leaf or leaf == "*":
            continue
        condition = " and ".join(dict.fromkeys(r.conds))
        key = (
            leaf,
            r.cls_key,
            r.quant,
            r.quant_expr,
            condition,
            r.where,
            r.file,
            r.line,
            r.prefix_passed,
        )
        v = variants.get(key)
        if v is None:
            v = variants[key] = {
                "class": r.cls_key,
                "quant_config": r.quant,
                "quant_config_expr": r.quant_expr,
                "condition": condition,
                "in": r.where,
                "file": r.file,
                "line": r.line,
                "paths": set(),
            }
            if not r.prefix_passed:
                v["prefix_passed"] = False
                v["attr_paths"] = set()
        v["paths"].add(r.path)
        if not r.prefix_passed and r.attr_path:
            v["attr_paths"].add(r.attr_path)
    out: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(variants, key=lambda k: tuple(str(x) for x in k)):
        v = variants[key]
        v["paths"] = sorted(v["paths"])
        if "attr_paths" in v:
            v["attr_paths"] = sorted(v["attr_paths"])
        out.setdefault(key[0], []).append(v)
    return out


def class_json(world: World, keys: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    todo = list(keys)
    while todo:
        key = todo.pop()
        if key in out:
            continue
        info = world.key_owner.get(key)
        if info is None:
            out[key] = {"external": True}
            continue
        bases = []
        for b in world.bases(info):
            if isinstance(b, ClassInfo):
                bkey = world.class_key(b)
                bases.append(bkey)
                todo.append(bkey)
            else:
                bases.append(b.dotted)
        out[key] = {
            "bases": bases,
            "mro": [
                world.class_key(c) if isinstance(c, ClassInfo) else c.dotted
                for c in world.mro(info)
            ],
            "file": info.module.rel,
            "line": info.node.lineno,
        }
    return out


WELL_KNOWN_CLASSES = {
    "vllm.model_executor.layers.linear": (
        "LinearBase",
        "ReplicatedLinear",
        "ColumnParallelLinear",
        "MergedColumnParallelLinear",
        "QKVParallelLinear",
        "RowParallelLinear",
    ),
    "vllm.model_executor.layers.vocab_parallel_embedding": (
        "VocabParallelEmbedding",
        "ParallelLMHead",
    ),
    "vllm.model_executor.layers.layernorm": ("RMSNorm", "LayerNorm"),
    "vllm.model_executor.layers.fused_moe": (
        "FusedMoE",
        "SharedFusedMoE",
        "RoutedExperts",
        "MoERunner",
    ),
    "vllm.model_executor.layers.fused_moe.router.gate_linear": ("GateLinear",),
    "vllm.model_executor.layers.conv": ("Conv2dLayer", "Conv3dLayer"),
}


def derive(
    source: Source, platform: str, archs: Sequence[str], commit: str | None
) -> dict[str, Any]:
    world = World(source, platform)
    version_mod = world.module("vllm._version")
    if version_mod is None:
        raise DeriveError("vllm/_version.py not in the wheel")
    release = literal(version_mod, "__version__")
    short = str(literal(version_mod, "__commit_id__") or "")
    short = short[1:] if short.startswith("g") else short
    if commit is not None and (
        not re.fullmatch(r"[0-9a-f]{40}", commit) or not commit.startswith(short)
    ):
        raise DeriveError(f"--commit {commit} is not a 40-hex commit starting with {short}")
    cite_commit = commit or short
    table, registry_line = registry(world)
    _REGISTRY_CACHE[id(world)] = table
    out_archs: dict[str, Any] = {}
    absent: list[str] = []
    for arch in archs:
        resolved = resolve_architecture(world, arch)
        if resolved is None or resolved["info"] is None:
            absent.append(arch)
            continue
        out_archs[arch] = arch_json(world, arch, resolved, cite_commit)
    used: set[str] = set()
    for item in out_archs.values():
        for variants in item["layers"].values():
            used.update(v["class"] for v in variants)
    missing: list[str] = []
    for dotted, names in WELL_KNOWN_CLASSES.items():
        module = world.module(dotted)
        for name in names:
            ref = world.resolve(module, name) if module is not None else None
            if isinstance(ref, ClassInfo):
                used.add(world.class_key(ref))
            else:
                missing.append(f"{dotted}.{name}")
    return {
        "format": FORMAT,
        "engine": "vllm",
        "release": release,
        "platform": platform,
        "commit": cite_commit,
        "commit_short": short,
        "registry": {"file": world.module(REGISTRY_MODULE).rel, "line": registry_line},  # type: ignore[union-attr]
        "absent": sorted(absent),
        "architectures": out_archs,
        "pattern_module": pattern_module_json(world),
        "classes": class_json(world, used),
        "classes_absent": sorted(missing),
    }


PATTERN_MODULE = "vllm.model_executor.layers.quantization.utils.config_utils"
"""Where the quant configs' ``re:`` matching (``is_equal_or_regex_match``) lives."""


def pattern_module_json(world: World) -> dict[str, Any]:
    """The module the quant configs compile ``re:`` targets with: what the file binds to
    ``re`` (``import regex as re``)."""
    module = world.module(PATTERN_MODULE)
    if module is None:
        raise DeriveError(f"{PATTERN_MODULE} not in the wheel")
    for stmt in module.tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if (alias.asname or alias.name) == "re":
                    return {"module": alias.name, "file": module.rel, "line": stmt.lineno}
    raise DeriveError(f"{PATTERN_MODULE} binds no name re: review how it matches re: targets")


def arch_json(world: World, arch: str, resolved: dict[str, Any], commit: str) -> dict[str, Any]:
    info: ClassInfo = resolved["info"]
    interp = Interpreter(world)
    interp.build(info)
    top_frame_obj = None
    for item in interp.packed_when:
        if item["frame"].obj is not None and item["frame"].obj.cls is info:
            top_frame_obj = item["frame"].obj
            break
    packed, packed_at = packed_json(world, info)
    entry: dict[str, Any] = {
        "registry_entry": list(resolved["entry"]),
        "registry_line": resolved["line"],
        "model_file": info.module.rel,
        "model_class": info.name,
        "model_line": info.node.lineno,
        "cite": f"{REPO} {info.module.rel}@{commit}",
        "mro": [
            world.class_key(c) if isinstance(c, ClassInfo) else c.dotted for c in world.mro(info)
        ],
        "supports_quant": supports_quant(world, info),
        "packed_modules_mapping": packed,
        "packed_when": packed_when_json(interp, top_frame_obj) if top_frame_obj else [],
        "mapper": mapper_json(world, info),
        "layers": layers_json(interp.records),
        "load_fused": load_fused_json(world, info, interp.records),
        "nested_models": nested_json(world, interp),
        "quant_packed": quant_packed_json(world, info, interp),
    }
    if packed_at is not None:
        entry["packed_modules_mapping_at"] = packed_at
    return entry


def load_fused_json(world: World, info: ClassInfo, records: list[Record]) -> list[dict[str, Any]]:
    """Layers ``load_weights`` loads from several checkpoint modules: the ``(param_name,
    shard_name, shard_id)`` literals of its stacked-parameter lists, in the ``load_weights`` of
    the model class, its bases and every class the model builds. Also those the
    ``packed_modules_mapping`` never names (DeepSeek-V3.2's indexer ``wk_weights_proj`` =
    ``wk`` + ``weights_proj``)."""
    classes: list[ClassInfo] = [c for c in world.mro(info) if isinstance(c, ClassInfo)]
    for r in records:
        owner = world.key_owner.get(r.cls_key)
        if owner is not None:
            classes += [c for c in world.mro(owner) if isinstance(c, ClassInfo)]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    seen: set[int] = set()
    for cls in classes:
        if id(cls.node) in seen:
            continue
        seen.add(id(cls.node))
        for stmt in cls.node.body:
            if not (isinstance(stmt, ast.FunctionDef) and stmt.name == "load_weights"):
                continue
            for node in ast.walk(stmt):
                if not (isinstance(node, ast.Tuple) and len(node.elts) == 3):
                    continue
                fused, shard = node.elts[0], node.elts[1]
                if not (
                    isinstance(fused, ast.Constant)
                    and isinstance(fused.value, str)
                    and isinstance(shard, ast.Constant)
                    and isinstance(shard.value, str)
                    and fused.value != shard.value
                ):
                    continue
                key = (cls.module.rel, fused.value)
                entry = found.setdefault(
                    key,
                    {
                        "fused": fused.value,
                        "shards": [],
                        "file": cls.module.rel,
                        "line": node.lineno,
                    },
                )
                if shard.value not in entry["shards"]:
                    entry["shards"].append(shard.value)
    return sorted(found.values(), key=lambda e: (e["fused"], e["file"], e["line"]))


def nested_json(world: World, interp: Interpreter) -> list[dict[str, Any]]:
    out = []
    for item in interp.nested:
        entry = {k: v for k, v in item.items() if k not in ("info", "condition", "at")}
        entry["condition"] = " and ".join(item["condition"])
        info = item.get("info")
        if info is not None:
            packed, packed_at = packed_json(world, info)
            entry["model_class"] = info.name
            entry["model_file"] = info.module.rel
            entry["supports_quant"] = supports_quant(world, info)
            entry["packed_modules_mapping"] = packed
            if packed_at is not None:
                entry["packed_modules_mapping_at"] = packed_at
            entry["mapper"] = mapper_json(world, info)
            entry["packed_when"] = class_packed_when(interp, info)
        out.append(entry)
    return sorted(out, key=lambda e: (e["path"], e["line"]))


def class_packed_when(interp: Interpreter, info: ClassInfo) -> list[dict[str, Any]]:
    """The entries ``__init__`` of ``info`` adds to ``self.packed_modules_mapping``."""
    objs = {
        id(p["frame"].obj): p["frame"].obj
        for p in interp.packed_when
        if p["frame"].obj is not None and p["frame"].obj.cls is info
    }
    return [w for o in objs.values() for w in packed_when_json(interp, o)]


LOADER_MODULE = "vllm.model_executor.model_loader.utils"
INTERFACES_MODULE = "vllm.model_executor.models.interfaces"


def rule_at(world: World, dotted: str, qualname: str) -> dict[str, Any]:
    """Where a function of the release is (``SupportsQuant._maybe_apply_model_mapping``)."""
    module = world.module(dotted)
    body: Sequence[ast.stmt] = module.tree.body if module is not None else []
    node: ast.stmt | None = None
    for part in qualname.split("."):
        node = next(
            (n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == part),
            None,
        )
        if node is None:
            raise DeriveError(f"{qualname} not in {dotted}: review how the quant config is told")
        body = node.body if isinstance(node, ast.ClassDef) else []
    assert module is not None and node is not None
    return {"function": qualname, "file": module.rel, "line": node.lineno}


def quant_packed_json(world: World, info: ClassInfo, interp: Interpreter) -> list[dict[str, Any]]:
    """The ``packed_modules_mapping`` the quant config holds while each part of the model is
    built, in build order: the model class, then every nested model. A quant config starts
    with an empty mapping (``QuantizationConfig.__init__``); ``configure_quant_config``
    (``initialize_model``, for the model class and every ``init_vllm_registered_model``)
    *replaces* it with a class's own dict when the class is not ``SupportsQuant`` and has the
    attribute at all (even ``{}``: Qwen2-VL's, from ``SupportsLoRA``), so that the entries the
    class's ``__init__`` then adds reach the config by reference (DeepSeek's
    ``fused_qkv_a_proj``); ``SupportsQuant.__new__`` *updates* it with a copy of a non-empty
    class mapping before ``__init__`` runs, so the entries ``__init__`` adds never reach it.
    An inner model chosen from the config at run time (Llava's ``text_config``) leaves the
    mapping ``unknown``: the one before it stands."""
    replace = rule_at(world, LOADER_MODULE, "configure_quant_config")
    update = rule_at(world, INTERFACES_MODULE, "SupportsQuant._maybe_apply_model_mapping")
    state: dict[str, list[str]] = {}
    when: list[dict[str, Any]] = []

    def tell(cls: ClassInfo) -> tuple[str, dict[str, Any] | None]:
        nonlocal state, when
        packed, at = packed_json(world, cls)
        if supports_quant(world, cls):
            if not packed:
                return "kept", update
            state = {**state, **packed}
            when = [w for w in when if w["fused"] not in packed]
            return "updated", update
        if at is None:
            return "kept", replace
        state, when = dict(packed), class_packed_when(interp, cls)
        return "replaced", replace

    def scope(
        path: str, how: str, by: str, rule: dict[str, Any] | None, at: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "path": path,
            "how": how,
            "by": by,
            "rule": rule,
            **at,
            "packed_modules_mapping": dict(sorted(state.items())),
            "packed_when": sorted(when, key=lambda e: (e["fused"], e["line"])),
        }

    how, rule = tell(info)
    out = [scope("", how, info.name, rule, {"file": info.module.rel, "line": info.node.lineno})]
    changed_at = len(interp.records)
    for item in interp.nested:
        inner = item.get("info")
        at = {"file": item["file"], "line": item["line"]}
        before = (dict(state), list(when))
        if inner is None:
            how, rule, by = "unknown", None, ""
        elif item["built_by"] == "constructor" and not supports_quant(world, inner):
            continue
        else:
            how, rule = tell(inner)
            by = inner.name
        if (state, when) != before:
            changed_at = min(changed_at, item["at"])
        out.append(scope(item["path"], how, by, rule, at))
    # the model class's own layers are read with its scope: none may be built after a nested
    # model has changed the mapping (the modelled releases build their towers first)
    paths = [item["path"] for item in interp.nested]
    for record in interp.records[changed_at:]:
        path = record.path if record.prefix_passed else record.attr_path or ""
        if (
            record.quant != "none"
            and path
            and not path.startswith("?")
            and not any(path == p or path.startswith(p + ".") for p in paths)
        ):
            raise DeriveError(
                f"{info.name}: {path} is built after a nested model changed the packed "
                "mapping: review which mapping the quant config holds for it"
            )
    return out


def supports_quant(world: World, info: ClassInfo) -> bool:
    return any(isinstance(c, ClassInfo) and c.name == "SupportsQuant" for c in world.mro(info))


def literal(module: Module, name: str) -> Any:
    """A module-level constant, also from a chained ``a = b = "x"``."""
    for stmt in module.tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
        ):
            return stmt.value.value
    return None


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("wheel", type=Path, help="a vllm wheel or a folder holding vllm/")
    parser.add_argument(
        "--out", type=Path, help="JSON to write (default: facts/vllm-<release>.json)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff if --out is stale")
    parser.add_argument("--commit", help="the release's full 40-hex commit (cited)")
    parser.add_argument("--platform", default="cuda", choices=sorted(PLATFORMS))
    parser.add_argument("--arch", action="append", help="architecture names (default: the list)")
    args = parser.parse_args(argv)
    try:
        source = Source(args.wheel)
        release_mod = World(source, args.platform).module("vllm._version")
        release = literal(release_mod, "__version__") if release_mod else None
        out = args.out or FACTS_DIR / f"vllm-{release}.json"
        commit = args.commit
        if commit is None and out.is_file():
            old = json.loads(out.read_text("utf-8")).get("commit", "")
            if re.fullmatch(r"[0-9a-f]{40}", old or ""):
                commit = old
        data = derive(source, args.platform, args.arch or DEFAULT_ARCHITECTURES, commit)
    except DeriveError as exc:
        print(f"derive_engine_layers: {exc}", file=sys.stderr)
        return 2
    text = render(data)
    if args.check:
        old_text = out.read_text("utf-8") if out.is_file() else ""
        if old_text == text:
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                old_text.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{out} (committed)",
                tofile=f"{out} (derived)",
            )
        )
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, "utf-8")
    print(f"wrote {out}: {len(data['architectures'])} architectures, absent {data['absent']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
