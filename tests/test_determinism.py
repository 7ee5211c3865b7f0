"""Two runs give byte-identical reports; nothing of the machine leaks into them; no token ever
appears in any output, error or debug traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from huggingface_hub import close_session

from conftest import MANIFESTS, REPO, llama, modelopt_file, nvfp4_modelopt, write_checkpoint
from hubserver import HubServer, RepoSpec, point_huggingface_hub_at
from qarm_audit.cli import cli
from qarm_audit.sources import hub as hub_module
from qarm_audit.sources.hub import RetryPolicy

TOKEN = "hf_qarmTESTtoken0123456789abcdefXYZ"
FORMATS = ("json", "markdown")
COMMITTED = sorted(MANIFESTS.glob("*.manifest.json"))
PRODUCER = REPO / "fixtures" / "producers" / "modelopt-nvfp4"
SHARDS = [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]


def nvfp4(module: str, out: int, inp: int) -> dict[str, Any]:
    return dict(nvfp4_modelopt(module, out, inp))


def sharded(root: Path) -> Path:
    tensors = llama(2, nvfp4)
    names = sorted(tensors)
    half = len(names) // 2
    documents = {
        "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
        "hf_quant_config.json": modelopt_file("NVFP4", ["lm_head"]),
    }
    shards = {
        SHARDS[0]: {n: tensors[n] for n in names[:half]},
        SHARDS[1]: {n: tensors[n] for n in names[half:]},
    }
    return write_checkpoint(root, shards, documents)


def invoke(*args: str, cwd: Path | None = None) -> Any:
    """The CLI in-process, from ``cwd``; stdout and stderr apart."""
    previous = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)
    finally:
        os.chdir(previous)


def leaks(text: str, *places: Path) -> list[str]:
    """Absolute paths of this machine found in ``text``."""
    roots = (*places, Path.home(), Path.cwd(), REPO)
    spellings = {s for p in roots for s in (str(p), str(p.resolve()))}
    return sorted(s for s in spellings if s not in ("/", "") and s in text)


def twice(source: str, fmt: str, *, cwd: Path | None = None) -> str:
    first = invoke("audit", source, "-f", fmt, cwd=cwd)
    second = invoke("audit", source, "-f", fmt, cwd=cwd)
    assert first.exit_code in (0, 1), first.stderr
    assert first.exit_code == second.exit_code
    assert first.stdout.encode() == second.stdout.encode()
    assert first.stderr == second.stderr
    return str(first.stdout)


# -- local sources ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("manifest", COMMITTED, ids=[m.name for m in COMMITTED])
def test_committed_manifests_give_identical_bytes_twice(
    tmp_path: Path, manifest: Path, fmt: str
) -> None:
    """From two different folders, by the same relative name: the same bytes, no path of ours."""
    outputs = []
    for where in ("a", "b"):
        folder = tmp_path / where / "work"
        folder.mkdir(parents=True)
        shutil.copy(manifest, folder / manifest.name)
        outputs.append(twice(manifest.name, fmt, cwd=folder))
    assert outputs[0] == outputs[1]
    assert leaks(outputs[0], tmp_path) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_producer_checkpoint_gives_identical_bytes(tmp_path: Path, fmt: str) -> None:
    outputs = []
    for where in ("a", "b"):
        shutil.copytree(PRODUCER, tmp_path / where / PRODUCER.name)
        outputs.append(twice(PRODUCER.name, fmt, cwd=tmp_path / where))
    assert outputs[0] == outputs[1]
    assert leaks(outputs[0], tmp_path) == []
    # by its repository path too, from the repository root: the path as typed, nothing more
    relative = str(PRODUCER.relative_to(REPO))
    text = twice(relative, fmt, cwd=REPO)
    assert leaks(text, tmp_path) == []
    assert relative in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_local_sharded_folder_gives_identical_bytes(tmp_path: Path, fmt: str) -> None:
    outputs = [twice("ckpt", fmt, cwd=sharded(tmp_path / w / "ckpt").parent) for w in ("a", "b")]
    assert outputs[0] == outputs[1]
    assert leaks(outputs[0], tmp_path) == []


def test_manifest_capture_is_byte_identical(tmp_path: Path) -> None:
    """``qarm manifest`` of the same checkpoint in two places writes the same bytes."""
    written = []
    for where in ("a", "b"):
        root = sharded(tmp_path / where / "ckpt").parent
        result = invoke("manifest", "ckpt", "-o", "out.manifest.json", cwd=root)
        assert result.exit_code == 0, result.stderr
        written.append((root / "out.manifest.json").read_bytes())
    assert written[0] == written[1]
    assert leaks(written[0].decode(), tmp_path) == []


def test_reports_carry_no_timestamp(tmp_path: Path) -> None:
    """Run a second apart: identical (a clock in the report would differ)."""
    import time

    root = sharded(tmp_path / "ckpt").parent
    first = invoke("audit", "ckpt", "-f", "json", cwd=root).stdout
    time.sleep(1.1)
    assert invoke("audit", "ckpt", "-f", "json", cwd=root).stdout == first


# -- the Hub --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import file_download
    from huggingface_hub.utils import _http as hf_http

    class Clock:
        def sleep(self, seconds: float) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            import time

            return getattr(time, name)

    monkeypatch.setattr(hub_module, "RETRY", RetryPolicy(base_delay=0.01, sleep=lambda s: None))
    monkeypatch.setattr(hf_http, "time", Clock())
    monkeypatch.setattr(file_download, "time", Clock())


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    """``hub(spec, cache=name)``: a server; each call gets a fresh Hub cache of its own."""
    stack = ExitStack()

    def start(*specs: RepoSpec, cache: str = "hf", **kwargs: Any) -> HubServer:
        server = stack.enter_context(HubServer({s.repo_id: s for s in specs}, **kwargs))
        stack.enter_context(point_huggingface_hub_at(server.endpoint, cache_dir=tmp_path / cache))
        return server

    with stack:
        yield start
    close_session()


@pytest.mark.parametrize("fmt", FORMATS)
def test_hub_audit_gives_identical_bytes(hub: Any, tmp_path: Path, fmt: str) -> None:
    """Two servers (two ports), two fresh caches, a warm cache: the same bytes each time."""
    folder = sharded(tmp_path / "src")
    outputs = []
    for cache in ("cache-a", "cache-b"):
        spec = RepoSpec.from_folder("org/det", folder)
        hub(spec, cache=cache)
        outputs.append(twice(f"org/det@{spec.sha}", fmt))  # the second run: a warm cache
        close_session()
    assert outputs[0] == outputs[1]
    assert leaks(outputs[0], tmp_path) == []
    assert "127.0.0.1" not in outputs[0]


# -- the token ------------------------------------------------------------------------------


def hub_runs(spec: RepoSpec, server: HubServer, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    """Successful and failing Hub runs, each with and without QARM_DEBUG=1."""
    pinned = f"org/gated@{spec.sha}"
    scenarios: list[tuple[str, Callable[[], None], list[str]]] = [
        ("ok-json", lambda: None, ["audit", pinned, "-f", "json"]),
        ("ok-markdown", lambda: None, ["audit", "org/gated", "-f", "markdown"]),
        ("manifest", lambda: None, ["manifest", pinned, "-o", str(tmp_path / "m.json")]),
        ("missing-repo", lambda: None, ["audit", "org/missing"]),
        ("missing-revision", lambda: None, ["audit", "org/gated@nope"]),
        ("5xx", lambda: server.fail(503, count=None), ["audit", pinned]),
        ("reset", lambda: server.reset_connection(count=None), ["audit", pinned]),
        ("range", lambda: server.wrong_content_range(path="*.safetensors"), ["audit", pinned]),
        ("ignored-range", lambda: server.ignore_range(path="*.safetensors"), ["audit", pinned]),
        ("forbidden", lambda: server.fail(403, count=None), ["audit", pinned]),
    ]
    for debug in ("0", "1"):
        for name, inject, args in scenarios:
            server.clear_faults()
            inject()
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("QARM_DEBUG", debug)
                yield f"{name}/debug={debug}", invoke(*args)
    server.clear_faults()


def test_token_never_appears_in_any_output(
    hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = RepoSpec.from_folder("org/gated", sharded(tmp_path / "src"), gated=True, token=TOKEN)
    server = hub(spec)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    codes = {}
    for name, result in hub_runs(spec, server, tmp_path):
        codes[name] = result.exit_code
        assert TOKEN not in result.stdout + result.stderr, name
        assert TOKEN[3:] not in result.stdout + result.stderr, name
        if name.endswith("debug=1") and result.exit_code == 3:
            assert "Traceback" in result.stderr, name  # the traceback is there, the token not
    assert len(codes) == 20
    assert codes["ok-json/debug=0"] == codes["ok-markdown/debug=1"] == 1
    assert {codes[f"{n}/debug=1"] for n in ("5xx", "reset", "range", "forbidden")} == {3}
    assert server.records and all(r.authorization for r in server.records)  # it was sent
    for path in (tmp_path / "hf").rglob("*"):  # and nothing qarm cached holds it
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_token_never_appears_in_a_subprocess_debug_traceback(hub: Any, tmp_path: Path) -> None:
    """The real console entry point, QARM_DEBUG=1, failing in the middle of a header read."""
    spec = RepoSpec.from_folder("org/gated", sharded(tmp_path / "src"), gated=True, token=TOKEN)
    server = hub(spec)
    server.reset_connection(path="*.safetensors", count=None)
    env = {**os.environ, "HF_TOKEN": TOKEN, "QARM_DEBUG": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    done = subprocess.run(
        [sys.executable, "-m", "qarm_audit", "audit", f"org/gated@{spec.sha}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" in done.stderr and "qarm: error:" in done.stderr
    assert TOKEN not in done.stdout + done.stderr


def test_the_order_of_findings_does_not_depend_on_string_hashes() -> None:
    """Findings alike but for their message (the seed has some) come in one order whatever
    the process's hash seed: each run is a new process, as each CI job is."""
    seed = REPO / "fixtures" / "manifests" / "seed-nvfp4-w4a4.manifest.json"
    outputs = set()
    for hash_seed in ("1", "2", "3", "4", "5", "6"):
        done = subprocess.run(
            [sys.executable, "-m", "qarm_audit", "audit", str(seed), "-f", "json"],
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
