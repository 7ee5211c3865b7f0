"""A declared quantization scheme, in one vocabulary for both config families."""

from __future__ import annotations

from dataclasses import dataclass

UNQUANTIZED_ARM = "unquantized"
NO_ARM = "none"

FAMILY_LABELS = {
    "fp8": "FP8",
    "nvfp4": "NVFP4",
    "mxfp8": "MXFP8",
    "mxfp4": "MXFP4",
    "int": "INT",
    "awq": "INT-AWQ",
    "bnb-nf4": "BNB-NF4",
    "bnb-fp4": "BNB-FP4",
    "bnb-int8": "BNB-INT8",
    "gptq": "INT",
    "autoawq": "INT",
    "gpt-oss-mxfp4": "MXFP4",
}


@dataclass(frozen=True)
class Scheme:
    """What a declaration says one set of modules holds.

    ``name`` is the bucket key: the ModelOpt algorithm (``FP8``, ``W4A16_NVFP4``) or the
    compressed-tensors group name (``group_0``).
    """

    name: str
    producer: str
    """``modelopt``, ``compressed-tensors``, ``fp8`` (a native ``quant_method: fp8``),
    ``bitsandbytes``, ``gptq``, ``awq`` or ``mxfp4`` (gpt-oss's ``quant_method: mxfp4``)."""
    family: str
    """``fp8``, ``nvfp4``, ``mxfp8``, ``mxfp4``, ``int``, ``awq``, ``bnb-nf4``, ``bnb-fp4``,
    ``bnb-int8``, ``gptq``, ``autoawq`` (AutoAWQ's ``quant_method: awq``), ``gpt-oss-mxfp4``
    (gpt-oss's ``_blocks``/``_scales`` experts) or ``unknown``."""
    weight_bits: int | None
    weight_type: str | None
    weight_strategy: str | None
    """``tensor``, ``channel``, ``group``, ``block`` or ``tensor_group``."""
    group_size: int | None = None
    activation_bits: int | None = None
    """None for a weight-only scheme."""
    activation_type: str | None = None
    activation_dynamic: bool | str | None = None
    activation_strategy: str | None = None
    weight_symmetric: bool = True
    format: str | None = None
    """compressed-tensors ``format`` of the group (or the whole config)."""
    algo: str = ""
    """The algorithm as written in the declaration (case kept)."""
    block: tuple[int, int] | None = None
    """A 2-D weight block [rows, columns] per scale (native FP8 ``weight_block_size``)."""
    scale_format: str | None = None
    """The scale format as declared (native FP8 ``scale_fmt``, e.g. ``ue8m0``)."""
    act_order: bool = False
    """GPTQ ``desc_act`` with groups, or compressed-tensors ``actorder`` ``group`` or
    ``dynamic``: the columns are quantized in activation order, each in the group ``g_idx``
    names."""
    actorder: str | None = None
    """compressed-tensors weights' ``actorder`` as its parser reads it (``true`` is ``group``),
    None for none or ``false``."""
    moe_dims: tuple[int, int, int] | None = None
    """gpt-oss MXFP4: config.json's (``num_local_experts``, ``hidden_size``,
    ``intermediate_size``), which the engine sizes the experts' parameters by; None where the
    config states no integer for one of them."""

    @property
    def declared_arm(self) -> str:
        """The arm a faithful engine would run, named in the one arm vocabulary."""
        if self.family == "unknown" or self.weight_bits is None:
            return f"{self.algo or self.name} (unknown)"
        label = FAMILY_LABELS.get(self.family, self.family.upper())
        activation = self.activation_bits if self.activation_bits is not None else 16
        return f"W{self.weight_bits}A{activation}-{label}"

    @property
    def activation_words(self) -> str:
        """The declared activations as ``<type> <dynamic|static> <strategy>`` (``-`` for a
        part not declared), or ``none`` for no activation quantization: what an engine rule's
        ``declared_activation`` is compared with."""
        if self.activation_bits is None:
            return "none"
        dynamic = self.activation_dynamic
        how = "dynamic" if dynamic is True else "static" if dynamic in (False, "local") else "-"
        return f"{self.activation_type or '-'} {how} {self.activation_strategy or '-'}"

    @property
    def weight_only(self) -> bool:
        return self.activation_bits is None

    @property
    def static_activations(self) -> bool:
        """Activation scales are calibrated and shipped (input_scale, input_global_scale)."""
        return self.activation_bits is not None and self.activation_dynamic in (False, "local")

    def describe(self) -> str:
        parts = [self.declared_arm]
        if self.weight_strategy:
            size = f" g{self.group_size}" if self.group_size else ""
            if self.block:
                size = f" {self.block[0]}x{self.block[1]}"
            parts.append(f"weights {self.weight_strategy}{size}")
        if self.activation_bits is not None:
            kind = {True: "dynamic", False: "static", "local": "local"}.get(
                self.activation_dynamic, str(self.activation_dynamic)
            )
            strategy = f" {self.activation_strategy}" if self.activation_strategy else ""
            parts.append(f"activations {kind}{strategy}")
        else:
            parts.append("weight-only")
        return ", ".join(parts)


MODELOPT_ALGOS: dict[str, dict[str, object]] = {
    "FP8": dict(
        family="fp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="tensor",
        activation_bits=8,
        activation_type="float",
        activation_dynamic=False,
        activation_strategy="tensor",
    ),
    "FP8_PER_CHANNEL_PER_TOKEN": dict(
        family="fp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="channel",
        activation_bits=8,
        activation_type="float",
        activation_dynamic=True,
        activation_strategy="token",
    ),
    "FP8_PB_WO": dict(
        family="fp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="block",
        group_size=128,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=True,
        activation_strategy="group",
    ),
    "FP8_PB_REAL": dict(
        family="fp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="block",
        group_size=128,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=True,
        activation_strategy="group",
    ),
    "FP8_BLOCK_SCALES": dict(
        family="fp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="block",
        group_size=128,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=True,
        activation_strategy="group",
    ),
    "NVFP4": dict(
        family="nvfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="tensor_group",
        group_size=16,
        activation_bits=4,
        activation_type="float",
        activation_dynamic=False,
        activation_strategy="tensor_group",
    ),
    "W4A16_NVFP4": dict(
        family="nvfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="tensor_group",
        group_size=16,
    ),
    "NVFP4_AWQ": dict(
        family="nvfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="tensor_group",
        group_size=16,
        activation_bits=4,
        activation_type="float",
        activation_dynamic=False,
    ),
    "NVFP4_SVD": dict(
        family="nvfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="tensor_group",
        group_size=16,
        activation_bits=4,
        activation_type="float",
        activation_dynamic=False,
    ),
    "W4A8_NVFP4_FP8": dict(
        family="nvfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="tensor_group",
        group_size=16,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=False,
    ),
    "MXFP8": dict(
        family="mxfp8",
        weight_bits=8,
        weight_type="float",
        weight_strategy="group",
        group_size=32,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=True,
    ),
    "MXFP4": dict(
        family="mxfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="group",
        group_size=32,
        activation_bits=4,
        activation_type="float",
        activation_dynamic=True,
    ),
    "W4A8_MXFP4_FP8": dict(
        family="mxfp4",
        weight_bits=4,
        weight_type="float",
        weight_strategy="group",
        group_size=32,
        activation_bits=8,
        activation_type="float",
        activation_dynamic=False,
    ),
    "W4A16_AWQ": dict(family="awq", weight_bits=4, weight_type="int", weight_strategy="group"),
    "W4A8_AWQ": dict(
        family="awq",
        weight_bits=4,
        weight_type="int",
        weight_strategy="group",
        activation_bits=8,
        activation_type="float",
        activation_dynamic=False,
    ),
    "W8A16": dict(family="int", weight_bits=8, weight_type="int", weight_strategy="channel"),
    "W8A8_SQ_PER_CHANNEL": dict(
        family="int",
        weight_bits=8,
        weight_type="int",
        weight_strategy="channel",
        activation_bits=8,
        activation_type="int",
        activation_dynamic=False,
    ),
}
"""ModelOpt ``quant_algo`` (upper-cased) -> what it means; from ModelOpt's export code."""


def modelopt_scheme(algo: str, group_size: int | None = None) -> Scheme:
    """The scheme a ModelOpt algorithm string names; unknown strings give family ``unknown``."""
    known = MODELOPT_ALGOS.get(algo.upper())
    if known is None:
        return Scheme(
            name=algo,
            producer="modelopt",
            family="unknown",
            weight_bits=None,
            weight_type=None,
            weight_strategy=None,
            algo=algo,
        )
    fields = dict(known)
    if group_size is not None and fields.get("weight_strategy") in ("tensor_group", "group"):
        fields["group_size"] = group_size
    return Scheme(name=algo, producer="modelopt", algo=algo, **fields)  # type: ignore[arg-type]
