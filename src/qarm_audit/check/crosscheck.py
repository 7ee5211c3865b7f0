"""Cross-check every module's shipped operands against its declared scheme; refuse by name."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..declarations import Declaration, Scheme
from ..findings import Finding, finding
from ..modules.inventory import ModuleInfo
from ..modules.operands import KV_OPERANDS, QUANT_OPERANDS, OperandKind, classify_operand
from ..resolve.resolver import INHERITED, Membership
from ..sources.checkpoint import TensorEntry
from .alike import Alike, group_alike
from .bnb import bnb_4bit_shapes
from .gptq import awq_shapes, gptq_shapes
from .groups import partial_group
from .mxfp4 import mxfp4_shapes, unquantized_experts
from .spelling import COMPATIBLE, Spelling, spell


@dataclass(frozen=True)
class Operand:
    """One operand a scheme expects: its name, dtypes, and shape as a function of [out, in]."""

    name: str
    dtypes: frozenset[str] | None
    shape: str
    """``[]`` scalar (one element), ``out,in``, ``out,in/2``, ``out,in/g``, ``out``,
    ``out/bn,in/bk`` (one per 2-D block, rounded up), ``any``."""
    required: bool = True


F32 = frozenset({"F32"})
E4M3 = frozenset({"F8_E4M3"})
"""Every FP8 weight an engine allocates (vLLM 0.33: ModelOpt's FP8 and MXFP8, compressed-tensors'
FP8 and MXFP8, native FP8 alike), which a weight written as F8_E5M2 is copied into by value."""
FLOAT = frozenset({"F32", "BF16", "F16"})
E8M0 = frozenset({"U8", "F8_E8M0"})


@functools.lru_cache(maxsize=1024)
def contract(scheme: Scheme) -> tuple[Operand, ...] | None:
    """The operands a scheme's producer writes, or None when qarm has no contract for it;
    made once per scheme (every group of modules of the scheme asks)."""
    made = _contract_of(scheme)
    return tuple(made) if made is not None else None


def _contract_of(scheme: Scheme) -> list[Operand] | None:
    static = scheme.static_activations
    if scheme.producer == "fp8":
        return _native_fp8(scheme)
    if scheme.producer == "bitsandbytes":
        return _bitsandbytes(scheme)
    if scheme.producer == "gptq":
        return _gptq(scheme)
    if scheme.producer == "awq":
        return _awq()
    if scheme.producer == "mxfp4":
        return _mxfp4(scheme)
    if scheme.producer == "modelopt":
        if scheme.family == "fp8":
            weight = Operand("weight", E4M3, "out,in")
            if scheme.weight_strategy == "tensor":
                return [
                    weight,
                    Operand("weight_scale", F32, "[]"),
                    Operand("input_scale", F32, "[]", required=static),
                ]
            if scheme.weight_strategy == "channel":
                return [weight, Operand("weight_scale", F32, "out")]
            return [weight, Operand("weight_scale", F32, "any")]
        if scheme.family == "nvfp4":
            return [
                Operand("weight", frozenset({"U8"}), "out,in/2"),
                Operand("weight_scale", frozenset({"F8_E4M3"}), "out,in/g"),
                Operand("weight_scale_2", F32, "[]"),
                Operand("input_scale", F32, "[]", required=static),
            ]
        if scheme.family == "mxfp8":
            return [
                Operand("weight", E4M3, "out,in"),
                Operand("weight_scale", E8M0, "out,in/g"),
            ]
        if scheme.family == "mxfp4":
            # MXFP4QTensor: two E2M1 values per byte along in, one E8M0 byte per 32
            return [
                Operand("weight", U8, "out,in/2"),
                Operand("weight_scale", U8, "out,in/g"),
            ]
        return None
    if scheme.family == "fp8":
        shape = {"tensor": "[]", "channel": "out,1", "group": "out,in/g"}.get(
            scheme.weight_strategy or "", "any"
        )
        return [
            Operand("weight", E4M3, "out,in"),
            Operand("weight_scale", FLOAT, shape),
            Operand(
                "input_scale",
                FLOAT,
                "[]" if scheme.activation_strategy == "tensor" else "any",
                required=static,
            ),
        ]
    if scheme.family == "mxfp8":
        # CompressedTensorsW8A8Mxfp8: FP8 weights, one E8M0 uint8 scale per 32
        return [
            Operand("weight", E4M3, "out,in"),
            Operand("weight_scale", U8, "out,in/g"),
            *([Operand("input_scale", FLOAT, "any")] if static else []),
        ]
    if scheme.family == "nvfp4":
        return [
            Operand("weight_packed", frozenset({"U8"}), "out,in/2"),
            Operand("weight_scale", frozenset({"F8_E4M3"}), "out,in/g"),
            Operand("weight_global_scale", F32, "[]"),
            Operand("input_global_scale", F32, "[]", required=static),
        ]
    if scheme.family == "mxfp4":
        # MXFP4PackedCompressor: NVFP4's packing with E8M0 uint8 scales per 32 and no global
        # scale; vLLM's CompressedTensorsW4A4Mxfp4 allocates both as uint8 (an F8_E8M0 scale
        # would be cast by value on load)
        written = [
            Operand("weight_packed", U8, "out,in/2"),
            Operand("weight_scale", U8, "out,in/g"),
        ]
        if not scheme.weight_symmetric:
            written.append(Operand("weight_zero_point", None, "any"))
        if static:
            written.append(Operand("input_global_scale", F32, "[]"))
        return written  # what the compressor does not write is unexpected, not optional
    if scheme.family == "int" and scheme.format == "pack-quantized":
        return [
            Operand("weight_packed", frozenset({"I32"}), "any"),
            Operand("weight_shape", frozenset({"I64", "I32"}), "any"),
            Operand("weight_scale", FLOAT, "any"),
            Operand("weight_zero_point", None, "any", required=not scheme.weight_symmetric),
        ]
    if scheme.family == "int":
        return [
            Operand("weight", frozenset({"I8"}), "out,in"),
            Operand("weight_scale", FLOAT, "any"),
            Operand("input_scale", FLOAT, "any", required=static),
        ]
    return None


def _native_fp8(scheme: Scheme) -> list[Operand]:
    """vLLM's ``Fp8LinearMethod.create_weights``: an ``float8_e4m3fn`` weight; per block a
    float32 ``weight_scale_inv`` of one scale per block (DeepGEMM's UE8M0 format, declared by
    ``scale_fmt``, also as F8_E8M0, which loads into it exactly), else one float32
    ``weight_scale`` and, for static activations, one ``input_scale``."""
    weight = Operand("weight", E4M3, "out,in")
    if scheme.block is not None:
        dtypes = F32 | {"F8_E8M0"} if scheme.scale_format == "ue8m0" else F32
        return [weight, Operand("weight_scale_inv", dtypes, "out/bn,in/bk")]
    return [
        weight,
        Operand("weight_scale", F32, "[]"),
        Operand("input_scale", F32, "[]", required=scheme.static_activations),
    ]


U8 = frozenset({"U8"})


def _bitsandbytes(scheme: Scheme) -> list[Operand]:
    """What transformers' bitsandbytes quantizer saves and a bitsandbytes loader reads: 4-bit, a
    packed U8 weight with its quant state (``absmax``, ``quant_map`` and the
    ``quant_state.bitsandbytes__<type>`` record; double quant: U8 absmax codes and their
    ``nested_*``); 8-bit (LLM.int8), an I8 weight with one F32 ``SCB`` per output row."""
    if scheme.weight_bits == 8:
        return [
            Operand("weight", frozenset({"I8"}), "out,in"),
            Operand("SCB", F32, "out"),
            Operand("weight_format", U8, "[]", required=False),
        ]
    double = scheme.format == "double-quant"
    nested = [
        Operand("weight.nested_absmax", F32, "any"),
        Operand("weight.nested_quant_map", F32, "any"),
    ]
    return [
        Operand("weight", U8, "any"),
        Operand("weight.absmax", U8 if double else F32, "any"),
        Operand("weight.quant_map", F32, "any"),
        *(nested if double else []),
        Operand(f"weight.quant_state.bitsandbytes__{scheme.algo}", U8, "any"),
    ]


I32 = frozenset({"I32"})


def _gptq(scheme: Scheme) -> list[Operand]:
    """What GPTQModel writes and vLLM's ``AutoGPTQLinearMethod`` loads: an int32 ``qweight``,
    ``qzeros`` and 16-bit ``scales``; ``g_idx`` beside them (required with ``desc_act``, which
    it records). Shapes are checked in ``check/gptq.py``: the packed weight is
    ``[in/pack, out]``."""
    return [
        Operand("qweight", I32, "any"),
        Operand("qzeros", I32, "any"),
        Operand("scales", FLOAT, "any"),
        Operand("g_idx", I32, "any", required=scheme.act_order),
    ]


def _awq() -> list[Operand]:
    """What AutoAWQ writes and vLLM's AWQ linear methods load: an int32 ``qweight`` and
    ``qzeros`` and 16-bit ``scales``; no ``g_idx`` (GPTQ's). Shapes: ``check/gptq.py``."""
    return [
        Operand("qweight", I32, "any"),
        Operand("qzeros", I32, "any"),
        Operand("scales", FLOAT, "any"),
    ]


def _mxfp4(scheme: Scheme) -> list[Operand]:
    """What transformers' MXFP4 quantizer saves for gpt-oss's routed experts and vLLM's
    ``GptOssMxfp4MoEMethod`` loads: U8 blocks and U8 E8M0 scales (the loader copies them into
    uint8 parameters), 16-bit biases (gpt-oss builds its MoE with ``has_bias=True``; another
    model type's MoE may have none). Shapes: ``check/mxfp4.py``."""
    bias = scheme.algo == "gpt_oss_mxfp4"
    return [
        Operand("gate_up_proj_blocks", U8, "any"),
        Operand("gate_up_proj_scales", U8, "any"),
        Operand("gate_up_proj_bias", FLOAT, "any", required=bias),
        Operand("down_proj_blocks", U8, "any"),
        Operand("down_proj_scales", U8, "any"),
        Operand("down_proj_bias", FLOAT, "any", required=bias),
    ]


def _expected_shape(
    spec: str, out: int, inner: int, group: int | None, block: tuple[int, int] | None = None
) -> tuple[int, ...] | None:
    if spec == "out/bn,in/bk" and block:
        return (-(-out // block[0]), -(-inner // block[1]))
    if spec == "out,in":
        return (out, inner)
    if spec == "out,in/2":
        return (out, inner // 2)
    if spec == "out,in/g" and group:
        return (out, -(-inner // group))
    if spec == "out,1":
        return (out, 1)
    return None


def _shape_ok(
    spec: str,
    entry: TensorEntry,
    out: int,
    inner: int,
    group: int | None,
    block: tuple[int, int] | None = None,
    lead: tuple[int, ...] = (),
) -> bool:
    """Whether ``entry`` has the shape ``spec`` says, for a weight ``lead + [out, in]``: the
    weight's leading dimensions (a MoE's stacked experts) lead every operand's shape too, and
    nothing else may (an engine's loader asserts the shape it allocated)."""
    shape = entry.shape
    if spec == "any":
        return True
    if spec == "[]":
        n = 1
        for d in shape:
            n *= d
        return n == 1
    if spec == "out":
        return shape in ((*lead, out), (*lead, out, 1))
    expected = _expected_shape(spec, out, inner, group, block)
    return expected is None or shape == (*lead, *expected)


def _weight_shape(info: ModuleInfo) -> Finding | None:
    """A refusal for a weight that is no Linear's: ``[out, in]``, or ``[experts, out, in]``
    for a MoE's stacked experts, and no dimension empty. The operands' shapes are checked
    against it, so a weight of another rank would pass with operands as odd as itself."""
    weight = info.weight
    if weight is None:
        return None
    rank = len(weight.shape)
    if (rank == 2 or (rank == 3 and ".experts" in info.name)) and all(weight.shape):
        return None
    return finding(
        "operand-shape",
        f"{weight.name} has shape {list(weight.shape)}; a Linear's weight is [out, in] (a "
        "MoE's stacked experts [experts, out, in]), every dimension above 0",
        module=info.name,
        tensor=weight.name,
    )


def _dims(info: ModuleInfo, scheme: Scheme) -> tuple[int, int] | None:
    """[out, in] of the unquantized weight, from the shipped weight's shape."""
    weight = info.weight
    if weight is None or len(weight.shape) < 2:
        return None
    out, cols = weight.shape[-2], weight.shape[-1]
    packed = weight.dtype == "U8" and scheme.weight_bits == 4
    return out, cols * 2 if packed else cols


def check_module(
    info: ModuleInfo, membership: Membership, scheme: Scheme | None
) -> tuple[Spelling, list[Finding]]:
    """The shipped spelling of one module and every refusal its operands earn."""
    spelling = spell(info)
    name = info.name
    out: list[Finding] = []
    for operand, entry in info.operands.items():
        if classify_operand(operand) is OperandKind.UNCLASSIFIED:
            out.append(
                finding(
                    "unclassified-operand",
                    f"{entry.name} ({entry.dtype} {list(entry.shape)}) looks like a quantization "
                    "operand of no family qarm knows; it must not be read as unquantized",
                    module=name,
                    tensor=entry.name,
                )
            )
    if scheme is None:
        if spelling.quantized:
            state = "excluded" if membership.bucket == "excluded" else "not declared quantized"
            tensor = _first_quant_tensor(info)
            out.append(
                finding(
                    "unquantized-ships-quantized",
                    f"{name} is {state} ({membership.how}"
                    f"{' ' + repr(membership.rule) if membership.rule else ''}) but ships "
                    f"{spelling.family} operands ({spelling.detail})",
                    module=name,
                    tensor=tensor,
                )
            )
        return spelling, out
    if not spelling.quantized:
        if membership.how in INHERITED and info.kind != "linear":
            return spelling, out  # a container (A_log, dt_bias) that inherits a child's scheme
        if scheme.producer == "mxfp4":
            out.append(unquantized_experts(info, scheme, membership))
            return spelling, out
        weight = info.weight
        out.append(
            finding(
                "quantized-ships-unquantized",
                f"{name} is declared {scheme.name} ({membership.how}) but ships "
                f"{'a plain ' + weight.dtype + ' weight' if weight else 'no weight'} and no scales",
                module=name,
                tensor=weight.name if weight else "",
            )
        )
        return spelling, out
    if spelling.family not in COMPATIBLE.get(scheme.family, frozenset()):
        out.append(
            finding(
                "spelling-mismatch",
                f"{name} is declared {scheme.name} ({scheme.family}) but ships the "
                f"{spelling.family} spelling ({spelling.detail})",
                module=name,
                tensor=_first_quant_tensor(info),
            )
        )
        return spelling, out
    if (
        spelling.producer
        and spelling.producer not in (scheme.producer, "native")
        and (scheme.family == "nvfp4")
    ):
        out.append(
            finding(
                "spelling-mismatch",
                f"{name} is declared {scheme.producer} {scheme.name} but ships the "
                f"{spelling.producer} spelling ({spelling.detail})",
                module=name,
                tensor=_first_quant_tensor(info),
            )
        )
        return spelling, out
    out.extend(_check_contract(info, scheme))
    return spelling, out


def _first_quant_tensor(info: ModuleInfo) -> str:
    for operand, entry in sorted(info.operands.items()):
        if classify_operand(operand) is OperandKind.QUANT:
            return entry.name
    weight = info.weight
    return weight.name if weight else ""


def _check_contract(info: ModuleInfo, scheme: Scheme) -> list[Finding]:
    spec = contract(scheme)
    if spec is None:
        return []
    malformed = _weight_shape(info)
    if malformed is not None:
        return [malformed]
    dims = _dims(info, scheme)
    weight = info.weight
    lead = weight.shape[:-2] if weight is not None else ()
    out: list[Finding] = []
    partial = _partial_group(info, scheme, dims)
    if partial is not None:
        out.append(partial)
    for operand in spec:
        entry = info.operands.get(operand.name)
        if entry is None:
            if operand.required:
                out.append(
                    finding(
                        "operand-missing",
                        f"{info.name} is declared {scheme.name} and ships no {operand.name}",
                        module=info.name,
                        tensor=f"{info.name}.{operand.name}",
                    )
                )
            continue
        if operand.dtypes is not None and entry.dtype not in operand.dtypes:
            out.append(
                finding(
                    "operand-dtype",
                    f"{entry.name} is {entry.dtype}; {scheme.name} writes "
                    f"{'/'.join(sorted(operand.dtypes))}",
                    module=info.name,
                    tensor=entry.name,
                )
            )
            continue
        if dims is not None and not _shape_ok(
            operand.shape, entry, *dims, scheme.group_size, scheme.block, lead
        ):
            out.append(
                finding(
                    "operand-shape",
                    f"{entry.name} has shape {list(entry.shape)}; {scheme.name} with weight "
                    f"[out={dims[0]}, in={dims[1]}] writes [{operand.shape}]"
                    + (f" with group {scheme.group_size}" if "g" in operand.shape else "")
                    + (
                        f" with block {scheme.block[0]}x{scheme.block[1]}"
                        if scheme.block and "bn" in operand.shape
                        else ""
                    ),
                    module=info.name,
                    tensor=entry.name,
                )
            )
    if scheme.producer == "bitsandbytes" and scheme.weight_bits == 4:
        out.extend(bnb_4bit_shapes(info, scheme))
    if scheme.producer == "gptq":
        out.extend(gptq_shapes(info, scheme))
    if scheme.producer == "awq":
        out.extend(awq_shapes(info, scheme))
    if scheme.producer == "mxfp4":
        out.extend(mxfp4_shapes(info, scheme))
    out.extend(_strays(info, scheme, spec))
    return out


WHOLE_GROUPS = frozenset(
    {
        ("modelopt", "nvfp4"),
        ("compressed-tensors", "nvfp4"),
        ("modelopt", "mxfp8"),
        ("compressed-tensors", "int"),
    }
)
"""Schemes whose engine layers take whole groups only: each engine raises, or allocates
``in // group`` scales (one group fewer than the producer writes); the engine profiles say
which, per release (``load_errors`` of code ``operand-shape``)."""


def _partial_group(
    info: ModuleInfo, scheme: Scheme, dims: tuple[int, int] | None
) -> Finding | None:
    packed = info.operands.get("weight_packed")
    if scheme.format == "pack-quantized" and packed is not None and packed.dtype == "I32":
        # int32 words along the input: as many inputs as the words hold, rounded up
        dims = (packed.shape[0], packed.shape[-1] * (32 // (scheme.weight_bits or 4)))
    if (scheme.producer, scheme.family) not in WHOLE_GROUPS or dims is None:
        return None
    return partial_group(info.name, dims[1], scheme, f"{info.name}.weight_scale")


OPTIONAL: dict[tuple[str, str], frozenset[str]] = {
    # compressed-tensors group quantization with activation ordering
    ("compressed-tensors", "int"): frozenset({"weight_g_idx"}),
}
"""Operands a producer writes beside its contract in some exports; nothing else may be."""

SMOOTHED = frozenset({"NVFP4_AWQ", "NVFP4_SVD", "W4A16_AWQ", "W4A8_AWQ", "W8A8_SQ_PER_CHANNEL"})
"""ModelOpt algorithms whose export keeps the smoothing factor (``pre_quant_scale``) beside the
scales (docs/formats.md). Under any other (FP8, NVFP4) the tensor is a stray: no vLLM 0.33
layer registers it, and its weight loader raises 'There is no module or parameter named'."""


def _optional(scheme: Scheme) -> frozenset[str]:
    if scheme.producer == "modelopt" and (scheme.algo or scheme.name).upper() in SMOOTHED:
        return frozenset({"pre_quant_scale"})
    return OPTIONAL.get((scheme.producer, scheme.family), frozenset())


def _strays(info: ModuleInfo, scheme: Scheme, spec: Sequence[Operand]) -> list[Finding]:
    """Every shipped tensor the scheme's producer does not write: engines fail on an unexpected
    parameter or drop its bytes silently, so a tensor that cannot be placed is refused."""
    expected = {o.name for o in spec} | KV_OPERANDS | {"bias"}
    expected |= _optional(scheme)
    out: list[Finding] = []
    for name, entry in info.operands.items():
        if name in expected or classify_operand(name) is OperandKind.UNCLASSIFIED:
            continue  # an unclassified operand is refused on its own
        family = QUANT_OPERANDS.get(name)
        what = f"it belongs to the {family} family" if family else "it is no operand qarm knows"
        out.append(
            finding(
                "operand-unexpected",
                f"{entry.name} ({entry.dtype} {list(entry.shape)}) is no operand of "
                f"{scheme.name} as {scheme.producer} writes it "
                f"({', '.join(sorted(o.name for o in spec))}); {what}",
                module=info.name,
                tensor=entry.name,
            )
        )
    return out


def uncontracted(declaration: Declaration, alike: Sequence[Alike]) -> list[Finding]:
    """A warning per declared scheme with modules and no operand contract: their tensors were
    checked for spelling only, never for strays, dtypes or shapes, so the audit cannot say
    clean for them."""
    modules: dict[str, int] = {}
    for group in alike:
        membership = group.membership
        scheme = declaration.schemes.get(membership.bucket)
        if membership.declared_quantized and scheme is not None and contract(scheme) is None:
            modules[membership.bucket] = modules.get(membership.bucket, 0) + len(group.members)
    return [
        finding(
            "operands-unchecked",
            f"{name} ({declaration.schemes[name].declared_arm}): qarm knows no operand contract "
            f"for this scheme, so the tensors of its {count} module{'s' * (count != 1)} were not "
            "checked against what its producer writes (strays, dtypes, shapes)",
        )
        for name, count in sorted(modules.items())
    ]


def check_all(
    declaration: Declaration,
    modules: Mapping[str, ModuleInfo],
    memberships: Mapping[str, Membership],
    alike: Sequence[Alike] | None = None,
) -> tuple[dict[str, Spelling], list[Finding]]:
    """Check every module. Modules alike but for their names (a MoE's experts) are checked once
    per group of :func:`~.alike.group_alike` (given, or made here), which learns its spelling;
    only a group that earned a refusal is checked again per module, to name each one."""
    spellings: dict[str, Spelling] = {}
    found: list[Finding] = []
    for group in group_alike(modules, memberships) if alike is None else alike:
        info, membership = group.example, group.membership
        if not any(op not in KV_OPERANDS for op in info.operands):
            continue  # a module that ships only KV scales carries no weight spelling
        scheme = (
            declaration.schemes.get(membership.bucket) if membership.declared_quantized else None
        )
        spelling, refusals = check_module(info, membership, scheme)
        group.spelling = spelling
        if not refusals:
            spellings.update(dict.fromkeys([m.name for m in group.members], spelling))
            continue
        for member in group.members:
            spellings[member.name], refusals = check_module(
                member, memberships[member.name], scheme
            )
            found.extend(refusals)
    return spellings, found
