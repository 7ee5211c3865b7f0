"""Manifests: lossless, deterministic, diff-friendly, atomic; auditing one equals its source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import MANIFESTS, fp8_modelopt, llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from qarm_audit import audit
from qarm_audit.errors import HeaderError, ManifestError
from qarm_audit.report import render_json, render_markdown
from qarm_audit.sources import open_source, render_manifest, write_manifest
from qarm_audit.sources.index import index_text_of


def sharded(tmp_path: Path) -> Path:
    t = llama(
        spell=lambda m, o, i: (
            nvfp4_modelopt(m, o, i, input_scale=True) if ".mlp." in m else fp8_modelopt(m, o, i)
        )
    )
    names = sorted(t)
    shards = {
        "model-00001-of-00002.safetensors": {n: t[n] for n in names[:20]},
        "model-00002-of-00002.safetensors": {n: t[n] for n in names[20:]},
    }
    documents = {
        "config.json": '{\r\n  "model_type": "llama"\r\n}',  # CRLF, no final newline
        "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"], kv="FP8"),
    }
    return write_checkpoint(tmp_path / "ckpt", shards, documents)


def without_source(report) -> dict:
    data = json.loads(render_json(report))
    data.pop("source")
    return data


def test_round_trip_is_exact_and_audits_identically(tmp_path: Path, run) -> None:
    folder = sharded(tmp_path)
    out = tmp_path / "m.manifest.json"
    result = run("manifest", folder, "-o", out)
    assert result.exit_code == 0, result.stderr
    original = open_source(str(folder))
    loaded = open_source(str(out))
    assert loaded.documents == original.documents
    written = (folder / "model.safetensors.index.json").read_text()
    assert index_text_of(loaded) == index_text_of(original) == written
    assert loaded.shards == original.shards
    assert render_manifest(loaded) == out.read_text()
    assert without_source(audit(str(out))) == without_source(audit(str(folder)))


def test_manifest_bytes_are_deterministic_and_one_tensor_per_line(tmp_path: Path) -> None:
    folder = sharded(tmp_path)
    a = render_manifest(open_source(str(folder)))
    b = render_manifest(open_source(str(folder)))
    assert a == b
    rows = [line for line in a.splitlines() if line.startswith('  "') and "\\t" in line]
    assert len(rows) == sum(len(s.tensors) for s in open_source(str(folder)).shards)
    assert str(tmp_path) not in a


def test_write_is_atomic_and_never_clobbers_a_different_file(tmp_path: Path, run) -> None:
    folder = sharded(tmp_path)
    out = tmp_path / "m.json"
    out.write_text("something else")
    result = run("manifest", folder, "-o", out)
    assert result.exit_code == 2
    assert "--force" in result.stderr
    assert out.read_text() == "something else"
    assert run("manifest", folder, "-o", out, "--force").exit_code == 0
    again = run("manifest", folder, "-o", out)
    assert again.exit_code == 0 and "unchanged" in again.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "m.json"]


def test_gzip_manifest_round_trips(tmp_path: Path) -> None:
    folder = sharded(tmp_path)
    out = tmp_path / "m.json.gz"
    checkpoint = open_source(str(folder))
    assert write_manifest(checkpoint, out)
    assert open_source(str(out)).shards == checkpoint.shards
    assert not write_manifest(checkpoint, out)  # identical bytes: nothing written


def test_a_gzip_manifest_that_is_no_whole_stream_is_bad_input(tmp_path: Path) -> None:
    """A truncated or corrupt gzip manifest is read whole, so it is bad input (exit 2), not
    a failed read (exit 3)."""
    import gzip

    whole = gzip.compress((MANIFESTS / "seed-nvfp4-w4a4.manifest.json").read_bytes())
    corrupt = bytearray(whole)
    corrupt[20:40] = bytes(20)
    for name, data in (
        ("prefix.gz", whole[:3]),
        ("cut.gz", whole[: len(whole) // 2]),
        ("corrupt.gz", bytes(corrupt)),
        ("trailing.gz", whole + b"\x1f\x8bxx"),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ManifestError, match="not a whole gzip stream"):
            open_source(str(path))


def test_committed_manifests_round_trip() -> None:
    for path in sorted(MANIFESTS.glob("*.json")):
        assert render_manifest(open_source(str(path))) == path.read_text(), path.name


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (lambda d: d.update(format="qarm-manifest/99"), ManifestError, "not a qarm-manifest/2"),
        (
            lambda d: d["shards"][0]["tensors"].append(["x", "F32", [-1]]),
            ManifestError,
            "malformed tensor row",
        ),
        (
            lambda d: d["shards"][0].update(file="../evil.safetensors"),
            Exception,
            "not a plain relative name",
        ),
        (
            lambda d: d["shards"][0].update(size=d["shards"][0]["size"] + 1),
            HeaderError,
            "8 + header + data",
        ),
        (
            lambda d: d["shards"][0]["tensors"].append(d["shards"][0]["tensors"][0]),
            ManifestError,
            "appears twice",
        ),
    ],
    ids=["format", "shape", "traversal", "size", "duplicate"],
)
def test_hostile_manifest_is_a_named_error(tmp_path: Path, run, mutate, error, message) -> None:
    folder = sharded(tmp_path)
    document = json.loads(render_manifest(open_source(str(folder))))
    mutate(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(error, match=re.escape(message)):
        open_source(str(path))
    assert run("audit", path).exit_code == 2


def test_reports_are_byte_identical_and_leak_no_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sharded(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert render_json(audit("ckpt")) == render_json(audit("ckpt"))
    assert render_markdown(audit("ckpt")) == render_markdown(audit("ckpt"))
    assert str(tmp_path) not in render_json(audit("ckpt")) + render_markdown(audit("ckpt"))


# --- the index as a rule over the headers ---------------------------------------------------


def _rewrite_index(folder: Path, transform) -> str:
    path = folder / "model.safetensors.index.json"
    text = transform(json.loads(path.read_text()))
    path.write_text(text)
    return text


@pytest.mark.parametrize(
    ("style", "derived"),
    [
        ("transformers", True),  # indent 2, sorted keys, final newline
        ("no-final-newline", True),  # compressed-tensors' converter
        ("indent-1", False),
        ("unsorted", False),
        ("extra-key", True),
    ],
)
def test_index_is_stored_as_a_rule_only_when_it_reproduces_the_text(
    tmp_path: Path, style: str, derived: bool
) -> None:
    folder = sharded(tmp_path)

    def transform(document: dict) -> str:
        if style == "indent-1":
            return json.dumps(document, indent=1, sort_keys=True)
        if style == "unsorted":
            document["weight_map"] = dict(reversed(document["weight_map"].items()))
            return json.dumps(document, indent=2)
        if style == "extra-key":
            document["metadata"]["total_parameters"] = 7
        tail = "" if style == "no-final-newline" else "\n"
        return json.dumps(document, indent=2, sort_keys=True) + tail

    text = _rewrite_index(folder, transform)
    out = tmp_path / "m.manifest.json"
    write_manifest(open_source(str(folder)), out)
    written = out.read_text()
    assert ('"weight_map": "from the shards"' in written) is derived
    assert ('model.layers.0.mlp.down_proj.weight\\":' in written) is not derived
    loaded = open_source(str(out))
    assert index_text_of(loaded) == text
    assert render_manifest(loaded) == written
    assert without_source(audit(str(out))) == without_source(audit(str(folder)))


@pytest.mark.parametrize(
    "index",
    [
        {"weight_map": "from the shards", "rest": {}, "tail": "\r\n"},
        {"weight_map": "something else", "rest": {}, "tail": ""},
        {"weight_map": "from the shards", "rest": {"weight_map": {}}, "tail": ""},
        {"weight_map": "from the shards", "rest": [], "tail": ""},
        {"weight_map": "from the shards", "rest": {}},
        {"weight_map": "from the shards", "rest": {}, "tail": "", "more": 1},
    ],
)
def test_a_malformed_index_rule_is_a_named_manifest_error(tmp_path: Path, index: dict) -> None:
    out = tmp_path / "m.manifest.json"
    write_manifest(open_source(str(sharded(tmp_path))), out)
    document = json.loads(out.read_text())
    document["index"] = index
    out.write_text(json.dumps(document))
    with pytest.raises(ManifestError, match="an index object must be"):
        open_source(str(out))


def test_a_rule_index_carries_its_metadata_into_the_integrity_check(tmp_path: Path) -> None:
    folder = sharded(tmp_path)
    _rewrite_index(
        folder,
        lambda d: json.dumps({**d, "metadata": {"total_size": 5}}, indent=2, sort_keys=True),
    )
    out = tmp_path / "m.manifest.json"
    write_manifest(open_source(str(folder)), out)
    assert '"weight_map": "from the shards"' in out.read_text()
    report = audit(str(out))
    assert report.integrity is not None and report.integrity.total_size == 5
    assert "index-total-size" in [r.code for r in report.refusals]
