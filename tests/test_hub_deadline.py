"""Deadlines for Hub reads: a server that drips bytes ends the run in a named error, exit 3.

Each test gives a small deadline (half a second) and a server that sends what is asked in 20
pieces, one every 0.25 s (ten times the deadline), so the verdict does not depend on how fast the
machine is; and without the deadline the run would finish, not hang.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from hubserver import HubServer, RepoSpec
from hubtesting import Sleeps, record_sleeps, serving
from processes import sigint_as_at_a_terminal
from qarm_audit.sources import open_source
from qarm_audit.sources.hub import HubDeadlineError
from qarm_audit.sources.hub.deadline import AUDIT_ENV, REQUEST_ENV

DOCUMENTS = {
    "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"]),
}
DRIP = 0.25
"""Seconds between two pieces of a dripping answer."""
PIECES = 20


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    return record_sleeps(monkeypatch)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    yield from serving(tmp_path)


@pytest.fixture
def repo(tmp_path: Path) -> RepoSpec:
    folder = write_checkpoint(
        tmp_path / "single", {"model.safetensors": dict(llama(1, nvfp4_modelopt))}, DOCUMENTS
    )
    return RepoSpec.from_folder("org/slow", folder)


def _body_size(server: HubServer, repo: RepoSpec, path: str) -> int:
    """Bytes qarm asks of ``path``: the listing, a document, or the lone shard's header."""
    if path.startswith("/api"):
        url = f"{server.endpoint}/api/models/{repo.repo_id}/revision/{repo.sha}?blobs=true"
        with urllib.request.urlopen(url) as answer:
            size = len(answer.read())
        server.reset_counters()
        return size
    file = "model.safetensors" if path.endswith(".safetensors") else path.rsplit("/", 1)[1]
    source = repo.commits[repo.sha][file]
    assert isinstance(source, Path)
    data = source.read_bytes()
    return 8 + int(struct.unpack("<Q", data[:8])[0]) if file.endswith(".safetensors") else len(data)


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("*.safetensors", "reading bytes 0-"),
        ("/api/models/*", "reading the file listing"),
        ("*/config.json", "downloading config.json"),
    ],
)
def test_a_dripping_answer_ends_at_the_request_deadline(
    hub: Any, run: Any, repo: RepoSpec, monkeypatch: Any, path: str, what: str
) -> None:
    monkeypatch.setenv(REQUEST_ENV, "0.5")
    server = hub(repo)
    size = _body_size(server, repo, path)
    server.drip(DRIP, -(-size // PIECES), path=path, method="GET")
    result = run("audit", f"org/slow@{repo.sha}", "--format", "json")
    assert result.exit_code == 3
    assert what in result.stderr
    assert f"passed its deadline of 0.5 s ({REQUEST_ENV})" in result.stderr
    assert "Traceback" not in result.stderr
    # cut off at the deadline, not read to the end and refused after
    dripped = [r for r in server.records if r.fault == "drip"]
    assert dripped and all(r.body_bytes < size for r in dripped)
    # and nothing is asked after it: hf_hub_download resumed a cut-off document 5 times, 1 s
    # apart, each resume cut off at once, before the error
    assert server.count("GET", path) == 1, [r.path for r in server.records]


def test_a_silent_metadata_request_ends_at_the_request_deadline(
    hub: Any, run: Any, repo: RepoSpec, monkeypatch: Any
) -> None:
    """A server silent before its answer's headers: each request waits no longer than the
    deadline leaves, though ``hf_hub_download`` asks a document's metadata again with a fixed
    60 s timeout (before, the run ended some 60 s past a 10 s deadline)."""
    monkeypatch.setenv(REQUEST_ENV, "1")
    server = hub(repo)
    server.add_latency(12.0, path="*/config.json", method="HEAD")
    started = time.monotonic()
    result = run("audit", f"org/slow@{repo.sha}", "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert "downloading config.json" in result.stderr
    assert f"passed its deadline of 1 s ({REQUEST_ENV})" in result.stderr
    assert time.monotonic() - started < 8


def test_the_audit_deadline_bounds_every_read_together(
    hub: Any, repo: RepoSpec, monkeypatch: Any
) -> None:
    monkeypatch.setenv(REQUEST_ENV, "600")
    monkeypatch.setenv(AUDIT_ENV, "0.5")
    server = hub(repo)
    server.drip(DRIP, -(-_body_size(server, repo, "*.safetensors") // PIECES), path="*.safetensors")
    with pytest.raises(HubDeadlineError, match=f"deadline of 0.5 s \\({AUDIT_ENV}\\)"):
        open_source(f"org/slow@{repo.sha}")


def test_a_retry_that_would_wait_past_the_deadline_is_not_waited(
    hub: Any, repo: RepoSpec, monkeypatch: Any, sleeps: Sleeps
) -> None:
    monkeypatch.setenv(AUDIT_ENV, "5")
    server = hub(repo)
    server.rate_limit(retry_after=30, path="*.safetensors", count=None)
    with pytest.raises(HubDeadlineError, match=AUDIT_ENV):
        open_source(f"org/slow@{repo.sha}")
    assert 30 not in sleeps.calls


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf"])
def test_a_deadline_that_is_not_a_positive_number_is_refused(
    hub: Any, run: Any, repo: RepoSpec, monkeypatch: Any, value: str
) -> None:
    monkeypatch.setenv(REQUEST_ENV, value)
    hub(repo)
    result = run("audit", f"org/slow@{repo.sha}")
    assert result.exit_code == 2
    assert REQUEST_ENV in result.stderr


def test_ordinary_reads_finish_well_inside_the_defaults(hub: Any, run: Any, repo: RepoSpec) -> None:
    hub(repo)
    assert run("audit", f"org/slow@{repo.sha}").exit_code in (0, 1)


def test_ctrl_c_during_a_dripping_read_exits_130_at_once(
    hub: Any, repo: RepoSpec, tmp_path: Path
) -> None:
    """SIGINT to the real process while its reading threads wait on a dripping answer: the
    interpreter waited for those threads until the request's deadline (300 s by default)
    before it exited 130. The reads are cut off when Ctrl-C arrives."""
    server = hub(repo)
    server.drip(DRIP, 1, path="*.safetensors", method="GET")  # a header would take minutes
    env = {
        **os.environ,
        "HF_ENDPOINT": server.endpoint,
        "HF_HUB_CACHE": str(tmp_path / "hf-process"),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src"),
    }
    for name in (REQUEST_ENV, AUDIT_ENV, "HF_TOKEN"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "qarm_audit", "audit", f"org/slow@{repo.sha}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=sigint_as_at_a_terminal,
    )
    try:
        for _ in range(600):  # until the dripping read has begun (at most 60 s)
            if any(r.fault == "drip" for r in server.records) or process.poll() is not None:
                break
            time.sleep(0.1)
        assert any(r.fault == "drip" for r in server.records)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)  # not the 300 s of the request deadline
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err.decode()
    assert err.decode().endswith("qarm: interrupted; nothing more was written\n"), err.decode()
    assert out == b""


def test_ctrl_c_between_the_documents_and_the_reads_leaves_no_read_waited_for(
    hub: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """Ctrl-C after the documents arrived and before the header reads are waited for (here,
    while the index is parsed), with a shard read ahead on a dripping answer: that read is cut
    off, rather than waited for until its deadline (300 s by default)."""
    import qarm_audit.sources.hub as hub_module

    shards = {
        f"model-0000{i}-of-00002.safetensors": dict(llama(1, nvfp4_modelopt)) if i == 1 else {}
        for i in (1, 2)
    }
    folder = write_checkpoint(tmp_path / "two", shards, DOCUMENTS)
    repo = RepoSpec.from_folder("org/two", folder)
    server = hub(repo)
    server.drip(DRIP, 1, path="*.safetensors", method="GET")  # minutes per header
    monkeypatch.delenv(AUDIT_ENV, raising=False)
    monkeypatch.setenv(REQUEST_ENV, "30")  # what a read not cut off would be waited for

    def interrupted(text: str) -> object:
        while not any(r.fault == "drip" for r in server.records):
            time.sleep(0.01)  # until a read ahead is on its dripping answer
        raise KeyboardInterrupt

    monkeypatch.setattr(hub_module, "parse_index", interrupted)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        open_source(f"org/two@{repo.sha}")
    assert time.monotonic() - started < 20
