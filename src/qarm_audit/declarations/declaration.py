"""What a checkpoint declares about its quantization, read once for the whole checkpoint
(:func:`~qarm_audit.declarations.read_declaration`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..findings import Finding
from .rules import (
    AwqRules,
    BnbRules,
    CompressedTensorsRules,
    FormatRules,
    Fp8Rules,
    GptqRules,
    ModelOptRules,
    Mxfp4Rules,
    OnlineTransform,
)
from .schemes import Scheme


@dataclass(frozen=True)
class KvDeclaration:
    algo: str
    """``FP8``, ``NVFP4``, ``INT8`` ..., as declared."""
    where: str
    strategy: str | None = None
    """compressed-tensors' ``kv_cache_scheme`` strategy (``tensor``, ``attn_head``); None for
    a format that states none."""
    symmetric: bool = True
    dynamic: bool = False
    """compressed-tensors' ``kv_cache_scheme`` ``symmetric`` and ``dynamic`` (any value but
    ``false``, ``"local"`` included, is dynamic)."""
    written: tuple[tuple[str, Any], ...] = ()
    """compressed-tensors' ``kv_cache_scheme`` keys an engine reads, with their JSON values as
    written (None for a key not written): vLLM checks the raw mapping, without the defaults
    a parser fills in. For a flat ModelOpt declaration, what decides whether an engine builds
    a KV-cache method for it (``_modelopt_kv_written``)."""


@dataclass(frozen=True)
class Declaration:
    family: str
    """``modelopt``, ``compressed-tensors``, ``fp8`` (native ``quant_method: fp8``),
    ``bitsandbytes``, ``gptq``, ``awq``, ``mxfp4`` (gpt-oss), ``none``
    (declares no quantization, e.g. sparsity only), ``absent`` (no declaration document at
    all) or ``unreadable``."""
    source: str
    """Which document (and key) the declaration was read from."""
    method: str | None = None
    algo: str | None = None
    schemes: dict[str, Scheme] = field(default_factory=dict)
    modelopt: ModelOptRules | None = None
    compressed_tensors: CompressedTensorsRules | None = None
    fp8: Fp8Rules | None = None
    bnb: BnbRules | None = None
    gptq: GptqRules | None = None
    awq: AwqRules | None = None
    mxfp4: Mxfp4Rules | None = None
    kv: KvDeclaration | None = None
    producer: str | None = None
    findings: tuple[Finding, ...] = ()
    reason: str | None = None
    """Why nothing was resolved, when ``family`` is ``unreadable``."""
    considered: tuple[str, ...] = ()
    """Every declaration location found, in precedence order."""
    form: str = "flat"
    """``nested`` (a ModelOpt ``quantization`` block, the ``hf_quant_config.json`` shape) or
    ``flat``; engines treat the two differently (vLLM accepts fewer algorithms nested)."""
    groups_weight_only: bool = False
    """A ModelOpt declaration with ``config_groups`` whose every group has
    ``input_activations: null`` (vLLM v0.33 re-labels such an NVFP4 as W4A16_NVFP4)."""
    sparsity_targets: tuple[str, ...] = ()
    """The targets of a compressed-tensors ``sparsity_config`` (vLLM refuses any)."""
    transform_leaves: frozenset[str] = frozenset()
    """The submodule names of a compressed-tensors ``transform_config``'s saved transforms
    (``v_input``): a tensor ``<module>.v_input.weight`` is a transform of ``<module>``."""
    online_transforms: tuple[OnlineTransform, ...] = ()
    """Each transform a compressed-tensors ``transform_config`` applies at run time (any
    location but ``weight_input`` and ``weight_output``, which are fused into the weights), in
    declaration order."""

    @property
    def config_format(self) -> str:
        """A compressed-tensors declaration's top-level ``format`` (its algo), ``""`` for none
        or another family."""
        return (self.algo or "") if self.family == "compressed-tensors" else ""

    @property
    def rules(self) -> FormatRules | None:
        """The format's rules that were read, whichever format declared them."""
        for rules in (
            self.modelopt,
            self.compressed_tensors,
            self.fp8,
            self.bnb,
            self.gptq,
            self.awq,
            self.mxfp4,
        ):
            if rules is not None:
                return rules
        return None

    @property
    def quantized(self) -> bool:
        return self.family in (
            "modelopt",
            "compressed-tensors",
            "fp8",
            "bitsandbytes",
            "gptq",
            "awq",
            "mxfp4",
        )
