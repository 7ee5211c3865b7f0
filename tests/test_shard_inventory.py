"""The inventory worked out shard by shard as headers arrive (``ShardInventory``) is the
inventory of all the tensors at once (``build_inventory``), whatever the order the shards
arrive in and are joined in, and whichever modules lie across shards; where it cannot be
(names that split alike, bitsandbytes' parts, a shard it was not given), it says so."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qarm_audit.errors import IntegrityError
from qarm_audit.modules.inventory import ModuleInfo, ShardInventory, build_inventory
from qarm_audit.modules.operands import BNB_SUFFIXES
from qarm_audit.sources.checkpoint import ShardHeader, TensorEntry

BNB_PARTS = frozenset().union(*BNB_SUFFIXES.values())
MODULES = st.none() | st.lists(
    st.sampled_from(["model", "layers", "0", "mlp", "experts", "q_proj", "k_proj", "v_proj", ""]),
    min_size=1,
    max_size=5,
).map(".".join)
"""None: a dotless name; ``""``: a name led by a dot (it splits as the dotless one does)."""
OPERANDS = st.sampled_from(
    ["weight", "weight_scale", "input_scale", "k_scale", "bias", "weight_packed", "absmax", ""]
)
ENTRY = st.tuples(
    MODULES,
    OPERANDS,
    st.sampled_from(["U8", "F8_E4M3", "BF16", "F32"]),
    st.lists(st.integers(1, 3), max_size=3).map(tuple),
)


def _shard(number: int, tensors: list[TensorEntry]) -> ShardHeader:
    return ShardHeader(
        file=f"model-{number:05d}.safetensors",
        size=0,
        header_length=0,
        metadata=None,
        tensors=tuple(tensors),
    )


def _shards(
    entries: list[tuple[str | None, str, str, tuple[int, ...]]], owners: list[int]
) -> list[ShardHeader]:
    """Each entry as a tensor (named module.operand, or a dotless name) of the shard its
    owner numbers; a name met twice in one shard is kept once, as a header would."""
    tensors: dict[int, dict[str, TensorEntry]] = {}
    for (module, operand, dtype, shape), owner in zip(entries, owners, strict=False):
        name = f"{module}.{operand}" if module is not None else operand
        tensors.setdefault(owner, {})[name] = TensorEntry(name, dtype, shape, 0, 0)
    return [_shard(number, list(found.values())) for number, found in sorted(tensors.items())]


def _cannot_join(shards: list[ShardHeader]) -> bool:
    """Bitsandbytes' parts, or two names that split alike in one shard or across shards."""
    split = [entry.name.rpartition(".")[::2] for shard in shards for entry in shard.tensors]
    return any(operand in BNB_PARTS for _, operand in split) or len(set(split)) < len(split)


def _alike(got: dict[str, ModuleInfo], want: dict[str, ModuleInfo]) -> None:
    assert list(got) == list(want)
    layouts: dict[int, int] = {}
    for name, info in want.items():
        other = got[name]
        assert list(other.operands.items()) == list(info.operands.items()), name
        assert (other.kind, other.engine_name, other.experts, other.fused_shards) == (
            info.kind,
            info.engine_name,
            info.experts,
            info.fused_shards,
        ), name
        # numbered in another order; equal exactly where they are there
        assert layouts.setdefault(info.layout, other.layout) == other.layout, name
    assert len(set(layouts.values())) == len(layouts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(ENTRY, min_size=1, max_size=24))
def test_the_inventory_joined_from_shards_is_the_inventory_of_all_the_tensors(
    data: st.DataObject, entries: list
) -> None:
    owners = data.draw(st.lists(st.integers(0, 3), min_size=len(entries), max_size=len(entries)))
    shards = _shards(entries, owners)
    arrival = data.draw(st.permutations(shards))
    order = data.draw(st.permutations(shards))
    sharded = ShardInventory()
    for shard in arrival:
        sharded.add(shard)
    got = sharded.inventory(order)
    tensors = [entry for shard in order for entry in shard.tensors]
    try:
        want = build_inventory(tensors)
    except IntegrityError:
        assert got is None  # the clash is named where all are grouped at once
        return
    if got is None:
        assert _cannot_join(shards)
        return
    _alike(got, want)


def test_a_module_across_two_shards_is_joined_in_the_checkpoints_order() -> None:
    first = _shard(
        1,
        [
            TensorEntry("model.layers.0.mlp.down_proj.weight", "U8", (4, 2), 0, 8),
            TensorEntry("model.layers.0.mlp.up_proj.weight", "U8", (4, 2), 8, 16),
        ],
    )
    second = _shard(
        2,
        [
            TensorEntry("model.layers.0.mlp.up_proj.weight_scale", "F8_E4M3", (4, 1), 0, 4),
            TensorEntry("model.layers.1.mlp.up_proj.weight", "U8", (4, 2), 4, 12),
            TensorEntry("model.layers.1.mlp.up_proj.weight_scale", "F8_E4M3", (4, 1), 12, 16),
        ],
    )
    sharded = ShardInventory()
    sharded.add(second)  # arrived first
    sharded.add(first)
    got = sharded.inventory([first, second])
    assert got is not None
    _alike(got, build_inventory([*first.tensors, *second.tensors]))
    joined = got["model.layers.0.mlp.up_proj"]
    assert list(joined.operands) == ["weight", "weight_scale"]
    assert joined.layout == got["model.layers.1.mlp.up_proj"].layout


@pytest.mark.parametrize(
    "names",
    [
        # two names that split alike, in one shard or two: named where all are grouped at once
        [["a", ".a"]],
        [["a"], [".a"]],
        [["m.weight.absmax"], ["m.weight"]],  # bitsandbytes' parts, joined across modules
    ],
)
def test_what_cannot_be_joined_from_shards_is_left_to_the_inventory_of_all(
    names: list[list[str]],
) -> None:
    shards = [
        _shard(n, [TensorEntry(name, "U8", (2,), 0, 2) for name in each])
        for n, each in enumerate(names)
    ]
    sharded = ShardInventory()
    for shard in shards:
        sharded.add(shard)
    assert sharded.inventory(shards) is None


def test_a_shard_not_given_and_a_second_taking_leave_it_to_the_inventory_of_all() -> None:
    given_ = _shard(1, [TensorEntry("a.weight", "U8", (2,), 0, 2)])
    other = _shard(2, [TensorEntry("b.weight", "U8", (2,), 0, 2)])
    sharded = ShardInventory()
    sharded.add(given_)
    # an equal header that is not the one given: the checkpoint read it again
    again = ShardHeader(given_.file, 0, 0, None, given_.tensors)
    assert sharded.inventory([again]) is None
    sharded = ShardInventory()
    sharded.add(given_)
    assert sharded.inventory([given_, other]) is None
    sharded = ShardInventory()
    sharded.add(given_)
    assert sharded.inventory([given_]) is not None
    assert sharded.inventory([given_]) is None  # its modules are the first taker's to change
