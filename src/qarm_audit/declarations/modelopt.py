"""ModelOpt declarations: ``hf_quant_config.json``; ``quant_method: modelopt`` in config.json."""

from __future__ import annotations

from itertools import chain, compress
from operator import not_
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
)
from pydantic.functional_validators import WrapValidator

from ..frozen import frozen_config

GroupSize = Annotated[int, Strict(), Field(gt=0)]
"""A group size is a positive JSON integer: 0 (which would skip the shape check), negatives,
floats, bools and strings are refused by name."""


class _Open(BaseModel):
    """Unknown keys are kept (and later listed), never rejected: producers drift."""

    model_config = frozen_config(extra="allow")


class Producer(_Open):
    name: str | None = None
    version: str | None = None


class LayerEntry(_Open):
    """One ``quantized_layers`` value of a MIXED_PRECISION map."""

    quant_algo: str
    group_size: GroupSize | None = None
    has_zero_point: bool | None = None
    pre_quant_scale: bool | None = None


def _layers_once_each(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Validate each distinct ``quantized_layers`` entry once: a MoE map repeats one entry for
    hundreds of thousands of expert projections. Anything unusual gets pydantic's own path."""
    if not isinstance(value, dict) or not value:
        return handler(value)
    entries = list(value.values())
    try:
        kinds = set(map(type, chain.from_iterable(map(dict.values, entries))))
    except TypeError:
        return handler(value)  # an entry that is not an object
    if float in kinds or {bool, int} <= kinds or not kinds.isdisjoint(_CONTAINERS):
        return handler(value)  # 16 == 16.0 == True would merge entries that differ
    # in C: the entries equal to the first (most of a MoE map), written as the first is
    first = entries[0]
    same = list(map(first.__eq__, entries))
    if set(map(tuple, compress(entries, same))) != {tuple(first)}:
        return _by_tokens(value, handler)  # the same keys in another order: each as written
    try:
        out = dict.fromkeys(value, LayerEntry.model_validate(first))
        distinct: dict[tuple[tuple[str, Any], ...], LayerEntry] = {}
        for name, entry in compress(value.items(), map(not_, same)):
            token = tuple(entry.items())
            reading = distinct.get(token)
            if reading is None:
                reading = distinct[token] = LayerEntry.model_validate(entry)
            out[name] = reading
    except ValidationError:
        return handler(value)
    return out


_CONTAINERS = frozenset({dict, list})


def _by_tokens(value: dict[str, Any], handler: ValidatorFunctionWrapHandler) -> Any:
    """Each entry as a hashable token of its items in order, validated once per token."""
    tokens = list(map(tuple, map(dict.items, value.values())))
    distinct: dict[tuple[tuple[str, Any], ...], Any] = dict.fromkeys(tokens)
    try:
        for token in distinct:
            distinct[token] = LayerEntry.model_validate(dict(token))
    except ValidationError:
        return handler(value)
    return dict(zip(value, map(distinct.__getitem__, tokens), strict=True))


LayerMap = Annotated[dict[str, LayerEntry], WrapValidator(_layers_once_each)]


class Quantization(_Open):
    """The ``quantization`` block of ``hf_quant_config.json`` (also the nested config.json form)."""

    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None
    group_size: GroupSize | None = None
    exclude_modules: list[str] | None = None
    quantized_layers: LayerMap | None = None
    has_zero_point: bool | None = None
    pre_quant_scale: bool | None = None


class HfQuantConfig(_Open):
    """``hf_quant_config.json``."""

    producer: Producer | None = None
    quantization: Quantization


class InlineConfig(_Open):
    """``config.json`` ``quantization_config`` with ``quant_method`` ``modelopt*``.

    Both spellings: flat (``quant_algo``, ``ignore``, ``kv_cache_scheme`` at top level, as
    ModelOpt's converter writes) and nested (a ``quantization`` block as in the file).
    """

    quant_method: str = "modelopt"
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None
    kv_cache_scheme: dict[str, Any] | str | None = None
    group_size: GroupSize | None = None
    ignore: list[str] | None = None
    exclude_modules: list[str] | None = None
    quantized_layers: LayerMap | None = None
    config_groups: dict[str, Any] | None = None
    producer: Producer | None = None
    quantization: Quantization | None = None


class Normalized(BaseModel):
    """The fields both spellings reduce to."""

    model_config = frozen_config()

    quant_algo: str | None
    kv_algo: str | None
    group_size: int | None
    excludes: list[str] = Field(default_factory=list)
    quantized_layers: dict[str, LayerEntry] | None = None
    producer: Producer | None = None


def normalize_file(config: HfQuantConfig) -> Normalized:
    q = config.quantization
    # every part is validated already: validating a MoE's layer map again is a pass over
    # hundreds of thousands of entries
    return Normalized.model_construct(
        quant_algo=q.quant_algo,
        kv_algo=q.kv_cache_quant_algo,
        group_size=q.group_size,
        excludes=list(q.exclude_modules or []),
        quantized_layers=q.quantized_layers,
        producer=config.producer,
    )


def kv_algo_of_scheme(scheme: dict[str, Any] | str | None) -> str | None:
    """ModelOpt writes a dict for an FP8 KV cache and the raw algorithm string otherwise."""
    if scheme is None:
        return None
    if isinstance(scheme, str):
        return scheme
    if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
        return "FP8"
    if scheme.get("type") == "int" and scheme.get("num_bits") == 8:
        return "INT8"
    if scheme.get("type") == "float" and scheme.get("num_bits") == 4:
        return "NVFP4"
    return f"{scheme.get('type')}{scheme.get('num_bits')}"


def kv_written(block: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a flat ModelOpt declaration writes that an engine's quant config reads to decide
    whether it builds a KV-cache method: whether ``kv_cache_scheme`` is a ``mapping`` (then its
    ``type`` and ``num_bits``), ``other`` (a string) or ``absent``, and whether a
    ``kv_cache_quant_algo`` is written (as Python tests it). Nothing for a nested one."""
    if isinstance(block.get("quantization"), dict):
        return ()
    scheme = block.get("kv_cache_scheme")
    kind = "mapping" if isinstance(scheme, dict) else "absent" if scheme is None else "other"
    mapping = scheme if isinstance(scheme, dict) else {}
    return (
        ("kv_cache_scheme", kind),
        ("type", mapping.get("type")),
        ("num_bits", mapping.get("num_bits")),
        ("kv_cache_quant_algo", bool(block.get("kv_cache_quant_algo"))),
    )


_GROUP_SIZE: TypeAdapter[int] = TypeAdapter(GroupSize)


def _group_size_of_groups(groups: dict[str, Any] | None) -> int | None:
    """ModelOpt's config.json converter writes the group size inside ``config_groups`` only.
    Every group size stated there is a positive JSON integer (vLLM reads the first weights'
    one): ``0``, negatives, floats, bools and strings raise a ``ValueError`` naming the field."""
    found: int | None = None
    for name, group in (groups or {}).items():
        if not isinstance(group, dict):
            continue
        for part in ("weights", "input_activations"):
            args = group.get(part)
            size = args.get("group_size") if isinstance(args, dict) else None
            if size is None:
                continue
            try:
                _GROUP_SIZE.validate_python(size)
            except ValidationError as exc:
                raise ValueError(
                    f"config_groups.{name}.{part}.group_size: {exc.errors()[0]['msg']} "
                    f"(got {size!r})"
                ) from None
            if part == "weights" and found is None:
                found = size
    return found


def normalize_inline(config: InlineConfig) -> Normalized:
    nested = config.quantization
    algo = config.quant_algo or (nested.quant_algo if nested else None)
    kv = config.kv_cache_quant_algo or kv_algo_of_scheme(config.kv_cache_scheme)
    if kv is None and nested is not None:
        kv = nested.kv_cache_quant_algo
    excludes = (
        config.ignore or config.exclude_modules or (nested.exclude_modules if nested else None)
    )
    layers = config.quantized_layers or (nested.quantized_layers if nested else None)
    group = config.group_size or (nested.group_size if nested else None)
    if group is None:
        group = _group_size_of_groups(config.config_groups)
    return Normalized.model_construct(  # validated parts, as in normalize_file
        quant_algo=algo,
        kv_algo=kv,
        group_size=group,
        excludes=list(excludes or []),
        quantized_layers=layers,
        producer=config.producer,
    )
