"""Safetensors headers as hostile input: every malformation is a named error and exit code 2."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from safetensors import safe_open

from conftest import write_checkpoint, write_safetensors
from qarm_audit.errors import HeaderError, HeaderTooLargeError, QarmError, ShardIndexError
from qarm_audit.sources import open_source
from qarm_audit.sources.header import DTYPE_BITS
from qarm_audit.sources.local import read_local_shard


def raw_file(
    path: Path, header: bytes | str | dict | None, data: int = 0, length: int | None = None
) -> Path:
    if header is None:
        path.write_bytes(b"\x01\x02\x03")
        return path
    if isinstance(header, dict):
        header = json.dumps(header)
    body = header.encode() if isinstance(header, str) else header
    prefix = struct.pack("<Q", len(body) if length is None else length)
    path.write_bytes(prefix + body + b"\0" * data)
    return path


def entry(dtype: str, shape: list[int], begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


HOSTILE: list[tuple[str, bytes | str | dict | None, int, int | None, str]] = [
    ("truncated-prefix", None, 0, None, "shorter than the 8-byte length prefix"),
    ("length-past-end", '{"a":1}', 0, 1000, "runs past the end"),
    ("over-cap", "{}", 0, 200_000_000, "above the cap"),
    ("not-utf8", b'{"\xff\xfe": 1}', 0, None, "not UTF-8"),
    ("not-object", "[1, 2, 3]", 0, None, "does not start with a JSON object"),
    ("not-json", "{not json", 0, None, "not valid JSON"),
    (
        "duplicate-key",
        '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
        '"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}',
        4,
        None,
        "duplicate key 'a'",
    ),
    ("unknown-dtype", {"a": entry("F7", [1], 0, 1)}, 1, None, "unknown dtype 'F7'"),
    ("negative-shape", {"a": entry("F32", [-1], 0, 4)}, 4, None, "is not a list of counts"),
    ("huge-shape", {"a": entry("F32", [2**60], 0, 4)}, 4, None, "is not a list of counts"),
    # equal is not a count: 2.0 == 2 and true == 1 in Python, and neither is a dimension
    ("float-dim", {"a": entry("F32", [2.0], 0, 8)}, 8, None, "is not a list of counts"),
    ("bool-dim", {"a": entry("F32", [True, 2], 0, 8)}, 8, None, "is not a list of counts"),
    ("float-offset", {"a": entry("F32", [2], 0.0, 8)}, 8, None, "is not [begin, end]"),
    ("negative-offset", {"a": entry("F32", [1], -4, 0)}, 4, None, "is not [begin, end]"),
    ("bool-offset", {"a": entry("F32", [1], False, 4)}, 4, None, "is not [begin, end]"),
    ("overlap", {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, 12, None, "overlap"),
    ("hole", {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 12, 20)}, 20, None, "hole of 4"),
    ("out-of-bounds", {"a": entry("F32", [2], 0, 8)}, 4, None, "8 + header + data"),
    ("size-mismatch", {"a": entry("F32", [3], 0, 8)}, 8, None, "needs 12"),
    ("inverted", {"a": entry("F32", [0], 8, 0)}, 8, None, "end before they begin"),
    ("subbyte-misaligned", {"a": entry("F4", [3], 0, 2)}, 2, None, "do not end on a byte"),
    ("bad-metadata", {"__metadata__": {"k": 1}}, 0, None, "__metadata__ must map strings"),
    ("extra-key", {"a": {**entry("F32", [1], 0, 4), "x": 1}}, 4, None, "keys"),
    (
        "nan-literal",
        '{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}',
        4,
        None,
        "non-standard JSON literal NaN",
    ),
    (
        "deep-nesting",
        "{" + '"a":' * 1 + "[" * 100_000 + "]" * 100_000 + "}",
        0,
        None,
        "nested too deeply",
    ),
]


@pytest.mark.parametrize(
    ("case", "header", "data", "length", "message"), HOSTILE, ids=[c[0] for c in HOSTILE]
)
def test_hostile_header_is_a_named_error_and_exit_2(
    tmp_path: Path, run, case: str, header, data: int, length: int | None, message: str
) -> None:
    path = raw_file(tmp_path / "model.safetensors", header, data, length)
    with pytest.raises(HeaderError) as info:
        read_local_shard(path, path.name)
    assert message in str(info.value)
    assert str(info.value).startswith("model.safetensors: ")
    result = run("audit", tmp_path)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    assert message in result.stderr


def test_over_cap_is_its_own_error_class(tmp_path: Path) -> None:
    path = raw_file(tmp_path / "x.safetensors", "{}", 0, 200_000_000)
    with pytest.raises(HeaderTooLargeError):
        read_local_shard(path, "x.safetensors")


def test_parser_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    tensors = {
        f"t.{dtype}": (dtype, (3, 8))
        for dtype in (
            "U8",
            "I8",
            "BF16",
            "F16",
            "F32",
            "F64",
            "I32",
            "I64",
            "F8_E4M3",
            "F8_E5M2",
            "F8_E8M0",
            "BOOL",
        )
    }
    tensors["scalar"] = ("F32", ())
    tensors["empty"] = ("F32", (0, 4))
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors, metadata={"format": "pt"})
    ours = read_local_shard(path, path.name)
    assert ours.metadata == {"format": "pt"}
    with safe_open(str(path), "np") as lib:
        assert sorted(lib.keys()) == sorted(t.name for t in ours.tensors)
        for t in ours.tensors:
            view = lib.get_slice(t.name)
            assert view.get_dtype() == t.dtype
            assert tuple(view.get_shape()) == t.shape
    assert ours.size == path.stat().st_size == 8 + ours.header_length + ours.data_length


@pytest.mark.parametrize("dtype", sorted(DTYPE_BITS))
def test_every_dtype_the_library_can_open_we_can_parse(tmp_path: Path, dtype: str) -> None:
    bits = DTYPE_BITS[dtype]
    shape = [16]
    nbytes = 16 * bits // 8
    path = raw_file(tmp_path / "m.safetensors", {"a": entry(dtype, shape, 0, nbytes)}, nbytes)
    with safe_open(str(path), "np") as lib:
        assert lib.get_slice("a").get_dtype() == dtype
    assert read_local_shard(path, "m.safetensors").tensors[0].dtype == dtype


def test_reading_a_shard_reads_only_the_header(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"w": ("F32", (1024, 1024))})
    reads: list[int] = []
    real_open = Path.open

    def spy(self: Path, *args, **kwargs):
        handle = real_open(self, *args, **kwargs)
        original = handle.read

        def read(n: int = -1) -> bytes:
            data = original(n)
            reads.append(len(data))
            return data

        handle.read = read  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(Path, "open", spy)
    shard = read_local_shard(path, path.name)
    assert sum(reads) == 8 + shard.header_length < 1024


INDEX_CASES = [
    (
        "missing-shard",
        {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
        ["model-00001-of-00002.safetensors"],
        "which is not in",
    ),
    ("dotdot", {"a": "../model.safetensors"}, [], "not a plain relative name"),
    ("absolute", {"a": "/etc/model.safetensors"}, [], "not a plain relative name"),
]


@pytest.mark.parametrize(
    ("case", "weight_map", "files", "message"), INDEX_CASES, ids=[c[0] for c in INDEX_CASES]
)
def test_index_disagreement_is_a_named_error_and_exit_2(
    tmp_path: Path, run, case: str, weight_map: dict, files: list[str], message: str
) -> None:
    tensors = {"a": ("F32", (2,)), "b": ("F32", (2,))}
    for file in files:
        write_safetensors(tmp_path / file, tensors)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ShardIndexError) as info:
        from qarm_audit import audit

        audit(str(tmp_path))
    assert message in str(info.value)
    result = run("audit", tmp_path)
    assert result.exit_code == 2
    assert message in result.stderr


READABLE_INDEX_CASES = [
    (
        "header-name-missing-from-index",
        {"a": "model-00001-of-00001.safetensors"},
        ["model-00001-of-00001.safetensors"],
        "header names are not in weight_map",
    ),
    (
        "index-name-missing-from-header",
        {
            "a": "model-00001-of-00001.safetensors",
            "b": "model-00001-of-00001.safetensors",
            "ghost": "model-00001-of-00001.safetensors",
        },
        ["model-00001-of-00001.safetensors"],
        "not in the header of the shard they name",
    ),
]


@pytest.mark.parametrize(
    ("case", "weight_map", "files", "message"),
    READABLE_INDEX_CASES,
    ids=[c[0] for c in READABLE_INDEX_CASES],
)
def test_an_index_that_disagrees_but_reads_gets_a_full_report_and_exit_1(
    tmp_path: Path, run, case: str, weight_map: dict, files: list[str], message: str
) -> None:
    tensors = {"a": ("F32", (2,)), "b": ("F32", (2,))}
    for file in files:
        write_safetensors(tmp_path / file, tensors)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    from qarm_audit import audit

    report = audit(str(tmp_path))
    assert [r.code for r in report.refusals] == ["index-disagrees"]
    assert message in report.refusals[0].message
    assert report.totals.tensors == 2  # everything else was still audited
    result = run("audit", tmp_path, "-f", "json")
    assert result.exit_code == 1


def test_duplicate_name_across_shards_is_refused(tmp_path: Path, run) -> None:
    write_checkpoint(
        tmp_path,
        {"a.safetensors": {"x": ("F32", (2,))}, "b.safetensors": {"x": ("F32", (2,))}},
        index=False,
    )
    result = run("audit", tmp_path)
    assert result.exit_code == 2
    assert "duplicate name" in result.stderr


def test_symlinked_shard_outside_the_checkpoint_is_refused(tmp_path: Path, run) -> None:
    outside = tmp_path / "elsewhere" / "model.safetensors"
    write_safetensors(outside, {"x": ("F32", (2,))})
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "model.safetensors").symlink_to(outside)
    with pytest.raises(QarmError, match="resolves outside the checkpoint"):
        open_source(str(root))
    assert run("audit", root).exit_code == 2


def test_reading_never_modifies_the_checkpoint(tmp_path: Path, run) -> None:
    write_checkpoint(
        tmp_path,
        {"model.safetensors": {"x": ("F32", (2,))}},
        {"config.json": {"model_type": "llama"}},
    )
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert run("audit", tmp_path).exit_code == 0
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert before == after


def test_a_negative_zero_offset_is_refused_as_the_safetensors_library_refuses_it(
    tmp_path: Path, run
) -> None:
    import struct

    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[-0,4]}}'
    (tmp_path / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + b"\0" * 4
    )
    result = run("audit", tmp_path)
    assert result.exit_code == 2
    assert "-0" in result.stderr
    # a string holding "-0" is no integer
    header = b'{"__metadata__":{"k":"[-0]"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    (tmp_path / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + b"\0" * 4
    )
    assert run("audit", tmp_path).exit_code != 2


def test_an_index_naming_every_tensor_under_the_wrong_shard_is_refused(tmp_path: Path) -> None:
    """As many names as the headers hold, each in some shard, but the index swaps two shards:
    the count alone would pass it."""
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    write_safetensors(tmp_path / first, {"a": ("F32", (2,))})
    write_safetensors(tmp_path / second, {"b": ("F32", (2,))})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": second, "b": first}})
    )
    from qarm_audit import audit

    report = audit(str(tmp_path))
    assert [r.code for r in report.refusals] == ["index-disagrees"]
    assert "not in the header of the shard they name" in report.refusals[0].message


def test_an_index_whose_total_size_is_not_the_tensor_bytes_is_refused_in_a_full_report(
    tmp_path: Path, run
) -> None:
    """metadata.total_size that disagrees with the shards it names was a warning (exit 0): an
    integrity fault of a checkpoint that can otherwise be read is a refusal, exit 1."""
    tensors = {"a": ("F32", (2,)), "b": ("F32", (2,))}
    write_checkpoint(tmp_path, {"model-1.safetensors": tensors}, index=True)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == 16
    from qarm_audit import audit

    assert audit(str(tmp_path)).refusals == []
    index["metadata"]["total_size"] = 18
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    report = audit(str(tmp_path))
    assert [r.code for r in report.refusals] == ["index-total-size"]
    assert "total_size is 18, tensors hold 16 bytes (difference 2)" in report.refusals[0].message
    assert report.totals.tensors == 2  # everything else was still audited
    result = run("audit", tmp_path, "-f", "json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["refusals"][0]["code"] == "index-total-size"
