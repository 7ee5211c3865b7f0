"""The report model of ``qarm explain``: each rule tried for one module and the one that decided."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..frozen import frozen_config
from .model import ArmRow, EngineInfo, FindingRow, SourceInfo

EXPLAIN_SCHEMA_VERSION = "1.0"


class _Row(BaseModel):
    model_config = frozen_config(extra="forbid")


class Attempt(_Row):
    """One rule the resolver tries for a module."""

    step: str
    """``exclude: exact``, ``quantized_layers: prefix``, ``targets: regex`` ..."""
    tried: str
    """The name (or names) looked up."""
    outcome: str
    """``decided``, ``shadowed``, ``miss``, ``split`` or ``n/a``."""
    detail: str
    bucket: str = ""
    """Where a match would put the module (a scheme, ``excluded``)."""


class OperandRow(_Row):
    operand: str
    tensor: str
    dtype: str
    shape: list[int]
    shard: str
    kind: str
    """``plain``, ``quant``, ``kv`` or ``unclassified``."""
    family: str
    """The quantization family the operand name belongs to, or ``""``."""


class ModuleExplanation(_Row):
    module: str
    engine_name: str
    """The module the engine builds: ``qkv_proj`` for ``q_proj``, ``experts`` for an expert."""
    kind: str
    fused_shards: list[str]
    layer_kind: str = ""
    """The engine layer's kind (``linear``, ``fused``, ``lm_head``, ``router``, ``norm``, ...)."""
    layer_class: str = ""
    """The engine's class for the layer (``QKVParallelLinear``), ``""`` where not known."""
    quant_config: bool = True
    """False: the engine builds the layer without a quant config (never quantized)."""
    layer_tree: str = ""
    """The facts the layer tree was built from (``vllm 0.33.0``) or ``generic``."""
    bucket: str
    how: str
    rule: str
    scheme: str | None
    """The decided scheme, described; None when the module is excluded or unlisted."""
    attempts: list[Attempt]
    operands: list[OperandRow]
    shipped: str
    """The shipped spelling family (``nvfp4``, ``fp8``, ``none`` ...)."""
    shipped_detail: str
    verdict: str
    """``refused``, ``warnings`` or ``clean``, for this module's own findings."""
    findings: list[FindingRow]
    arms: list[ArmRow]
    """The arm under the chosen engine profile (one row per GPU range where they differ)."""
    arm_note: str | None = None
    """Why there is no arm row (not a Linear, declared unquantized, ships nothing)."""


class Explanation(_Row):
    schema_version: str = EXPLAIN_SCHEMA_VERSION
    query: str
    matched: str
    """``module``, ``tensor`` or ``engine module`` (a fused or experts name: each member)."""
    tensor: str | None = None
    source: SourceInfo
    declaration: str
    engine: EngineInfo
    modules: list[ModuleExplanation] = Field(default_factory=list)
