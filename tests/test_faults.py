"""Fault injection through the Hub test server, driven by the real huggingface_hub client.

Every fault kind x every request kind it can hit ends in one of two ways: the same report as a
clean run, or exit 3 with one named line on stderr (and nothing on stdout). Never a report over a
partial read. The matrix and its count are in docs/reliability.md.

Request kinds: the file listing (``model_info``), a document download (``hf_hub_download``: HEAD
then GET), the first range read of a shard header, and the remainder read (the checkpoint is
served without the Hub's parameter count and its index without total_size, so every shard takes
exactly two reads).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import close_session

import hubserver
from conftest import llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from hubserver import Fault, HubServer, RepoSpec, point_huggingface_hub_at
from hubtesting import Sleeps, record_sleeps, serving

SHARDS = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
DOCUMENTS = {
    "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"]),
}
TIMEOUT = 0.3


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> Sleeps:
    """No backoff is slept (qarm's or huggingface_hub's); a short per-request timeout."""
    recorder = record_sleeps(monkeypatch, timeout=TIMEOUT)
    # Without the Hub's parameter count every shard header takes two reads: first, remainder.
    monkeypatch.setattr(hubserver, "_safetensors_parameters", lambda blob: Counter())
    return recorder


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    yield from serving(tmp_path)


def nvfp4(module: str, out: int, inp: int) -> dict[str, Any]:
    return dict(nvfp4_modelopt(module, out, inp))


def checkpoint(root: Path, layers: int = 2) -> Path:
    tensors = llama(layers, nvfp4)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {
        SHARDS[0]: {n: tensors[n] for n in names[:half]},
        SHARDS[1]: {n: tensors[n] for n in names[half:]},
    }
    folder = write_checkpoint(root, shards, DOCUMENTS)
    # nor the index's total_size, the other figure a first read is sized from
    index = folder / "model.safetensors.index.json"
    document = json.loads(index.read_text())
    document.pop("metadata", None)
    index.write_text(json.dumps(document, indent=2))
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("faults")
    return {"old": checkpoint(base / "old"), "new": checkpoint(base / "new", layers=1)}


@pytest.fixture(scope="module")
def clean(folders: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """The JSON report of each folder audited locally, as a Hub audit must reproduce it."""
    from click.testing import CliRunner

    from qarm_audit.cli import cli

    out = {}
    for key, path in folders.items():
        result = CliRunner().invoke(cli, ["audit", str(path), "-f", "json"])
        assert result.exit_code == 1, result.stderr  # NVFP4 declared, input_scale absent...
        out[key] = comparable(result.stdout)
    return out


def comparable(stdout: str) -> dict[str, Any]:
    """The report without what legitimately differs between a local and a Hub source."""
    document = json.loads(stdout)
    document.pop("source")
    for shard in document["integrity"]["shards"]:
        shard["remote_sha256"] = None
    return document


# -- targeting one request kind -------------------------------------------------------------


class Nth(Fault):
    """A fault that lets the first ``skip`` matching requests through, then applies."""

    skip: int = 0
    seen: int = 0

    def matches(self, method: str, path: str) -> bool:
        if not super().matches(method, path):
            return False
        self.seen += 1
        return self.seen > self.skip


@dataclass(frozen=True)
class Target:
    path: str
    method: str | None
    skip: int
    ranged: bool
    """A range read (where range faults apply)."""


TARGETS = {
    "listing": Target("/api/models/*", "GET", 0, False),
    "document-head": Target("*/hf_quant_config.json", "HEAD", 0, False),
    "document-get": Target("*/hf_quant_config.json", "GET", 0, False),
    "first-read": Target(f"*/{SHARDS[0]}", "GET", 0, True),
    "remainder-read": Target(f"*/{SHARDS[0]}", "GET", 1, True),
}

SAME, ERROR, EITHER = "same report", "exit 3", "same report or exit 3"


@dataclass(frozen=True)
class Kind:
    """A fault kind: how to make it, where it applies, and the outcome it must end in."""

    make: Callable[[Target], Fault]
    ranged_only: bool = False
    body_only: bool = False
    """Only an answer with a body can be cut short (not a HEAD)."""
    outcome: str = SAME
    """Expected outcome (the invariant SAME-or-ERROR is checked for every case anyway)."""
    message: str = ""


def fault(kind: str, target: Target, count: int | None = 1, **kw: Any) -> Fault:
    made = Nth(kind, path=target.path, method=target.method, count=count, **kw)  # type: ignore[arg-type]
    made.skip = target.skip
    return made


KINDS: dict[str, Kind] = {
    # a timeout: the answer comes long after the client's short timeout, once
    "timeout": Kind(lambda t: fault("latency", t, latency=2.0)),
    "reset": Kind(lambda t: fault("reset", t)),
    "disconnect": Kind(lambda t: fault("disconnect", t)),
    "5xx-burst": Kind(lambda t: fault("status", t, count=3, status=503)),
    "5xx-persistent": Kind(
        lambda t: fault("status", t, count=None, status=502),
        outcome=ERROR,
        message="HTTP 502",
    ),
    "429-retry-after": Kind(lambda t: fault("rate_limit", t, retry_after=2)),
    "429-retry-after-too-long": Kind(
        lambda t: fault("rate_limit", t, count=None, retry_after=3600), outcome=ERROR
    ),
    "truncated-body": Kind(lambda t: fault("truncate", t, keep_bytes=10), body_only=True),
    "truncated-body-persistent": Kind(
        lambda t: fault("truncate", t, count=None, keep_bytes=10), body_only=True, outcome=ERROR
    ),
    "oversized-range-body": Kind(
        lambda t: fault("oversize_range", t, extra=64),
        ranged_only=True,
        outcome=ERROR,
        message="the server sent more; qarm stopped reading",
    ),
    "range-ignored": Kind(
        lambda t: fault("ignore_range", t),
        ranged_only=True,
        outcome=ERROR,
        message="ignored the Range header",
    ),
    "wrong-content-range": Kind(
        lambda t: fault("wrong_range", t, shift=3),
        ranged_only=True,
        outcome=ERROR,
        message="the server answered Content-Range",
    ),
}

CASES = [
    (kind, target)
    for kind, spec in KINDS.items()
    for target, where in TARGETS.items()
    if (where.ranged or not spec.ranged_only) and not (spec.body_only and where.method == "HEAD")
]


def check_outcome(result: Any, clean: dict[str, Any], expected: str, message: str = "") -> str:
    """SAME or ERROR, never anything else; returns which."""
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    if result.exit_code == 3:
        assert result.stdout == "", "a report was printed over a failed read"
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("qarm: error: "), result.stderr
        assert message in result.stderr
        got = ERROR
    else:
        assert result.exit_code == 1, result.stderr
        assert comparable(result.stdout) == clean, "a Hub report differs from the clean one"
        got = SAME
    if expected != EITHER:
        assert got == expected, result.stderr
    return got


@pytest.mark.parametrize(("kind", "target"), CASES, ids=[f"{k}@{t}" for k, t in CASES])
def test_fault_ends_in_the_clean_report_or_a_named_error(
    hub: Any, run: Any, folders: dict[str, Path], clean: dict[str, Any], kind: str, target: str
) -> None:
    spec = RepoSpec.from_folder("org/faulty", folders["old"])
    server = hub(spec)
    injected = server.add_fault(KINDS[kind].make(TARGETS[target]))
    start = time.perf_counter()
    result = run("audit", f"org/faulty@{spec.sha}", "--format", "json")
    elapsed = time.perf_counter() - start
    assert injected.hits >= 1, f"the fault never hit a {target} request"
    if kind == "timeout":  # the client gave up on the slow answer rather than waiting for it
        assert elapsed < injected.latency, elapsed
    check_outcome(result, clean["old"], KINDS[kind].outcome, KINDS[kind].message)


def test_a_fault_on_the_remainder_read_hits_the_second_request(
    hub: Any, run: Any, folders: dict[str, Path]
) -> None:
    """The targeting is real: the first read passes, the remainder read is the one answered 502."""
    spec = RepoSpec.from_folder("org/faulty", folders["old"])
    server = hub(spec)
    server.add_fault(KINDS["5xx-persistent"].make(TARGETS["remainder-read"]))
    assert run("audit", f"org/faulty@{spec.sha}").exit_code == 3
    statuses = [r.status for r in server.records if r.path.endswith(SHARDS[0])]
    assert statuses[0] == 206 and set(statuses[1:]) == {502}


# -- the revision moving between requests ---------------------------------------------------


class MoveMain(Nth):
    """Pushes a new commit to ``main`` when the targeted request arrives (then lets it through)."""

    push: Callable[[], str] | None = None
    moved: str | None = None

    def matches(self, method: str, path: str) -> bool:
        if super().matches(method, path) and self.moved is None and self.push is not None:
            self.moved = self.push()
        return False


@pytest.mark.parametrize("target", list(TARGETS))
def test_revision_moving_mid_run_never_mixes_commits(
    hub: Any,
    run: Any,
    folders: dict[str, Path],
    clean: dict[str, dict[str, Any]],
    target: str,
) -> None:
    spec = RepoSpec.from_folder("org/moving", folders["old"])
    new_files = RepoSpec.from_folder("org/moving", folders["new"])
    server = hub(spec)
    first = spec.sha
    where = TARGETS[target]
    move = MoveMain("latency", path=where.path, method=where.method, count=None)
    move.skip = where.skip
    move.push = lambda: spec.add_commit(new_files.commits[new_files.sha])
    server.add_fault(move)
    result = run("audit", "org/moving", "--format", "json")
    assert move.moved is not None and spec.sha == move.moved != first
    revision = json.loads(result.stdout)["source"]["revision"]
    # The listing resolves main once: moved during it, the new commit is read; after, the old.
    assert revision == (move.moved if target == "listing" else first)
    check_outcome(result, clean["new" if revision == move.moved else "old"], SAME)
    other = first if revision == move.moved else move.moved
    assert not any(other in r.path for r in server.records)


# -- redirects to another origin ------------------------------------------------------------


def test_cdn_redirect_to_another_host(
    hub: Any, run: Any, folders: dict[str, Path], clean: dict[str, Any]
) -> None:
    spec = RepoSpec.from_folder("org/cdn", folders["old"])
    server = hub(spec, cdn_redirect=True)
    result = run("audit", f"org/cdn@{spec.sha}", "--format", "json")
    check_outcome(result, clean["old"], SAME)
    assert server.count("GET", "/_cdn/*") == 2 * len(SHARDS)  # first and remainder reads


def test_redirect_to_a_different_port_drops_the_token(
    hub: Any, run: Any, folders: dict[str, Path], clean: dict[str, Any], tmp_path: Path
) -> None:
    """The shards answer 302 to another server (another port): followed, and the token is not
    sent there (httpx strips Authorization across origins)."""
    token = "hf_qarmTESTtokenRedirect0123456789"
    spec = RepoSpec.from_folder("org/cdn", folders["old"], token=token, private=True)
    with HubServer({spec.repo_id: spec}) as other, ExitStack() as stack:
        origin = stack.enter_context(HubServer({spec.repo_id: spec}, cdn_redirect=True))
        origin.cdn_url = lambda repo_id, sha, filename: (  # type: ignore[method-assign]
            f"http://127.0.0.1:{other.port}/_cdn/{repo_id}/{sha}/{filename}"
        )
        stack.enter_context(
            point_huggingface_hub_at(
                origin.endpoint, cache_dir=tmp_path / "hf-port", disable_token=False
            )
        )
        stack.enter_context(pytest.MonkeyPatch.context()).setenv("HF_TOKEN", token)
        result = run("audit", f"org/cdn@{spec.sha}", "--format", "json")
        close_session()
    check_outcome(result, clean["old"], SAME)
    assert token not in result.stdout + result.stderr
    redirected = [r for r in other.records if r.path.startswith("/_cdn/")]
    assert len(redirected) == 2 * len(SHARDS)
    assert not any(r.authorization for r in redirected)
    assert all(r.authorization for r in origin.records)


def test_redirect_target_failing_is_a_named_error(
    hub: Any, run: Any, folders: dict[str, Path], clean: dict[str, Any]
) -> None:
    spec = RepoSpec.from_folder("org/cdn", folders["old"])
    server = hub(spec, cdn_redirect=True)
    server.fail(503, path="/_cdn/*", count=None)
    result = run("audit", f"org/cdn@{spec.sha}", "--format", "json")
    check_outcome(result, clean["old"], ERROR, "HTTP 503")


def test_case_count_is_recorded_in_the_docs() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text()
    total = len(CASES) + 1 + len(TARGETS) + 3
    assert f"{len(CASES)} fault x request cases" in text
    assert f"{total} fault-injection tests" in text
