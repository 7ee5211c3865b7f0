"""The one report model every format renders. Its JSON form is a versioned public contract."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "1.0"


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SourceInfo(_Row):
    kind: str
    location: str
    repo: str | None = None
    revision: str | None = None


class SchemeInfo(_Row):
    name: str
    description: str
    declared_arm: str
    family: str


class KvInfo(_Row):
    algo: str
    where: str
    scales_shipped: int


class DeclarationInfo(_Row):
    family: str
    source: str
    method: str | None
    algo: str | None
    producer: str | None
    schemes: list[SchemeInfo]
    rules: dict[str, int]
    """How many rules of each kind: quantized_layers, exclude_modules, targets, ignore."""
    layers_per_scheme: dict[str, int]
    """MIXED_PRECISION: quantized_layers entries per algorithm."""
    excludes: list[str]
    """exclude_modules / ignore entries, as written."""
    targets: dict[str, str]
    """compressed-tensors target -> group."""
    kv_cache: KvInfo | None
    considered: list[str]
    reason: str | None


class Totals(_Row):
    tensors: int
    modules: int
    shards: int


class Bucket(_Row):
    scheme: str
    description: str
    tensors: int
    modules: int
    membership: dict[str, int]
    """Modules per way of membership: exact, prefix, regex, class, wildcard, substring, ..."""


class FindingRow(_Row):
    code: str
    severity: str
    module: str
    tensor: str
    message: str


class ArmRow(_Row):
    scheme: str
    modules: int
    declared: str
    executed: str
    reason: str
    note: str | None = None
    log: str | None = None
    operands: dict[str, str] = Field(default_factory=dict)
    """Coverage of operands that decide arms, e.g. ``{"input_scale": "193/193"}``."""

    def line(self) -> str:
        """``NVFP4: declared W4A4-NVFP4, input_scale on 193/193 -> executed W4A16-NVFP4``."""
        coverage = "".join(f", {k} on {v}" for k, v in self.operands.items())
        verb = "=" if self.declared == self.executed else "->"
        return (
            f"{self.scheme}: declared {self.declared}{coverage} {verb} executed "
            f"{self.executed} [{self.modules} modules]"
        )


class EngineInfo(_Row):
    name: str
    routing: str
    env: dict[str, str]
    gpu: str | None


class ShardCheck(_Row):
    file: str
    size: int
    header_length: int
    tensors: int
    data_bytes: int
    remote_sha256: str | None = None


class IntegrityInfo(_Row):
    verification: str
    """What was verified: semantic checks of headers and index, not a content hash."""
    shards: list[ShardCheck]
    index: str | None
    """The index arithmetic, or None for a single-file checkpoint."""
    total_size: int | None
    tensor_bytes: int
    checks: list[str]


class ModuleRow(_Row):
    module: str
    bucket: str
    how: str
    rule: str
    tensors: int
    shipped: str


class Report(_Row):
    schema_version: str = SCHEMA_VERSION
    verdict: str
    """``refused``, ``warnings`` or ``clean``."""
    source: SourceInfo
    declaration: DeclarationInfo
    engine: EngineInfo
    totals: Totals
    buckets: list[Bucket]
    arms: list[ArmRow]
    refusals: list[FindingRow]
    warnings: list[FindingRow]
    notes: list[FindingRow]
    integrity: IntegrityInfo | None
    modules: list[ModuleRow]

    def worst(self) -> str:
        if self.refusals:
            return "refusal"
        if self.warnings:
            return "warning"
        return "clean"
