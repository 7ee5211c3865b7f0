"""The one report model every format renders. Its JSON form is a versioned public contract."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from ..frozen import frozen_config

SCHEMA_VERSION = "1.3"
"""Bumped to 1.1 for fields added since 1.0, all optional (they have defaults; ``ignored`` is
one): a 1.0 reader that skips unknown keys reads a 1.1 report. A removed or retyped field would
make it 2.0."""


class _Row(BaseModel):
    model_config = frozen_config(extra="forbid")


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
    parameters: int = 0
    """Parameters the bucket's tensors hold, packing-aware (an NVFP4 U8 byte holds two; a
    packed I32 word 32 / bits); scales, zero points and KV scales are not parameters."""


class FindingRow(_Row):
    code: str
    severity: str
    module: str
    tensor: str
    message: str


class IgnoredRow(_Row):
    """A finding an ignore rule moved out of refusals, warnings or notes; never dropped."""

    code: str
    severity: str
    """The severity it would have had: ``refusal``, ``warning`` or ``info``."""
    module: str
    tensor: str
    message: str
    reason: str
    """The reason the ignore rule gives (mandatory)."""
    origin: str
    """Where the rule was written: ``qarm.toml``, ``pyproject.toml``, a ``--config`` file, or
    ``--ignore``."""


class ArmRow(_Row):
    scheme: str
    modules: int
    """Modules on this row; 0 when only a declaration was audited (no tensor names)."""
    declared: str
    executed: str
    reason: str
    note: str | None = None
    log: str | None = None
    operands: dict[str, str] = Field(default_factory=dict)
    """Coverage of operands that decide arms, e.g. ``{"input_scale": "193/193"}``."""
    gpu: str | None = None
    """The GPUs this row holds for: ``sm90`` for ``--gpu``, a range of the standard capability
    set (``sm80-sm90``, ``sm100+``, ``sm80, sm120+``) without one; None when it holds for all."""
    kernel: str | None = None
    """Kernel detail of the executed arm (``Marlin``); the arm name alone decides agreement."""
    source: str | None = None
    """The engine source the rule was read from: ``owner/repo path@commit``."""

    def line(self) -> str:
        """``NVFP4: declared W4A4-NVFP4, input_scale on 193/193 -> executed W4A16-NVFP4``."""
        coverage = "".join(f", {k} on {v}" for k, v in self.operands.items())
        verb = "=" if self.declared == self.executed else "->"
        kernel = f" ({self.kernel})" if self.kernel else ""
        gpu = f" on {self.gpu}" if self.gpu else ""
        count = f"{self.modules} module{'' if self.modules == 1 else 's'}"
        return (
            f"{self.scheme}: declared {self.declared}{coverage} {verb} executed "
            f"{self.executed}{kernel}{gpu} [{count}]"
        )


class RoutingMove(_Row):
    """Modules whose arm moves when routing switches from the profile's own to the other."""

    from_arm: str
    """The arm under the profile's own routing."""
    to_arm: str
    """The arm under the other routing."""
    from_routing: str
    to_routing: str
    gpu: str | None = None
    """As in ArmRow: where the move happens; None when on every GPU."""
    modules: int
    module_names: list[str]


class EngineInfo(_Row):
    name: str
    version: str = ""
    routing: str
    """The routing the arm line was computed with: ``declared`` or ``probe``."""
    env: dict[str, str]
    gpu: str | None
    gpu_from: str = ""
    """Since 1.3: ``given`` (``--gpu``), ``detected`` (the machine's GPU) or ``""`` (none)."""
    installed: str | None = None
    """Since 1.3: the engine's version installed where qarm ran, or null."""
    release_from: str = ""
    """Since 1.3: why this release: ``asked`` (``--engine vllm==X``), ``installed``,
    ``newest`` (none installed, or the installed one is not modelled) or ``file``."""


class LayerTreeInfo(_Row):
    """The engine layer tree the modules were resolved on."""

    architecture: str
    """``config.json``'s first ``architectures`` entry, or ``""``."""
    facts: str
    """The engine release whose facts built the tree (``vllm 0.33.0``), or ``generic``."""
    modelled: bool
    """False when generic rules stood in (no facts for this engine or architecture)."""
    cite: str = ""
    """``owner/repo path@commit`` of the model file the facts were read from."""


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


# A TypedDict, not a model like the other rows: a MoE report holds hundreds of thousands of
# these, and a dict validates about four times faster. (No docstring: it would enter the schema.)
@with_config(ConfigDict(extra="forbid"))
class ModuleRow(TypedDict):
    module: str
    bucket: str
    how: str
    rule: str
    tensors: int
    shipped: str


class ScalarRow(_Row):
    """One scale tensor the scalar probe considered."""

    tensor: str
    dtype: str
    shape: list[int]
    status: str
    """``ok``, ``zero``, ``negative``, ``nonfinite``, ``skipped`` (not read: above the bound or
    an undecoded dtype) or ``not-read`` (the source holds no bytes)."""
    values: list[str] = Field(default_factory=list)
    """Decoded values as text (``nan``, ``inf`` kept: JSON numbers cannot carry them)."""
    note: str | None = None


class ProbeInfo(_Row):
    """What ``--probe-scalars`` read: never more than ``bound`` elements of any one tensor."""

    available: bool
    """False when the source holds no tensor bytes (a manifest); then nothing was read."""
    reason: str | None
    bound: int
    """Most elements read from any one tensor."""
    candidates: int
    tensors_read: int
    bytes_read: int
    """Tensor-data bytes read, beyond the 8-byte prefixes and headers every audit reads."""
    flagged: int
    """Tensors holding a zero, negative or non-finite value."""
    scalars: list[ScalarRow]


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
    routing_moves: list[RoutingMove] | None = None
    """``--routing both``: modules whose arm moves between the two routings; None when not
    asked for, [] when nothing moves."""
    refusals: list[FindingRow]
    warnings: list[FindingRow]
    notes: list[FindingRow]
    ignored: list[IgnoredRow] = Field(default_factory=list)
    """Findings moved aside by an ignore rule, with its reason; they count for neither the
    verdict nor the exit code. Empty when no ignore rule matched."""
    integrity: IntegrityInfo | None
    modules: list[ModuleRow]
    probe: ProbeInfo | None = None
    """Scale values, only with ``--probe-scalars``; None means no tensor byte was read."""
    layer_tree: LayerTreeInfo | None = None
    """Since 1.2: the engine layer tree the modules were resolved on."""

    def worst(self) -> str:
        if self.refusals:
            return "refusal"
        if self.warnings:
            return "warning"
        return "clean"
