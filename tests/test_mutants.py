"""Tests written to kill the mutants mutmut found surviving in spelling.py, crosscheck.py,
resolver.py and matchers.py (docs/reliability.md lists what survives and why).

Each table pins a whole value (a spelling with its detail, an operand contract, a finding with
its message), so that a changed literal, a dropped argument or a flipped condition shows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qarm_audit.check.crosscheck import (
    F32,
    FLOAT,
    Operand,
    _dims,
    _expected_shape,
    _first_quant_tensor,
    _shape_ok,
    check_all,
    check_module,
    contract,
)
from qarm_audit.check.spelling import NONE, Spelling, spell
from qarm_audit.declarations import read_declaration
from qarm_audit.declarations.schemes import Scheme
from qarm_audit.errors import PatternError
from qarm_audit.modules.inventory import ModuleInfo, build_inventory
from qarm_audit.resolve import resolve
from qarm_audit.resolve.matchers import (
    FirstMatch,
    PrefixIndex,
    SubstringSet,
    WildcardSet,
    _top_level_bar,
    compile_user_regex,
    glob_prefix,
    regex_prefix,
)
from qarm_audit.resolve.resolver import Membership, _language_model_aliases
from qarm_audit.sources.checkpoint import TensorEntry

MODULE = "model.layers.0.mlp.down_proj"
FP8S = frozenset({"F8_E4M3"})  # what every FP8 weight is allocated as


def module(ops: list[tuple[str, str, tuple[int, ...]]], name: str = MODULE) -> ModuleInfo:
    return build_inventory([TensorEntry(f"{name}.{o}", d, s, 0, 0) for o, d, s in ops])[name]


# -- spelling --------------------------------------------------------------------------------

W = "weight"
SPELLINGS: dict[str, tuple[list[Any], tuple[str, str, str]]] = {
    "plain": ([(W, "BF16", (4, 4))], ("none", "", "plain weight")),
    "plain-f32": ([(W, "F32", (4, 4))], ("none", "", "plain weight")),
    "plain-f16": ([(W, "F16", (4, 4))], ("none", "", "plain weight")),
    "plain-f64": ([(W, "F64", (4, 4))], ("none", "", "plain weight")),
    "bias-only": ([("bias", "BF16", (4,))], ("none", "", "plain weight")),
    "kv-on-plain": ([(W, "BF16", (4, 4)), ("k_scale", "F32", ())], ("none", "", "plain weight")),
    "bare-e4m3": ([(W, "F8_E4M3", (4, 4))], ("fp8", "", "weight F8_E4M3 with no scale")),
    "bare-e5m2": ([(W, "F8_E5M2", (4, 4))], ("fp8", "", "weight F8_E5M2 with no scale")),
    "bare-u8": ([(W, "U8", (4, 4))], ("unknown", "", "weight U8 with no scale")),
    "bare-i8": ([(W, "I8", (4, 4))], ("int", "", "weight I8 with no scale")),
    "bare-i32": ([(W, "I32", (4, 4))], ("unknown", "", "weight I32 with no scale")),
    "gptq-qweight": ([("qweight", "I32", (4, 4))], ("awq-gptq", "", "qweight/qzeros/scales")),
    "gptq-qzeros": ([("qzeros", "I32", (4, 4))], ("awq-gptq", "", "qweight/qzeros/scales")),
    "gptq-scales": ([("scales", "F16", (4, 4))], ("awq-gptq", "", "qweight/qzeros/scales")),
    "gptq-g_idx": ([("g_idx", "I32", (4,))], ("awq-gptq", "", "qweight/qzeros/scales")),
    "sparse-compressed": (
        [("compressed", "BF16", (4,))],
        ("sparse", "compressed-tensors", "sparse bitmask (compressed, bitmask)"),
    ),
    "sparse-bitmask": (
        [("bitmask", "U8", (4,))],
        ("sparse", "compressed-tensors", "sparse bitmask (compressed, bitmask)"),
    ),
    "sparse-row_offsets": (
        [("row_offsets", "I32", (4,))],
        ("sparse", "compressed-tensors", "sparse bitmask (compressed, bitmask)"),
    ),
    "marlin-scale_packed": (
        [("scale_packed", "F16", (4,))],
        ("marlin-24", "compressed-tensors", "marlin-24 (scale_packed, meta)"),
    ),
    "marlin-meta": (
        [("meta", "I16", (4,))],
        ("marlin-24", "compressed-tensors", "marlin-24 (scale_packed, meta)"),
    ),
    "ct-nvfp4": (
        [
            ("weight_packed", "U8", (4, 2)),
            ("weight_scale", "F8_E4M3", (4, 1)),
            ("weight_global_scale", "F32", ()),
        ],
        (
            "nvfp4",
            "compressed-tensors",
            "weight_packed U8 + weight_scale F8_E4M3 + weight_global_scale",
        ),
    ),
    "ct-mxfp4-u8": (
        [("weight_packed", "U8", (4, 2)), ("weight_scale", "U8", (4, 1))],
        ("mxfp4", "compressed-tensors", "weight_packed U8 + E8M0 weight_scale"),
    ),
    "ct-mxfp4-e8m0": (
        [("weight_packed", "U8", (4, 2)), ("weight_scale", "F8_E8M0", (4, 1))],
        ("mxfp4", "compressed-tensors", "weight_packed U8 + E8M0 weight_scale"),
    ),
    "ct-int": (
        [("weight_packed", "I32", (4, 1)), ("weight_scale", "F16", (4, 1))],
        ("int", "compressed-tensors", "weight_packed I32 (pack-quantized)"),
    ),
    "ct-packed-f16": (
        [("weight_packed", "F16", (4, 1)), ("weight_scale", "F16", (4, 1))],
        ("unknown", "", "weight_packed F16"),
    ),
    "ct-packed-u8-f32": (
        [("weight_packed", "U8", (4, 2)), ("weight_scale", "F32", (4, 1))],
        ("unknown", "", "weight_packed U8"),
    ),
    "native-e4m3": (
        [(W, "F8_E4M3", (4, 4)), ("weight_scale_inv", "F32", (1, 1))],
        ("fp8", "native", "F8 weight + block weight_scale_inv"),
    ),
    "native-e5m2": (
        [(W, "F8_E5M2", (4, 4)), ("weight_scale_inv", "F32", (1, 1))],
        ("fp8", "native", "F8 weight + block weight_scale_inv"),
    ),
    "inv-on-bf16": (
        [(W, "BF16", (4, 4)), ("weight_scale_inv", "F32", (1, 1))],
        ("scales-only", "", "BF16 weight with weight_scale_inv"),
    ),
    "mxfp8-u8": (
        [(W, "F8_E4M3", (4, 4)), ("weight_scale", "U8", (4, 1))],
        ("mxfp8", "", "F8 weight + E8M0 weight_scale"),
    ),
    "mxfp8-e8m0": (
        [(W, "F8_E5M2", (4, 4)), ("weight_scale", "F8_E8M0", (4, 1))],
        ("mxfp8", "", "F8 weight + E8M0 weight_scale"),
    ),
    "fp8-with-2": (
        [(W, "F8_E4M3", (4, 4)), ("weight_scale", "F32", ()), ("weight_scale_2", "F32", ())],
        ("unknown", "", "F8 weight with a weight_scale_2"),
    ),
    "fp8": (
        [(W, "F8_E4M3", (4, 4)), ("weight_scale", "F32", ())],
        ("fp8", "", "F8_E4M3 weight + weight_scale"),
    ),
    "fp8-e5m2": (
        [(W, "F8_E5M2", (4, 4)), ("weight_scale", "F32", ())],
        ("fp8", "", "F8_E5M2 weight + weight_scale"),
    ),
    "fp8-input-only": (
        [(W, "F8_E4M3", (4, 4)), ("input_scale", "F32", ())],
        ("fp8", "", "F8_E4M3 weight + weight_scale"),
    ),
    "nvfp4-modelopt": (
        [(W, "U8", (4, 2)), ("weight_scale", "F8_E4M3", (4, 1)), ("weight_scale_2", "F32", ())],
        ("nvfp4", "modelopt", "weight U8 + weight_scale F8_E4M3 + weight_scale_2"),
    ),
    "nvfp4-f4": (
        [(W, "F4", (4, 4)), ("weight_scale", "F8_E4M3", (4, 1)), ("weight_scale_2", "F32", ())],
        ("nvfp4", "modelopt", "weight U8 + weight_scale F8_E4M3 + weight_scale_2"),
    ),
    "nvfp4-no-global": (
        [(W, "U8", (4, 2)), ("weight_scale", "F8_E4M3", (4, 1))],
        ("nvfp4", "", "weight U8 + weight_scale F8_E4M3, no global scale"),
    ),
    "mxfp4-u8": (
        [(W, "U8", (4, 2)), ("weight_scale", "U8", (4, 1))],
        ("mxfp4", "", "weight U8 + E8M0 weight_scale"),
    ),
    "mxfp4-e8m0": (
        [(W, "F4", (4, 4)), ("weight_scale", "F8_E8M0", (4, 1))],
        ("mxfp4", "", "weight U8 + E8M0 weight_scale"),
    ),
    "awq-bf16": (
        [(W, "U8", (4, 2)), ("weight_scale", "BF16", (4, 1))],
        ("awq", "modelopt", "weight U8 (int4 pairs) + float weight_scale"),
    ),
    "awq-f32": (
        [(W, "U8", (4, 2)), ("weight_scale", "F32", (4, 1))],
        ("awq", "modelopt", "weight U8 (int4 pairs) + float weight_scale"),
    ),
    "u8-int-scale": (
        [(W, "U8", (4, 2)), ("weight_scale", "I32", (4, 1))],
        ("unknown", "", "weight U8 with weight_scale"),
    ),
    "int8": (
        [(W, "I8", (4, 4)), ("weight_scale", "F32", (4, 1))],
        ("int", "", "weight I8 + weight_scale"),
    ),
    "scales-on-bf16": (
        [(W, "BF16", (4, 4)), ("input_scale", "F32", ()), ("weight_scale", "F32", ())],
        ("scales-only", "", "BF16 weight with input_scale, weight_scale"),
    ),
    "scales-no-weight": (
        [("weight_scale", "F32", ())],
        ("scales-only", "", "no weight with weight_scale"),
    ),
    "unknown-i32": (
        [(W, "I32", (4, 4)), ("weight_scale", "F32", ())],
        ("unknown", "", "weight I32 with weight_scale"),
    ),
    "unclassified-is-not-spelling": (
        [(W, "BF16", (4, 4)), ("weight_bogus_scale", "F32", ())],
        ("none", "", "plain weight"),
    ),
}


@pytest.mark.parametrize("case", sorted(SPELLINGS))
def test_every_spelling_with_its_detail(case: str) -> None:
    ops, expected = SPELLINGS[case]
    got = spell(module(ops))
    assert (got.family, got.producer, got.detail) == expected
    assert got.quantized is (expected[0] != "none")


def test_none_spelling_is_unquantized() -> None:
    assert Spelling("none", "", "plain weight") == NONE and not NONE.quantized
    assert Spelling("fp8", "", "").quantized


# -- operand contracts -----------------------------------------------------------------------


def scheme(
    producer: str,
    family: str,
    strategy: str | None = None,
    act: int | None = None,
    dynamic: bool | str = False,
    act_strategy: str | None = None,
    fmt: str | None = None,
    symmetric: bool = True,
    bits: int = 8,
    group: int | None = 16,
    name: str = "S",
) -> Scheme:
    return Scheme(
        name,
        producer,
        family,
        bits,
        "float",
        strategy,
        group,
        act,
        "float" if act else None,
        dynamic,
        act_strategy,
        symmetric,
        fmt,
        name,
    )


def op(name: str, dtypes: frozenset[str] | None, shape: str, required: bool = True) -> Operand:
    return Operand(name, dtypes, shape, required)


U8 = frozenset({"U8"})
E4M3 = frozenset({"F8_E4M3"})
E8M0 = frozenset({"U8", "F8_E8M0"})
MO, CT = "modelopt", "compressed-tensors"
CONTRACTS: dict[str, tuple[Scheme, list[Operand] | None]] = {
    "mo-fp8-tensor-static": (
        scheme(MO, "fp8", "tensor", 8, False),
        [op(W, FP8S, "out,in"), op("weight_scale", F32, "[]"), op("input_scale", F32, "[]")],
    ),
    "mo-fp8-tensor-local": (
        scheme(MO, "fp8", "tensor", 8, "local"),
        [op(W, FP8S, "out,in"), op("weight_scale", F32, "[]"), op("input_scale", F32, "[]")],
    ),
    "mo-fp8-tensor-dynamic": (
        scheme(MO, "fp8", "tensor", 8, True),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", F32, "[]"),
            op("input_scale", F32, "[]", required=False),
        ],
    ),
    "mo-fp8-weight-only": (
        scheme(MO, "fp8", "tensor"),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", F32, "[]"),
            op("input_scale", F32, "[]", required=False),
        ],
    ),
    "mo-fp8-channel": (
        scheme(MO, "fp8", "channel", 8, True),
        [op(W, FP8S, "out,in"), op("weight_scale", F32, "out")],
    ),
    "mo-fp8-block": (
        scheme(MO, "fp8", "block"),
        [op(W, FP8S, "out,in"), op("weight_scale", F32, "any")],
    ),
    "mo-nvfp4-static": (
        scheme(MO, "nvfp4", "tensor_group", 4, "local", bits=4),
        [
            op(W, U8, "out,in/2"),
            op("weight_scale", E4M3, "out,in/g"),
            op("weight_scale_2", F32, "[]"),
            op("input_scale", F32, "[]"),
        ],
    ),
    "mo-nvfp4-weight-only": (
        scheme(MO, "nvfp4", "tensor_group", bits=4),
        [
            op(W, U8, "out,in/2"),
            op("weight_scale", E4M3, "out,in/g"),
            op("weight_scale_2", F32, "[]"),
            op("input_scale", F32, "[]", required=False),
        ],
    ),
    "mo-mxfp8": (
        scheme(MO, "mxfp8", "group"),
        [op(W, FP8S, "out,in"), op("weight_scale", E8M0, "out,in/g")],
    ),
    "mo-int": (scheme(MO, "int", "group", bits=4), None),
    "mo-awq": (scheme(MO, "awq", "group", bits=4), None),
    "ct-fp8-tensor-static": (
        scheme(CT, "fp8", "tensor", 8, False, "tensor"),
        [op(W, FP8S, "out,in"), op("weight_scale", FLOAT, "[]"), op("input_scale", FLOAT, "[]")],
    ),
    "ct-fp8-channel-token": (
        scheme(CT, "fp8", "channel", 8, True, "token"),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", FLOAT, "out,1"),
            op("input_scale", FLOAT, "any", required=False),
        ],
    ),
    "ct-fp8-group": (
        scheme(CT, "fp8", "group", 8, False, "group"),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", FLOAT, "out,in/g"),
            op("input_scale", FLOAT, "any"),
        ],
    ),
    "ct-fp8-block": (
        scheme(CT, "fp8", "block"),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", FLOAT, "any"),
            op("input_scale", FLOAT, "any", required=False),
        ],
    ),
    "ct-fp8-no-strategy": (
        scheme(CT, "fp8"),
        [
            op(W, FP8S, "out,in"),
            op("weight_scale", FLOAT, "any"),
            op("input_scale", FLOAT, "any", required=False),
        ],
    ),
    "ct-nvfp4-static": (
        scheme(CT, "nvfp4", "tensor_group", 4, False, "tensor_group", bits=4),
        [
            op("weight_packed", U8, "out,in/2"),
            op("weight_scale", E4M3, "out,in/g"),
            op("weight_global_scale", F32, "[]"),
            op("input_global_scale", F32, "[]"),
        ],
    ),
    "ct-nvfp4-weight-only": (
        scheme(CT, "nvfp4", "tensor_group", bits=4),
        [
            op("weight_packed", U8, "out,in/2"),
            op("weight_scale", E4M3, "out,in/g"),
            op("weight_global_scale", F32, "[]"),
            op("input_global_scale", F32, "[]", required=False),
        ],
    ),
    "ct-int-pack-symmetric": (
        scheme(CT, "int", "group", fmt="pack-quantized", bits=4),
        [
            op("weight_packed", frozenset({"I32"}), "any"),
            op("weight_shape", frozenset({"I64", "I32"}), "any"),
            op("weight_scale", FLOAT, "any"),
            op("weight_zero_point", None, "any", required=False),
        ],
    ),
    "ct-int-pack-asymmetric": (
        scheme(CT, "int", "group", fmt="pack-quantized", symmetric=False, bits=4),
        [
            op("weight_packed", frozenset({"I32"}), "any"),
            op("weight_shape", frozenset({"I64", "I32"}), "any"),
            op("weight_scale", FLOAT, "any"),
            op("weight_zero_point", None, "any"),
        ],
    ),
    "ct-int8-static": (
        scheme(CT, "int", "channel", 8, False, "tensor", fmt="int-quantized"),
        [
            op(W, frozenset({"I8"}), "out,in"),
            op("weight_scale", FLOAT, "any"),
            op("input_scale", FLOAT, "any"),
        ],
    ),
    "ct-int8-dynamic": (
        scheme(CT, "int", "channel", 8, True, "token", fmt="int-quantized"),
        [
            op(W, frozenset({"I8"}), "out,in"),
            op("weight_scale", FLOAT, "any"),
            op("input_scale", FLOAT, "any", required=False),
        ],
    ),
    "ct-mxfp4": (
        scheme(CT, "mxfp4", "group", bits=4, group=32),
        [op("weight_packed", U8, "out,in/2"), op("weight_scale", U8, "out,in/g")],
    ),
    "ct-mxfp4-asymmetric-static": (
        scheme(CT, "mxfp4", "group", 4, False, "tensor", symmetric=False, bits=4, group=32),
        [
            op("weight_packed", U8, "out,in/2"),
            op("weight_scale", U8, "out,in/g"),
            op("weight_zero_point", None, "any"),
            op("input_global_scale", frozenset({"F32"}), "[]"),
        ],
    ),
    "mo-mxfp4": (
        scheme(MO, "mxfp4", "group", bits=4, group=32),
        [op(W, U8, "out,in/2"), op("weight_scale", U8, "out,in/g")],
    ),
    "ct-unknown": (scheme(CT, "unknown"), None),
}


@pytest.mark.parametrize("case", sorted(CONTRACTS))
def test_every_contract_whole(case: str) -> None:
    made, expected = CONTRACTS[case]
    assert contract(made) == (tuple(expected) if expected is not None else None)


def test_operand_is_required_by_default() -> None:
    assert Operand("weight", None, "any").required is True


# -- shapes and dims ------------------------------------------------------------------------


def entry(shape: tuple[int, ...], dtype: str = "F32") -> TensorEntry:
    return TensorEntry("m.x", dtype, shape, 0, 0)


@pytest.mark.parametrize(
    ("spec", "shape", "ok"),
    [
        ("any", (3, 5, 7), True),
        ("[]", (), True),
        ("[]", (1, 1), True),
        ("[]", (2,), False),
        ("[]", (1, 2), False),
        ("out", (8,), True),
        ("out", (8, 1), True),
        ("out", (4, 8), False),  # a dimension the weight does not have
        ("out", (4,), False),
        ("out", (1, 8), False),
        ("out", (8, 2), False),
        ("out,in", (8, 16), True),
        ("out,in", (2, 8, 16), False),
        ("out,in", (16, 8), False),
        ("out,in/2", (8, 8), True),
        ("out,in/2", (8, 16), False),
        ("out,in/g", (8, 2), True),
        ("out,in/g", (8, 1), False),
        ("out,1", (8, 1), True),
        ("out,1", (8,), False),
    ],
)
def test_shape_rules(spec: str, shape: tuple[int, ...], ok: bool) -> None:
    assert _shape_ok(spec, entry(shape), 8, 16, 8) is ok


@pytest.mark.parametrize(
    ("spec", "shape", "ok"),
    [
        ("out,in", (2, 8, 16), True),
        ("out,in", (8, 16), False),
        ("out,in", (3, 8, 16), False),
        ("out,in/g", (2, 8, 2), True),
        ("out,in/g", (1, 2, 8, 2), False),
        ("out", (2, 8), True),
        ("out", (2, 8, 1), True),
        ("out", (8,), False),
        ("[]", (), True),
    ],
)
def test_shape_rules_under_stacked_experts(spec: str, shape: tuple[int, ...], ok: bool) -> None:
    """A weight [2, 8, 16] (two experts): every operand is led by the same 2."""
    assert _shape_ok(spec, entry(shape), 8, 16, 8, None, (2,)) is ok


def test_expected_shapes_and_groups() -> None:
    assert _expected_shape("out,in", 8, 16, None) == (8, 16)
    assert _expected_shape("out,in/2", 8, 16, None) == (8, 8)
    assert _expected_shape("out,in/g", 8, 17, 8) == (8, 3)  # a last, partial group counts
    assert _expected_shape("out,in/g", 8, 16, 8) == (8, 2)
    assert _expected_shape("out,in/g", 8, 16, None) is None
    assert _expected_shape("out,in/g", 8, 16, 0) is None
    assert _expected_shape("out,1", 8, 16, None) == (8, 1)
    assert _expected_shape("any", 8, 16, 8) is None
    assert _shape_ok("out,in/g", entry((8, 99)), 8, 16, None)  # no group: nothing to check


def test_dims_unpack_four_bit_weights_only() -> None:
    four = scheme(MO, "nvfp4", bits=4)
    eight = scheme(MO, "fp8")
    packed = module([(W, "U8", (8, 4))])
    assert _dims(packed, four) == (8, 8)
    assert _dims(packed, eight) == (8, 4)
    assert _dims(module([(W, "F8_E4M3", (2, 8, 4))]), four) == (8, 4)  # experts: last two dims
    assert _dims(module([(W, "U8", (8,))]), four) is None
    assert _dims(module([("bias", "F32", (8,))]), four) is None


# -- check_module: every finding with its message ---------------------------------------------

FP8 = scheme(MO, "fp8", "tensor", 8, False, "tensor", group=None, name="FP8")
NV = scheme(MO, "nvfp4", "tensor_group", 4, False, "tensor_group", bits=4, name="NVFP4")
CTNV = scheme(CT, "nvfp4", "tensor_group", bits=4, name="group_0")
CTFP8 = scheme(CT, "fp8", "tensor", 8, False, "tensor", group=None, name="group_1")
T = f"{MODULE}."
LINEAR = Membership("FP8", "class", "Linear")
NVLIN = Membership("NVFP4", "class", "Linear")
NV_OK = [
    (W, "U8", (8, 8)),
    ("weight_scale", "F8_E4M3", (8, 1)),
    ("weight_scale_2", "F32", ()),
    ("input_scale", "F32", ()),
]

FINDINGS: dict[str, tuple[list[Any], Membership, Scheme | None, list[tuple[str, str, str]]]] = {
    "unclassified-operand": (
        [(W, "BF16", (8, 8)), ("weight_bogus_scale", "F32", ())],
        Membership("unlisted", "none"),
        None,
        [
            (
                "unclassified-operand",
                T + "weight_bogus_scale",
                f"{T}weight_bogus_scale (F32 []) looks like a quantization operand of no family "
                "qarm knows; it must not be read as unquantized",
            )
        ],
    ),
    "excluded-ships-quantized": (
        [(W, "F8_E4M3", (8, 8)), ("weight_scale", "F32", ())],
        Membership("excluded", "exact", "lm_head"),
        None,
        [
            (
                "unquantized-ships-quantized",
                T + "weight_scale",
                f"{MODULE} is excluded (exact 'lm_head') but ships fp8 operands "
                "(F8_E4M3 weight + weight_scale)",
            )
        ],
    ),
    "unlisted-ships-quantized": (
        [(W, "F8_E4M3", (8, 8)), ("weight_scale", "F32", ()), ("input_scale", "F32", ())],
        Membership("unlisted", "none"),
        None,
        [
            (
                "unquantized-ships-quantized",
                T + "input_scale",  # the first quantization operand by name
                f"{MODULE} is not declared quantized (none) but ships fp8 operands "
                "(F8_E4M3 weight + weight_scale)",
            )
        ],
    ),
    "unlisted-ships-bare-fp8": (
        [(W, "F8_E4M3", (8, 8))],
        Membership("unlisted", "none"),
        None,
        [
            (
                "unquantized-ships-quantized",
                T + "weight",  # no quantization operand: the weight is named
                f"{MODULE} is not declared quantized (none) but ships fp8 operands "
                "(weight F8_E4M3 with no scale)",
            )
        ],
    ),
    "unlisted-plain": ([(W, "BF16", (8, 8))], Membership("unlisted", "none"), None, []),
    "declared-ships-plain": (
        [(W, "BF16", (8, 8))],
        LINEAR,
        FP8,
        [
            (
                "quantized-ships-unquantized",
                T + "weight",
                f"{MODULE} is declared FP8 (class) but ships a plain BF16 weight and no scales",
            )
        ],
    ),
    "declared-ships-nothing": (
        [("bias", "BF16", (8,))],
        Membership("FP8", "exact", "x"),
        FP8,
        [
            (
                "quantized-ships-unquantized",
                "",
                f"{MODULE} is declared FP8 (exact) but ships no weight and no scales",
            )
        ],
    ),
    "inherited-linear-is-not-a-container": (
        [(W, "BF16", (8, 8))],
        Membership("FP8", "prefix", "x"),
        FP8,
        [
            (
                "quantized-ships-unquantized",
                T + "weight",
                f"{MODULE} is declared FP8 (prefix) but ships a plain BF16 weight and no scales",
            )
        ],
    ),
    "family-mismatch": (
        [(W, "U8", (8, 4)), ("weight_scale", "F8_E4M3", (8, 1)), ("weight_scale_2", "F32", ())],
        LINEAR,
        FP8,
        [
            (
                "spelling-mismatch",
                T + "weight_scale",
                f"{MODULE} is declared FP8 (fp8) but ships the nvfp4 spelling "
                "(weight U8 + weight_scale F8_E4M3 + weight_scale_2)",
            )
        ],
    ),
    "producer-mismatch-modelopt": (
        [
            ("weight_packed", "U8", (8, 4)),
            ("weight_scale", "F8_E4M3", (8, 1)),
            ("weight_global_scale", "F32", ()),
        ],
        NVLIN,
        NV,
        [
            (
                "spelling-mismatch",
                T + "weight_global_scale",
                f"{MODULE} is declared modelopt NVFP4 but ships the compressed-tensors spelling "
                "(weight_packed U8 + weight_scale F8_E4M3 + weight_global_scale)",
            )
        ],
    ),
    "producer-mismatch-ct": (
        [(W, "U8", (8, 4)), ("weight_scale", "F8_E4M3", (8, 1)), ("weight_scale_2", "F32", ())],
        Membership("group_0", "regex", "re:.*"),
        CTNV,
        [
            (
                "spelling-mismatch",
                T + "weight_scale",
                f"{MODULE} is declared compressed-tensors group_0 but ships the modelopt "
                "spelling (weight U8 + weight_scale F8_E4M3 + weight_scale_2)",
            )
        ],
    ),
    "producer-native-fp8-is-fine": (
        [(W, "F8_E4M3", (8, 16)), ("weight_scale_inv", "F32", (1, 1))],
        Membership("group_1", "regex", "re:.*"),
        CTFP8,
        [
            (
                "operand-missing",
                T + "weight_scale",
                f"{MODULE} is declared group_1 and ships no weight_scale",
            ),
            (
                "operand-missing",
                T + "input_scale",
                f"{MODULE} is declared group_1 and ships no input_scale",
            ),
            (
                "operand-unexpected",
                T + "weight_scale_inv",
                f"{T}weight_scale_inv (F32 [1, 1]) is no operand of group_1 as "
                "compressed-tensors writes it (input_scale, weight, weight_scale); it belongs "
                "to the block-inv family",
            ),
        ],
    ),
    "operands-missing": (
        [(W, "U8", (8, 8)), ("weight_scale", "F8_E4M3", (8, 1))],
        NVLIN,
        NV,
        [
            (
                "operand-missing",
                T + "weight_scale_2",
                f"{MODULE} is declared NVFP4 and ships no weight_scale_2",
            ),
            (
                "operand-missing",
                T + "input_scale",
                f"{MODULE} is declared NVFP4 and ships no input_scale",
            ),
        ],
    ),
    "operand-dtype": (
        [(W, "F8_E4M3", (8, 16)), ("weight_scale", "BF16", ()), ("input_scale", "F32", ())],
        LINEAR,
        FP8,
        [("operand-dtype", T + "weight_scale", f"{T}weight_scale is BF16; FP8 writes F32")],
    ),
    "operand-dtype-several": (
        [(W, "F8_E4M3", (8, 16)), ("weight_scale", "I8", ()), ("input_scale", "F32", ())],
        Membership("group_1", "regex", "re:.*"),
        CTFP8,
        [
            (
                "operand-dtype",
                T + "weight_scale",
                f"{T}weight_scale is I8; group_1 writes BF16/F16/F32",
            )
        ],
    ),
    "operand-shape-group": (
        [(W, "U8", (8, 8)), ("weight_scale", "F8_E4M3", (8, 2)), *NV_OK[2:]],
        NVLIN,
        NV,
        [
            (
                "operand-shape",
                T + "weight_scale",
                f"{T}weight_scale has shape [8, 2]; NVFP4 with weight [out=8, in=16] writes "
                "[out,in/g] with group 16",
            )
        ],
    ),
    "operand-shape-scalar": (
        [*NV_OK[:2], ("weight_scale_2", "F32", (2,)), NV_OK[3]],
        NVLIN,
        NV,
        [
            (
                "operand-shape",
                T + "weight_scale_2",
                f"{T}weight_scale_2 has shape [2]; NVFP4 with weight [out=8, in=16] writes [[]]",
            )
        ],
    ),
    "operand-shape-extra-dimension": (
        [NV_OK[0], ("weight_scale", "F8_E4M3", (2, 8, 1)), *NV_OK[2:]],
        NVLIN,
        NV,
        [
            (
                "operand-shape",
                T + "weight_scale",
                f"{T}weight_scale has shape [2, 8, 1]; NVFP4 with weight [out=8, in=16] writes "
                "[out,in/g] with group 16",
            )
        ],
    ),
    **{
        f"weight-shape-{label}": (
            [(W, "F8_E4M3", shape), ("weight_scale", "F32", ()), ("input_scale", "F32", ())],
            LINEAR,
            FP8,
            [
                (
                    "operand-shape",
                    T + W,
                    f"{T}{W} has shape {list(shape)}; a Linear's weight is [out, in] (a MoE's "
                    "stacked experts [experts, out, in]), every dimension above 0",
                )
            ],
        )
        for label, shape in {
            "rank-1": (16,),
            "rank-3-dense": (1, 8, 16),
            "rank-4": (1, 1, 8, 16),
            "empty": (0, 16),
        }.items()
    },
    "operand-dtype-e5m2": (
        [(W, "F8_E5M2", (8, 16)), ("weight_scale", "F32", ()), ("input_scale", "F32", ())],
        LINEAR,
        FP8,
        [("operand-dtype", T + W, f"{T}weight is F8_E5M2; FP8 writes F8_E4M3")],
    ),
    "operand-shape-partial-group": (
        [(W, "U8", (8, 12)), ("weight_scale", "F8_E4M3", (8, 2)), *NV_OK[2:]],
        NVLIN,
        NV,
        [
            (
                "operand-shape",
                T + "weight_scale",
                f"{MODULE} has in=24, not a multiple of NVFP4's group of 16: the producer "
                "writes the last group partial, as a whole one",
            )
        ],
    ),
    "operand-shape-partial-group-packed": (
        [
            ("weight_packed", "I32", (8, 12)),
            ("weight_shape", "I64", (2,)),
            ("weight_scale", "BF16", (8, 2)),
        ],
        Membership("group_0", "regex", "re:.*"),
        scheme(CT, "int", "group", bits=4, group=64, fmt="pack-quantized", name="group_0"),
        [
            (
                "operand-shape",
                T + "weight_scale",
                f"{MODULE} has in=96, not a multiple of group_0's group of 64: the producer "
                "writes the last group partial, as a whole one",
            )
        ],
    ),
    "operand-unexpected-smoothing": (
        [
            (W, "F8_E4M3", (8, 16)),
            ("weight_scale", "F32", ()),
            ("input_scale", "F32", ()),
            ("pre_quant_scale", "BF16", (16,)),
        ],
        LINEAR,
        FP8,
        [
            (
                "operand-unexpected",
                T + "pre_quant_scale",
                f"{T}pre_quant_scale (BF16 [16]) is no operand of FP8 as modelopt writes it "
                "(input_scale, weight, weight_scale); it belongs to the awq-smooth family",
            )
        ],
    ),
    "intact-smoothed": (
        [*NV_OK, ("pre_quant_scale", "BF16", (16,))],
        Membership("NVFP4_AWQ", "class", "Linear"),
        scheme(MO, "nvfp4", "tensor_group", 4, False, "tensor_group", bits=4, name="NVFP4_AWQ"),
        [],
    ),
    "intact": (NV_OK, NVLIN, NV, []),
}


@pytest.mark.parametrize("case", sorted(FINDINGS))
def test_every_finding_with_its_message(case: str) -> None:
    ops, membership, declared, expected = FINDINGS[case]
    _, found = check_module(module(ops), membership, declared)
    assert [(f.code, f.module, f.tensor, f.message) for f in found] == [
        (code, MODULE, tensor, message) for code, tensor, message in expected
    ]


def test_container_inheriting_a_scheme_ships_nothing_and_is_fine() -> None:
    container = module([("A_log", "F32", (8,))], "model.layers.0.mixer")
    for how in ("prefix", "experts-parent"):
        _, found = check_module(container, Membership("FP8", how, "k"), FP8)
        assert found == []
    _, found = check_module(container, Membership("FP8", "exact", "k"), FP8)
    assert [f.code for f in found] == ["quantized-ships-unquantized"]


def test_first_quant_tensor_is_the_first_by_operand_name() -> None:
    info = module([(W, "F8_E4M3", (8, 8)), ("weight_scale", "F32", ()), ("input_scale", "F32", ())])
    assert _first_quant_tensor(info) == T + "input_scale"
    assert _first_quant_tensor(module([(W, "BF16", (8, 8))])) == T + "weight"
    assert _first_quant_tensor(module([("bias", "BF16", (8,))])) == ""


def test_check_all_checks_alike_modules_once_but_names_every_refusal() -> None:
    tensors = []
    for i in range(3):
        for o, d, s in [(W, "F8_E4M3", (8, 8)), ("weight_scale", "F32", ())]:
            tensors.append(TensorEntry(f"model.layers.{i}.mlp.down_proj.{o}", d, s, 0, 0))
    tensors.append(TensorEntry("model.layers.0.self_attn.k_proj.k_scale", "F32", (), 0, 0))
    modules = build_inventory(tensors)
    declaration = read_declaration(
        {"hf_quant_config.json": json.dumps({"quantization": {"quant_algo": "FP8"}})}
    )
    refused = dict.fromkeys(modules, Membership("excluded", "exact", "x"))
    spellings, found = check_all(declaration, modules, refused)
    assert sorted(f.module for f in found) == [f"model.layers.{i}.mlp.down_proj" for i in range(3)]
    assert "model.layers.0.self_attn.k_proj" not in spellings  # ships only KV scales
    assert {s.family for s in spellings.values()} == {"fp8"}
    fine = dict.fromkeys(modules, Membership("FP8", "class", "Linear"))
    spellings, found = check_all(declaration, modules, fine)
    assert [f.code for f in found] == ["operand-missing"] * 3  # input_scale, each named
    assert len(spellings) == 3


# -- the resolver ---------------------------------------------------------------------------


def resolved(document: dict[str, Any], names: list[str], ops: tuple[str, ...] = (W,)) -> Any:
    name = "hf_quant_config.json" if "quantization" in document else "config.json"
    declaration = read_declaration({name: json.dumps(document)})

    def shape(name: str, operand: str) -> tuple[int, ...]:
        return (8,) if name.endswith("norm") else (8, 8) if operand == W else ()

    tensors = [TensorEntry(f"{n}.{o}", "BF16", shape(n, o), 0, 0) for n in names for o in ops]
    return resolve(declaration, build_inventory(tensors))


def mo(algo: str = "FP8", excludes: list[str] | None = None, layers: Any = None) -> dict[str, Any]:
    q: dict[str, Any] = {"quant_algo": algo, "exclude_modules": excludes or []}
    if layers is not None:
        q["quantized_layers"] = layers
    return {"quantization": q}


def ctdoc(groups: dict[str, list[str]], ignore: list[str] | None = None) -> dict[str, Any]:
    weights = {"num_bits": 8, "type": "float", "strategy": "tensor"}
    return {
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {g: {"targets": t, "weights": weights} for g, t in groups.items()},
            "ignore": ignore or [],
        }
    }


def memberships(resolution: Any) -> dict[str, tuple[str, str, str]]:
    return {k: (m.bucket, m.how, m.rule) for k, m in resolution.memberships.items()}


def messages(resolution: Any) -> list[tuple[str, str, str]]:
    return [(f.code, f.module, f.message) for f in resolution.findings]


def test_language_model_aliases() -> None:
    assert _language_model_aliases("lm_head") == ["lm_head", "lm_head"]
    assert _language_model_aliases("model.lm_head") == ["model.lm_head", "lm_head"]
    assert _language_model_aliases("x.lm_headx") == ["x.lm_headx"]
    assert _language_model_aliases("language_model.model.layers.0") == [
        "language_model.model.layers.0",
        "model.language_model.layers.0",
    ]
    assert _language_model_aliases("model.language_model.layers.0") == [
        "model.language_model.layers.0",
        "language_model.model.layers.0",
    ]
    assert _language_model_aliases("x.language_model.y") == ["x.language_model.y"]


def test_modelopt_default_scheme_is_by_class_linear() -> None:
    r = resolved(mo("FP8"), [MODULE, "model.norm"])
    assert memberships(r) == {
        MODULE: ("FP8", "class", "Linear"),
        "model.norm": ("unlisted", "none", ""),
    }


def test_star_without_a_dot_expands_and_quotes_the_entry_as_written() -> None:
    names = ["model.layers.1", "model.layers.10.mlp.down_proj", "model.layers.2.mlp.down_proj"]
    r = resolved(mo(excludes=["model.layers.1*"]), names)
    assert memberships(r) == {
        "model.layers.1": ("excluded", "wildcard", "model.layers.1*"),
        "model.layers.10.mlp.down_proj": ("excluded", "wildcard", "model.layers.1*"),
        "model.layers.2.mlp.down_proj": ("FP8", "class", "Linear"),
    }
    r = resolved(mo(excludes=["model.layers.1.*"]), ["model.layers.1", "model.layers.1.mlp.up"])
    assert memberships(r)["model.layers.1"] == ("FP8", "class", "Linear")
    assert memberships(r)["model.layers.1.mlp.up"] == ("excluded", "wildcard", "model.layers.1.*")
    r = resolved(mo(excludes=["*"]), ["a.b"])
    assert memberships(r) == {"a.b": ("excluded", "wildcard", "*")}


def test_wildcards_are_only_the_entries_with_wildcard_characters() -> None:
    for pattern, name in (("model.?.x", "model.1.x"), ("model.[01].x", "model.0.x")):
        r = resolved(mo(excludes=[pattern]), [name, "model.2.y"])
        assert memberships(r)[name] == ("excluded", "wildcard", pattern)
        assert memberships(r)["model.2.y"][0] == "FP8"


def test_substring_exclude_says_so_and_quotes_the_entry() -> None:
    r = resolved(mo(excludes=["mlp.gate"]), ["model.layers.0.mlp.gate_up"])
    assert memberships(r) == {"model.layers.0.mlp.gate_up": ("excluded", "substring", "mlp.gate")}
    assert messages(r) == [
        (
            "substring-exclude",
            "model.layers.0.mlp.gate_up",
            "model.layers.0.mlp.gate_up is excluded only because 'mlp.gate' occurs inside its "
            "name (vLLM's raw-substring stage); no exact or wildcard entry covers it",
        )
    ]


def test_substring_exclude_quotes_a_star_entry_as_written() -> None:
    r = resolved(mo(excludes=["gate*"]), ["model.layers.0.mlp.gate_up"])
    assert memberships(r)["model.layers.0.mlp.gate_up"] == ("excluded", "substring", "gate*")


def test_language_model_prefix_is_stripped_for_the_substring_stage_only() -> None:
    r = resolved(mo(excludes=["language_model.x"]), ["language_model.language_model.x.y"])
    assert memberships(r)["language_model.language_model.x.y"] == (
        "excluded",
        "substring",
        "language_model.x",
    )
    r = resolved(mo(excludes=["^vision"]), ["language_model.^vision.x"])
    assert memberships(r)["language_model.^vision.x"][:2] == ("excluded", "substring")
    # stripped: "model.a" is inside "language_model.model.a" only after the prefix goes...
    r = resolved(mo(excludes=["zmodel.a"]), ["language_model.zmodel.a.b"])
    assert memberships(r)["language_model.zmodel.a.b"] == ("excluded", "substring", "zmodel.a")


def test_one_expert_listed_excludes_the_experts_layer_exactly() -> None:
    experts = [f"model.layers.0.mlp.experts.{e}.{p}" for e in (0, 1) for p in ("up", "down")]
    r = resolved(mo(excludes=["model.layers.0.mlp.experts.1.down"]), experts)
    assert set(memberships(r).values()) == {
        ("excluded", "exact", "model.layers.0.mlp.experts.1.down")
    }


def test_fused_shards_declared_apart_are_named() -> None:
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    r = resolved(mo(excludes=[shards[0]]), shards)
    assert messages(r) == [
        (
            "fused-shards-disagree",
            "model.layers.0.self_attn.qkv_proj",
            "model.layers.0.self_attn.qkv_proj: shards ['q_proj'] are excluded and "
            "['k_proj', 'v_proj'] are not",
        )
    ]
    r = resolved(mo(excludes=[*shards[:2], shards[2]]), shards)
    assert set(memberships(r).values()) == {("excluded", "exact", shards[0])}
    assert messages(r) == []


def test_mixed_fused_shards_of_two_precisions_are_named() -> None:
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    layers = {s: {"quant_algo": "FP8" if i else "NVFP4"} for i, s in enumerate(shards)}
    r = resolved(mo("MIXED_PRECISION", layers=layers), shards)
    assert messages(r) == [
        (
            "fused-shards-disagree",
            "model.layers.0.self_attn.qkv_proj",
            "model.layers.0.self_attn.qkv_proj is loaded from 3 shards declared q_proj=NVFP4, "
            "k_proj=FP8, v_proj=FP8; engines require one precision per fused module",
        )
    ]


def test_mixed_keyed_by_the_fused_name_and_by_the_experts_parent() -> None:
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    r = resolved(
        mo("MIXED_PRECISION", layers={"model.layers.0.self_attn.qkv_proj": {"quant_algo": "FP8"}}),
        shards,
    )
    assert set(memberships(r).values()) == {("FP8", "fused", "model.layers.0.self_attn.qkv_proj")}
    experts = [f"model.layers.0.mlp.experts.{e}.up_proj" for e in (0, 1)]
    keyed = {"model.layers.0.mlp.experts": {"quant_algo": "NVFP4"}}
    r = resolved(mo("MIXED_PRECISION", layers=keyed), experts)
    assert set(memberships(r).values()) == {("NVFP4", "experts", "model.layers.0.mlp.experts")}
    child = {"model.layers.0.mlp.shared_expert.up_proj": {"quant_algo": "NVFP4"}}
    r = resolved(mo("MIXED_PRECISION", layers=child), experts)
    assert set(memberships(r).values()) == {
        ("NVFP4", "experts-parent", "model.layers.0.mlp.shared_expert.up_proj")
    }
    assert r.unmatched == []


def test_mixed_prefix_children_that_disagree_are_named() -> None:
    layers = {
        "model.layers.0.mixer.out_proj": {"quant_algo": "FP8"},
        "model.layers.0.mixer.in_proj": {"quant_algo": "NVFP4"},
    }
    r = resolved(mo("MIXED_PRECISION", layers=layers), ["model.layers.0.mixer"], ("A_log",))
    assert memberships(r) == {
        "model.layers.0.mixer": ("FP8", "prefix", "model.layers.0.mixer.out_proj")
    }
    assert messages(r) == [
        (
            "prefix-children-disagree",
            "model.layers.0.mixer",
            "model.layers.0.mixer takes FP8 from its first listed child "
            "model.layers.0.mixer.out_proj, but its listed children declare ['FP8', 'NVFP4']",
        )
    ]
    assert r.unmatched == ["model.layers.0.mixer.in_proj"]


def test_ct_fused_shards_declared_apart_are_named() -> None:
    shards = [f"model.layers.0.mlp.{p}" for p in ("gate_proj", "up_proj")]
    r = resolved(ctdoc({"g": ["re:.*gate_proj"]}), shards)
    # vLLM finds no target for every shard: the whole gate_up_proj stays unquantized
    assert memberships(r) == {
        shards[0]: ("unlisted", "none", ""),
        shards[1]: ("unlisted", "none", ""),
    }
    assert messages(r) == [
        (
            "fused-shards-disagree",
            "model.layers.0.mlp.gate_up_proj",
            "model.layers.0.mlp.gate_up_proj is loaded from shards declared gate_proj=g, "
            "up_proj=unlisted; vLLM builds one layer and resolves every shard unlisted (none)",
        )
    ]


def test_ct_ignore_by_fused_name_covers_every_shard() -> None:
    shards = [f"model.layers.0.mlp.{p}" for p in ("gate_proj", "up_proj")]
    r = resolved(ctdoc({"g": ["Linear"]}, ["model.layers.0.mlp.gate_up_proj"]), shards)
    assert set(memberships(r).values()) == {
        ("excluded", "exact", "model.layers.0.mlp.gate_up_proj")
    }
    r = resolved(ctdoc({"g": ["Linear"]}, ["re:.*gate_up_proj$"]), shards)
    assert set(memberships(r).values()) == {("excluded", "regex", "re:.*gate_up_proj$")}
    r = resolved(ctdoc({"g": ["Linear"]}, ["re:.*down"]), [MODULE])  # a lone module: its name
    assert memberships(r) == {MODULE: ("excluded", "regex", "re:.*down")}


def test_ct_earliest_target_wins_between_exact_and_regex() -> None:
    r = resolved(ctdoc({"a": ["re:model", MODULE]}), [MODULE])
    assert memberships(r) == {MODULE: ("a", "regex", "re:model")}
    r = resolved(ctdoc({"a": [MODULE, "re:model"]}), [MODULE])
    assert memberships(r) == {MODULE: ("a", "exact", MODULE)}
    r = resolved(ctdoc({"a": ["re:model"], "b": ["re:model.layers"]}), [MODULE])
    assert memberships(r) == {MODULE: ("a", "regex", "re:model")}


def test_ct_class_targets_skip_regexes_and_dotted_names() -> None:
    r = resolved(ctdoc({"a": ["re:nothing", "x.y", "Linear"]}), [MODULE])
    assert memberships(r) == {MODULE: ("a", "class", "Linear")}
    assert r.unmatched == ["x.y"]
    r = resolved(ctdoc({"a": ["re:linear"]}), [MODULE])
    assert memberships(r) == {MODULE: ("unlisted", "none", "")}
    r = resolved(ctdoc({"a": [MODULE, "lm_head"]}), [MODULE])
    assert r.unmatched == []  # a shipped exact target, and a dotless one, are never unmatched


def test_ct_pattern_errors_name_targets_or_ignore() -> None:
    for groups, ignore, where in (
        ({"a": ["re:("]}, None, "targets"),
        ({"a": ["Linear"]}, ["re:("], "ignore"),
    ):
        with pytest.raises(PatternError) as info:
            resolved(ctdoc(groups, ignore), [MODULE])
        assert info.value.where == where


# -- matchers -------------------------------------------------------------------------------


def test_compile_user_regex_bounds_and_names_the_place() -> None:
    assert compile_user_regex("a" * 4096, "targets").pattern == "a" * 4096
    cases = [
        ("a" * 4097, "pattern of 4097 characters is above the cap"),
        ("(a+)+", "pattern '(a+)+' nests quantifiers (catastrophic backtracking)"),
        ("(", "pattern '(' does not compile: missing ), unterminated subpattern at position 0"),
    ]
    for pattern, message in cases:
        with pytest.raises(PatternError) as info:
            compile_user_regex(pattern, "ignore")
        assert (info.value.where, info.value.problem) == ("ignore", message)


@pytest.mark.parametrize(
    ("pattern", "prefix", "bar"),
    [
        ("model\\.layers\\.0", "model.layers.0", False),
        ("abc*", "ab", False),
        ("ab+c", "ab", False),
        ("ab?c", "a", False),
        ("ab{2}", "a", False),
        ("a|b", "", True),
        ("(a|b)c", "", False),
        ("x(a|b)", "x", False),
        ("[a|b]c", "", False),
        ("a[|]|b", "", True),
        ("a\\|b|c", "", True),
        ("a\\|b", "a|b", False),
        ("model\\.layers\\.\\d+", "model.layers.", False),
        (".*q_proj", "", False),
        ("^abc", "", False),
        ("a\\", "a", False),
        ("lm_head", "lm_head", False),
        ("ab(c|d)+|e", "", True),
        ("a$", "a", False),
    ],
)
def test_regex_prefix_and_top_level_bar(pattern: str, prefix: str, bar: bool) -> None:
    assert regex_prefix(pattern) == prefix
    assert _top_level_bar(pattern) is bar


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("model.layers.*", "model.layers."),
        ("a?b", "a"),
        ("a[bc]", "a"),
        ("lm_head", "lm_head"),
        ("*x", ""),
        ("", ""),
    ],
)
def test_glob_prefix(pattern: str, prefix: str) -> None:
    assert glob_prefix(pattern) == prefix


def test_prefix_index_candidates() -> None:
    index = PrefixIndex(["", "model.", "model.", "lm", "model.layers.1"])
    assert index.by_prefix == {"": [0], "model.": [1, 2], "lm": [3], "model.layers.1": [4]}
    assert index.lengths == [0, 2, 6, 14]
    assert index.candidates("model.layers.10.x") == [0, 1, 2, 4]
    assert index.candidates("model.layers.1") == [0, 1, 2, 4]
    assert index.candidates("lm_head") == [0, 3]
    assert index.candidates("m") == [0]


def test_first_match_in_declaration_order() -> None:
    fm = FirstMatch(["model\\.layers\\.1", "model", ".*proj"], "targets")
    assert (fm.patterns, fm.where) == (["model\\.layers\\.1", "model", ".*proj"], "targets")
    assert fm.first("model.layers.10.x") == 0
    assert fm.first("model.norm") == 1
    assert fm.first("lm.proj") == 2
    assert fm.first("lm.head") is None
    assert FirstMatch([], "targets").first("x") is None


def test_wildcard_set_first_in_order() -> None:
    ws = WildcardSet(["model.*.mlp", "model.layers.*", "lm_head"])
    assert ws.first("model.layers.0.mlp") == "model.*.mlp"
    assert ws.first("model.layers.0.attn") == "model.layers.*"
    assert ws.first("lm_head") == "lm_head"
    assert ws.first("lm_head.x") is None
    assert WildcardSet([]).first("x") is None


def test_substring_set() -> None:
    ss = SubstringSet(["", "gate", "mlp.gate", "x"])
    assert ss.entries == ["gate", "mlp.gate", "x"]
    assert ss.first("model.mlp.gate_up") == "gate"
    assert ss.first("gate") is None  # the name itself is not a substring of itself
    assert ss.first("x.gate") == "gate"
    assert ss.first("model.up") is None
    assert SubstringSet([""]).first("anything") is None


# -- the deterministic regex guard ----------------------------------------------------------


def test_a_pattern_only_python_runs_and_that_can_blow_up_is_refused_by_name() -> None:
    with pytest.raises(PatternError) as info:
        FirstMatch(["x", "(?=a)(a|aa)*b"], "targets")
    assert info.value.where == "targets"
    assert info.value.problem == (
        "pattern '(?=a)(a|aa)*b' needs Python's re (re2 has no equivalent for it) and repeats "
        "in a way that can backtrack without end (catastrophic backtracking); qarm refuses it"
    )
    assert FirstMatch(["(?=a)a*b"], "targets").first("aab") == 0  # one repeat: safe


@pytest.mark.parametrize(("length", "shown"), [(80, "a" * 79 + "\n"), (81, "a" * 77 + "...")])
def test_a_name_re2_cannot_answer_for_an_unsafe_pattern_is_refused_by_name(
    length: int, shown: str
) -> None:
    fm = FirstMatch(["(a|aa)*$"], "ignore")
    name = "a" * (length - 1) + "\n"
    with pytest.raises(PatternError) as info:
        fm.first(name)
    assert info.value.where == "ignore"
    shown_repr = repr(shown)
    assert info.value.problem == (
        f"pattern '(a|aa)*$' can be matched in linear time only on printable ASCII names, and "
        f"the module name {shown_repr} is not; Python's re could backtrack without end on it "
        "(catastrophic backtracking); qarm refuses it"
    )
    assert fm.first("a" * 200) == 0  # printable ASCII: re2, linear


# -- second round: the survivors of the first mutmut run with this file ----------------------


def test_prefix_edges() -> None:
    assert glob_prefix("modelX.*") == "modelX."
    assert regex_prefix("aXb") == "aXb"
    assert regex_prefix("a\\.") == "a."
    assert _top_level_bar("((a))|b") is True
    assert _top_level_bar("((a)|b)") is False


def test_trie_regex_factors_shared_prefixes() -> None:
    from qarm_audit.resolve.matchers import trie_regex

    assert trie_regex([]) == ""
    assert trie_regex(["x"]) == "x"
    assert trie_regex(["ab", "ac"]) == "a(?:b|c)"
    assert trie_regex(["a", "ab"]) == "a(?:b)?"
    assert trie_regex(["a", "ab", "ac"]) == "a(?:b|c)?"
    assert trie_regex(["a.b", "a"]) == "a(?:\\.b)?"
    assert trie_regex(["ab", "cd"]) == "(?:ab|cd)"


def test_more_shape_edges() -> None:
    assert _expected_shape("out,in/2", 8, 17, None) == (8, 8)
    assert _shape_ok("[]", entry((2, 1)), 8, 16, 8) is False
    assert _shape_ok("[]", entry((0,)), 8, 16, 8) is False
    assert _shape_ok("out", entry((2, 8, 1)), 8, 16, 8) is False  # no experts dimension
    assert _shape_ok("out", entry((2, 8, 1)), 8, 16, 8, None, (2,)) is True


def test_unknown_declared_family_refuses_any_quantized_spelling() -> None:
    unknown = scheme(MO, "unknown", name="W4A8_AWQ")
    info = module([(W, "F8_E4M3", (8, 8)), ("weight_scale", "F32", ())])
    _, found = check_module(info, Membership("W4A8_AWQ", "class", "Linear"), unknown)
    assert [(f.code, f.message) for f in found] == [
        (
            "spelling-mismatch",
            f"{MODULE} is declared W4A8_AWQ (unknown) but ships the fp8 spelling "
            "(F8_E4M3 weight + weight_scale)",
        )
    ]


def test_every_operand_dtype_is_checked_not_just_the_first() -> None:
    info = module(
        [(W, "F8_E4M3", (8, 16)), ("weight_scale", "BF16", ()), ("input_scale", "F16", ())]
    )
    _, found = check_module(info, LINEAR, FP8)
    assert [(f.code, f.tensor) for f in found] == [
        ("operand-dtype", T + "weight_scale"),
        ("operand-dtype", T + "input_scale"),
    ]


def test_check_all_goes_past_a_kv_only_module() -> None:
    tensors = [TensorEntry("model.layers.0.self_attn.attn.k_scale", "F32", (), 0, 0)]
    tensors += [TensorEntry(f"{MODULE}.{o}", d, s, 0, 0) for o, d, s in [(W, "F8_E4M3", (8, 8))]]
    modules = build_inventory(tensors)
    assert next(iter(modules)) == "model.layers.0.self_attn.attn"
    declaration = read_declaration(
        {"hf_quant_config.json": json.dumps({"quantization": {"quant_algo": "FP8"}})}
    )
    spellings, found = check_all(
        declaration, modules, dict.fromkeys(modules, Membership("unlisted", "none"))
    )
    assert list(spellings) == [MODULE]
    assert [f.code for f in found] == ["unquantized-ships-quantized"]


def test_a_group_named_like_a_bucket_is_not_applied_to_that_bucket() -> None:
    """A compressed-tensors group may be called "unlisted": an unlisted module is still not
    declared quantized."""
    declaration = read_declaration({"config.json": json.dumps(ctdoc({"unlisted": ["x.y"]}))})
    assert "unlisted" in declaration.schemes
    modules = build_inventory([TensorEntry(f"{MODULE}.weight", "BF16", (8, 8), 0, 0)])
    _, found = check_all(declaration, modules, {MODULE: Membership("unlisted", "none")})
    assert found == []


def test_excludes_edges() -> None:
    # "X.*" is not split: its literal is not a substring entry
    r = resolved(mo(excludes=["model.layers.1.*"]), ["vision.model.layers.1.x"])
    assert memberships(r)["vision.model.layers.1.x"] == ("FP8", "class", "Linear")
    # a two-character "X*" is split: "u" becomes a raw substring
    r = resolved(mo(excludes=["u*"]), ["model.mlp.up_proj"])
    assert memberships(r)["model.mlp.up_proj"] == ("excluded", "substring", "u*")
    # an entry with every wildcard character is still a wildcard
    r = resolved(mo(excludes=["model.?.[0-9]*"]), ["model.a.1x"])
    assert memberships(r)["model.a.1x"] == ("excluded", "wildcard", "model.?.[0-9]*")
    # a name under language_model. that nothing excludes
    name = "language_model.model.layers.0.mlp.down_proj"
    r = resolved(mo(excludes=["zzz"]), [name])
    assert memberships(r)[name] == ("FP8", "class", "Linear")


def test_pre_fused_module_keeps_the_entry_that_excluded_it() -> None:
    name = "model.layers.0.self_attn.qkv_proj"
    r = resolved(mo(excludes=[name + "*"]), [name])
    assert memberships(r)[name] == ("excluded", "wildcard", name + "*")


def test_fused_module_excluded_by_its_fused_name_keeps_that_entry() -> None:
    shards = [f"model.layers.0.self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj")]
    r = resolved(mo(excludes=["*qkv_proj", *shards]), shards)
    assert set(memberships(r).values()) == {("excluded", "wildcard", "*qkv_proj")}


def test_mixed_two_shard_fused_module_and_experts() -> None:
    shards = [f"model.layers.0.mlp.{p}" for p in ("gate_proj", "up_proj")]
    layers = {shards[0]: {"quant_algo": "FP8"}, shards[1]: {"quant_algo": "NVFP4"}}
    r = resolved(mo("MIXED_PRECISION", layers=layers), shards)
    assert [f.code for f in r.findings] == ["fused-shards-disagree"]
    experts = [f"model.layers.0.mlp.experts.{e}.up_proj" for e in (0, 1)]
    layers = {experts[0]: {"quant_algo": "FP8"}, experts[1]: {"quant_algo": "NVFP4"}}
    r = resolved(mo("MIXED_PRECISION", layers=layers), experts)
    # each expert keeps its own declared precision, but the engine decides the layer once
    assert [f.code for f in r.findings] == ["experts-disagree"]
    assert [m[0] for m in memberships(r).values()] == ["FP8", "NVFP4"]


def test_ct_experts_are_resolved_one_by_one() -> None:
    experts = [f"model.layers.0.mlp.experts.{e}.up_proj" for e in (0, 1)]
    r = resolved(ctdoc({"g": ["Linear"]}, ["model.layers.0.mlp.experts"]), experts)
    assert set(memberships(r).values()) == {("g", "class", "Linear")}
    r = resolved(ctdoc({"a": [experts[0]], "b": [experts[1]]}), experts)
    # one engine layer, decided once: experts declared apart are refused
    assert [f.code for f in r.findings] == ["experts-disagree"]


def test_spelling_lists_every_operand_of_an_unknown_weight() -> None:
    info = module([(W, "I32", (4, 4)), ("weight_scale", "F32", ()), ("input_scale", "F32", ())])
    assert spell(info).detail == "weight I32 with input_scale, weight_scale"


def test_check_all_on_modules_built_by_hand_without_a_layout() -> None:
    """``layout`` is optional: without it, a module's operands are its signature."""
    declaration = read_declaration(
        {"hf_quant_config.json": json.dumps({"quantization": {"quant_algo": "FP8"}})}
    )
    plain = ModuleInfo("a.x", {W: TensorEntry("a.x.weight", "BF16", (8, 8), 0, 0)}, "linear")
    fp8 = ModuleInfo("b.x", {W: TensorEntry("b.x.weight", "F8_E4M3", (8, 8), 0, 0)}, "linear")
    assert plain.layout == fp8.layout == 0
    unlisted = Membership("unlisted", "none")
    spellings, found = check_all(
        declaration, {"a.x": plain, "b.x": fp8}, {"a.x": unlisted, "b.x": unlisted}
    )
    assert {k: s.family for k, s in spellings.items()} == {"a.x": "none", "b.x": "fp8"}
    assert [(f.code, f.module) for f in found] == [("unquantized-ships-quantized", "b.x")]


def test_every_mutation_of_the_checker_still_applies() -> None:
    """scripts/check_mutations.py deletes each guarded branch by its exact text: a branch
    rewritten since must have its mutation rewritten too, or the check would measure nothing."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location(
        "check_mutations", REPO / "scripts" / "check_mutations.py"
    )
    assert spec is not None and spec.loader is not None
    checker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checker)
    stale = [
        (name, file)
        for name, file, original, _ in checker.MUTATIONS
        if (checker.SRC / file).read_text().count(original) != 1
    ]
    assert stale == []


def test_views_of_one_pattern_set_in_two_orders_each_take_their_own_first() -> None:
    # the engine view tries targets in declaration order, the producer view sorted: each
    # name is matched once for both, and each view still answers by its own order
    engine = FirstMatch(["model\\..*", "model\\.layers\\..*", "model\\..*"], "targets")
    producer = FirstMatch(sorted(set(engine.patterns)), "targets")
    assert producer.shared is engine.shared
    assert engine.first("model.layers.3.mlp") == 0
    assert producer.first("model.layers.3.mlp") == 0  # "model\\..*" sorts first as well
    assert FirstMatch(["model\\.layers\\..*", "model\\..*"], "targets").first("model.layers.3") == 0
    assert FirstMatch(["model\\..*", "model\\.layers\\..*"], "targets").first("model.layers.3") == 0
    assert FirstMatch(["lm", "model\\.layers\\..*", "model\\..*"], "targets").first("model.x") == 2


def test_a_refusal_raises_only_where_it_comes_before_a_match_in_the_views_order() -> None:
    name = "a" * 10 + "\n"  # not printable: the unsafe pattern would need Python's re
    refusing_first = FirstMatch(["(a|aa)*$", "a+\\n"], "ignore")
    with pytest.raises(PatternError):
        refusing_first.first(name)
    matching_first = FirstMatch(["a+\\n", "(a|aa)*$"], "ignore")
    assert matching_first.shared is refusing_first.shared
    assert matching_first.first(name) == 0


def test_a_stacked_experts_weight_leads_its_operands() -> None:
    """[experts, out, in] is a Linear's weight under ``.experts`` only, and its scales are led by
    the same experts dimension."""
    name = "model.layers.0.mlp.experts.down_proj"
    ops = [(W, "F8_E4M3", (2, 8, 16)), ("weight_scale", "F32", (2, 8))]
    channel = scheme(MO, "fp8", "channel", 8, False, "tensor", group=None, name="FP8")
    _, found = check_module(module(ops, name), LINEAR, channel)
    assert found == []
    ops[1] = ("weight_scale", "F32", (8,))
    _, found = check_module(module(ops, name), LINEAR, channel)
    assert [(f.code, f.tensor) for f in found] == [("operand-shape", f"{name}.weight_scale")]
