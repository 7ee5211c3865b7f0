"""The report model of ``qarm diff``: what differs between two checkpoints, from A's side."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..frozen import frozen_config

DIFF_SCHEMA_VERSION = "1.0"


class _Row(BaseModel):
    model_config = frozen_config(extra="forbid")


class SideInfo(_Row):
    """One checkpoint of the pair, as its own audit sees it."""

    location: str
    kind: str
    repo: str | None
    revision: str | None
    tensors: int
    modules: int
    shards: int
    declared: str
    """``algo (family) via source``."""
    verdict: str
    refusals: int
    warnings: int
    arms: list[str]
    """Each arm row's line (``scheme: declared X -> executed Y ... [n modules]``) under the
    chosen engine profile."""


class TensorChange(_Row):
    """A name both ship with another dtype or shape."""

    name: str
    a_dtype: str
    a_shape: list[int]
    b_dtype: str
    b_shape: list[int]


class ShardCount(_Row):
    file: str
    names: int
    prefix: str
    """The dotted prefix every name of the shard shares (``mtp``), or ``""``."""


class ShardFlow(_Row):
    """How many names held by ``a_file`` in A are held by ``b_file`` in B."""

    a_file: str
    b_file: str
    names: int


class NameMove(_Row):
    name: str
    a_file: str
    b_file: str


class LayoutDiff(_Row):
    identical: bool
    """Same shard files, and every name both ship in the same file."""
    a_shards: list[ShardCount]
    b_shards: list[ShardCount]
    flows: list[ShardFlow]
    moved: list[NameMove]
    """Every name both ship whose shard file differs."""
    lines: list[str]
    """What happened to each shard of A, in words."""


class ModuleChange(_Row):
    """A module whose resolved declaration differs (bucket, rule or provenance)."""

    module: str
    change: str
    """``relabelled``, ``excluded in A only``, ``excluded in B only``, ``quantized in A only``,
    ``quantized in B only``, ``provenance`` (same bucket, another rule), ``only in A``,
    ``only in B``."""
    a_bucket: str
    a_how: str
    a_rule: str
    b_bucket: str
    b_how: str
    b_rule: str


class ModuleMove(_Row):
    """Module changes grouped by kind and bucket move, for reading."""

    change: str
    a_bucket: str
    b_bucket: str
    a_how: str = ""
    b_how: str = ""
    modules: int
    a_arm: str = ""
    """The declared arm of A's bucket, where it is a scheme."""
    b_arm: str = ""
    example: str


class ConfigChange(_Row):
    key: str
    a: str
    b: str
    only_a: list[str] = Field(default_factory=list)
    only_b: list[str] = Field(default_factory=list)


class DiffReport(_Row):
    schema_version: str = DIFF_SCHEMA_VERSION
    identical: bool
    """Names, dtypes, shapes, declarations and layout all equal."""
    summary: str
    """One line a reviewer can paste, from A's point of view."""
    a: SideInfo
    b: SideInfo
    only_a: list[str]
    only_b: list[str]
    only_a_by_operand: dict[str, int]
    only_b_by_operand: dict[str, int]
    changed: list[TensorChange]
    layout: LayoutDiff
    modules: list[ModuleChange]
    module_moves: list[ModuleMove]
    config: list[ConfigChange]
    documents: list[str]
    """Declaration documents whose text differs (shown, not counted in ``identical``)."""
