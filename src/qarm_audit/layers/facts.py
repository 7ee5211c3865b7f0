"""Per-architecture facts of one engine release, read from ``facts/<engine>-<release>.json``.

The files are written by ``scripts/derive_engine_layers.py`` from the release's own source
(read with ``ast``, never imported) and cite ``owner/repo path@commit`` for every fact; a new
release is a regenerate-and-review step. Only facts live here, no engine code.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

FACTS_FORMAT = "qarm-engine-layers/2"


@dataclass(frozen=True)
class LayerFact:
    """How the architecture builds a layer whose prefix ends in a given leaf."""

    cls: str
    quant_config: str
    """``passed`` (built with the model's quant config), ``none`` (built without: never
    quantized) or ``other``."""
    line: int = 0
    condition: str = ""
    paths: tuple[str, ...] = ()
    """The engine's names for such layers (``model.layers.*.mlp.gate``; ``*`` any part)."""


@dataclass(frozen=True)
class Packing:
    fused: str
    shards: tuple[str, ...]
    config: str = ""
    """A config key that must be set (not None) for the packing to exist (``q_lora_rank``)."""


@dataclass(frozen=True)
class PackedScope:
    """The packed mapping the quant config holds while the layers under ``path`` are built:
    a nested model tells the config its own (Qwen2-VL's language model fuses q/k/v although
    the model class's mapping is empty)."""

    path: str
    packings: tuple[Packing, ...]

    def holds(self, engine_path: str) -> bool:
        return engine_path.startswith(self.path + ".") or engine_path == self.path


@dataclass(frozen=True)
class Rename:
    """The model's ``hf_to_vllm_mapper`` as its quant config and layer names see it
    (``get_rename_mapper()``: renames only), applied as vLLM's ``WeightsMapper`` applies it:
    regexes, then substrings, then prefixes, then suffixes, each table in its own order and
    every entry that applies (``vllm/model_executor/models/utils.py``)."""

    regex: tuple[tuple[re.Pattern[str], str], ...] = ()
    substr: tuple[tuple[str, str], ...] = ()
    prefix: tuple[tuple[str, str], ...] = ()
    suffix: tuple[tuple[str, str], ...] = ()
    _seen: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """Names already renamed (every expert of a MoE layer asks for its layer's name)."""

    def __bool__(self) -> bool:
        return bool(self.regex or self.substr or self.prefix or self.suffix)

    def weight(self, key: str) -> str:
        """A tensor name as vLLM renames it."""
        for pattern, new in self.regex:
            if pattern.search(key):
                key = pattern.sub(new, key)
        for old, new in self.substr:
            if old in key:
                key = key.replace(old, new, 1)
        for old, new in self.prefix:
            if key.startswith(old):
                key = key.replace(old, new, 1)
        for old, new in self.suffix:
            if key.endswith(old):
                key = new.join(key.rsplit(old, 1))
        return key

    def module(self, name: str) -> str:
        """The engine's name for a checkpoint module: its ``.weight`` renamed, less the
        ``.weight`` (DeepSeek-V4's ``head`` is ``lm_head``, by the suffix ``head.weight``)."""
        seen = self._seen.get(name)
        if seen is not None:
            return seen
        mapped = self.weight(name + ".weight")
        out = mapped[: -len(".weight")] if mapped.endswith(".weight") else self.weight(name)
        if len(self._seen) >= 1 << 16:
            self._seen.clear()  # the facts live for the process: keep the memo bounded
        self._seen[name] = out
        return out


@dataclass(frozen=True)
class ArchitectureFacts:
    name: str
    model_file: str
    cite: str
    packings: tuple[Packing, ...]
    has_mapper: bool
    rename: Rename = Rename()
    layers: dict[str, tuple[LayerFact, ...]] = field(default_factory=dict)
    load_fused: tuple[Packing, ...] = ()
    """Layers ``load_weights`` loads from several checkpoint modules that the packed mapping
    does not name (DeepSeek-V3.2's ``wk_weights_proj``): the quant config never sees the
    shards."""
    nested: tuple[PackedScope, ...] = ()
    """The mapping under each nested model's path (the engine's name), longest path first;
    ``packings`` holds for every other layer."""


@dataclass(frozen=True)
class EngineFacts:
    engine: str
    release: str
    commit: str
    architectures: dict[str, ArchitectureFacts]
    classes: dict[str, tuple[str, ...]]
    """Layer class -> its base classes, as far as the facts know them."""
    pattern_module: str = "re"
    """The module the engine compiles ``re:`` targets with (``regex`` for vLLM)."""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.release}"

    def is_linear(self, cls: str) -> bool:
        """A ``LinearBase`` subclass (what a quant config's linear method applies to)."""
        return self.is_subclass(cls, "LinearBase")

    def is_subclass(self, cls: str, base: str) -> bool:
        """``cls`` is ``base`` or derives from it, as far as the facts know its bases."""
        seen: set[str] = set()
        todo = [cls]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name == base:
                return True
            todo.extend(self.classes.get(name, ()))
        return False


def _table(mapper: dict[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    """One table's ``[old, new]`` pairs, in the model's own order."""
    pairs = mapper.get(key) or []
    return tuple(
        (k, v)
        for k, v in (tuple(pair) for pair in pairs)
        if isinstance(k, str) and isinstance(v, str)
    )


def _rename(mapper: dict[str, Any] | None) -> Rename:
    """The renames the quant config sees (a dropped name, mapped to null, is left as it is)."""
    if not mapper:
        return Rename()
    seen = mapper.get("rename_mapper") or mapper
    return Rename(
        regex=tuple(
            (re.compile(k.removeprefix("re:")), v) for k, v in _table(seen, "orig_to_new_regex")
        ),
        substr=_table(seen, "orig_to_new_substr"),
        prefix=_table(seen, "orig_to_new_prefix"),
        suffix=_table(seen, "orig_to_new_suffix"),
    )


def available() -> list[str]:
    root = resources.files(__package__).joinpath("facts")
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


@cache
def load_facts(name: str) -> EngineFacts:
    """``name`` is ``<engine>-<release>`` (``vllm-0.33.0``)."""
    text = resources.files(__package__).joinpath("facts", f"{name}.json").read_text("utf-8")
    return _parse(json.loads(text))


def _packings(item: dict[str, Any]) -> tuple[Packing, ...]:
    """A mapping's entries, and those added under a condition qarm can evaluate: an entry
    whose condition is more than one "config.<key> is not None" test is left out
    (DeepSeek's qkv_proj for model_type "deepseek" only)."""
    packings = [
        Packing(fused, tuple(shards)) for fused, shards in item["packed_modules_mapping"].items()
    ]
    packings += [
        Packing(p["fused"], tuple(p["shards"]), p["config"])
        for p in item.get("packed_when", [])
        if p.get("config") and p.get("test", "is not None") == "is not None"
    ]
    return tuple(packings)


def _parse(data: dict[str, Any]) -> EngineFacts:
    if data.get("format") != FACTS_FORMAT:
        raise ValueError(f"layer facts format {data.get('format')!r}, expected {FACTS_FORMAT}")
    commit = data["commit"]
    archs: dict[str, ArchitectureFacts] = {}
    for arch, item in data["architectures"].items():
        # the mapping the quant config holds, per part of the model, where the facts say
        scopes = item.get("quant_packed") or [{"path": "", **item}]
        own = next((s for s in scopes if not s["path"]), {"path": "", **item})
        nested = sorted(
            (
                PackedScope(s["path"], _packings(s))
                for s in scopes
                if s["path"] and s.get("how") != "unknown"
            ),
            key=lambda scope: -len(scope.path),
        )
        mapper = item.get("mapper") or None
        layers = {
            leaf: tuple(
                LayerFact(
                    v["class"],
                    v["quant_config"],
                    v.get("line", 0),
                    v.get("condition", ""),
                    tuple(p for p in (*v.get("paths", ()), *v.get("attr_paths", ())) if p),
                )
                for v in (variants if isinstance(variants, list) else [variants])
            )
            for leaf, variants in item.get("layers", {}).items()
        }
        archs[arch] = ArchitectureFacts(
            name=arch,
            model_file=item["model_file"],
            cite=item.get("cite") or f"vllm-project/vllm {item['model_file']}@{commit}",
            packings=_packings(own),
            has_mapper=mapper is not None,
            rename=_rename(mapper),
            layers=layers,
            load_fused=tuple(
                Packing(
                    p["fused"].rpartition(".")[2],
                    tuple(x.rpartition(".")[2] for x in p["shards"]),
                )
                for p in item.get("load_fused", [])
            ),
            nested=tuple(nested),
        )
    classes = {
        name: tuple(info.get("mro") or info.get("bases", ()))
        for name, info in data.get("classes", {}).items()
    }
    pattern = (data.get("pattern_module") or {}).get("module", "re")
    return EngineFacts(data["engine"], data["release"], commit, archs, classes, pattern)
