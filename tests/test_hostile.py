"""Hostile inputs beyond the header corpus: the library raises a named QarmError, the CLI exits 2
(3 for I/O), never a traceback, never exit 0. See docs/reliability.md."""

from __future__ import annotations

import json
import re
import signal
import struct
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MANIFESTS, modelopt_file, write_checkpoint
from processes import sigint_as_at_a_terminal
from qarm_audit import audit
from qarm_audit.declarations import read_declaration
from qarm_audit.errors import (
    DeclarationError,
    ExitCode,
    FetchError,
    HeaderError,
    HeaderTooLargeError,
    ManifestError,
    PatternError,
    QarmError,
    ShardIndexError,
    SourceSpecError,
)
from qarm_audit.report import render_json, render_markdown
from qarm_audit.resolve import matchers as matchers_module
from qarm_audit.resolve.matchers import FirstMatch
from qarm_audit.sources import Checkpoint, Origin, ShardHeader, TensorEntry, open_source
from qarm_audit.sources.header import BITS_LIMIT, DTYPE_BITS, HEADER_CAP, length_prefix
from qarm_audit.sources.index import parse_index
from qarm_audit.sources.local import read_local_shard
from qarm_audit.sources.manifest import parse_manifest, render_manifest

PLAIN = {"model.layers.0.mlp.down_proj.weight": ("BF16", (4, 4))}
LLAMA = {"model_type": "llama"}


def refused(result: Any, code: int, message: str) -> None:
    """The CLI refused by name: the exit code, one line on stderr, no traceback."""
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.stderr.startswith("qarm: error: "), result.stderr
    assert message in result.stderr, result.stderr


def folder(tmp_path: Path, documents: dict[str, Any] | None = None, **kw: Any) -> Path:
    return write_checkpoint(
        tmp_path / "ckpt", {"model.safetensors": PLAIN}, documents or {"config.json": LLAMA}, **kw
    )


def checkpoint(rows: list[tuple[str, str, tuple[int, ...]]], documents: dict[str, str]) -> Any:
    """An in-memory checkpoint (as a manifest holds it): contiguous, valid offsets."""
    entries, cursor = [], 0
    for name, dtype, shape in rows:
        numel = 1
        for dim in shape:
            numel *= dim
        nbytes = numel * DTYPE_BITS[dtype] // 8
        entries.append(TensorEntry(name, dtype, shape, cursor, cursor + nbytes))
        cursor += nbytes
    shard = ShardHeader("model.safetensors", 8 + 64 + cursor, 64, None, tuple(entries))
    return Checkpoint(origin=Origin("manifest", "m"), documents=documents, shards=(shard,))


def manifest_file(path: Path, ckpt: Any) -> Path:
    path.write_text(render_manifest(ckpt))
    return path


# -- the header length cap --------------------------------------------------------------------


@pytest.mark.parametrize("cap", [64, HEADER_CAP])
def test_length_prefix_at_the_cap(cap: int) -> None:
    """cap-1 and cap are read, cap+1 is refused, without allocating anything of that size."""
    size = cap + 8 + 1
    for length in (cap - 1, cap):
        assert length_prefix(struct.pack("<Q", length), where="f", size=size, cap=cap) == length
    with pytest.raises(HeaderTooLargeError, match=f"header length {cap + 1} is above the cap"):
        length_prefix(struct.pack("<Q", cap + 1), where="f", size=size + 1, cap=cap)
    with pytest.raises(HeaderTooLargeError):
        length_prefix(b"\xff" * 8, where="f", size=size, cap=cap)  # 2**64-1


@pytest.mark.parametrize(("length", "ok"), [(63, True), (64, True), (65, False)])
def test_read_local_shard_at_a_small_cap(tmp_path: Path, length: int, ok: bool) -> None:
    body = b"{}".ljust(length)
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", length) + body)
    if ok:
        assert read_local_shard(path, path.name, cap=64).header_length == length
    else:
        with pytest.raises(HeaderTooLargeError):
            read_local_shard(path, path.name, cap=64)


def test_cli_header_just_above_the_cap_is_refused_unread(tmp_path: Path, run: Any) -> None:
    """A sparse file whose prefix says cap+1: refused before a byte of the header is read."""
    root = tmp_path / "ckpt"
    root.mkdir()
    path = root / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", HEADER_CAP + 1))
        handle.truncate(8 + HEADER_CAP + 1)
    refused(run("audit", root), 2, f"header length {HEADER_CAP + 1} is above the cap")


# -- nesting, NaN and Infinity in every JSON document ----------------------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


DEPTHS = [900, sys.getrecursionlimit() - 5, sys.getrecursionlimit() + 5, 100_000]


def deep_config(depth: int) -> str:
    return (
        '{"model_type": "llama", "quantization_config": {"quant_method": "modelopt", '
        f'"quant_algo": "FP8", "extra": {nested(depth)}}}}}'
    )


def deep_index(depth: int) -> str:
    return (
        f'{{"metadata": {{"deep": {nested(depth)}}}, '
        '"weight_map": {"model.layers.0.mlp.down_proj.weight": "model.safetensors"}}'
    )


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("document", ["config.json", "hf_quant_config.json", "index"])
def test_deep_nesting_in_documents(tmp_path: Path, run: Any, document: str, depth: int) -> None:
    """Shallow enough to parse: audited (or refused by name); deeper: a named error."""
    if document == "index":
        root = folder(tmp_path, index=False)
        (root / "model.safetensors.index.json").write_text(deep_index(depth))
    elif document == "config.json":
        root = folder(tmp_path, {"config.json": deep_config(depth)})
    else:
        block = json.dumps(modelopt_file("FP8"))[:-1] + f', "extra": {nested(depth)}}}'
        root = folder(tmp_path, {"config.json": LLAMA, "hf_quant_config.json": block})
    result = run("audit", root, "-f", "json")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if depth > sys.getrecursionlimit():
        refused(result, 2, "JSON is nested too deeply")
        with pytest.raises((DeclarationError, ShardIndexError), match="nested too deeply"):
            audit(str(root))
    else:
        assert result.exit_code in (0, 1, 2), result.stderr
        if result.exit_code == 2:
            assert "nested too deeply" in result.stderr


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_nesting_in_a_manifest(tmp_path: Path, run: Any, depth: int) -> None:
    text = render_manifest(checkpoint([("a.weight", "BF16", (2,))], {"config.json": "{}"}))
    top = text.replace('"origin": {', f'"deep": {nested(depth)}, "origin": {{', 1)
    path = tmp_path / "top.manifest.json"
    path.write_text(top)
    result = run("audit", path)
    assert "Traceback" not in result.stderr
    if depth > sys.getrecursionlimit() or result.exit_code == 2:
        # near the limit, the parser's own stack depth decides: a named error, or a report
        refused(result, 2, "JSON is nested too deeply")
    else:
        assert result.exit_code in (0, 1), result.stderr
    # a nested declaration inside the manifest's documents: refused when read as a declaration
    inner = manifest_file(
        tmp_path / "inner.manifest.json",
        checkpoint([("a.weight", "BF16", (2,))], {"config.json": deep_config(depth)}),
    )
    result = run("audit", inner)
    assert "Traceback" not in result.stderr
    if depth > sys.getrecursionlimit():
        refused(result, 2, "config.json: JSON is nested too deeply")


LITERALS = ["NaN", "Infinity", "-Infinity"]


@pytest.mark.parametrize("literal", LITERALS)
def test_nan_and_infinity_in_every_document(tmp_path: Path, run: Any, literal: str) -> None:
    message = f"non-standard JSON literal {literal}"
    config = (
        '{"model_type": "llama", "quantization_config": {"quant_method": "modelopt", '
        f'"quant_algo": "FP8", "group_size": {literal}}}}}'
    )
    refused(run("audit", folder(tmp_path / "c", {"config.json": config})), 2, message)
    quant = json.dumps(modelopt_file("NVFP4")).replace(
        '"group_size": 16', f'"group_size": {literal}'
    )
    documents = {"config.json": LLAMA, "hf_quant_config.json": quant}
    refused(run("audit", folder(tmp_path / "q", documents)), 2, message)
    root = folder(tmp_path / "i", index=False)
    (root / "model.safetensors.index.json").write_text(
        f'{{"metadata": {{"total_size": {literal}}}, "weight_map": {{}}}}'
    )
    refused(run("audit", root), 2, message)
    text = render_manifest(checkpoint([("a.weight", "BF16", (2,))], {}))
    size = json.loads(text)["shards"][0]["size"]
    path = tmp_path / "nan.manifest.json"
    path.write_text(text.replace(f'"size": {size}', f'"size": {literal}', 1))
    refused(run("audit", path), 2, message)
    header = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    body = header.replace("[1]", f"[{literal}]").encode()
    shard = tmp_path / "h" / "model.safetensors"
    shard.parent.mkdir()
    shard.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 4)
    refused(run("audit", shard.parent), 2, message)
    for parse, text in (
        (parse_index, f'{{"metadata": {{"total_size": {literal}}}, "weight_map": {{}}}}'),
        (lambda t: read_declaration({"config.json": t}), config),
    ):
        with pytest.raises(QarmError, match=message):
            parse(text)


# -- shapes whose product overflows 64 bits --------------------------------------------------

HUGE = 2**52 - 1  # every dimension is below the per-dimension cap; their product is not


@pytest.mark.parametrize(
    "shape",
    [(HUGE, HUGE), (HUGE, HUGE, HUGE, HUGE), (2**32, 2**32), (2**31, 2**30)],
    ids=["2d", "4d", "2^64-elements", "2^61-elements-x8-bits"],
)
def test_huge_shapes_overflow_by_name_and_allocate_nothing(
    tmp_path: Path, run: Any, shape: tuple[int, ...]
) -> None:
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel  # F8: one byte per element
    # In a real file the offsets are bounded by the file: the span cannot match the shape.
    header = {"w": {"dtype": "F8_E4M3", "shape": list(shape), "data_offsets": [0, 8]}}
    body = json.dumps(header).encode()
    root = tmp_path / "file"
    root.mkdir()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 8)
    tracemalloc.start()
    try:
        with pytest.raises(HeaderError, match="overflows 64 bits"):
            read_local_shard(root / "model.safetensors", "model.safetensors")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    refused(run("audit", root), 2, "overflows 64 bits")
    # A manifest holds no file: its size and offsets can be as large as the shape asks.
    ckpt = checkpoint([("model.layers.0.mlp.down_proj.weight", "F8_E4M3", shape)], {})
    assert ckpt.shards[0].size > nbytes >= BITS_LIMIT // 8
    path = manifest_file(tmp_path / "huge.manifest.json", ckpt)
    with pytest.raises(HeaderError, match="overflows 64 bits"):
        parse_manifest(path.read_text(), "huge")
    refused(run("audit", path), 2, "overflows 64 bits")


def test_largest_shape_below_64_bits_is_not_an_overflow(tmp_path: Path) -> None:
    """Just below 2**64 bits of F8: a size mismatch in a file, a valid row in a manifest."""
    shape = (2**31, 2**30 - 1)
    nbytes = 2**31 * (2**30 - 1)
    assert nbytes * 8 < BITS_LIMIT <= (nbytes + 2**31) * 8
    ckpt = checkpoint([("w.weight", "F8_E4M3", shape)], {})
    parsed = parse_manifest(render_manifest(ckpt), "edge")
    assert parsed.shards[0].tensors[0].end == nbytes
    header = {"w": {"dtype": "F8_E4M3", "shape": list(shape), "data_offsets": [0, 8]}}
    body = json.dumps(header).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(body)) + body + b"\0" * 8)
    with pytest.raises(HeaderError, match=f"needs {nbytes}"):
        read_local_shard(path, path.name)


# -- tensor names: opaque strings -----------------------------------------------------------


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


NAMES = {
    "nul": "model.layers.0.mlp.down\x00proj.weight",
    "slash": "model/layers/0/mlp/down_proj.weight",
    "dotdot": "../../etc/passwd.weight",
    "backslash": "model\\layers.0.weight",
    "absolute": "/model.layers.0.weight",
    "empty": "",
    "newline": "model.layers.0\n.weight",
    "tab": "model.layers.0\t.weight",
    "unicode": "modèle.couches.0.poids\u202e.weight",
    "long": "m." * 50_000 + "weight",
}


@pytest.mark.parametrize("label", sorted(NAMES))
def test_strange_tensor_names_are_accepted_verbatim(tmp_path: Path, run: Any, label: str) -> None:
    """Tensor names are opaque strings, never paths: accepted, reported verbatim, no crash."""
    name = NAMES[label]
    root = tmp_path / "ckpt"
    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")}
    # F8 weight with no scale: the module earns a refusal that quotes its name.
    write_checkpoint(root, {"model.safetensors": {name: ("F8_E4M3", (4, 4)), **PLAIN}}, documents)
    report = audit(str(root))
    module = name.removesuffix(".weight")
    assert report.refusals
    if module:  # the report names it verbatim (JSON escapes it, never drops or rewrites it)
        assert any(module in text for text in strings(json.loads(render_json(report))))
    render_markdown(report)
    for fmt in ("table", "markdown", "json"):
        result = run("audit", root, "-f", fmt)
        assert result.exit_code == 1, (fmt, result.stderr)
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    # The manifest keeps the name exactly (a tab is written as a list row).
    manifest = tmp_path / "m.manifest.json"
    assert run("manifest", root, "-o", manifest).exit_code == 0
    again = open_source(str(manifest))
    assert name in {t.name for t in again.shards[0].tensors}


# -- symlinks and files that are not what they claim -----------------------------------------


@pytest.mark.parametrize(
    "name", ["config.json", "hf_quant_config.json", "model.safetensors.index.json"]
)
def test_document_symlinked_outside_the_checkpoint_is_refused(
    tmp_path: Path, run: Any, name: str
) -> None:
    root = folder(tmp_path, {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")})
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir()
    if name.endswith("index.json"):
        outside.write_text(json.dumps({"weight_map": dict.fromkeys(PLAIN, "model.safetensors")}))
    else:
        outside.write_text((root / name).read_text())
        (root / name).unlink()
    (root / name).symlink_to(outside)
    with pytest.raises(SourceSpecError, match="resolves outside the checkpoint"):
        open_source(str(root))
    refused(run("audit", root), 2, f"{name}: resolves outside the checkpoint")


def test_symlink_inside_the_checkpoint_is_followed(tmp_path: Path, run: Any) -> None:
    root = folder(tmp_path)
    (root / "real-config.json").write_text(json.dumps(LLAMA))
    (root / "config.json").unlink()
    (root / "config.json").symlink_to("real-config.json")
    assert run("audit", root).exit_code == 0


@pytest.mark.parametrize(
    "name",
    [
        "config.json",
        "hf_quant_config.json",
        "model.safetensors.index.json",
        "model.safetensors",
        "model-00002-of-00002.safetensors",
    ],
)
def test_dangling_symlink_is_an_io_error_never_absent(tmp_path: Path, run: Any, name: str) -> None:
    """An evicted cache blob: the declaration (or shard) cannot be read, so nothing is said.

    Before the fix, a dangling hf_quant_config.json was skipped as absent, and a checkpoint that
    declares NVFP4 but ships BF16 audited clean (exit 0)."""
    shards = {
        "model-00001-of-00002.safetensors": PLAIN,
        "model-00002-of-00002.safetensors": {"lm_head.weight": ("BF16", (4, 4))},
    }
    if name == "model.safetensors":
        shards = {"model.safetensors": {**PLAIN, "lm_head.weight": ("BF16", (4, 4))}}
    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"])}
    root = write_checkpoint(tmp_path / "ckpt", shards, documents)
    assert run("audit", root).exit_code == 1  # intact: declared NVFP4, ships BF16
    (root / name).unlink()
    (root / name).symlink_to(tmp_path / "evicted-blob")
    with pytest.raises(FetchError, match="dangling"):
        open_source(str(root))
    refused(run("audit", root), 3, f"{name}: is a symlink to nothing")


@pytest.mark.parametrize("name", ["hf_quant_config.json", "model.safetensors"])
def test_a_link_to_a_device_is_no_regular_file_and_no_dangling_link(
    tmp_path: Path, run: Any, name: str
) -> None:
    """A link to /dev/zero exists: it was called "a symlink to nothing (a dangling link)"."""
    root = folder(tmp_path)
    (root / name).unlink(missing_ok=True)
    (root / name).symlink_to("/dev/zero")
    refused(run("audit", root), 2, f"{name}: exists but is not a regular file")


def test_a_folder_named_like_a_document_is_refused(tmp_path: Path, run: Any) -> None:
    root = folder(tmp_path)
    (root / "hf_quant_config.json").mkdir()
    refused(run("audit", root), 2, "hf_quant_config.json: exists but is not a regular file")


# -- the index --------------------------------------------------------------------------------


def test_index_mapping_one_name_to_two_shards_is_a_duplicate_key(tmp_path: Path, run: Any) -> None:
    root = write_checkpoint(
        tmp_path / "ckpt",
        {"a.safetensors": {"x": ("F32", (2,))}, "b.safetensors": {"y": ("F32", (2,))}},
    )
    (root / "model.safetensors.index.json").write_text(
        '{"weight_map": {"x": "a.safetensors", "y": "b.safetensors", "x": "b.safetensors"}}'
    )
    with pytest.raises(ShardIndexError, match="duplicate key 'x'"):
        open_source(str(root))
    refused(run("audit", root), 2, "duplicate key 'x'")


@pytest.mark.parametrize(
    "spelling",
    [
        "./model.safetensors",
        "sub/../model.safetensors",
        "sub//model.safetensors",
        "model.safetensors/",
        ".\\model.safetensors",
        "C:model.safetensors",
        "model.safetensors\x00.json",
    ],
)
def test_index_naming_the_same_shard_twice_is_refused(
    tmp_path: Path, run: Any, spelling: str
) -> None:
    root = write_checkpoint(tmp_path / "ckpt", {"model.safetensors": {**PLAIN, "b": ("F32", (2,))}})
    weight_map = {next(iter(PLAIN)): "model.safetensors", "b": spelling}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ShardIndexError):
        open_source(str(root))
    result = run("audit", root)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "model.safetensors.index.json: shard file name" in result.stderr


# -- regular expressions from the declaration ------------------------------------------------


def ct_config(targets: list[str], ignore: list[str] | None = None) -> dict[str, Any]:
    group = {
        "targets": targets,
        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
        "format": "float-quantized",
    }
    return {
        "model_type": "llama",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "config_groups": {"group_0": group},
            "ignore": ignore or [],
        },
    }


def ct_checkpoint(names: list[str], targets: list[str], ignore: list[str] | None = None) -> Any:
    config = json.dumps(ct_config(targets, ignore))
    return checkpoint([(f"{n}.weight", "BF16", (2,)) for n in names], {"config.json": config})


@pytest.mark.parametrize("pattern", ["(a+)+b", "(a*)*b", "(\\w+)+x", "([a-z]+)*$"])
def test_nested_quantifiers_are_refused_before_matching(
    tmp_path: Path, run: Any, pattern: str
) -> None:
    ckpt = ct_checkpoint(["a" * 40], [f"re:{pattern}"])
    with pytest.raises(PatternError, match="nests quantifiers"):
        audit(ckpt)
    path = manifest_file(tmp_path / "m.manifest.json", ckpt)
    refused(run("audit", path), 2, "nests quantifiers")


SLOW = [
    ("(a|aa)*b", "a" * 60),  # exponential in Python's re, no nested quantifier
    ("(a|a)*b", "a" * 60),
    ("(.*a){25}", "a" * 60),  # a bounded repeat of a quantified body
    (".*" * 12 + "x", "a" * 300),  # polynomial, no group at all
]


@pytest.mark.parametrize(("pattern", "name"), SLOW, ids=[p for p, _ in SLOW])
@pytest.mark.parametrize("where", ["targets", "ignore"])
def test_patterns_that_backtrack_in_python_are_answered_in_linear_time(
    tmp_path: Path, run: Any, pattern: str, name: str, where: str
) -> None:
    """re2 has these patterns' exact semantics on such names: they are matched there, in
    linear time, and the audit's answer is the same on every run and under any load."""
    targets, ignore = (
        (["re:" + pattern], None) if where == "targets" else (["Linear"], ["re:" + pattern])
    )
    ckpt = ct_checkpoint([name], targets, ignore)
    first = render_json(audit(ckpt))
    assert render_json(audit(ckpt)) == first
    path = manifest_file(tmp_path / "m.manifest.json", ckpt)
    result = run("audit", path, "-f", "json")
    assert result.exit_code in (0, 1), result.output


UNSAFE = ["(?=a)(a|aa)*b", "(a)\\1(a|aa)*b", "(?!x)(.*a){25}", "(?<=x)(.*)*y"]


@pytest.mark.parametrize("pattern", UNSAFE)
@pytest.mark.parametrize("where", ["targets", "ignore"])
def test_patterns_only_python_runs_that_can_backtrack_are_refused_before_matching(
    tmp_path: Path, run: Any, pattern: str, where: str
) -> None:
    targets, ignore = (
        (["re:" + pattern], None) if where == "targets" else (["Linear"], ["re:" + pattern])
    )
    ckpt = ct_checkpoint(["a" * 60], targets, ignore)
    with pytest.raises(PatternError, match="catastrophic backtracking") as info:
        audit(ckpt)
    assert info.value.where == where
    path = manifest_file(tmp_path / "m.manifest.json", ckpt)
    refused(run("audit", path), 2, "catastrophic backtracking")


def test_the_pattern_verdict_depends_on_no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall-clock watchdog refused or passed a benign 480-pattern declaration from run to
    run, with the machine's load. Now each pattern is judged from itself and the name alone:
    with every clock jumping an hour at each reading, and no timer or signal allowed, the same
    declarations get the same verdicts (answered in linear time, refused by name, or resolved)."""
    cases = (
        [ct_checkpoint([name], ["re:" + pattern]) for pattern, name in SLOW]
        + [ct_checkpoint(["a" * 60], ["re:" + pattern]) for pattern in UNSAFE]
        + [
            ct_checkpoint(
                [f"model.layers.{i}.mlp.down_proj" for i in range(480)],
                [f"re:.*layers\\.{i}\\.mlp\\.down_proj$" for i in range(480)],
            )
        ]
    )

    def verdicts() -> list[str]:
        matchers_module._plan.cache_clear()
        out = []
        for ckpt in cases:
            try:
                out.append(render_json(audit(ckpt)))
            except PatternError as exc:
                out.append(f"refused: {exc}")
        return out

    calm = verdicts()
    assert sum(v.startswith("refused: ") for v in calm) == len(UNSAFE)
    readings = iter(range(10**9))

    def jumping() -> float:
        return 3600.0 * next(readings)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a timer or a signal was set while matching patterns")

    for clock in ("monotonic", "perf_counter", "time", "process_time", "thread_time"):
        monkeypatch.setattr(time, clock, jumping)
    monkeypatch.setattr(signal, "alarm", forbidden)
    monkeypatch.setattr(signal, "setitimer", forbidden)
    monkeypatch.setattr(threading, "Timer", forbidden)
    assert verdicts() == calm


def test_benign_patterns_are_unaffected() -> None:
    names = [f"model.layers.{i}.mlp.down_proj" for i in range(200)]
    report = audit(ct_checkpoint(names, ["re:.*down_proj$"]))
    assert report.refusals  # declared FP8, ships BF16: audited to the end


def test_outside_the_main_thread_matching_works_the_same() -> None:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(audit(ct_checkpoint(["a.b"], ["re:a"]))))
    worker.start()
    worker.join(30)
    rows = out[0].modules if out else []
    assert [(m["module"], m["how"], m["rule"]) for m in rows] == [("a.b", "regex", "re:a")]


# -- a manifest of a million rows, broken at the last ----------------------------------------


def million_row_manifest(last: Any) -> str:
    """A valid manifest of 10**6 F32 scalars, whatever its row format, with ``last`` as its last
    row."""
    one = json.loads(render_manifest(checkpoint([("t0", "F32", ())], {})))
    template = one["shards"][0]["tensors"][0]
    n = 1_000_000
    if isinstance(template, str):
        rows: list[Any] = [template.replace("t0", f"t{i}", 1) for i in range(n)]
    else:
        rows = [[f"t{i}", *template[1:]] for i in range(n)]
    rows[-1] = last
    shard = one["shards"][0]
    shard["tensors"] = rows
    shard["size"] = 8 + shard["header_length"] + 4 * n
    return json.dumps(one)


@pytest.mark.parametrize(
    ("last", "message"),
    [(42, "malformed tensor row"), ("only-a-name", "malformed tensor row")],
)
def test_million_row_manifest_broken_at_the_last_row(
    tmp_path: Path, run: Any, last: Any, message: str
) -> None:
    text = million_row_manifest(last)
    start = time.perf_counter()
    with pytest.raises(ManifestError, match=message):
        parse_manifest(text, "big")
    assert time.perf_counter() - start < 20
    path = tmp_path / "big.manifest.json"
    path.write_text(text)
    start = time.perf_counter()
    refused(run("audit", path), 2, message)
    assert time.perf_counter() - start < 30


def test_a_name_twice_in_one_in_memory_shard_is_a_named_error() -> None:
    """Found by fuzzing the library API: a Checkpoint built in memory (no header or manifest
    parser to refuse the duplicate) made the bucket sum fail with an AssertionError."""
    from qarm_audit import audit
    from qarm_audit.errors import IntegrityError
    from qarm_audit.sources.checkpoint import Checkpoint, Origin, ShardHeader, TensorEntry

    twice = (TensorEntry("m.weight", "F32", (1,), 0, 4), TensorEntry("m.weight", "F32", (1,), 4, 8))
    shard = ShardHeader("model.safetensors", 8 + 8 + 8, 8, None, twice)
    with pytest.raises(IntegrityError, match="also in this shard: duplicate name"):
        audit(Checkpoint(Origin("local", "x"), {}, None, (shard,)), engine="name-probe")


def test_names_that_split_alike_are_a_named_error_not_a_lost_tensor(tmp_path: Path) -> None:
    """Found by fuzzing: "a" and ".a" both split into module "" and operand "a"; one was
    silently dropped and the bucket sum failed with an AssertionError."""
    from conftest import write_checkpoint
    from qarm_audit import audit
    from qarm_audit.errors import IntegrityError

    path = write_checkpoint(
        tmp_path / "c", {"model.safetensors": {"a": ("F32", (1,)), ".a": ("F32", (1,))}}
    )
    with pytest.raises(IntegrityError, match="cannot be told apart"):
        audit(str(path), engine="name-probe")


# -- values a parser cannot hold: lone surrogates, long integers, too many objects -------------


def raw_shard(path: Path, header: bytes, data: int = 4) -> Path:
    """A shard written byte by byte (the safetensors library writes no malformed header)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data)
    return path


def test_a_lone_surrogate_in_a_tensor_name_is_refused_as_safetensors_refuses_it(
    tmp_path: Path, run: Any
) -> None:
    """JSON can escape half a surrogate pair, which no UTF-8 text holds. The safetensors library
    refuses such a header; qarm audited it (and a config_groups name so escaped reached the
    renderers, where writing it out failed)."""
    from safetensors import SafetensorError, safe_open

    header = b'{"a.weight\\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    shard = raw_shard(tmp_path / "ckpt" / "model.safetensors", header)
    with pytest.raises(SafetensorError, match="hex escape"), safe_open(str(shard), "np"):
        pass
    with pytest.raises(HeaderError, match="lone surrogate"):
        read_local_shard(shard, shard.name)
    refused(run("audit", shard.parent), 2, "model.safetensors: the key (in $) 'a.weight\\ud800'")
    config = json.dumps(ct_config(["Linear"])).replace('"group_0"', '"group\\udc00"')
    root = folder(tmp_path / "ct", {"config.json": config})
    refused(run("audit", root), 2, "config.json: the key (in $['quantization_config']")
    pair = json.dumps(ct_config(["Linear"])).replace('"group_0"', '"group\\ud83d\\ude00"')
    assert run("audit", folder(tmp_path / "pair", {"config.json": pair})).exit_code == 1


LONG = "9" * 5000


@pytest.mark.parametrize("document", ["header", "index", "manifest", "config.json"])
def test_an_integer_beyond_pythons_digit_limit_is_named(
    tmp_path: Path, run: Any, document: str
) -> None:
    """int() converts at most 4300 digits; json.loads raised its ValueError, and the CLI said
    "internal error" (exit 3) for a header, an index or a manifest."""
    if document == "header":
        header = f'{{"a": {{"dtype": "F32", "shape": [{LONG}], "data_offsets": [0, 4]}}}}'
        source = raw_shard(tmp_path / "h" / "model.safetensors", header.encode()).parent
        where = "model.safetensors"
    elif document == "index":
        source = folder(tmp_path, index=False)
        (source / "model.safetensors.index.json").write_text(
            f'{{"metadata": {{"total_size": {LONG}}}, "weight_map": {{}}}}'
        )
        where = "model.safetensors.index.json"
    elif document == "manifest":
        text = render_manifest(checkpoint([("a.weight", "BF16", (2,))], {}))
        size = json.loads(text)["shards"][0]["size"]
        source = tmp_path / "long.manifest.json"
        source.write_text(text.replace(f'"size": {size}', f'"size": {LONG}', 1))
        where = str(source)
    else:
        source = folder(tmp_path, {"config.json": f'{{"model_type": "llama", "x": {LONG}}}'})
        where = "config.json"
    refused(run("audit", source), 2, f"{where}: an integer of 5000 digits at line ")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a{4294967296}", "the repetition number is too large"),
        ("(" * 1000 + "a" + ")" * 1000, "its groups are nested too deeply"),
    ],
    ids=["overflow", "1000-groups"],
)
def test_re_patterns_that_do_not_compile_in_re_itself_are_named(
    tmp_path: Path, run: Any, pattern: str, message: str
) -> None:
    """re.compile raised OverflowError and RecursionError, not re.error: exit 3."""
    with pytest.raises(PatternError, match=message):
        FirstMatch([pattern], "targets")
    path = manifest_file(tmp_path / "m.manifest.json", ct_checkpoint(["a.b"], [f"re:{pattern}"]))
    refused(run("audit", path), 2, f"targets: pattern {pattern[:20]!r}"[:-1])


@pytest.mark.parametrize("length", [499, 5000, 100_000])
def test_a_long_modelopt_exclude_entry_is_audited(tmp_path: Path, run: Any, length: int) -> None:
    """The substring trie of the excludes was built by recursion, one level per character: an
    entry of 499 characters or more was a RecursionError (exit 3)."""
    entry = "model." + "x" * length
    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8", [entry])}
    result = run("audit", folder(tmp_path, documents), "-f", "json")
    assert result.exit_code == 1, result.stderr  # declared FP8, ships BF16
    assert entry in result.stdout
    # built without recursion: the factored regex itself, not the fallback loop that a
    # RecursionError would leave the substring stage to
    assert matchers_module.trie_regex([entry]) == re.escape(entry)
    assert matchers_module.SubstringSet([entry])._prefilter


def _trie_regex_by_recursion(words: list[str]) -> str:
    """trie_regex as it was written first (recursive): the reference for the iterative one."""
    import re

    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return ""
        body = "(?:" + "|".join(branches) + ")" if len(branches) > 1 else branches[0]
        if "" in node:
            return body + "?" if len(branches) > 1 else f"(?:{body})?"
        return body

    return build(trie)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab.*\\(?", max_size=12), max_size=10))
def test_the_iterative_trie_regex_writes_what_the_recursive_one_wrote(words: list[str]) -> None:
    words = sorted(set(words))
    assert matchers_module.trie_regex(words) == _trie_regex_by_recursion(words)


# -- bounded in memory, not only in bytes ------------------------------------------------------


def gzip_bomb(path: Path, mib: int) -> Path:
    """A valid gzip member inflating to ``mib`` MiB of spaces then ``{}``: one deflate block of
    1 MiB repeated (each ends in a full flush, so each is independent), and its real trailer."""
    import zlib

    chunk = b" " * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = zlib.compressobj(9, zlib.DEFLATED, -15)
    end = last.compress(b"{}") + last.flush()
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(b"{}", crc)
    size = (mib * len(chunk) + 2) & 0xFFFFFFFF
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    path.write_bytes(header + block * mib + end + struct.pack("<II", crc, size))
    return path


def peak_of(call: Any) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        call()
        error = None
    except BaseException as exc:  # returned to the test
        error = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak


def test_a_gzip_bomb_is_refused_while_it_inflates(tmp_path: Path, run: Any) -> None:
    """0.9 MB of gzip inflating to 900 MiB: the whole of it was inflated (1.8 GiB at the peak)
    before the size cap was looked at; now inflating stops past 128 times the file's size."""
    bomb = gzip_bomb(tmp_path / "bomb.manifest.json.gz", 900)
    assert bomb.stat().st_size < 1_000_000
    error, peak = peak_of(lambda: open_source(str(bomb)))
    assert isinstance(error, ManifestError) and "compression bomb" in str(error), error
    assert peak < 200 * 2**20, peak
    refused(run("audit", bomb), 2, "inflates past")


def test_a_plain_manifest_above_the_cap_is_refused_unread(tmp_path: Path, run: Any) -> None:
    from qarm_audit.sources.manifest import MANIFEST_CAP

    path = tmp_path / "big.manifest.json"
    with path.open("wb") as handle:  # sparse: nothing of it is on disk
        handle.write(b'{"format": "qarm-manifest/2"')
        handle.truncate(MANIFEST_CAP + 1)
    error, peak = peak_of(lambda: open_source(str(path)))
    assert isinstance(error, ManifestError) and "above the" in str(error), error
    assert peak < 2**20


def test_a_config_of_a_hundred_megabytes_of_empty_lists_is_refused_unparsed(
    tmp_path: Path, run: Any
) -> None:
    """Three bytes "[]," make a 56-byte list: parsing a 100 MB config.json took 2.5 GiB. Now a
    document holds at most one '[' or '{' per 8 characters (a declaration at most 10^6)."""
    count = 100_000_000 // 3
    root = folder(tmp_path)
    (root / "config.json").write_text('{"model_type": "llama", "x": [' + "[]," * count + "[]]}")
    error, peak = peak_of(lambda: audit(str(root)))
    assert isinstance(error, DeclarationError), error
    assert "config.json: JSON holds 33333336 '[' and '{'" in str(error)
    assert peak < 450 * 2**20, peak  # the text itself, read once as bytes and once decoded
    refused(run("audit", root), 2, "more than the 1000000 qarm parses")


def test_a_header_dense_with_lists_is_refused_unparsed(tmp_path: Path, run: Any) -> None:
    lists = "[]," * 3_000_000
    header = f'{{"a": {{"dtype": "F32", "shape": [{lists}[]], "data_offsets": [0, 4]}}}}'
    shard = raw_shard(tmp_path / "h" / "model.safetensors", header.encode())
    error, peak = peak_of(lambda: read_local_shard(shard, shard.name))
    assert isinstance(error, HeaderError) and "qarm parses in such a document" in str(error)
    assert peak < 40 * 2**20, peak
    refused(run("audit", shard.parent), 2, "model.safetensors: JSON holds 3000005")


def test_brackets_inside_strings_are_not_counted(tmp_path: Path) -> None:
    """A tensor name or a document line may hold brackets: only those outside strings make
    objects, so only those count."""
    name = "[" * 5000
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
    shard = raw_shard(tmp_path / "model.safetensors", header.encode())
    assert read_local_shard(shard, shard.name).tensors[0].name == name


# -- what the file system and the environment refuse --------------------------------------------


def test_an_untraversable_checkpoint_folder_is_an_io_error(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder qarm may not search (chmod 000; as root, a stat that says EACCES): the
    PermissionError of Path.is_file() ended in "internal error"."""
    import errno
    import os

    root = folder(tmp_path)
    if os.geteuid() != 0:
        root.chmod(0)
        try:
            refused(run("audit", root), 3, "cannot read: Permission denied")
        finally:
            root.chmod(0o755)
    stat = Path.stat
    inside = str(root) + os.sep

    def denied(self: Path, **kwargs: Any) -> os.stat_result:
        if str(self).startswith(inside):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", denied)
    with pytest.raises(FetchError, match=r"config\.json: cannot read: Permission denied"):
        open_source(str(root))
    refused(run("audit", root), 3, "cannot read: Permission denied")
    refused(run("audit", root / "sub" / "deeper"), 3, "cannot read: Permission denied")


def test_a_token_no_http_header_can_carry_is_refused_before_any_request(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx raised UnicodeEncodeError building the Authorization header: "internal error"."""
    token = "hf_t\u00f6ken"
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing is asked of it
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(QarmError, match="not printable ASCII"):
        open_source("owner/name@" + "a" * 40)
    result = run("audit", "owner/name@" + "a" * 40)
    refused(result, 2, "HF_TOKEN: the Hub token holds a character")
    assert token not in result.stderr and "t\u00f6ken" not in result.stderr


# -- where the report goes: -o, a closed stdout, Ctrl-C --------------------------------------


def clean_folder(tmp_path: Path, name: str = "ckpt") -> Path:
    return write_checkpoint(tmp_path / name, {"model.safetensors": PLAIN}, {"config.json": LLAMA})


def test_an_output_folder_that_does_not_exist_is_refused_before_any_work(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-o into a missing folder: the audit ran to the end, then FileNotFoundError (exit 3,
    "internal error"). Now a usage error before any source is read, for every command."""
    from qarm_audit import cli as cli_module

    calls: list[str] = []
    monkeypatch.setattr(cli_module, "audit", lambda source, **kw: calls.append(source))
    monkeypatch.setattr(cli_module, "open_source", lambda source, **kw: calls.append(source))
    root = clean_folder(tmp_path)
    missing = tmp_path / "no" / "such" / "report.json"
    refused(run("audit", root, "-f", "json", "-o", missing), 2, "the folder")
    refused(run("manifest", root, "-o", missing), 2, "does not exist")
    refused(run("diff", root, root, "-o", missing), 2, "--output: ")
    refused(run("explain", root, "x", "-o", missing), 2, "--output: ")
    (tmp_path / "a-file").write_text("")
    refused(run("audit", root, "-o", tmp_path / "a-file" / "r.md"), 2, "is not a folder")
    assert calls == []


def test_an_unwritable_output_folder_is_refused_before_any_work(tmp_path: Path, run: Any) -> None:
    import os

    if os.geteuid() == 0:  # root writes anywhere chmod allows; /sys refuses it too
        if not Path("/sys").is_dir():
            pytest.skip("no /sys")
        target = Path("/sys/qarm-report.json")
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        target = locked / "report.json"
    refused(run("audit", clean_folder(tmp_path), "-o", target), 2, "cannot write there")
    refused(run("manifest", clean_folder(tmp_path), "-o", target), 2, "cannot write there")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_full_device_is_a_named_write_error(tmp_path: Path, run: Any) -> None:
    """/dev/full: write_text raised OSError ENOSPC (exit 3, "internal error"); qarm manifest
    read /dev/full to compare it with the manifest (an endless stream of zeros)."""
    root = clean_folder(tmp_path)
    result = run("audit", root, "-o", "/dev/full")  # the verdict line, then the error
    assert result.exit_code == 3 and "Traceback" not in result.stderr
    assert result.stderr.endswith(
        "qarm: error: /dev/full: cannot write the report: No space left on device\n"
    )
    refused(run("manifest", root, "-o", "/dev/full"), 3, "/dev/full: cannot write the manifest")
    assert Path("/dev/full").is_char_device()  # written through, never replaced


def test_the_report_file_is_replaced_whole_or_not_at_all(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C exited 1 ("refusals", click's Abort); now 130, with no report written half-way:
    not the -o file (written through a temporary file, then renamed), not the job summary
    (appended once, after every source), and no temporary file left."""
    from qarm_audit import cli as cli_module

    real = cli_module.audit
    seen: list[str] = []

    def interrupted(source: str, **kwargs: Any) -> Any:
        seen.append(source)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(source, **kwargs)

    monkeypatch.setattr(cli_module, "audit", interrupted)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("the previous report\n")
    summary = tmp_path / "summary.md"
    summary.write_text("an earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    root = clean_folder(tmp_path)
    result = run("audit", root, root, "-f", "markdown", "-o", out / "report.md")
    assert result.exit_code == 130, result.stderr
    assert result.stderr.endswith("qarm: interrupted; nothing more was written\n")
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert [p.name for p in out.iterdir()] == ["report.md"]
    assert (out / "report.md").read_text() == "the previous report\n"
    assert summary.read_text() == "an earlier step\n"
    monkeypatch.setattr(cli_module, "audit", real)
    opened = Path.open

    def interrupted_half_way(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = opened(self, mode, *args, **kwargs)
        if "w" not in mode:
            return handle

        class Half:
            def __enter__(self) -> Half:
                return self

            def __exit__(self, *exc: object) -> None:
                handle.close()

            def write(self, text: str) -> int:
                handle.write(text[: len(text) // 2])
                handle.flush()
                raise KeyboardInterrupt

        return Half()

    with monkeypatch.context() as patch:  # Ctrl-C in the middle of writing the report
        patch.setattr(Path, "open", interrupted_half_way)
        result = run("audit", root, root, "-f", "markdown", "-o", out / "report.md")
    assert result.exit_code == 130, result.stderr
    assert (out / "report.md").read_text() == "the previous report\n"
    assert [p.name for p in out.iterdir()] == ["report.md"]
    assert run("audit", root, root, "-f", "markdown", "-o", out / "report.md").exit_code == 0
    assert (out / "report.md").read_text().count("### qarm audit") == 2
    assert [p.name for p in out.iterdir()] == ["report.md"]


def _qarm(*args: str | Path, **kwargs: Any) -> Any:
    import os
    import subprocess

    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.pop("QARM_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "qarm_audit", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=sigint_as_at_a_terminal,  # a test's Ctrl-C reaches it, as at a terminal
        **kwargs,
    )


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
@pytest.mark.parametrize("earned", [0, 1])
def test_a_closed_stdout_ends_quietly_with_the_exit_code_the_audit_earned(
    tmp_path: Path, fmt: str, earned: int
) -> None:
    """`qarm audit ... | true`: the table exited 1 whatever the audit found (rich's own
    handler; 3 when the pipe closed between two sources), JSON and markdown exited 3 with a
    BrokenPipeError. Now every source is still audited, nothing more is written, and the exit
    code is the audit's."""
    clean = clean_folder(tmp_path)
    sources = [clean] * 80
    if earned:
        documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")}
        sources.append(folder(tmp_path / "refused", documents))  # after the pipe is closed
    process = _qarm("audit", *sources, "-f", fmt)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before qarm has written anything: its first write fails
    errors = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=120) == earned, errors
    assert "Traceback" not in errors and "Error" not in errors, errors
    assert "internal error" not in errors and "Exception ignored" not in errors


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_with_no_stdout_at_all_the_exit_code_is_still_the_audit_s(tmp_path: Path, fmt: str) -> None:
    """`qarm audit ... >&-`: the report goes nowhere; the exit code must still say what the
    audit found (a refused checkpoint exited 0), and nothing is printed but the verdict line."""
    import os
    import subprocess

    documents = {"config.json": LLAMA, "hf_quant_config.json": modelopt_file("FP8")}
    for source, earned in ((clean_folder(tmp_path), 0), (folder(tmp_path / "r", documents), 1)):
        done = subprocess.run(
            [sys.executable, "-m", "qarm_audit", "audit", str(source), "-f", fmt],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k not in ("QARM_DEBUG",)},
            preexec_fn=lambda: os.close(1),
            timeout=120,
        )
        errors = done.stderr.decode()
        assert done.returncode == earned, errors
        assert "Traceback" not in errors and "Error" not in errors, errors


def test_ctrl_c_while_writing_exits_130(tmp_path: Path) -> None:
    """SIGINT to the real process, blocked writing a report nobody reads yet."""

    process = _qarm("audit", *[clean_folder(tmp_path)] * 80, "-f", "json")
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.read(1)  # writing; the pipe fills and the write blocks
    if first != b"[":  # ended before writing: say how
        process.wait(timeout=60)
        pytest.fail(f"exit {process.returncode}, stdout {first!r}: {process.stderr.read()!r}")
    time.sleep(0.3)
    process.send_signal(signal.SIGINT)
    process.stdout.read()
    process.stdout.close()
    errors = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=60) == 130, errors
    assert errors.endswith("qarm: interrupted; nothing more was written\n"), errors
    assert "Traceback" not in errors


# -- tokens in what a server says --------------------------------------------------------------

TOKEN = "hf_qarmECHOtoken0123456789abcdefXYZ"


@pytest.fixture
def echoing_hub(tmp_path: Path) -> Any:
    """A Hub that puts the Authorization header it got into its answers: a listing that
    huggingface_hub cannot read (its ValueError quotes the field: the token), error bodies."""
    import http.server

    from hubserver import point_huggingface_hub_at

    class Echo(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            said = f"you sent {self.headers.get('Authorization', '')}"
            status, body = 400, {"error": said}
            if self.path.startswith("/api/models/"):
                status = 200
                body = {"id": "org/x", "sha": "a" * 40, "inferenceProviderMapping": said}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Message", said)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    with point_huggingface_hub_at(endpoint, cache_dir=tmp_path / "hf", disable_token=False):
        yield endpoint
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("debug", ["0", "1"])
def test_a_token_a_server_echoes_is_scrubbed_and_the_exit_code_stays_3(
    echoing_hub: Any, run: Any, monkeypatch: pytest.MonkeyPatch, debug: str
) -> None:
    """The server's answer holds the token, and huggingface_hub's ValueError quotes it: the
    "internal error" line printed it whole, and with QARM_DEBUG=1 so did the traceback, which
    also turned the exit code into 1 ("refusals")."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("QARM_DEBUG", debug)
    result = run("audit", "org/x@" + "a" * 40)
    assert result.exit_code == 3, result.stderr
    assert "you sent Bearer <HF_TOKEN>" in result.stderr
    assert TOKEN not in result.stdout + result.stderr and TOKEN[3:] not in result.stderr
    assert ("Traceback (most recent call last):" in result.stderr) == (debug == "1")


def test_tokens_are_scrubbed_from_every_chained_exception(
    run: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from qarm_audit import cli as cli_module

    def failing(source: str, **kwargs: Any) -> Any:
        try:
            try:
                raise OSError(f"the server said: Authorization: Bearer {TOKEN}")
            except OSError as inner:
                raise LookupError(f"while reading {TOKEN}\n::error::forged") from inner
        except LookupError:
            raise RuntimeError(f"gave up ({TOKEN})") from None

    monkeypatch.setattr(cli_module, "audit", failing)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("QARM_DEBUG", "1")
    result = run("audit", clean_folder(tmp_path))
    assert result.exit_code == 3
    assert TOKEN not in result.stderr
    assert "gave up (<HF_TOKEN>)" in result.stderr
    assert "LookupError" not in result.stderr  # suppressed by `from None`, as Python shows it

    def chained(source: str, **kwargs: Any) -> Any:
        try:
            raise OSError(f"Bearer {TOKEN}")
        except OSError as inner:
            raise QarmError("x", f"while reading {TOKEN}\n::error::forged") from inner

    monkeypatch.setattr(cli_module, "audit", chained)
    result = run("audit", clean_folder(tmp_path))
    assert result.exit_code == 2 and TOKEN not in result.stderr
    assert "OSError: Bearer <HF_TOKEN>" in result.stderr
    assert "direct cause" in result.stderr
    assert not [line for line in result.stderr.split("\n") if line.lstrip().startswith("::")]


DEEP_TOML = "x = " + "[" * 3000 + "]" * 3000 + "\n"


def test_toml_nested_too_deeply_or_not_utf8_is_a_named_error(tmp_path: Path, run: Any) -> None:
    """tomllib parses nested arrays by recursion: a profile, a ``--config`` file or the
    ``qarm.toml`` read from the working folder nested 3 000 deep ended in an internal error,
    as did a profile that is not UTF-8."""
    manifest = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
    deep = tmp_path / "deep.toml"
    deep.write_text(DEEP_TOML)
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b'name = "\xff"\n')
    for args, said in (
        (("--engine", deep), "nested too deeply"),
        (("--engine", latin), "not UTF-8"),
        (("--config", deep), "nested too deeply"),
    ):
        result = run("audit", manifest, *args)
        assert result.exit_code == ExitCode.BAD_INPUT, (args, result.stderr)
        assert result.stderr.startswith("qarm: error: ") and said in result.stderr


def test_digits_that_python_cannot_read_as_an_integer_are_refused_by_name(
    tmp_path: Path, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails: ``COLUMNS=²`` ended in an internal
    error, and ``--gpu sm²`` printed int()'s own message."""
    manifest = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
    monkeypatch.setenv("COLUMNS", "²")
    for args in ((), ("-f", "markdown"), ("-o", tmp_path / "table.txt")):
        result = run("audit", manifest, *args)
        assert result.exit_code == ExitCode.CLEAN, result.stderr
    result = run("audit", manifest, "--gpu", "sm²")
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "unknown GPU 'sm²'" in result.stderr and "int()" not in result.stderr


def test_the_report_never_replaces_a_file_it_audits(tmp_path: Path, run: Any) -> None:
    """``-o`` (and ``--json-output``) naming the manifest audited, or a file of the audited
    folder, replaced it with the report; a new file beside them is still written."""
    manifest = tmp_path / "m.manifest.json"
    manifest.write_bytes((MANIFESTS / "seed-nvfp4-w4a4.manifest.json").read_bytes())
    root = write_checkpoint(
        tmp_path / "ckpt",
        {"model.safetensors": {"model.layers.0.mlp.up_proj.weight": ("BF16", (64, 64))}},
        {"config.json": {"model_type": "llama"}},
    )
    before = {p: p.read_bytes() for p in (manifest, *root.iterdir())}
    for args in (
        ("audit", manifest, "-o", manifest),
        ("audit", manifest, "--json-output", manifest),
        ("audit", root, "-f", "markdown", "-o", root / "model.safetensors"),
        ("explain", root, "model.layers.0.mlp.up_proj", "-o", root / "config.json"),
        ("diff", manifest, root, "-o", manifest),
    ):
        result = run(*args)
        assert result.exit_code == ExitCode.BAD_INPUT, (args, result.stderr)
        assert "which qarm only reads" in result.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert run("audit", root, "-o", root / "report.txt").exit_code == ExitCode.CLEAN
