"""What the Hub tests share: a server started per test, and sleeps that are recorded, not slept."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import close_session
from huggingface_hub import constants as hf_constants

from hubserver import HubServer, RepoSpec, point_huggingface_hub_at
from qarm_audit.sources import hub as hub_module
from qarm_audit.sources.hub import RetryPolicy


class Sleeps:
    """Stands in for ``time`` inside huggingface_hub, and for qarm's retry sleep: records."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.calls.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def record_sleeps(
    monkeypatch: pytest.MonkeyPatch, *, qarm: bool = True, timeout: float | None = None
) -> Sleeps:
    """No backoff is slept, huggingface_hub's or (with ``qarm``) qarm's own; ``timeout``
    shortens every request's, hf_hub_download's GET included (it reads its own constant, see
    docs/reliability.md)."""
    from huggingface_hub import file_download
    from huggingface_hub.utils import _http as hf_http

    recorder = Sleeps()
    if qarm:
        policy = RetryPolicy(base_delay=0.01, sleep=recorder.sleep)
        if timeout is not None:
            policy = RetryPolicy(base_delay=0.01, sleep=recorder.sleep, timeout=timeout)
            monkeypatch.setattr(hf_constants, "HF_HUB_DOWNLOAD_TIMEOUT", timeout)
        monkeypatch.setattr(hub_module, "RETRY", policy)
    monkeypatch.setattr(hf_http, "time", recorder)
    monkeypatch.setattr(file_download, "time", recorder)
    return recorder


def serving(tmp_path: Path) -> Iterator[Callable[..., HubServer]]:
    """For a fixture: ``start(*specs, **server_kwargs)`` starts a HubServer and points
    huggingface_hub at it (cache under ``tmp_path``); everything stops after the test."""
    stack = ExitStack()

    def start(*specs: RepoSpec, **kwargs: Any) -> HubServer:
        server = stack.enter_context(HubServer({s.repo_id: s for s in specs}, **kwargs))
        stack.enter_context(point_huggingface_hub_at(server.endpoint, cache_dir=tmp_path / "hf"))
        return server

    with stack:
        yield start
    close_session()  # drop pooled keep-alive connections to the stopped server
