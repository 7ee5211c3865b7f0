"""Hub access through the real huggingface_hub client against tests/hubserver.HubServer.

Every test points huggingface_hub at a fresh server and a fresh Hub cache (``hub`` fixture),
replaces qarm's retry policy with one that records its sleeps instead of sleeping, and does the
same for huggingface_hub's own sleeps, so that no test waits for a backoff.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants as hf_constants

import hubserver
from conftest import llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from hubserver import HubServer, RepoSpec, SparseFile
from hubtesting import Sleeps, record_sleeps, serving
from qarm_audit import audit
from qarm_audit.errors import HeaderTooLargeError, HubError
from qarm_audit.report import render_json
from qarm_audit.report.progress import HubProgress
from qarm_audit.sources import hub as hub_module
from qarm_audit.sources import open_source
from qarm_audit.sources.hub import (
    HubOfflineError,
    RangeMismatchError,
    RangeNotHonouredError,
    RetryPolicy,
)

TOKEN = "hf_qarmTestSecretToken0123456789"
SHARDS = [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
DOCUMENTS = {
    "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"]),
}


# -- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    return record_sleeps(monkeypatch)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    """``hub(*specs, **server_kwargs)``: a started server that huggingface_hub points at."""
    yield from serving(tmp_path)


def nvfp4(module: str, out: int, inp: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    return dict(nvfp4_modelopt(module, out, inp))


def single(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "single", {"model.safetensors": llama(2, nvfp4)}, DOCUMENTS)


def sharded(tmp_path: Path, name: str = "sharded", layers: int = 3) -> Path:
    tensors = llama(layers, nvfp4)
    names = sorted(tensors)
    cut = [0, len(names) // 3, 2 * len(names) // 3, len(names)]
    shards = {
        file: {n: tensors[n] for n in names[cut[i] : cut[i + 1]]} for i, file in enumerate(SHARDS)
    }
    return write_checkpoint(tmp_path / name, shards, DOCUMENTS)


def renamed(folder: Path) -> dict[str, str]:
    """The folder's shards renamed ``part-<i>.safetensors``, its index with them: no shard is
    named as ``save_pretrained`` names them. Returns the new names by the old."""
    index = folder / "model.safetensors.index.json"
    names = {file: f"part-{i}.safetensors" for i, file in enumerate(SHARDS)}
    for old, new in names.items():
        (folder / old).rename(folder / new)
    document = json.loads(index.read_text())
    document["weight_map"] = {k: names[v] for k, v in document["weight_map"].items()}
    index.write_text(json.dumps(document, indent=2))
    return names


STALE = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
"""A whole set of shards named as ``save_pretrained`` names them, which the index does not
name (left from an earlier upload): the set read ahead, the first with a broken header."""


def with_stale_set(folder: Path) -> Path:
    renamed(folder)
    (folder / STALE[0]).write_bytes(struct.pack("<Q", 40) + b"{" * 40)
    (folder / STALE[1]).write_bytes(struct.pack("<Q", 2) + b"{}")
    return folder


def header_length(path: Path) -> int:
    with path.open("rb") as handle:
        return int(struct.unpack("<Q", handle.read(8))[0])


def report(result: Any) -> dict[str, Any]:
    """The JSON report without what legitimately differs between sources."""
    document = json.loads(result.stdout)
    document.pop("source")
    for shard in document["integrity"]["shards"]:
        shard["remote_sha256"] = None
    return document


def shard_path(repo: str, sha: str, file: str) -> str:
    return f"/{repo}/resolve/{sha}/{file}"


def quiet(result: Any) -> str:
    return str(result.stdout) + str(result.stderr)


# -- equality with a local audit, bytes and requests ---------------------------------------


def test_single_file_equals_local_audit(hub: Any, run: Any, tmp_path: Path) -> None:
    folder = single(tmp_path)
    spec = RepoSpec.from_folder("org/single", folder)
    server = hub(spec)
    remote = run("audit", f"org/single@{spec.sha}", "--format", "json")
    local = run("audit", folder, "--format", "json")
    assert remote.exit_code == local.exit_code
    assert report(remote) == report(local)
    source = json.loads(remote.stdout)["source"]
    assert source == {
        "kind": "hub",
        "location": f"org/single@{spec.sha}",
        "repo": "org/single",
        "revision": spec.sha,
    }
    data = (folder / "model.safetensors").read_bytes()
    shard = json.loads(remote.stdout)["integrity"]["shards"][0]
    assert shard["remote_sha256"] == hashlib.sha256(data).hexdigest()
    # The Hub's parameter count sizes the only read exactly: 8 + header bytes, nothing more.
    path = shard_path("org/single", spec.sha, "model.safetensors")
    assert server.bytes_by_path[path] == 8 + header_length(folder / "model.safetensors")
    assert server.count("GET", path) == 1
    # listing + (HEAD + GET) x 2 documents + 1 range read
    assert server.request_count == 6
    assert "resolved" not in remote.stderr


def test_sharded_equals_local_audit(hub: Any, run: Any, tmp_path: Path) -> None:
    folder = sharded(tmp_path)
    spec = RepoSpec.from_folder("org/sharded", folder)
    server = hub(spec)
    remote = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    local = run("audit", folder, "--format", "json")
    assert remote.exit_code == local.exit_code
    assert report(remote) == report(local)
    for file in SHARDS:
        path = shard_path("org/sharded", spec.sha, file)
        # read while the documents download, before the index says how long the header is:
        # the 8-byte prefix, then exactly the header
        ranges = [r.range for r in server.records if r.path == path]
        assert ranges == ["bytes=0-7", f"bytes=8-{8 + header_length(folder / file) - 1}"]
    # listing + (HEAD + GET) x 3 documents + 2 reads per shard
    assert server.request_count == 2 * len(SHARDS) + 7


@pytest.mark.parametrize(
    ("late", "shards"),
    [
        ("model.safetensors.index.json", SHARDS),  # the first wave of the index's likely shards
        ("hf_quant_config.json", ["model.safetensors"]),  # no index: every shard
    ],
)
def test_the_shards_are_read_while_the_documents_download(
    hub: Any, run: Any, tmp_path: Path, late: str, shards: list[str]
) -> None:
    """A document arrives late; every shard's header was asked for before it did."""
    folder = sharded(tmp_path) if len(shards) > 1 else single(tmp_path)
    spec = RepoSpec.from_folder("org/late", folder)
    server = hub(spec)
    server.add_latency(0.5, path=f"*/{late}", method="GET")
    assert run("audit", f"org/late@{spec.sha}").exit_code in (0, 1)
    (document,) = [r for r in server.records if r.method == "GET" and r.path.endswith(late)]
    for file in shards:
        path = shard_path("org/late", spec.sha, file)
        first = min(r.arrived for r in server.records if r.path == path)
        assert first < document.answered - 0.3


def test_a_shard_read_ahead_that_the_index_does_not_name_is_dropped(
    hub: Any, run: Any, tmp_path: Path
) -> None:
    """Read ahead as the index's likely shards, then not named by it: not audited, not cached,
    and a broken header among them no error."""
    folder = with_stale_set(sharded(tmp_path))
    spec = RepoSpec.from_folder("org/sharded", folder)
    server = hub(spec)
    remote = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    local = run("audit", folder, "--format", "json")
    assert remote.exit_code == local.exit_code in (0, 1)
    assert report(remote) == report(local)
    assert server.count("GET", shard_path("org/sharded", spec.sha, STALE[0])) >= 1  # read ahead
    snapshot = tmp_path / "hf" / "models--org--sharded" / "snapshots" / spec.sha
    cached = {p.name for p in (snapshot / ".qarm-audit").glob("*.header")}
    assert cached == {f"part-{i}.safetensors.header" for i in range(len(SHARDS))}


DEEPSEEK = [f"model-{i:05d}-of-000003.safetensors" for i in (1, 2, 3)]


@pytest.mark.parametrize(
    ("listing", "ahead"),
    [
        (SHARDS, SHARDS),
        ([*SHARDS, "model-00004-of-00004.safetensors"], SHARDS),  # an odd one is no set
        (["model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"], STALE),
        (DEEPSEEK, DEEPSEEK),  # DeepSeek's own names: six digits for the count
        ([*SHARDS, *STALE], []),  # two whole sets: either could be the index's
        (["model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"], []),
        (["model-1-of-1" + "0" * 5000 + ".safetensors", "model-٠١-of-٠١.safetensors"], []),
        # one number spelled two ways: not each once, so no set is whole
        (["model-1-of-2.safetensors", "model-01-of-2.safetensors", "model-2-of-2.safetensors"], []),
    ],
)
def test_the_shards_read_ahead_are_one_whole_set(listing: list[str], ahead: list[str]) -> None:
    from qarm_audit.sources.hub.listing import likely_shards

    assert likely_shards(["config.json", *listing], 16) == ahead
    assert likely_shards(listing, 2) == ahead[:2]


@pytest.fixture
def no_parameter_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub that does not report the safetensors parameter count in model_info."""
    monkeypatch.setattr(hubserver, "_safetensors_parameters", lambda blob: Counter())


def without_total_size(folder: Path) -> Path:
    """The folder's index without ``metadata.total_size`` (the other figure a first read can be
    sized from)."""
    index = folder / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    document.pop("metadata", None)
    index.write_text(json.dumps(document, indent=2))
    return folder


@pytest.mark.usefixtures("no_parameter_count")
def test_without_parameter_count_no_byte_of_tensor_data(hub: Any, run: Any, tmp_path: Path) -> None:
    folder = without_total_size(sharded(tmp_path))
    spec = RepoSpec.from_folder("org/sharded", folder)
    server = hub(spec)
    remote = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    assert report(remote) == report(run("audit", folder, "--format", "json"))
    for file in SHARDS:
        path = shard_path("org/sharded", spec.sha, file)
        length = header_length(folder / file)
        assert server.bytes_by_path[path] == 8 + length  # exactly the prefix and the header
        ranges = [r.range for r in server.records if r.path == path]
        # read ahead: the prefix, then exactly the remainder
        assert len(ranges) == 2 and str(ranges[1]).endswith(f"-{8 + length - 1}")
    assert server.request_count == len(SHARDS) + 10


@pytest.mark.usefixtures("no_parameter_count")
def test_later_shards_are_sized_from_earlier_headers(
    hub: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """After the first wave, the first read is sized from the headers seen: one read each."""
    monkeypatch.setattr(hub_module, "WORKERS", 2)
    layer = llama(1, nvfp4)
    shards = {
        f"model-{i:05d}-of-00008.safetensors": {
            name.replace("layers.0.", f"layers.{i}."): t
            for name, t in layer.items()
            if "layers.0." in name
        }
        for i in range(8)
    }
    folder = without_total_size(write_checkpoint(tmp_path / "eight", shards, DOCUMENTS))
    spec = RepoSpec.from_folder("org/eight", folder)
    server = hub(spec)
    checkpoint = open_source(f"org/eight@{spec.sha}")
    assert [s.file for s in checkpoint.shards] == list(shards)
    for i, file in enumerate(shards):
        path = shard_path("org/eight", spec.sha, file)
        need = 8 + header_length(folder / file)
        assert server.count("GET", path) == (2 if i < 2 else 1)
        assert need <= server.bytes_by_path[path] <= need * 1.05
    assert server.count("GET", "*.safetensors") == len(shards) + 2


def test_a_likely_shard_listed_without_a_size_is_no_error_unless_the_index_names_it(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """A listing that gives no size for a file named as an index's shard: before the index
    arrives it is not read (nothing says where its header ends), and once the index arrives
    it is refused only if the index names it."""
    folder = with_stale_set(sharded(tmp_path))
    spec = RepoSpec.from_folder("org/sizeless", folder)
    unsized = {STALE[1]}
    answer = hubserver._json_response

    def without_sizes(status: int, payload: Any, headers: Any = ()) -> Any:
        if isinstance(payload, dict) and isinstance(payload.get("siblings"), list):
            for sibling in payload["siblings"]:
                if sibling.get("rfilename") in unsized:
                    sibling.pop("size", None)
                    sibling.pop("lfs", None)
        return answer(status, payload, headers)

    monkeypatch.setattr(hubserver, "_json_response", without_sizes)
    server = hub(spec)
    remote = run("audit", f"org/sizeless@{spec.sha}", "--format", "json")
    assert remote.exit_code in (0, 1), remote.stderr
    assert server.count("GET", shard_path("org/sizeless", spec.sha, STALE[0])) >= 1
    assert server.count("GET", shard_path("org/sizeless", spec.sha, STALE[1])) == 0
    unsized.add("part-0.safetensors")  # now a shard the index names
    refused = run("audit", f"org/sizeless@{spec.sha}")
    assert refused.exit_code == 3, refused.stderr
    assert "part-0.safetensors: the listing of org/sizeless@" in refused.stderr
    assert "gives no size for it" in refused.stderr


def answer_for(monkeypatch: Any, file: str, change: Callable[[Any], Any]) -> None:
    """The test server answers a request for ``file`` at a revision (``/resolve/``) with what
    ``change`` makes of its own answer."""
    resolve = hubserver._Router.resolve

    def changed(self: Any, segs: list[str]) -> Any:
        answer = resolve(self, segs)
        if answer is not None and segs[-1] == file and "resolve" in segs:
            return change(answer)
        return answer

    monkeypatch.setattr(hubserver._Router, "resolve", changed)


def with_header(name: str, value: str) -> Callable[[Any], Any]:
    """An answer's ``name`` header replaced by ``value``."""

    def change(answer: Any) -> Any:
        kept = [(k, v) for k, v in answer.headers if k.lower() != name.lower()]
        answer.headers = [*kept, (name, value)]
        return answer

    return change


@pytest.mark.parametrize("header", ["ETag", "X-Linked-Etag"])
# the relative one climbs from the cache's blobs/ to tmp_path: hf/models--org--etag/blobs
@pytest.mark.parametrize("name", ["{outside}", "../../../outside/written", "W//{outside}"])
def test_a_document_blob_named_as_a_path_is_refused_and_nothing_written(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any, header: str, name: str
) -> None:
    """huggingface_hub stores a download as ``blobs/<etag>``: an etag that is a path would
    have it write the document (and a lock) outside the Hub cache."""
    outside = tmp_path / "outside" / "written"
    outside.parent.mkdir()
    etag = name.format(outside=outside)
    spec = RepoSpec.from_folder("org/etag", single(tmp_path))
    answer_for(monkeypatch, "config.json", with_header(header, f'"{etag}"'))
    hub(spec)
    before = {p for p in tmp_path.rglob("*") if "hf" not in p.relative_to(tmp_path).parts[:1]}
    refused = run("audit", f"org/etag@{spec.sha}", "--format", "json")
    assert refused.exit_code == 3, refused.stderr
    assert "config.json: the server names the file's blob '\"" in refused.stderr
    assert f"({header}), which is no plain name" in refused.stderr
    assert not outside.exists() and not outside.with_suffix(".lock").exists()
    after = {p for p in tmp_path.rglob("*") if "hf" not in p.relative_to(tmp_path).parts[:1]}
    assert after == before


@pytest.mark.parametrize("named", ["f" * 40, "../../../outside", "main"])
def test_a_document_answered_as_of_another_commit_is_refused_and_not_cached(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any, named: str
) -> None:
    """huggingface_hub files a document under the commit its answer names: one answered as of
    another commit is refused, and nothing is filed under that commit."""
    spec = RepoSpec.from_folder("org/commit", single(tmp_path))
    answer_for(monkeypatch, "config.json", with_header("X-Repo-Commit", named))
    hub(spec)
    refused = run("audit", f"org/commit@{spec.sha}", "--format", "json")
    assert refused.exit_code == 3, refused.stderr
    assert f"config.json: asked for the file at commit {spec.sha}" in refused.stderr
    assert f"as of commit {named!r} (X-Repo-Commit)" in refused.stderr
    cached = tmp_path / "hf" / "models--org--commit"
    assert not list(cached.rglob("config.json")) and not list(cached.glob("refs/*"))
    assert not (tmp_path / "outside").exists()  # "../../../outside" from snapshots/


@pytest.mark.parametrize("target", ["config.json", "model.safetensors"])
def test_a_file_redirected_to_a_missing_page_is_named_as_redirected_not_missing(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any, target: str
) -> None:
    """A redirect (of a document's metadata request, of a shard's range read) to a page the
    server does not have: the commit may well hold the file; the error says where it went."""
    spec = RepoSpec.from_folder("org/redirected", single(tmp_path))
    redirect = hubserver._Response(302, [("Location", "."), ("X-Repo-Commit", spec.sha)])
    answer_for(monkeypatch, target, lambda answer: redirect)
    hub(spec)
    refused = run("audit", f"org/redirected@{spec.sha}")
    assert refused.exit_code == 3, refused.stderr
    assert f"the server redirected the request for {target!r} at org/redirected@" in refused.stderr
    assert f"/org/redirected/resolve/{spec.sha}/', which answered HTTP 404" in refused.stderr
    assert "although the file listing names it" not in refused.stderr


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d.__setitem__("sha", 12345), "named no commit sha"),
        (lambda d: d["siblings"].append({"rfilename": 7}), "names a file by 7, not a string"),
        (
            lambda d: [s["lfs"].__setitem__("sha256", 5) for s in d["siblings"] if "lfs" in s],
            "gives its LFS sha256 as 5, not 64 hexadecimal digits",
        ),
        (
            lambda d: [s.__setitem__("size", True) for s in d["siblings"]],
            "gives no size for it",
        ),
    ],
)
def test_a_listing_field_of_another_type_is_a_named_hub_error(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any, change: Any, said: str
) -> None:
    spec = RepoSpec.from_folder("org/typed", single(tmp_path))
    answer = hubserver._json_response

    def retyped(status: int, payload: Any, headers: Any = ()) -> Any:
        if isinstance(payload, dict) and isinstance(payload.get("siblings"), list):
            change(payload)
        return answer(status, payload, headers)

    monkeypatch.setattr(hubserver, "_json_response", retyped)
    hub(spec)
    refused = run("audit", f"org/typed@{spec.sha}")
    assert refused.exit_code == 3, refused.stderr
    assert said in refused.stderr and "internal error" not in refused.stderr


@pytest.mark.usefixtures("no_parameter_count")
def test_the_index_total_size_sizes_the_first_wave(hub: Any, run: Any, tmp_path: Path) -> None:
    """A server that reports no parameter count, and shards not named as transformers names
    them (so none is read ahead): the index's ``total_size`` fixes the bytes of the tensor
    data, hence of the headers, and the first wave takes one read per shard too."""
    folder = sharded(tmp_path)
    names = renamed(folder)
    spec = RepoSpec.from_folder("org/sharded", folder)
    server = hub(spec)
    remote = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    assert report(remote) == report(run("audit", folder, "--format", "json"))
    for file in names.values():
        path = shard_path("org/sharded", spec.sha, file)
        need = 8 + header_length(folder / file)
        assert server.count("GET", path) == 1
        assert need <= server.bytes_by_path[path] <= need * 1.10


def test_header_cap_applies_and_reads_stay_bounded(hub: Any, run: Any) -> None:
    head = struct.pack("<Q", 200_000_000) + b"{"
    spec = RepoSpec.from_files(
        "org/huge", {"model.safetensors": SparseFile(head, 10**12), "config.json": b"{}"}
    )
    server = hub(spec)
    with pytest.raises(HeaderTooLargeError):
        open_source(f"org/huge@{spec.sha}")
    assert server.bytes_by_path[shard_path("org/huge", spec.sha, "model.safetensors")] == 100_000
    result = run("audit", f"org/huge@{spec.sha}")
    assert result.exit_code == 2 and "above the cap" in result.stderr


def test_index_naming_a_missing_shard_is_refused(hub: Any, run: Any, tmp_path: Path) -> None:
    folder = sharded(tmp_path)
    (folder / SHARDS[2]).unlink()
    hub(RepoSpec.from_folder("org/holes", folder))
    result = run("audit", "org/holes")
    assert result.exit_code == 2
    assert f"names shard '{SHARDS[2]}', which is not in org/holes@" in result.stderr


# -- revisions -----------------------------------------------------------------------------


def test_branch_is_resolved_once_and_every_url_names_the_sha(
    hub: Any, run: Any, tmp_path: Path
) -> None:
    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    server = hub(spec)
    result = run("audit", "org/sharded", "--format", "json")
    assert result.exit_code in (0, 1)
    assert f"qarm: resolved main -> {spec.sha}\n" in result.stderr
    assert json.loads(result.stdout)["source"]["revision"] == spec.sha
    paths = [r.path for r in server.records]
    assert paths[0] == "/api/models/org/sharded/revision/main"
    assert sum(p.startswith("/api/") for p in paths) == 1
    resolve = [p for p in paths if "/resolve/" in p]
    assert len(resolve) == len(paths) - 1
    assert all(p.startswith(f"/org/sharded/resolve/{spec.sha}/") for p in resolve)


def test_moving_main_mid_run_does_not_mix_revisions(hub: Any, tmp_path: Path, run: Any) -> None:
    old = sharded(tmp_path, "old")
    new = sharded(tmp_path, "new", layers=2)
    spec = RepoSpec.from_folder("org/moving", old)
    pushed = RepoSpec.from_folder("org/moving", new)
    server = hub(spec)
    moved: list[str] = []

    class MoveMain:
        """Pushes a new commit to main right after qarm resolved it."""

        def resolved(self, revision: str, sha: str) -> None:
            moved.append(spec.add_commit(pushed.commits[pushed.sha]))

        def headers_started(self, total: int) -> None:
            pass

        def header_read(self, file: str) -> None:
            pass

        def headers_finished(self) -> None:
            pass

    first = spec.sha
    remote = audit("org/moving", observer=MoveMain())
    assert moved and spec.sha == moved[0] != first
    assert remote.source.revision == first
    local = json.loads(run("audit", old, "--format", "json").stdout)
    got = json.loads(render_json(remote))
    got.pop("source")
    local.pop("source")
    for shard in got["integrity"]["shards"]:
        shard["remote_sha256"] = None
    assert got == local
    assert not any(moved[0] in r.path for r in server.records)


def test_require_pinned_refuses_a_branch(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path), tags=["v1"])
    server = hub(spec)
    for source in ("org/single", "org/single@main", "org/single@v1"):
        result = run("audit", source, "--require-pinned")
        assert result.exit_code == 2, source
        assert "--require-pinned" in result.stderr and "40-hex" in result.stderr
    out = tmp_path / "m.json"
    assert run("manifest", "org/single@v1", "-o", out, "--require-pinned").exit_code == 2
    assert server.request_count == 0 and not out.exists()
    assert run("audit", f"org/single@{spec.sha}", "--require-pinned").exit_code in (0, 1)
    # a full sha answered with another commit's listing (a branch named like a sha, or a
    # server that lies) is never audited as that other commit, with or without the flag
    lookalike = "a" * 40
    spec.branches[lookalike] = spec.sha
    for flags in ((), ("--require-pinned",)):
        result = run("audit", f"org/single@{lookalike}", *flags)
        assert result.exit_code == 3, flags
        assert f"answered with the listing of commit {spec.sha}" in result.stderr


def test_manifest_through_the_hub(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    hub(spec)
    out = tmp_path / "hub.manifest.json"
    made = run("manifest", f"org/sharded@{spec.sha}", "-o", out)
    assert made.exit_code == 0, made.stderr
    manifest = json.loads(out.read_text())
    assert manifest["origin"] == {"repo": "org/sharded", "revision": spec.sha}
    assert all(s["remote_sha256"] for s in manifest["shards"])
    from_manifest = run("audit", out, "--format", "json")
    from_hub = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    a, b = json.loads(from_manifest.stdout), json.loads(from_hub.stdout)
    a.pop("source")
    b.pop("source")
    assert a == b


def test_observer_hears_resolution_and_progress(hub: Any, tmp_path: Path, capsys: Any) -> None:
    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    hub(spec)
    events: list[tuple[str, ...]] = []

    class Record:
        def resolved(self, revision: str, sha: str) -> None:
            events.append(("resolved", revision, sha))

        def headers_started(self, total: int) -> None:
            events.append(("started", str(total)))

        def header_read(self, file: str) -> None:
            events.append(("read", file))

        def headers_finished(self) -> None:
            events.append(("finished",))

    open_source("org/sharded", observer=Record())
    assert events[:2] == [("resolved", "main", spec.sha), ("started", "3")]
    assert sorted(events[2:5]) == [("read", f) for f in SHARDS]
    assert events[5:] == [("finished",)]
    # The CLI's observer draws a bar when asked to (only on a terminal, not with JSON).
    open_source(f"org/sharded@{spec.sha}", observer=HubProgress(bar=True))
    assert "resolved" not in capsys.readouterr().err


# -- faults --------------------------------------------------------------------------------


def test_transient_errors_are_retried(hub: Any, run: Any, tmp_path: Path, sleeps: Sleeps) -> None:
    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    server = hub(spec)
    server.fail(503, path="/api/models/*")
    server.fail(500, path="*/hf_quant_config.json", method="GET")
    server.fail(502, path=f"*/{SHARDS[0]}")
    server.reset_connection(path=f"*/{SHARDS[1]}")
    server.disconnect(path=f"*/{SHARDS[2]}")
    result = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    assert result.exit_code in (0, 1), result.stderr
    assert all(f.hits == 1 for f in server.faults)
    assert sleeps.calls == [0.01] * 5  # one retry each, after the policy's first delay
    # one more request per fault, two for the document (hf_hub_download's HEAD and GET)
    assert server.request_count == 2 * len(SHARDS) + 7 + 6


def test_rate_limit_honours_retry_after(hub: Any, tmp_path: Path, sleeps: Sleeps) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.rate_limit(retry_after=7, path="*.safetensors")
    open_source(f"org/single@{spec.sha}")
    assert sleeps.calls == [7.0]
    server.rate_limit(retry_after=3600, path="*.safetensors")
    with pytest.raises(HubError, match="Retry-After asks for 3600 s"):
        open_source(f"org/single@{spec.sha}")


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        # huggingface_hub's own backoff would sleep 100001 s on the range read
        (
            lambda s: s.fail(503, path="*.safetensors", count=None, retry_after=100000),
            "the Hub answered HTTP 503, and Retry-After asks for 100000 s, "
            "more than the 60 s qarm waits",
        ),
        # hf_hub_download's metadata request would sleep 3601 s, up to 5 times
        (
            lambda s: s.rate_limit(retry_after=3600, path="*/config.json", count=None),
            "config.json: downloading config.json: rate limited (HTTP 429), and Retry-After asks "
            "for 3600 s, more than the 60 s qarm waits",
        ),
    ],
)
def test_a_wait_huggingface_hub_would_sleep_past_qarms_bound_ends_the_read(
    hub: Any, run: Any, tmp_path: Path, fault: Any, said: str
) -> None:
    spec = RepoSpec.from_folder("org/waits", single(tmp_path))
    fault(hub(spec))
    started = time.monotonic()
    refused = run("audit", f"org/waits@{spec.sha}")
    assert refused.exit_code == 3, refused.stderr
    assert said in refused.stderr
    assert time.monotonic() - started < 30


def test_a_wait_asked_past_the_request_deadline_is_not_waited(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("QARM_HUB_REQUEST_DEADLINE", "5")
    spec = RepoSpec.from_folder("org/waits", single(tmp_path))
    hub(spec).fail(503, path="*.safetensors", count=None, retry_after=30)
    started = time.monotonic()
    refused = run("audit", f"org/waits@{spec.sha}")
    assert refused.exit_code == 3, refused.stderr
    assert "passed its deadline of 5 s (QARM_HUB_REQUEST_DEADLINE)" in refused.stderr
    assert time.monotonic() - started < 20


def test_timeout_is_retried(hub: Any, tmp_path: Path, monkeypatch: Any, sleeps: Sleeps) -> None:
    policy = RetryPolicy(base_delay=0.01, sleep=sleeps.sleep, timeout=0.3)
    monkeypatch.setattr(hub_module, "RETRY", policy)
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.add_latency(1.0, path="*.safetensors", count=1)
    checkpoint = open_source(f"org/single@{spec.sha}")
    assert checkpoint.shards[0].tensors
    assert sleeps.calls == [0.01]
    assert server.count("GET", "*.safetensors") == 2


def test_persistent_5xx_gives_up_with_a_named_error(
    hub: Any, run: Any, tmp_path: Path, sleeps: Sleeps
) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.fail(503, path="*.safetensors", count=None)
    result = run("audit", f"org/single@{spec.sha}")
    assert result.exit_code == 3
    assert result.stderr == (
        "qarm: error: model.safetensors: reading bytes 0-"
        f"{header_length(tmp_path / 'single/model.safetensors') + 7}: "
        "the Hub answered HTTP 503, 4 times; giving up\n"
    )
    assert server.count("GET", "*.safetensors") == 4
    assert sleeps.calls == [0.01, 0.02, 0.04]


def test_ignored_range_is_cut_off(hub: Any, run: Any) -> None:
    n = 40_000 * 40_000
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [40_000, 40_000], "data_offsets": [0, 2 * n]}}
    ).encode()
    head = struct.pack("<Q", len(header)) + header
    size = len(head) + 2 * n  # 3.2 GB, never materialised
    spec = RepoSpec.from_files(
        "org/big", {"model.safetensors": SparseFile(head, size), "config.json": b"{}"}
    )
    server = hub(spec)
    server.ignore_range(path="*.safetensors", count=None)
    with pytest.raises(RangeNotHonouredError, match="ignored the Range header"):
        open_source(f"org/big@{spec.sha}")
    result = run("audit", f"org/big@{spec.sha}")
    assert result.exit_code == 3
    assert f"answered HTTP 200 with the whole {size}-byte file" in result.stderr
    sent = server.bytes_by_path[shard_path("org/big", spec.sha, "model.safetensors")]
    assert sent < 16 * 1024 * 1024 < size // 100  # what the socket buffers took, no more
    assert server.count("GET", "*.safetensors") == 2  # not retried


def test_wrong_content_range_is_refused(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.wrong_content_range(shift=3, path="*.safetensors")
    with pytest.raises(RangeMismatchError, match="Content-Range 'bytes 3-"):
        open_source(f"org/single@{spec.sha}")
    server.wrong_content_range(shift=3, path="*.safetensors")
    result = run("audit", f"org/single@{spec.sha}")
    assert result.exit_code == 3 and "server answered Content-Range" in result.stderr


def test_truncated_body_is_retried_then_refused(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.truncate(keep_bytes=100, path="*.safetensors")
    assert open_source(f"org/single@{spec.sha}").shards[0].tensors
    assert server.count("GET", "*.safetensors") == 2
    server.truncate(keep_bytes=100, path="*.safetensors", count=None)
    result = run("audit", f"org/single@{spec.sha}")
    assert result.exit_code == 3
    assert "connection failed (RemoteProtocolError" in result.stderr
    assert "4 times; giving up" in result.stderr


def test_a_failure_is_retried_by_one_loop_only(
    hub: Any, run: Any, tmp_path: Path, sleeps: Sleeps
) -> None:
    """hf_hub_download resumes a GET closed early itself: qarm does not run it again on top."""
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.disconnect(path="*/hf_quant_config.json", method="GET", count=None)
    result = run("audit", f"org/single@{spec.sha}")
    assert result.exit_code == 3 and "RemoteProtocolError" in result.stderr
    assert server.count("GET", "*/hf_quant_config.json") == 6  # its first try and 5 resumes
    assert sleeps.calls == [1] * 5


def test_rate_limit_wait_is_read_as_huggingface_hub_reads_it() -> None:
    from qarm_audit.sources.hub.retry import rate_limited

    both = {"RateLimit": '"api";r=0;t=55', "Retry-After": "7"}
    assert (rate_limited(both).retry_after, rate_limited(both).asked_by) == (55.0, "RateLimit")
    left = {"RateLimit": '"api";r=3;t=55', "Retry-After": "7"}
    assert rate_limited(left).retry_after == 7.0
    # an HTTP date is the seconds until then (0 when past); a non-ASCII digit asks for nothing
    assert rate_limited({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}).retry_after == 0.0
    assert rate_limited({"Retry-After": "\u00b2"}).retry_after is None
    from qarm_audit.sources.hub.retry import retry_after

    assert retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
    assert retry_after("soon") is None


def test_gated_repo_names_hf_token_and_works_with_it(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    spec = RepoSpec.from_folder("org/gated", single(tmp_path), gated=True, token=TOKEN)
    hub(spec)
    refused = run("audit", "org/gated")
    assert refused.exit_code == 3
    assert "org/gated is gated or private" in refused.stderr and "HF_TOKEN" in refused.stderr
    monkeypatch.setenv("HF_TOKEN", "hf_wrongToken")
    wrong = run("audit", "org/gated")
    assert wrong.exit_code == 3 and "(HTTP 403)" in wrong.stderr
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    allowed = run("audit", "org/gated", "--format", "json")
    assert allowed.exit_code in (0, 1), allowed.stderr
    assert json.loads(allowed.stdout)["source"]["revision"] == spec.sha
    for result in (refused, wrong, allowed):
        assert TOKEN not in quiet(result)


def test_private_repo_without_token(hub: Any, run: Any, tmp_path: Path) -> None:
    hub(RepoSpec.from_folder("org/private", single(tmp_path), private=True, token=TOKEN))
    result = run("audit", "org/private")
    assert result.exit_code == 3
    assert "was not found, or it is private or gated (HTTP 401)" in result.stderr
    assert "HF_TOKEN" in result.stderr


def test_not_found_says_which(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    repo = run("audit", "org/missing")
    assert repo.exit_code == 3 and "repository org/missing does not exist" in repo.stderr
    revision = run("audit", "org/single@nope")
    assert revision.exit_code == 3
    assert "revision 'nope' does not exist in org/single" in revision.stderr
    # a document first (once downloaded, the Hub cache would answer for it)
    server.fail(404, path="*/hf_quant_config.json", count=None)
    document = run("audit", f"org/single@{spec.sha}")
    assert document.exit_code == 3
    assert f"file 'hf_quant_config.json' is not in org/single@{spec.sha}" in document.stderr
    server.clear_faults()
    server.fail(404, path="*/model.safetensors", count=None)
    file = run("audit", f"org/single@{spec.sha}")
    assert file.exit_code == 3
    assert f"file 'model.safetensors' is not in org/single@{spec.sha}" in file.stderr


def test_token_is_never_printed(hub: Any, run: Any, tmp_path: Path, monkeypatch: Any) -> None:
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec, RepoSpec.from_folder("org/gated", single(tmp_path), gated=True))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    results = [
        run("audit", "org/single"),
        run("audit", "org/single", "--format", "json"),
        run("manifest", "org/single", "-o", tmp_path / "m.json"),
        run("audit", "org/gated"),
        run("audit", "org/missing"),
        run("audit", "org/single@nope"),
    ]
    server.fail(503, count=None)
    results.append(run("audit", "org/single@" + spec.sha))
    server.clear_faults()
    server.reset_connection(count=None)
    results.append(run("audit", "org/single@" + spec.sha))
    assert [r.exit_code for r in results][3:] == [3] * 5
    assert sum(r.authorization for r in server.records) > 0  # the token was sent...
    for result in results:
        assert TOKEN not in quiet(result)  # ...and never shown


def test_offline_audits_from_the_cache(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    server = hub(spec)
    online = run("audit", "org/sharded", "--format", "json")
    server.reset_counters()
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    pinned = run("audit", f"org/sharded@{spec.sha}", "--format", "json")
    branch = run("audit", "org/sharded", "--format", "json")
    assert server.request_count == 0
    # the same audit, but never passing for an online one: its kind and a note say where from
    for offline in (json.loads(pinned.stdout), json.loads(branch.stdout)):
        assert offline["source"]["kind"] == "hub-offline"
        assert [n["code"] for n in offline["notes"] if "some-gpus" not in n["code"]] == [
            "offline-cache"
        ]
    same = {"source": None, "notes": None}
    assert json.loads(pinned.stdout) | same == json.loads(online.stdout) | same
    assert json.loads(branch.stdout)["source"] == json.loads(online.stdout)["source"] | {
        "kind": "hub-offline"
    }
    assert f"qarm: resolved main -> {spec.sha}" in branch.stderr
    never = run("audit", "org/other@" + "b" * 40)
    assert never.exit_code == 3
    assert (
        "HF_HUB_OFFLINE is set and the Hub cache holds no file list of org/other@bbbb"
        in never.stderr
    )
    unresolved = run("audit", "org/other@dev")
    assert unresolved.exit_code == 3 and "was never resolved online" in unresolved.stderr
    snapshot = tmp_path / "hf" / "models--org--sharded" / "snapshots" / spec.sha
    (snapshot / "hf_quant_config.json").unlink()
    evicted = run("audit", f"org/sharded@{spec.sha}")
    assert evicted.exit_code == 3
    assert "hf_quant_config.json of org/sharded@" in evicted.stderr
    assert "is not in the Hub cache" in evicted.stderr
    with pytest.raises(HubOfflineError):
        open_source(f"org/sharded@{spec.sha}")


# -- the benchmark -------------------------------------------------------------------------


def test_bench_runs_at_a_tiny_size(monkeypatch: Any) -> None:
    path = Path(__file__).resolve().parent.parent / "bench" / "hub_bench.py"
    loader = importlib.util.spec_from_file_location("hub_bench", path)
    assert loader is not None and loader.loader is not None
    bench = importlib.util.module_from_spec(loader)
    monkeypatch.setitem(sys.modules, "hub_bench", bench)
    loader.loader.exec_module(bench)
    out = io.StringIO()
    src = path.parent.parent / "src"  # --vs: this checkout against itself
    result = bench.bench(
        shards=3, layers=3, experts=2, latency=0.01, in_process=True, vs=src, out=out
    )
    assert result["shards"] == 3
    assert result["bytes_ratio"] <= 1.05
    # the listing, then the documents (a metadata request and a download) or, read meanwhile,
    # each header (its prefix, then the rest): never fewer round trips than that; how many
    # more depends on thread timing on a loaded machine, so no upper bound but the requests
    # themselves (the full-size run reports it against its target)
    assert result["round_trip_floor"] <= result["qarm"]["round_trips"] <= result["qarm"]["requests"]
    assert "round trips" in out.getvalue()
    assert len(result["vs"]["pair_ratios"]) == 1 and f"qarm at {src}" in out.getvalue()


# -- --probe-scalars through range reads ----------------------------------------------------


def test_probe_scalars_reads_the_few_scale_bytes_by_range(hub: Any, tmp_path: Path) -> None:
    import struct

    from conftest import llama, modelopt_file, nvfp4_modelopt, write_checkpoint
    from qarm_audit import audit

    tensors: dict[str, Any] = dict(llama(layers=1, spell=nvfp4_modelopt))
    zero = "model.layers.0.mlp.down_proj.weight_scale_2"
    tensors[zero] = ("F32", (), struct.pack("<f", 0.0))
    folder = write_checkpoint(
        tmp_path / "probe",
        {"model.safetensors": tensors},
        {"hf_quant_config.json": modelopt_file("W4A16_NVFP4", ["lm_head"])},
    )
    spec = RepoSpec.from_folder("org/probe", folder)
    server = hub(spec)
    local = audit(str(folder), probe_scalars=True, engine="name-probe")
    server.reset_counters()
    remote = audit(f"org/probe@{spec.sha}", probe_scalars=True, engine="name-probe")
    assert remote.probe is not None and remote.probe.available
    flagged = [(r.code, r.tensor) for r in remote.refusals]
    assert ("scale-zero", zero) in flagged  # (the other scales are zero-filled too)
    assert flagged == [(r.code, r.tensor) for r in local.refusals]
    assert remote.probe.model_dump() == local.probe.model_dump()
    path = shard_path("org/probe", spec.sha, "model.safetensors")
    header = 8 + header_length(folder / "model.safetensors")
    # the header read, then one small range read per scalar: never the weights
    assert server.bytes_by_path[path] == header + remote.probe.bytes_read
    assert remote.probe.bytes_read == 4 * remote.probe.tensors_read  # one F32 each


def test_an_edited_offline_header_never_passes_for_the_shard(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    import huggingface_hub

    spec = RepoSpec.from_folder("org/sharded", sharded(tmp_path))
    hub(spec)
    assert run("audit", f"org/sharded@{spec.sha}").exit_code in (0, 1)
    huggingface_hub.snapshot_download("org/sharded", revision=spec.sha)  # as `hf download`
    cached = tmp_path / "hf" / "models--org--sharded" / "snapshots" / spec.sha / ".qarm-audit"
    header = cached / f"{SHARDS[0]}.header"
    data = bytearray(header.read_bytes())
    data[-1:] = b"\t" if data[-1:] == b" " else b" "  # still a valid header, not the shard's
    header.write_bytes(bytes(data))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    result = run("audit", f"org/sharded@{spec.sha}")
    assert result.exit_code == 3
    assert "differs from the shard in the Hub cache" in result.stderr


def test_a_persistent_429_on_a_document_is_retried_by_one_loop_only(
    hub: Any, run: Any, tmp_path: Path, sleeps: Sleeps
) -> None:
    """A document answered 429 on every request took 96 s and 49 requests: huggingface_hub's
    retries ran inside qarm's own. hf_hub_download retries a 429 itself (5 times, waiting what
    Retry-After asks plus 1 s); qarm does not run it again on top. A 503 on the GET, which
    hf_hub_download does not retry, is retried by qarm's loop alone."""
    spec = RepoSpec.from_folder("org/single", single(tmp_path))
    server = hub(spec)
    server.rate_limit(retry_after=1, path="*/hf_quant_config.json", count=None)
    result = run("audit", f"org/single@{spec.sha}")
    assert result.exit_code == 3 and "HTTP 429" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    # hf_hub_download's own tries only (7 requests, 5 waits of 2 s with huggingface_hub 2.4);
    # retried by qarm's loop as well, it was 4 times that
    assert server.count(None, "*/hf_quant_config.json") <= 7
    assert len(sleeps.calls) <= 5 and sum(sleeps.calls) <= 10
    sleeps.calls.clear()
    other = RepoSpec.from_folder("org/other", single(tmp_path / "other"))
    server = hub(other)
    server.fail(503, path="*/hf_quant_config.json", method="GET", count=None)
    result = run("audit", f"org/other@{other.sha}")
    assert result.exit_code == 3 and "HTTP 503" in result.stderr, result.stderr
    assert server.count("GET", "*/hf_quant_config.json") == 4  # qarm's attempts, no more
    assert sleeps.calls == [0.01, 0.02, 0.04]


def test_a_side_declaration_in_the_listing_is_named(hub: Any, run: Any, tmp_path: Path) -> None:
    documents = {**DOCUMENTS, "config.json": json.dumps({"architectures": ["LlamaForCausalLM"]})}
    folder = write_checkpoint(tmp_path / "side", {"model.safetensors": llama(1, nvfp4)}, documents)
    (folder / "hf_quant_config.json").unlink()
    (folder / "quant_config.json").write_text(json.dumps({"w_bit": 4, "q_group_size": 128}))
    spec = RepoSpec.from_folder("org/side", folder)
    hub(spec)
    result = run("audit", f"org/side@{spec.sha}", "--format", "json")
    notes = json.loads(result.stdout)["notes"]
    notes = [n for n in notes if n["code"] == "side-declaration-unread"]
    assert [(n["tensor"], "--quantization awq," in n["message"]) for n in notes] == [
        ("quant_config.json", True)
    ]
