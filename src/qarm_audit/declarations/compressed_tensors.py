"""compressed-tensors declarations: ``quant_method: compressed-tensors`` with ``config_groups``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Strict, field_validator

from ..frozen import frozen_config
from .rules import OnlineTransform
from .schemes import Scheme


def _positive_or_channel(value: int) -> int:
    if value == 0 or value < -1:
        raise ValueError(f"group_size {value}: a positive integer (or -1 for per-channel)")
    return value


GroupSize = Annotated[int, Strict(), AfterValidator(_positive_or_channel)]
"""A strict JSON integer, positive or -1 (compressed-tensors' per-channel marker)."""


class _Open(BaseModel):
    model_config = frozen_config(extra="allow")


class QuantArgs(_Open):
    """``QuantizationArgs``: how one operand (weights, activations, KV) is quantized."""

    num_bits: int = 8
    type: str = "int"
    symmetric: bool = True
    group_size: GroupSize | None = None
    strategy: str | None = None
    block_structure: list[int] | str | None = None
    dynamic: bool | str = False
    actorder: str | bool | None = None
    scale_dtype: str | None = None
    zp_dtype: str | None = None
    observer: str | None = None
    observer_kwargs: dict[str, Any] | None = None

    @property
    def resolved_strategy(self) -> str:
        """compressed-tensors infers a missing strategy from the group size."""
        if self.strategy:
            return self.strategy
        if self.group_size is None:
            return "tensor"
        return "channel" if self.group_size == -1 else "group"


class GroupScheme(_Open):
    """One ``config_groups`` entry."""

    targets: list[str]
    weights: QuantArgs | None = None
    input_activations: QuantArgs | None = None
    output_activations: QuantArgs | None = None
    format: str | None = None


class CompressedTensorsConfig(_Open):
    quant_method: str | None = None
    format: str | None = None
    config_groups: dict[str, GroupScheme | list[str]] | None = None
    ignore: list[str] | None = None
    kv_cache_scheme: QuantArgs | None = None
    quantization_status: str | None = None
    global_compression_ratio: float | None = None
    sparsity_config: dict[str, Any] | None = None
    transform_config: dict[str, Any] | None = None
    version: str | None = None

    @field_validator("ignore", mode="before")
    @classmethod
    def _ignore_none(cls, value: Any) -> Any:
        return [] if value is None else value


PRESETS: dict[str, dict[str, Any]] = {
    "FP8": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"},
    },
    "FP8_DYNAMIC": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True},
    },
    "NVFP4": {
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16},
        "input_activations": {
            "num_bits": 4,
            "type": "float",
            "strategy": "tensor_group",
            "group_size": 16,
            "dynamic": "local",
        },
    },
    "NVFP4A16": {
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
    },
    "W4A16": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}},
    "W8A16": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}},
    "W8A8": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
    },
}
"""The preset names a ``config_groups`` entry may give instead of a scheme (a list of targets)."""


def group_scheme(name: str, raw: GroupScheme | list[str]) -> tuple[GroupScheme, bool]:
    """A group as a scheme; a bare target list names a preset by the group's name."""
    if isinstance(raw, GroupScheme):
        return raw, False
    preset = PRESETS.get(name.upper())
    if preset is None:
        return GroupScheme(targets=list(raw)), True
    return GroupScheme(targets=list(raw), **preset), False


def family_of(weights: QuantArgs | None, fmt: str | None) -> str:
    if weights is None:
        return "unknown"
    if weights.type == "float" and weights.num_bits == 8:
        if fmt == "mxfp8-quantized" or (
            weights.group_size == 32 and weights.scale_dtype in ("torch.uint8", "uint8")
        ):
            return "mxfp8"
        return "fp8"
    if weights.type == "float" and weights.num_bits == 4:
        if weights.group_size == 32 or fmt == "mxfp4-pack-quantized":
            return "mxfp4"
        return "nvfp4"
    if weights.type == "int":
        return "int"
    return "unknown"


def to_scheme(name: str, group: GroupScheme, global_format: str | None) -> Scheme:
    fmt = group.format or global_format
    w, a = group.weights, group.input_activations
    return Scheme(
        name=name,
        producer="compressed-tensors",
        family=family_of(w, fmt),
        weight_bits=w.num_bits if w else None,
        weight_type=w.type if w else None,
        weight_strategy=w.resolved_strategy if w else None,
        group_size=w.group_size if w and w.group_size and w.group_size > 0 else None,
        act_order=_actorder(w) in ("group", "dynamic"),
        actorder=_actorder(w),
        activation_bits=a.num_bits if a else None,
        activation_type=a.type if a else None,
        activation_dynamic=a.dynamic if a else None,
        activation_strategy=a.resolved_strategy if a else None,
        weight_symmetric=w.symmetric if w else True,
        format=fmt,
        algo=name,
    )


def _actorder(weights: QuantArgs | None) -> str | None:
    """``actorder`` as compressed-tensors' ``QuantizationArgs`` validates it: ``true`` is
    ``group``, ``false`` none, a string lowered."""
    value = weights.actorder if weights is not None else None
    if value is True:
        return "group"
    if isinstance(value, str):
        return value.lower()
    return None


OFFLINE_TRANSFORMS = frozenset({"weight_input", "weight_output"})
"""compressed-tensors' ``TransformLocation`` values fused into the weights; every other is
applied to activations at run time (``TransformLocation.is_online``)."""


def online_transforms(config: Any) -> tuple[OnlineTransform, ...]:
    """Each online transform of a ``transform_config``, read as written (a string target or
    ignore stands for a list of one, as compressed-tensors reads it)."""
    return tuple(
        OnlineTransform(name, location, _strings(args.get("targets")), _strings(args.get("ignore")))
        for name, location, args in _applied(config)
        if location not in OFFLINE_TRANSFORMS
    )


def transform_leaves(config: Any) -> frozenset[str]:
    """The submodule names a ``transform_config``'s transforms are saved under,
    ``<scheme>_<location>`` (``v_input``: ``<module>.v_input.weight``), online or fused."""
    return frozenset(f"{name}_{location}" for name, location, _ in _applied(config))


def _applied(config: Any) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(scheme, location, the entry) of each ``apply`` entry of a ``transform_config``;
    anything not shaped as compressed-tensors writes it is skipped."""
    groups = config.get("config_groups") if isinstance(config, dict) else None
    for name, scheme in (groups if isinstance(groups, dict) else {}).items():
        applied = scheme.get("apply") if isinstance(scheme, dict) else None
        for args in applied if isinstance(applied, list) else []:
            location = args.get("location") if isinstance(args, dict) else None
            if isinstance(location, str):
                yield str(name), location, args


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()
