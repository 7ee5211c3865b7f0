"""Prove ``tests/hubserver.py`` against the real ``huggingface_hub`` 2.4 client (httpx2).

How the client is pointed at the server
---------------------------------------
``huggingface_hub`` reads ``HF_ENDPOINT`` once, at import time, into
``huggingface_hub.constants.ENDPOINT`` (and ``HUGGINGFACE_CO_URL_TEMPLATE``, which
``hf_hub_url``/``hf_hub_download`` format); the module-level ``HfApi`` instance behind
``huggingface_hub.model_info`` & co. also copies the endpoint when it is created at
import. Setting the environment variable inside a test is therefore too late. Three
ways work with 2.4:

1. explicit: ``HfApi(endpoint=server.endpoint)`` and
   ``hf_hub_download(..., endpoint=server.endpoint)`` (``HfApi.hf_hub_download`` and
   ``HfApi.get_safetensors_metadata`` forward ``self.endpoint``);
2. in-process patching, as the ``serve`` fixture does through
   ``hubserver.point_huggingface_hub_at(endpoint, cache_dir=...)``: it sets
   ``constants.ENDPOINT``, ``constants.HUGGINGFACE_CO_URL_TEMPLATE``,
   ``huggingface_hub.hf_api.api.endpoint``, ``constants.HF_HUB_CACHE``, telemetry off,
   offline off, and hides any implicit token (``HF_TOKEN``/token file), restoring all
   of it afterwards; ``HfApi()`` objects created inside the block use the server;
3. ``HF_ENDPOINT``/``HF_HUB_CACHE`` in the environment of a *new* interpreter
   (``test_hf_endpoint_environment_variable_in_subprocess``).

Retry sleeps: ``http_backoff`` sleeps ``1, 2, 4...`` s (``Retry-After + 1`` on 429)
and ``http_get`` sleeps 1 s before resuming; the ``sleeps`` fixture replaces the
``time`` module seen by ``huggingface_hub.utils._http`` and
``huggingface_hub.file_download`` with a recorder so that these tests take no time
and can assert the delays the client asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
from huggingface_hub import HfApi, RepoFile, get_session, hf_hub_download
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)
from huggingface_hub.utils import http_backoff  # type: ignore[attr-defined]
from safetensors.numpy import save_file

from hubserver import (
    Fault,
    HubServer,
    LoggedRequest,
    RepoSpec,
    SparseFile,
    git_blob_sha1,
    repo_from_folder,
)
from hubtesting import Sleeps, record_sleeps, serving

TOKEN = "hf_test_token_123"
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128},
}


# -- fixtures ----------------------------------------------------------------------


def write_single(folder: Path, n: int = 64) -> dict[str, np.ndarray[Any, Any]]:
    tensors: dict[str, np.ndarray[Any, Any]] = {
        "model.embed.weight": np.arange(n * 4, dtype=np.float16).reshape(n, 4),
        "model.layers.0.qweight": np.arange(n, dtype=np.int32),
        "model.layers.0.scales": np.ones((2, 3), dtype=np.float32),
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "generation_config.json").write_text("{}")
    return tensors


def write_sharded(folder: Path) -> dict[str, dict[str, np.ndarray[Any, Any]]]:
    shards: dict[str, dict[str, np.ndarray[Any, Any]]] = {
        "model-00001-of-00002.safetensors": {
            "a.qweight": np.arange(32, dtype=np.int32).reshape(4, 8),
            "a.scales": np.ones((4,), dtype=np.float16),
        },
        "model-00002-of-00002.safetensors": {
            "b.weight": np.zeros((3, 5), dtype=np.float32),
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for name, tensors in shards.items():
        save_file(tensors, str(folder / name))
        weight_map.update(dict.fromkeys(tensors, name))
    total = sum(t.nbytes for tensors in shards.values() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(CONFIG))
    return shards


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    """Start a HubServer for some RepoSpecs and point huggingface_hub at it."""
    yield from serving(tmp_path)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    return record_sleeps(monkeypatch, qarm=False)


@pytest.fixture
def single(tmp_path: Path) -> tuple[RepoSpec, Path]:
    folder = tmp_path / "single"
    write_single(folder)
    return RepoSpec.from_folder("org/single", folder, tags=["v1.0"]), folder


@pytest.fixture
def sharded(tmp_path: Path) -> tuple[RepoSpec, Path]:
    folder = tmp_path / "sharded"
    write_sharded(folder)
    return RepoSpec.from_folder("org/sharded", folder), folder


def paths(server: HubServer) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in server.log]


# -- spec helpers ------------------------------------------------------------------


def test_repo_from_folder_is_recursive(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.json").write_text("{}")
    (tmp_path / "top.txt").write_text("t")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    files = repo_from_folder(tmp_path)
    assert files == {"a/b/x.json": tmp_path / "a/b/x.json", "top.txt": tmp_path / "top.txt"}
    assert ".git/HEAD" in repo_from_folder(tmp_path, skip_git=False)


def test_repo_spec_validation() -> None:
    with pytest.raises(TypeError, match="Path"):
        RepoSpec.from_files("o/r", {"config.json": "{}"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="40 hex"):
        RepoSpec.from_files("o/r", {"a": b"x"}, sha="abc")
    spec = RepoSpec.from_files("o/r", {"a": b"x"})
    with pytest.raises(ValueError, match="main"):
        HubServer({"o/r": RepoSpec("o/r", commits=spec.commits)})
    with pytest.raises(ValueError, match="repo_id"):
        HubServer({"o/other": spec})


# -- model_info / tree / refs ------------------------------------------------------


def test_model_info_files_metadata(serve: Callable[..., HubServer], single: Any) -> None:
    spec, folder = single
    server = serve(spec)
    api = HfApi(endpoint=server.endpoint)
    info = api.model_info("org/single", revision="main", files_metadata=True)
    assert info.sha == spec.sha
    assert info.siblings is not None
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == {p: (folder / p).stat().st_size for p in repo_from_folder(folder)}
    by_name = {s.rfilename: s for s in info.siblings}
    st = by_name["model.safetensors"]
    data = (folder / "model.safetensors").read_bytes()
    assert st.lfs is not None
    assert st.lfs.sha256 == hashlib.sha256(data).hexdigest()
    assert st.lfs.size == len(data)
    config = by_name["config.json"]
    assert config.lfs is None
    assert config.blob_id == git_blob_sha1((folder / "config.json").read_bytes())
    assert info.safetensors is not None
    assert info.safetensors.parameters == {"F16": 256, "I32": 64, "F32": 6}
    assert info.config == {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    # The same commit through a tag, the full sha, and no revision (GET /api/models/{id}).
    assert api.model_info("org/single", revision="v1.0").sha == spec.sha
    assert api.model_info("org/single", revision=spec.sha).sha == spec.sha
    plain = api.model_info("org/single")
    assert plain.sha == spec.sha
    assert plain.siblings is not None
    assert all(s.size is None for s in plain.siblings)  # no ?blobs=true
    assert paths(server)[0] == ("GET", "/api/models/org/single/revision/main")
    assert server.records[0].query == "blobs=true"
    assert paths(server)[-1] == ("GET", "/api/models/org/single")


def test_module_level_functions_follow_patched_endpoint(
    serve: Callable[..., HubServer], single: Any
) -> None:
    import huggingface_hub

    spec, _ = single
    server = serve(spec)
    assert server.endpoint == hf_constants.ENDPOINT
    assert huggingface_hub.model_info("org/single").sha == spec.sha
    assert HfApi().file_exists("org/single", "config.json")
    assert not HfApi().file_exists("org/single", "nope.json")


def test_moving_main_and_expand(serve: Callable[..., HubServer], single: Any) -> None:
    spec, _ = single
    old = spec.sha
    server = serve(spec)
    new = spec.add_commit({"config.json": b'{"model_type": "mistral"}'})
    api = HfApi()
    assert api.model_info("org/single").sha == new
    assert api.model_info("org/single", revision=old).sha == old
    assert api.model_info("org/single", revision="v1.0").sha == old
    slim = api.model_info("org/single", expand=["sha"])
    assert slim.sha == new and slim.siblings is None
    assert server.count("GET", "/api/models/*") == 4


def test_list_repo_tree_pagination_and_paths_info(
    serve: Callable[..., HubServer], tmp_path: Path
) -> None:
    files = {
        "config.json": b"{}",
        "a/one.safetensors": b"1" * 10,
        "a/b/two.json": b"22",
        "c/three.bin": b"333",
    }
    spec = RepoSpec.from_files("org/tree", files)
    server = serve(spec, tree_page_size=2)
    api = HfApi()
    entries = list(api.list_repo_tree("org/tree", recursive=True))
    found = {e.path: type(e).__name__ for e in entries}
    assert found == {
        "a": "RepoFolder",
        "a/b": "RepoFolder",
        "c": "RepoFolder",
        "config.json": "RepoFile",
        "a/one.safetensors": "RepoFile",
        "a/b/two.json": "RepoFile",
        "c/three.bin": "RepoFile",
    }
    assert server.count("GET", "/api/models/org/tree/tree/main") == 4  # 7 entries, 2 per page
    top = {e.path for e in api.list_repo_tree("org/tree")}
    assert top == {"a", "c", "config.json"}
    sub = {e.path for e in api.list_repo_tree("org/tree", path_in_repo="a", recursive=True)}
    assert sub == {"a/b", "a/one.safetensors", "a/b/two.json"}
    assert sorted(api.list_repo_files("org/tree")) == sorted(files)
    info = api.get_paths_info("org/tree", ["a/one.safetensors", "a", "missing"], expand=True)
    assert [e.path for e in info] == ["a/one.safetensors", "a"]
    lfs_file = info[0]
    assert isinstance(lfs_file, RepoFile)
    assert lfs_file.size == 10
    assert lfs_file.lfs is not None and lfs_file.lfs.sha256 == hashlib.sha256(b"1" * 10).hexdigest()
    assert lfs_file.last_commit is not None and lfs_file.last_commit.oid == spec.sha
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree("org/tree", path_in_repo="nope"))


def test_list_repo_refs(serve: Callable[..., HubServer], single: Any) -> None:
    spec, _ = single
    serve(spec)
    refs = HfApi().list_repo_refs("org/single")
    assert [(b.name, b.target_commit) for b in refs.branches] == [("main", spec.sha)]
    assert [(t.name, t.ref) for t in refs.tags] == [("v1.0", "refs/tags/v1.0")]


# -- downloads and range reads -----------------------------------------------------


def test_hf_hub_download_at_branch_and_sha(
    serve: Callable[..., HubServer], single: Any, tmp_path: Path
) -> None:
    spec, folder = single
    server = serve(spec)
    cache = tmp_path / "cache"
    path = hf_hub_download("org/single", "config.json", revision="main", cache_dir=cache)
    assert json.loads(Path(path).read_text()) == CONFIG
    assert Path(path).parent.name == spec.sha  # snapshots/<commit>/config.json
    refs_main = cache / "models--org--single" / "refs" / "main"
    assert refs_main.read_text() == spec.sha
    assert paths(server) == [
        ("HEAD", "/org/single/resolve/main/config.json"),
        ("GET", "/org/single/resolve/main/config.json"),
    ]
    head = get_session().head(server.url("org/single", "config.json"))
    assert head.headers["X-Repo-Commit"] == spec.sha
    assert head.headers["ETag"] == f'"{git_blob_sha1((folder / "config.json").read_bytes())}"'
    assert "X-Linked-Etag" not in head.headers
    server.reset_counters()

    # At the sha, in a fresh cache: HEAD + GET on /resolve/<sha>/...
    path2 = hf_hub_download(
        "org/single", "config.json", revision=spec.sha, cache_dir=tmp_path / "c2"
    )
    assert Path(path2).read_bytes() == (folder / "config.json").read_bytes()
    assert paths(server) == [
        ("HEAD", f"/org/single/resolve/{spec.sha}/config.json"),
        ("GET", f"/org/single/resolve/{spec.sha}/config.json"),
    ]
    # At the sha again: served from the cache without any request.
    server.reset_counters()
    assert hf_hub_download(
        "org/single", "config.json", revision=spec.sha, cache_dir=tmp_path / "c2"
    )
    assert server.request_count == 0

    # LFS file: X-Linked-Etag (sha256) and X-Linked-Size; blob stored under the sha256.
    st = hf_hub_download("org/single", "model.safetensors", cache_dir=cache)
    data = (folder / "model.safetensors").read_bytes()
    assert Path(st).read_bytes() == data
    blob = Path(os.path.realpath(st))
    assert blob.name == hashlib.sha256(data).hexdigest()
    head = get_session().head(server.url("org/single", "model.safetensors"))
    assert head.headers["X-Linked-Size"] == str(len(data))
    assert head.headers["X-Linked-Etag"] == f'"{blob.name}"'


def test_range_reads_through_hf_session(serve: Callable[..., HubServer], single: Any) -> None:
    spec, folder = single
    server = serve(spec)
    data = (folder / "model.safetensors").read_bytes()
    url = server.url("org/single", "model.safetensors", revision=spec.sha)
    session = get_session()
    assert isinstance(session, httpx2.Client)

    r = session.get(url, headers={"Range": "bytes=0-7"})
    assert r.status_code == 206
    assert r.content == data[:8]
    assert r.headers["Content-Range"] == f"bytes 0-7/{len(data)}"
    (header_len,) = struct.unpack("<Q", r.content)

    r = session.get(url, headers={"Range": f"bytes=8-{8 + header_len - 1}"})
    assert r.status_code == 206 and r.content == data[8 : 8 + header_len]
    assert json.loads(r.content)["__metadata__"] == {"format": "pt"}

    r = session.get(url, headers={"Range": f"bytes={len(data) - 10}-"})  # open-ended
    assert r.status_code == 206 and r.content == data[-10:]
    assert r.headers["Content-Range"] == f"bytes {len(data) - 10}-{len(data) - 1}/{len(data)}"
    r = session.get(url, headers={"Range": "bytes=-4"})  # suffix
    assert r.status_code == 206 and r.content == data[-4:]
    r = session.get(url, headers={"Range": "bytes=0-99999999"})  # clamped end
    assert r.status_code == 206 and r.content == data
    r = session.get(url, headers={"Range": f"bytes={len(data)}-"})
    assert r.status_code == 416
    assert r.headers["Content-Range"] == f"bytes */{len(data)}"
    r = session.get(url, headers={"Range": "bytes=0-1,4-5"})
    assert r.status_code == 416  # multi-range is not supported
    r = session.get(url)
    assert r.status_code == 200 and r.content == data

    # http_backoff goes through the same session.
    r = http_backoff("GET", url, headers={"Range": "bytes=2-5"})
    assert r.status_code == 206 and r.content == data[2:6]
    # Branch names resolve too.
    r = session.get(server.url("org/single", "model.safetensors"), headers={"Range": "bytes=0-0"})
    assert r.status_code == 206 and r.headers["X-Repo-Commit"] == spec.sha


def test_get_safetensors_metadata_sharded(serve: Callable[..., HubServer], sharded: Any) -> None:
    spec, _ = sharded
    server = serve(spec)
    meta = HfApi().get_safetensors_metadata("org/sharded", revision="main")
    assert meta.sharded
    assert meta.metadata == {"total_size": 128 + 8 + 60}
    assert set(meta.files_metadata) == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    }
    first = meta.files_metadata["model-00001-of-00002.safetensors"]
    assert first.tensors["a.qweight"].dtype == "I32"
    assert first.tensors["a.qweight"].shape == [4, 8]
    assert meta.weight_map["b.weight"] == "model-00002-of-00002.safetensors"
    assert meta.parameter_count == {"I32": 32, "F16": 4, "F32": 15}

    log = server.log
    prefix = "/org/sharded/resolve/main/"
    # Sequential part: file_exists(model.safetensors) -> 404, file_exists(index) ->
    # 200, then hf_hub_download(index) = HEAD + GET.
    assert log[:4] == [
        LoggedRequest("HEAD", prefix + "model.safetensors", None),
        LoggedRequest("HEAD", prefix + "model.safetensors.index.json", None),
        LoggedRequest("HEAD", prefix + "model.safetensors.index.json", None),
        LoggedRequest("GET", prefix + "model.safetensors.index.json", None),
    ]
    # Then one range GET per shard (in a thread pool, so in any order).
    assert sorted(log[4:]) == [
        LoggedRequest("GET", prefix + "model-00001-of-00002.safetensors", "bytes=0-100000"),
        LoggedRequest("GET", prefix + "model-00002-of-00002.safetensors", "bytes=0-100000"),
    ]
    assert server.records[0].status == 404

    # The Hub-only single-request variant is served too (main only).
    fast = HfApi().get_sharded_safetensors_metadata("org/sharded")
    assert fast.files_metadata == meta.files_metadata


def test_get_safetensors_metadata_single_file(serve: Callable[..., HubServer], single: Any) -> None:
    spec, _ = single
    server = serve(spec)
    meta = HfApi().get_safetensors_metadata("org/single", revision="v1.0")
    assert not meta.sharded
    file_meta = meta.files_metadata["model.safetensors"]
    assert file_meta.metadata == {"format": "pt"}
    assert file_meta.tensors["model.embed.weight"].shape == [64, 4]
    assert file_meta.tensors["model.embed.weight"].dtype == "F16"
    assert paths(server) == [
        ("HEAD", "/org/single/resolve/v1.0/model.safetensors"),
        ("GET", "/org/single/resolve/v1.0/model.safetensors"),
    ]


def test_sparse_file_reads_only_the_header(serve: Callable[..., HubServer]) -> None:
    """A "5 GB" shard costs one 100 kB range read and no disk."""
    n = 50_000 * 50_000
    header = json.dumps(
        {"w": {"dtype": "F16", "shape": [50_000, 50_000], "data_offsets": [0, 2 * n]}}
    ).encode()
    head = struct.pack("<Q", len(header)) + header
    spec = RepoSpec.from_files(
        "org/huge",
        {"model.safetensors": SparseFile(head, len(head) + 2 * n), "config.json": b"{}"},
    )
    server = serve(spec)
    meta = HfApi().get_safetensors_metadata("org/huge")
    assert meta.files_metadata["model.safetensors"].tensors["w"].shape == [50_000, 50_000]
    assert server.bytes_sent == 100_001
    info = HfApi().model_info("org/huge", files_metadata=True)
    assert info.siblings is not None
    assert {s.rfilename: s.size for s in info.siblings}["model.safetensors"] == len(head) + 2 * n


# -- errors and auth ---------------------------------------------------------------


def test_not_found_errors_map_to_client_exceptions(
    serve: Callable[..., HubServer], single: Any, tmp_path: Path
) -> None:
    spec, _ = single
    server = serve(spec)
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError) as repo_err:
        api.model_info("org/missing")
    assert not isinstance(repo_err.value, GatedRepoError)
    assert repo_err.value.response.status_code == 404
    assert repo_err.value.response.headers["X-Error-Code"] == "RepoNotFound"
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("org/missing", "config.json", cache_dir=tmp_path / "c")
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/single", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("org/single", "config.json", revision="v9", cache_dir=tmp_path / "c")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("org/single", "config.json", revision="0" * 40, cache_dir=tmp_path / "c")
    with pytest.raises(RemoteEntryNotFoundError) as entry_err:
        hf_hub_download("org/single", "tokenizer.json", cache_dir=tmp_path / "c")
    assert isinstance(entry_err.value, EntryNotFoundError)
    assert entry_err.value.response.headers["X-Repo-Commit"] == spec.sha
    # huggingface_hub caches the miss under .no_exist/<commit>/ thanks to X-Repo-Commit.
    assert (tmp_path / "c/models--org--single/.no_exist" / spec.sha / "tokenizer.json").exists()
    with pytest.raises(RemoteEntryNotFoundError):
        api.parse_safetensors_file_metadata("org/single", "missing.safetensors")
    assert not api.file_exists("org/missing", "config.json")
    assert not api.revision_exists("org/single", "nope")
    assert api.revision_exists("org/single", "v1.0")
    assert server.count(path="*") == server.request_count


def test_gated_repo_requires_token(serve: Callable[..., HubServer], tmp_path: Path) -> None:
    folder = tmp_path / "gated"
    write_single(folder)
    spec = RepoSpec.from_folder("org/gated", folder, gated=True, token=TOKEN)
    server = serve(spec)
    with pytest.raises(GatedRepoError) as no_token:
        HfApi().model_info("org/gated")
    assert no_token.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as bad_token:
        HfApi(token="hf_wrong").model_info("org/gated")
    assert bad_token.value.response.status_code == 403
    with pytest.raises(GatedRepoError):
        hf_hub_download("org/gated", "config.json", cache_dir=tmp_path / "c")
    with pytest.raises(GatedRepoError):  # file_exists re-raises GatedRepoError
        HfApi().get_safetensors_metadata("org/gated")
    assert sum(r.authorization for r in server.records) == 1  # only the wrong-token call

    server.reset_counters()
    api = HfApi(token=TOKEN)
    assert api.model_info("org/gated").gated == "manual"
    path = hf_hub_download("org/gated", "config.json", cache_dir=tmp_path / "c", token=TOKEN)
    assert json.loads(Path(path).read_text()) == CONFIG
    assert api.get_safetensors_metadata("org/gated").files_metadata["model.safetensors"]
    r = get_session().get(
        server.url("org/gated", "model.safetensors"),
        headers={"Authorization": f"Bearer {TOKEN}", "Range": "bytes=0-7"},
    )
    assert r.status_code == 206
    assert all(r.authorization for r in server.records)


def test_private_repo_is_not_found_without_token(
    serve: Callable[..., HubServer], tmp_path: Path
) -> None:
    spec = RepoSpec.from_files("org/private", {"config.json": b"{}"}, private=True, token=TOKEN)
    serve(spec)
    with pytest.raises(RepositoryNotFoundError) as err:
        HfApi().model_info("org/private")
    assert not isinstance(err.value, GatedRepoError)
    assert err.value.response.status_code == 401
    assert HfApi(token=TOKEN).model_info("org/private").private is True


# -- fault knobs -------------------------------------------------------------------


def test_latency_fault(serve: Callable[..., HubServer], single: Any) -> None:
    spec, _ = single
    server = serve(spec)
    fault = server.add_latency(0.05, path="/api/models/*", count=1)
    api = HfApi()
    start = time.monotonic()
    api.model_info("org/single")
    assert time.monotonic() - start >= 0.05
    api.model_info("org/single")
    assert fault.hits == 1 and fault.remaining == 0
    assert server.records[0].fault is None  # latency is not reported as a fault kind


def test_503_then_ok(
    serve: Callable[..., HubServer], single: Any, sleeps: Sleeps, tmp_path: Path
) -> None:
    spec, folder = single
    server = serve(spec)
    api = HfApi()

    # hf_hub_download: the metadata HEAD is not retried, but after a 5xx with nothing
    # in the cache it makes a second metadata call (with retries) -> success, no sleep.
    fault = server.fail(503, path="*/config.json", method="HEAD")
    hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "a")
    assert fault.hits == 1
    assert paths(server) == [
        ("HEAD", "/org/single/resolve/main/config.json"),
        ("HEAD", "/org/single/resolve/main/config.json"),
        ("GET", "/org/single/resolve/main/config.json"),
    ]
    assert [r.status for r in server.records] == [503, 200, 200]
    assert sleeps.calls == []

    # Two 503s on HEAD: the second metadata call goes through http_backoff (1 s sleep).
    server.fail(503, method="HEAD", count=2)
    hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "b")
    assert sleeps.calls == [1]

    # The file GET (http_get) only retries 408/429: a 503 surfaces.
    server.fail(503, method="GET")
    with pytest.raises(HfHubHTTPError) as err:
        hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "c")
    assert err.value.response.status_code == 503

    # model_info and parse_safetensors_file_metadata use get_session() directly: no retry.
    server.reset_counters()
    server.fail(503)
    with pytest.raises(HfHubHTTPError):
        api.model_info("org/single")
    assert server.request_count == 1
    server.fail(503, method="GET")
    with pytest.raises(HfHubHTTPError):
        api.get_safetensors_metadata("org/single")

    # http_backoff (and list_repo_tree, which uses it) retries with 1, 2, ... s sleeps.
    sleeps.calls.clear()
    server.fail(503, path="*/model.safetensors", count=2)
    r = http_backoff("GET", server.url("org/single", "model.safetensors"))
    assert r.status_code == 200 and r.content == (folder / "model.safetensors").read_bytes()
    assert sleeps.calls == [1, 2]
    server.fail(502, path="*/tree/*")
    assert {e.path for e in api.list_repo_tree("org/single")} >= {"config.json"}
    assert sleeps.calls == [1, 2, 1]


def test_429_retry_after(
    serve: Callable[..., HubServer], single: Any, sleeps: Sleeps, tmp_path: Path
) -> None:
    spec, _ = single
    server = serve(spec)
    server.rate_limit(retry_after=7, path="*/model.safetensors")
    r = http_backoff("GET", server.url("org/single", "model.safetensors"))
    assert r.status_code == 200
    assert sleeps.calls == [8.0]  # Retry-After + 1

    # The file GET of hf_hub_download retries 429 honouring Retry-After.
    sleeps.calls.clear()
    server.rate_limit(retry_after=3, method="GET")
    hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "a")
    assert sleeps.calls == [4.0]
    assert [r.status for r in server.records][-2:] == [429, 200]

    # model_info: no retry, HfHubHTTPError with the 429 response.
    server.rate_limit(retry_after=3)
    with pytest.raises(HfHubHTTPError) as err:
        HfApi().model_info("org/single")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "3"


def test_connection_reset_and_disconnect(
    serve: Callable[..., HubServer], single: Any, sleeps: Sleeps, tmp_path: Path
) -> None:
    spec, _ = single
    server = serve(spec)
    url = server.url("org/single", "model.safetensors")

    server.reset_connection()
    with pytest.raises(httpx2.ReadError):  # ECONNRESET -> httpx2.ReadError
        get_session().get(url, headers={"Range": "bytes=0-7"})
    assert server.records[-1].status is None and server.records[-1].fault == "reset"

    server.disconnect()
    with pytest.raises(httpx2.RemoteProtocolError, match="without sending a response"):
        get_session().get(url, headers={"Range": "bytes=0-7"})

    # http_backoff retries both (NetworkError / RemoteProtocolError).
    server.reset_connection()
    server.disconnect()
    assert http_backoff("GET", url).status_code == 200
    assert sleeps.calls == [1, 2]

    # hf_hub_download: a reset is fatal (ReadError is not retried, neither on the
    # metadata HEAD nor on the file GET) ...
    server.reset_connection(method="GET")
    with pytest.raises(httpx2.ReadError):
        hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "a")
    # ... but a clean disconnect on the file GET is retried by http_get after 1 s.
    sleeps.calls.clear()
    server.disconnect(method="GET")
    hf_hub_download("org/single", "config.json", cache_dir=tmp_path / "b")
    assert sleeps.calls == [1]


def test_truncated_body(
    serve: Callable[..., HubServer], single: Any, sleeps: Sleeps, tmp_path: Path
) -> None:
    spec, folder = single
    server = serve(spec)
    data = (folder / "model.safetensors").read_bytes()
    url = server.url("org/single", "model.safetensors")

    fault = server.truncate(keep_bytes=100)
    with pytest.raises(httpx2.RemoteProtocolError, match=r"complete message body"):
        get_session().get(url)
    assert fault.hits == 1
    assert server.records[-1].body_bytes == 100 and server.records[-1].fault == "truncate"
    assert server.records[-1].status == 200

    # hf_hub_download resumes (here from 0: the partial bytes sit in httpx2's 10 MB
    # chunk buffer and were never written) and ends with the right content.
    server.reset_counters()
    server.truncate(method="GET")
    path = hf_hub_download("org/single", "model.safetensors", cache_dir=tmp_path / "a")
    assert Path(path).read_bytes() == data
    assert sleeps.calls == [1]
    assert [(r.method, r.range, r.fault) for r in server.records] == [
        ("HEAD", None, None),
        ("GET", None, "truncate"),
        ("GET", None, None),
    ]
    assert server.bytes_sent == len(data) // 2 + len(data)


def test_wrong_content_range_and_ignored_range(
    serve: Callable[..., HubServer], tmp_path: Path
) -> None:
    folder = tmp_path / "big"
    write_single(folder, n=20_000)  # > 100 kB so that bytes=0-100000 is a strict prefix
    spec = RepoSpec.from_folder("org/big", folder)
    server = serve(spec)
    data = (folder / "model.safetensors").read_bytes()
    url = server.url("org/big", "model.safetensors")

    server.wrong_content_range(shift=3)
    r = get_session().get(url, headers={"Range": "bytes=10-19"})
    assert r.status_code == 206
    assert r.headers["Content-Range"] == f"bytes 13-22/{len(data)}"
    assert r.content == data[13:23]
    assert server.records[-1].fault == "wrong_range"

    # huggingface_hub does not check Content-Range: the shifted bytes are parsed as
    # the header length and the parse fails.
    server.wrong_content_range(shift=1)
    with pytest.raises(SafetensorsParsingError):
        HfApi().parse_safetensors_file_metadata("org/big", "model.safetensors")

    # Range ignored: 200 with the whole file; the client still parses the header
    # (it only slices response.content) but the whole file went over the wire.
    server.reset_counters()
    server.ignore_range()
    r = get_session().get(url, headers={"Range": "bytes=0-7"})
    assert r.status_code == 200 and r.content == data
    server.ignore_range()
    meta = HfApi().parse_safetensors_file_metadata("org/big", "model.safetensors")
    assert meta.tensors["model.embed.weight"].shape == [20_000, 4]
    assert server.bytes_by_path["/org/big/resolve/main/model.safetensors"] == 2 * len(data)
    # Without the fault only the first 100001 bytes are sent.
    server.reset_counters()
    HfApi().parse_safetensors_file_metadata("org/big", "model.safetensors")
    assert server.bytes_sent == 100_001


def test_gated_fault(serve: Callable[..., HubServer], single: Any) -> None:
    spec, _ = single
    server = serve(spec)
    fault = server.add_fault(Fault("gated", path="/api/models/*", count=1))
    with pytest.raises(GatedRepoError):
        HfApi().model_info("org/single")
    assert HfApi().model_info("org/single").sha == spec.sha
    assert fault.hits == 1
    assert [r.status for r in server.records] == [401, 200]


def test_counters(serve: Callable[..., HubServer], single: Any) -> None:
    spec, folder = single
    server = serve(spec)
    data = (folder / "model.safetensors").read_bytes()
    session = get_session()
    url = server.url("org/single", "model.safetensors")
    session.get(url, headers={"Range": "bytes=0-99"})
    session.get(url, headers={"Range": "bytes=100-"})
    session.head(url)
    info = session.get(f"{server.endpoint}/api/models/org/single")
    path = "/org/single/resolve/main/model.safetensors"
    assert server.request_count == 4
    assert server.requests[("GET", path)] == 2
    assert server.requests[("HEAD", path)] == 1
    assert server.bytes_by_path[path] == len(data)
    assert server.bytes_sent == len(data) + len(info.content)
    assert [r.body_bytes for r in server.records] == [100, len(data) - 100, 0, len(info.content)]
    assert server.log[0] == ("GET", path, "bytes=0-99")
    assert server.count("GET", "*.safetensors") == 2
    server.reset_counters()
    assert (server.request_count, server.bytes_sent, server.log) == (0, 0, [])
    assert not server.bytes_by_path and not server.requests


def test_cdn_redirect_for_lfs_files(
    serve: Callable[..., HubServer], tmp_path: Path, sleeps: Sleeps
) -> None:
    folder = tmp_path / "gated"
    write_single(folder)
    spec = RepoSpec.from_folder("org/gated", folder, gated=True, token=TOKEN)
    server = serve(spec, cdn_redirect=True)
    data = (folder / "model.safetensors").read_bytes()

    path = hf_hub_download("org/gated", "model.safetensors", cache_dir=tmp_path / "c", token=TOKEN)
    assert Path(path).read_bytes() == data
    recs = server.records
    assert [(r.method, r.path.split("/")[1], r.status, r.authorization) for r in recs] == [
        ("HEAD", "org", 302, True),  # off-Hub Location: not followed, metadata read here
        ("GET", "_cdn", 200, False),  # token not sent to the "CDN"
    ]
    # Range reads through the session follow the redirect; httpx2 drops Authorization.
    server.reset_counters()
    meta = HfApi(token=TOKEN).get_safetensors_metadata("org/gated")
    assert meta.files_metadata["model.safetensors"].metadata == {"format": "pt"}
    assert [(r.method, r.path.split("/")[1], r.status, r.authorization) for r in server.records][
        -2:
    ] == [("GET", "org", 302, True), ("GET", "_cdn", 206, False)]
    # Non-LFS files are served directly.
    server.reset_counters()
    hf_hub_download("org/gated", "config.json", cache_dir=tmp_path / "c", token=TOKEN)
    assert [r.status for r in server.records] == [200, 200]


def test_hf_endpoint_environment_variable_in_subprocess(
    serve: Callable[..., HubServer], single: Any, tmp_path: Path
) -> None:
    spec, _ = single
    server = serve(spec)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=server.endpoint,
        HF_HUB_CACHE=str(tmp_path / "sub-cache"),
        HF_HOME=str(tmp_path / "sub-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    code = (
        "import json, huggingface_hub as h;"
        "p = h.hf_hub_download('org/single', 'config.json');"
        "print(json.dumps([h.model_info('org/single').sha, open(p).read(), p]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    sha, text, path = json.loads(out.stdout)
    assert sha == spec.sha and json.loads(text) == CONFIG
    assert path.startswith(str(tmp_path / "sub-cache"))
