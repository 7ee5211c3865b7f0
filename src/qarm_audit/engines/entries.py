"""The engine facts a profile cites beside its routing rules: refusals in the engine's own words
(a declaration, a layer, a load), how it reads a declared KV cache, what its model loaders rename
away, the config groups it drops. Each entry cites the engine's source."""

from __future__ import annotations

import re
from string import Formatter
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, model_validator

from ..frozen import frozen_config
from ..layers.model_config import ModelConfig

SOURCE_FORMAT = re.compile(r"^[\w.-]+/[\w.-]+ \S+@[\w.-]+")
"""``owner/repo path@commit`` (a tag where the release records no commit), optionally followed
by line numbers or a remark."""


def _cited(source: str | None) -> str | None:
    if source is not None and not SOURCE_FORMAT.match(source):
        raise ValueError(f"source {source!r} is not 'owner/repo path@commit'")
    return source


Source = Annotated[str | None, AfterValidator(_cited)]
"""Where a rule comes from in the engine's source: ``owner/repo path@commit``."""

KV_ERROR_FIELDS = frozenset({"num_bits", "type", "strategy", "symmetric", "strategy_enum"})
"""What a :class:`KvError` text may name: the declaration's values it is filled with."""


def _kv_template(text: str) -> str:
    """A :class:`KvError` text fills in only its named values, each whole: no attribute or
    index (which would read into the values), no format spec (which a value of another type
    than the text expects would fail), and braces in pairs."""
    try:
        parts = list(Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"text {text!r} is no format template: {exc}") from None
    for _literal, field, spec, _conversion in parts:
        if field is None:
            continue
        if spec:
            raise ValueError(f"text {text!r} formats {{{field}}} with {spec!r}; it may not")
        if field not in KV_ERROR_FIELDS:
            raise ValueError(
                f"text {text!r} names {{{field}}}; it may name only "
                + ", ".join(f"{{{name}}}" for name in sorted(KV_ERROR_FIELDS))
            )
    return text


def cite(source: str | None) -> str:
    """`` (<source>)`` for a message that ends with what the engine does; ``""`` for none."""
    return f" ({source})" if source else ""


class LoadError(BaseModel):
    """The engine's wording for a refusal qarm finds by itself (e.g. ``fused-shards-disagree``).

    The text is appended to the finding's message. ``cause`` tells the two ways fused shards
    disagree apart: ``exclude`` (some shards excluded or ignored, others not) or ``scheme``
    (shards declared different schemes). ``family`` (the scheme family the finding's module is
    declared) and ``says`` (words the finding's message holds) pick one kind of a code that
    covers many, such as an ``operand-shape`` for a partial group; ``quantized``, whether the
    checkpoint declares a quantization at all (engines check an unquantized model further).
    """

    model_config = frozen_config(extra="forbid")

    code: str
    producer: list[str] | None = None
    cause: str | None = None
    family: list[str] | None = None
    says: str | None = None
    quantized: bool | None = None
    text: str | None = None
    """The engine's error text. Placeholders: ``{module}``, ``{algos}``, ``{shards}``, and
    the finding's tensor's ``{shape}`` (``(8,)``) and ``{torch_size}`` (``torch.Size([8])``)."""
    note: str | None = None
    """What the engine does instead, when it raises nothing."""
    source: Source = None

    @model_validator(mode="after")
    def _says_something(self) -> LoadError:
        if self.text is None and self.note is None:
            raise ValueError("a load error needs a text or a note")
        return self


class DeclarationError(BaseModel):
    """The engine refuses the declaration itself, before building any layer (e.g. vLLM and a
    compressed-tensors ``sparsity_config``): ``engine-refuses-declaration``."""

    model_config = frozen_config(extra="forbid")

    producer: list[str] | None = None
    sparsity: bool | None = None
    """Holds when the declaration has (True) or has not (False) sparsity targets."""
    declared_family: list[str] | None = None
    """Holds when a declared scheme's family is one of these (``mxfp4``, ...)."""
    declared_strategy: list[str] | None = None
    """Holds when a declared scheme's weight strategy is one of these (``block``, ...)."""
    static_activations: bool | None = None
    """Holds when a declared scheme (of ``declared_strategy``, where given) has calibrated
    static activation scales (True) or not (False)."""
    declared_bits_not: list[int] | None = None
    """Holds when a declared scheme's weight bits are none of these (GPTQ: 4 and 8)."""
    declared_symmetric: bool | None = None
    """Holds when a declared scheme's weights are symmetric (True) or not (False)."""
    declared_group_size_not: list[int] | None = None
    """Holds when a declared scheme's group size is none of these (-1: one group a column)."""
    act_order: bool | None = None
    """Holds when a declared scheme quantizes in activation order with groups (GPTQ
    ``desc_act``) (True) or not (False)."""
    weightless: bool | None = None
    """Holds when a declared scheme declares no weights (a compressed-tensors group of
    ``input_activations`` only, as an attention-quantization recipe writes) (True) or
    declares them (False)."""
    text: str
    """The engine's error text. Placeholders: ``{bits}``, ``{sym}``, ``{group_size}``,
    ``{actorder}`` (the first declared scheme the error holds for)."""
    stage: str = "before building any layer"
    """When the engine raises it."""
    source: Source = None


class KvTaken(BaseModel):
    """The only KV-cache declarations of a producer the engine takes: it ignores any other
    (``kv-cache-ignored``), and its KV cache is then the model's dtype with the shipped scales
    unused. Algorithms compare without case (vLLM lowers ModelOpt's)."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    algo: list[str]
    strategy: list[str]
    symmetric: bool = True
    dynamic: bool = False
    scales_loaded: bool = False
    """The engine still builds its KV-cache method for any other form and loads the shipped
    scales, unused: a scale it cannot load still fails the load (not where a
    :class:`KvUnbuilt` entry says it builds no method for the declaration)."""
    note: str
    """What the engine does with any other, in its own terms; ``{algo}`` is the declared
    algorithm."""
    scales_note: str = ""
    """Where ``scales_loaded``, what the engine does with the shipped scales (added to the note
    where it builds its KV-cache method)."""
    source: Source = None


class KvUnbuilt(BaseModel):
    """A producer's KV-cache declaration for which the engine's quant config builds no
    KV-cache method: no k/v scale parameter exists, so the shipped scales are not loaded. Where
    the engine still sets its KV-cache dtype from the declaration, it quantizes the KV cache
    with the attention layers' default scales of 1.0 (``kv-scales-unloaded``); else the KV
    cache is the model's dtype (``kv-cache-ignored``). The config builds the method where the
    declaration's ``kv_cache_scheme`` is a mapping whose ``[type, num_bits]`` is among
    ``mapping_builds`` (compared as Python compares them; None: any mapping), or, where it is
    no mapping and ``otherwise_algo_key``, where a ``kv_cache_quant_algo`` is written (as
    Python tests it)."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    algo: list[str]
    """The declared ``quant_algo`` (upper case) whose quant config decides this way."""
    declaration_form: list[str]
    """``flat`` (config.json's ``quantization_config``) or ``nested``."""
    mapping_builds: list[list[Any]] | None = None
    otherwise_algo_key: bool = False
    dtype_from_declaration: bool
    """The engine sets its KV-cache dtype from the declaration itself, without the quant
    config's reading (vLLM); else from that reading, so without a method the KV cache is the
    model's dtype (SGLang)."""
    note: str
    """What the engine does, in its own terms."""
    source: Source = None


class ForModels(BaseModel):
    """An entry that holds for these architectures, where config.json (or its
    ``text_config``) states ``config_key``."""

    model_config = frozen_config(extra="forbid")

    architecture: list[str]
    config_key: str

    def holds_for(self, model: ModelConfig) -> bool:
        return model.architecture in self.architecture and model.get(self.config_key) is not None


SCALES_OF_ONE = "the KV cache is quantized with the attention layers' default scales of 1.0"
"""What a quantized KV cache whose shipped scales are not loaded runs with, as a rule."""


class KvScalesDropped(ForModels):
    """The engine does not load the shipped KV scales into this model's attention layers: it
    builds no KV-cache method on them, or its weight loader maps every KV-scale name a producer
    writes to another attention layer's parameter names. The KV cache is then quantized with
    scales of 1.0 (``kv-scales-unloaded``), or left in the model's dtype. Holds for these
    architectures where config.json states ``config_key`` (vLLM: ``kv_lora_rank``, with which
    it builds multi-head latent attention)."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    dtype_from_declaration: bool
    """The engine still sets its KV-cache dtype from the declaration (the KV cache is then
    quantized with scales of 1.0); else the KV cache is the model's dtype
    (``kv-cache-ignored``)."""
    note: str
    """What the engine does, in its own terms."""
    gpu_max: int | None = None
    """The highest compute capability it holds on (above it an attention backend keeps a KV
    cache of its own); None: every GPU. With no GPU known it is taken to hold."""
    effect: str = SCALES_OF_ONE
    """What the unloaded scales mean where the KV cache is quantized (``kv-scales-unloaded``):
    an attention backend may store the cache in a format that reads no static scale."""
    source: Source = None


class KvDtypeFromGpu(ForModels):
    """The engine sets these models' KV-cache dtype from the GPU, not from the declaration
    (with ``--kv-cache-dtype auto``): quantized from compute capability ``quantized_from`` up,
    bfloat16 below it and wherever config.json states ``bfloat16_key``. Holds where
    config.json states ``config_key`` (SGLang: ``index_topk``, DeepSeek's sparse attention)."""

    model_config = frozen_config(extra="forbid")

    quantized_from: int
    bfloat16_key: str | None = None
    note: str
    """What the engine does, in its own terms."""
    source: Source = None


class KvScaleOnLogits(ForModels):
    """The engine loads a shipped ``k_scale`` of the module ``<layer>.<module>`` into an
    attention layer whose default backend, from compute capability ``gpu_min`` up, writes the
    FP8 KV cache without a scale and multiplies the attention logits by that ``k_scale`` as it
    reads: a shipped scale other than 1.0 changes the attention it is read for."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    gpu_min: int
    gpu_max: int | None = None
    kv_algo: list[str] | None = None
    """Declared KV algorithms it holds for (upper case): the backend applies the scale only to
    an FP8 KV cache, which the engine sets from these; None: whatever is declared."""
    module: str
    """The shipped scale's module, below the decoder layer: ``self_attn.k_proj``."""
    note: str
    """What the engine does, in its own terms."""
    source: Source = None


class UnquantizedLayer(ForModels):
    """A layer these models build without a quant config, which the generic layer rules (an
    engine without layer facts) take for a Linear built with one: ``module`` below the decoder
    layer, as the checkpoint names it."""

    model_config = frozen_config(extra="forbid")

    module: str
    layer_class: str
    note: str
    """What the engine builds, in its own terms."""
    source: Source = None


class DequantizedOnLoad(ForModels):
    """A layer these models build without a quant config whose weight the loader takes in
    FP8 too, dequantizing it with its scale as it loads: ``module`` below the decoder layer
    ships ``weight`` in ``weight_dtype`` beside operands named ``scale_operands`` only, each of
    at least one dimension."""

    model_config = frozen_config(extra="forbid")

    module: str
    weight_dtype: str
    scale_operands: list[str]
    note: str
    """What the loader does, in its own terms."""
    source: Source = None


class LoaderDrop(BaseModel):
    """An operand the model class's weight loader renames, for these architectures, to a name
    the layer's quant method registers no parameter under: the loader skips it and the layer
    computes with the parameter's initial value (``operand-unloaded``)."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    declared_family: list[str] | None = None
    """Declared scheme families whose quant methods register ``operand``."""
    declared_strategy: list[str] | None = None
    """Declared weight strategies the quant method registers ``operand`` for."""
    architecture: list[str]
    """config.json's architectures (the first entry) whose model class renames it."""
    module_contains: list[str] | None = None
    """Holds for modules whose name contains one of these (``.experts.``: routed experts)."""
    config_format: list[str] | None = None
    """Holds where the compressed-tensors config's top-level ``format`` is one of these."""
    operand: str
    renamed_to: str
    reason: str
    """What the engine does, in its own terms."""
    source: Source = None


class GroupSkipped(BaseModel):
    """A compressed-tensors config group the engine drops before it matches any layer: one
    whose only target ends in ``target_suffix`` (vLLM: an attention class, ``LlamaAttention``)
    (``config-group-skipped``)."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    target_suffix: str
    note: str
    """What the engine does, in its own terms; ``{target}`` is the group's target."""
    source: Source = None


class KvError(BaseModel):
    """A check the engine makes of a producer's KV-cache declaration as it builds each
    attention layer of ``layer_class``, raising where it fails: ``engine-refuses-declaration``.
    The checks run in the profile's order, and the first that fails is the error raised."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    reads: Literal["type_bits", "strategy", "symmetric"]
    """What the check reads of the declaration as written (a key not written is null):
    ``[type, num_bits]``, ``strategy``, or whether ``symmetric`` is true as Python tests a
    value (``if not is_symmetric``)."""
    accepts: list[Any]
    """The values it passes, compared as Python compares them (``8.0 == 8``)."""
    text: Annotated[str, AfterValidator(_kv_template)]
    """The engine's error text, a :meth:`str.format` template over ``num_bits``, ``type``,
    ``strategy``, ``symmetric`` (as written, None where not) and ``strategy_enum``
    (``QuantizationStrategy.GROUP``, as the engine prints the strategy it parsed)."""
    layer_class: str = "Attention"
    """The engine runs the check only for a layer of this class or a subclass of it (vLLM's
    MLA attention is not one, and takes any KV-cache declaration)."""
    stage: str = "as it builds the first attention layer"
    source: Source = None


class KvDtypeError(BaseModel):
    """The engine refuses, as it validates its configuration, the KV-cache dtype it takes from
    a producer's declaration for a model of this kind: ``engine-refuses-declaration``. Holds
    where the declared KV algorithm is in ``kv_algo`` and the text model's config is the kind:
    its ``model_type`` is in ``text_model_types``, no key of ``unless_falsy`` is stated null or
    falsy, and ``config_key`` is stated other than null; except where it states a key of
    ``instead`` truthy, which then asks for ``instead[key]`` in place of ``config_key``. A key
    of ``instead`` stated null or falsy leaves the kind undecided (the releases test it
    differently), and the entry then does not hold."""

    model_config = frozen_config(extra="forbid")

    producer: list[str]
    kv_algo: list[str]
    """Declared KV algorithms (upper case) the engine makes this KV-cache dtype of."""
    text_model_types: list[str]
    config_key: str
    instead: dict[str, str] = {}
    unless_falsy: list[str] = []
    text: str
    """The engine's error text."""
    stage: str
    """When the engine raises it."""
    source: Source = None

    def holds_for(self, model: ModelConfig) -> bool:
        if model.text_model_type not in self.text_model_types:
            return False
        if any(model.text_state(key) in ("null", "falsy") for key in self.unless_falsy):
            return False
        needed = self.config_key
        for switch, key in self.instead.items():
            state = model.text_state(switch)
            if state in ("null", "falsy"):
                return False
            if state == "truthy":
                needed = key
        return model.text_state(needed) in ("falsy", "truthy")


class LayerError(BaseModel):
    """The engine refuses at load a layer of this kind declared with a scheme it does not
    take there (vLLM: a compressed-tensors embedding that is not weight-only INT): ``no-arm``
    on the module. The scheme loads when its family, weight-only-ness and weight strategy are
    all among the ``loads_*`` values given."""

    model_config = frozen_config(extra="forbid")

    producer: list[str] | None = None
    layer_kind: list[str]
    """The engine layer kinds (``embedding``, ...) the error is for."""
    loads_family: list[str] | None = None
    loads_weight_only: bool | None = None
    loads_strategy: list[str] | None = None
    reason: str
    error: str
    """The engine's error text; ``{scheme}`` is the declared scheme."""
    source: Source = None
