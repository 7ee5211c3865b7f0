"""Hugging Face conventions: `hf download` then an offline audit, refs and sizes that `hf cache`
sees, `hf://` URIs and Hub URLs, the login hint, progress bars; and weight files a Hub listing
shows that the audit did not read.

The real `hf` CLI and the real huggingface_hub client talk to tests/hubserver.py through
HF_ENDPOINT, with the Hub cache under the test's tmp_path.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import constants as hf_constants
from huggingface_hub import scan_cache_dir
from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

from conftest import llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from hubserver import HubServer, RepoSpec
from hubtesting import Sleeps, record_sleeps, serving
from qarm_audit.report.progress import HubProgress

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = {
    "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"]),
}
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    return record_sleeps(monkeypatch)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    yield from serving(tmp_path)


def sharded(tmp_path: Path, name: str = "sharded") -> Path:
    tensors = dict(llama(2, nvfp4_modelopt))
    names = sorted(tensors)
    half = len(names) // 2
    shards = {
        SHARDS[0]: {n: tensors[n] for n in names[:half]},
        SHARDS[1]: {n: tensors[n] for n in names[half:]},
    }
    return write_checkpoint(tmp_path / name, shards, DOCUMENTS)


def comparable(stdout: str) -> dict[str, Any]:
    document = json.loads(stdout)
    for key in ("source", "notes"):
        document.pop(key)
    for shard in document["integrity"]["shards"]:
        shard["remote_sha256"] = None
    return dict(document)


def hf(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The real `hf` CLI, against the server huggingface_hub is pointed at."""
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1"}
    command = [str(Path(sys.executable).parent / "hf"), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def qarm_offline(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """`HF_HUB_OFFLINE=1 qarm ...` as a user runs it: a process of its own."""
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    command = [sys.executable, "-m", "qarm_audit", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


# -- hf download, then offline -------------------------------------------------------------


def test_hf_download_then_an_offline_audit_reads_the_snapshot(
    hub: Any, run: Any, tmp_path: Path
) -> None:
    folder = sharded(tmp_path)
    spec = RepoSpec.from_folder("org/x", folder)
    server = hub(spec)
    cache = tmp_path / "hf"
    hf("download", "org/x", cache=cache)
    server.reset_counters()
    offline = qarm_offline("audit", "org/x", "-f", "json", cache=cache)
    local = run("audit", folder, "-f", "json")
    assert offline.returncode == local.exit_code, offline.stderr
    assert server.request_count == 0
    assert comparable(offline.stdout) == comparable(local.stdout)
    source = json.loads(offline.stdout)["source"]
    assert source == {"kind": "hub-offline", "location": "org/x", "repo": "org/x"} | {
        "revision": spec.sha
    }
    assert f"qarm: resolved main -> {spec.sha}" in offline.stderr
    # the headers came from the shards themselves: qarm never stored any
    assert not (cache / "models--org--x" / "snapshots" / spec.sha / ".qarm-audit").exists()


def test_a_partial_download_is_not_trusted_for_the_whole_commit(hub: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/x", sharded(tmp_path))
    hub(spec)
    cache = tmp_path / "hf"
    hf("download", "org/x", "--exclude", SHARDS[1], cache=cache)
    offline = qarm_offline("audit", f"org/x@{spec.sha}", cache=cache)
    assert offline.returncode == 3
    assert f"{SHARDS[1]} of org/x@{spec.sha} is neither in the Hub snapshot" in offline.stderr
    # without the commit's listing that `hf download` keeps, the snapshot alone is not enough
    shutil.rmtree(cache / "models--org--x" / "trees")
    offline = qarm_offline("audit", f"org/x@{spec.sha}", cache=cache)
    assert offline.returncode == 3
    assert "holds no file list of org/x@" in offline.stderr


def test_a_snapshot_file_the_stored_listing_lacks_refuses_the_offline_audit(
    hub: Any, run: Any, tmp_path: Path
) -> None:
    spec = RepoSpec.from_folder("org/x", sharded(tmp_path))
    hub(spec)
    assert run("audit", f"org/x@{spec.sha}").exit_code in (0, 1)
    cache = tmp_path / "hf"
    snapshot = cache / "models--org--x" / "snapshots" / spec.sha
    (snapshot / "pytorch_model.bin").write_bytes(b"\0" * 16)
    offline = qarm_offline("audit", f"org/x@{spec.sha}", cache=cache)
    assert offline.returncode == 3
    assert "'pytorch_model.bin'" in offline.stderr
    assert "not this commit's file list" in offline.stderr


def test_the_two_stored_file_lists_of_a_commit_must_agree_offline(
    hub: Any, run: Any, tmp_path: Path
) -> None:
    """An online audit and `hf download` each keep the commit's file list. A file taken out of
    qarm's (a second layout hidden, say) was trusted: the offline audit took qarm's list."""
    spec = RepoSpec.from_folder("org/x", sharded(tmp_path))
    hub(spec)
    cache = tmp_path / "hf"
    hf("download", "org/x", "--exclude", "*.safetensors", cache=cache)
    assert run("audit", f"org/x@{spec.sha}").exit_code in (0, 1)
    both = qarm_offline("audit", f"org/x@{spec.sha}", cache=cache)
    assert both.returncode in (0, 1), both.stderr  # the two lists agree
    listing = cache / "models--org--x" / "snapshots" / spec.sha / ".qarm-audit" / "listing.json"
    stored = json.loads(listing.read_text())
    stored["files"] = [f for f in stored["files"] if f != "config.json"]
    listing.write_text(json.dumps(stored))
    offline = qarm_offline("audit", f"org/x@{spec.sha}", cache=cache)
    assert offline.returncode == 3, offline.stderr
    assert "disagree on 'config.json'" in offline.stderr and "edited or is stale" in offline.stderr


# -- refs and sizes where huggingface_hub keeps them ---------------------------------------


def test_refs_and_headers_live_where_hf_cache_sees_them(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/x", sharded(tmp_path))
    hub(spec)
    cache = tmp_path / "hf"
    assert run("audit", "org/x").exit_code in (0, 1)
    storage = cache / "models--org--x"
    assert (storage / "refs" / "main").read_text() == spec.sha
    assert not (storage / "qarm-audit").exists()
    info = scan_cache_dir(cache)
    (repo,) = info.repos
    (revision,) = repo.revisions
    assert revision.commit_hash == spec.sha and revision.refs == frozenset({"main"})
    headers = sorted((storage / "snapshots" / spec.sha / ".qarm-audit").glob("*.header"))
    assert [h.name for h in headers] == [f"{s}.header" for s in SHARDS]
    documents = sum(
        (storage / "snapshots" / spec.sha / n).stat().st_size
        for n in (*DOCUMENTS, "model.safetensors.index.json")
    )
    assert repo.size_on_disk > documents  # the headers are counted too
    listed = hf("cache", "ls", "--cache-dir", str(cache), cache=cache).stdout
    assert "org/x" in listed and "main" in listed
    hf("cache", "prune", "--cache-dir", str(cache), "--yes", cache=cache)
    assert (storage / "snapshots" / spec.sha / "config.json").exists()  # still referenced
    offline = qarm_offline("audit", "org/x", cache=cache)
    assert offline.returncode in (0, 1), offline.stderr


# -- hf:// URIs and Hub URLs -----------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    [
        "hf://org/x@{sha}",
        "hf://models/org/x@{sha}",
        "https://huggingface.co/org/x/tree/{sha}",
        "{endpoint}/org/x/tree/{sha}",
        "hf://org/x",
        "https://huggingface.co/org/x",
    ],
)
def test_hub_uris_and_urls_name_the_same_audit(
    hub: Any, run: Any, tmp_path: Path, form: str
) -> None:
    spec = RepoSpec.from_folder("org/x", sharded(tmp_path))
    server = hub(spec)
    plain = run("audit", f"org/x@{spec.sha}", "-f", "json")
    given = form.format(sha=spec.sha, endpoint=server.endpoint)
    result = run("audit", given, "-f", "json")
    assert result.exit_code == plain.exit_code, result.stderr
    assert comparable(result.stdout) == comparable(plain.stdout)
    source = json.loads(result.stdout)["source"]
    assert source["repo"] == "org/x" and source["revision"] == spec.sha
    assert source["location"] == given


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("hf://datasets/org/x", "names a dataset repository"),
        ("https://huggingface.co/org/x/blob/main/config.json", "names 'config.json' inside"),
        ("hf://", "is not a Hugging Face Hub URI"),
        ("https://example.com/org/x", "is not a Hugging Face Hub URI"),
    ],
)
def test_a_uri_qarm_cannot_audit_is_refused_by_name(run: Any, given: str, says: str) -> None:
    result = run("audit", given)
    assert result.exit_code == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr


# -- what a user is told ---------------------------------------------------------------------


def test_the_access_error_names_hf_auth_login(hub: Any, run: Any, tmp_path: Path) -> None:
    spec = RepoSpec.from_folder("org/gated", sharded(tmp_path), gated=True, token="hf_x")
    hub(spec)
    result = run("audit", f"org/gated@{spec.sha}")
    assert result.exit_code == 3
    assert "`hf auth login`" in result.stderr and "HF_TOKEN" in result.stderr


def test_progress_bars_follow_huggingface_hub(monkeypatch: Any) -> None:
    hf_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module, not the class

    shown = HubProgress(bar=True)
    shown.headers_started(3)
    assert shown.progress is not None
    shown.headers_finished()
    # HF_HUB_DISABLE_PROGRESS_BARS=1, as huggingface_hub read it when imported
    monkeypatch.setattr(hf_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    silenced = HubProgress(bar=True)
    silenced.headers_started(3)
    assert silenced.progress is None
    monkeypatch.setattr(hf_tqdm, "HF_HUB_DISABLE_PROGRESS_BARS", None)
    disable_progress_bars()  # and huggingface_hub's switch in code
    try:
        silenced.headers_started(3)
        assert silenced.progress is None
    finally:
        enable_progress_bars()


# -- weight files the listing shows and the audit did not read -----------------------------


W = {"lm_head.weight": ("BF16", (16, 16))}


def _codes(stdout: str) -> tuple[list[str], list[str]]:
    report = json.loads(stdout)
    refusals = [f["code"] for f in report["refusals"]]
    warnings = [f["code"] for f in report["warnings"] if f["code"] != "declared-arm-differs"]
    return refusals, warnings


def test_unread_weight_files_of_a_hub_repo_are_reported_online_and_offline(
    hub: Any, run: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    documents = {"config.json": DOCUMENTS["config.json"]}
    bin_only = write_checkpoint(tmp_path / "bin", {}, DOCUMENTS)
    (bin_only / "pytorch_model.bin").write_bytes(b"\0" * 16)
    beside = write_checkpoint(tmp_path / "beside", {"model.safetensors": W}, documents)
    (beside / "original").mkdir()
    (beside / "original" / "consolidated.pth").write_bytes(b"\0" * 16)
    layout = write_checkpoint(
        tmp_path / "layout",
        {SHARDS[0]: W, SHARDS[1]: {"model.norm.weight": ("BF16", (16,))}},
        documents,
    )
    write_checkpoint(layout, {"model.safetensors": W}, index=False)
    unindexed = write_checkpoint(
        tmp_path / "unindexed",
        {SHARDS[0]: W, SHARDS[1]: {"model.norm.weight": ("BF16", (16,))}},
        documents,
    )
    index = json.loads((unindexed / "model.safetensors.index.json").read_text())
    index["weight_map"] = {"lm_head.weight": SHARDS[0]}  # the second shard left out
    (unindexed / "model.safetensors.index.json").write_text(json.dumps(index))
    specs = {
        "org/bin": RepoSpec.from_folder("org/bin", bin_only),
        "org/beside": RepoSpec.from_folder("org/beside", beside),
        "org/layout": RepoSpec.from_folder("org/layout", layout),
        "org/unindexed": RepoSpec.from_folder("org/unindexed", unindexed),
    }
    hub(*specs.values())
    expected = {
        "org/bin": (["weights-unread"], [], "pytorch_model.bin"),
        "org/beside": ([], ["weight-files-unread"], "original/consolidated.pth"),
        "org/layout": (["second-layout"], [], "model.safetensors"),
        "org/unindexed": (["index-disagrees", "index-total-size"], [], SHARDS[1]),
    }
    for repo, spec in specs.items():
        online = run("audit", f"{repo}@{spec.sha}", "-f", "json")
        local = run("audit", tmp_path / repo.split("/")[1], "-f", "json")
        refusals, warnings, named = expected[repo]
        assert _codes(online.stdout) == (refusals, warnings) == _codes(local.stdout), repo
        assert named in online.stdout
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    for repo, spec in specs.items():
        offline = run("audit", f"{repo}@{spec.sha}", "-f", "json")
        assert _codes(offline.stdout) == expected[repo][:2], repo
        assert expected[repo][2] in offline.stdout
