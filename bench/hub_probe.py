"""Run a Python module or script as its own process would, recording every request huggingface_hub's
session makes (client side: thread, start, answer), for hub_bench.py's round-trip count.

    python bench/hub_probe.py SPANS.json -m qarm_audit audit owner/name@sha -f json
    python bench/hub_probe.py SPANS.json -c "CODE" ARG...

Nothing of the program is changed: the session's event hooks only note the time.
"""

from __future__ import annotations

import atexit
import json
import runpy
import sys
import threading
import time
from typing import Any


class Timeline:
    """Client-side (thread, start, answer) of every request through huggingface_hub's session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.local = threading.local()
        self.threads = 0
        self.starts: dict[int, tuple[int, float]] = {}
        self.spans: list[tuple[float, float, int]] = []

    def _thread(self) -> int:
        if not hasattr(self.local, "id"):
            with self.lock:
                self.threads += 1
                self.local.id = self.threads
        return int(self.local.id)

    def on_request(self, request: Any) -> None:
        thread = self._thread()
        with self.lock:
            self.starts[id(request)] = (thread, time.perf_counter())

    def on_response(self, response: Any) -> None:
        now = time.perf_counter()
        with self.lock:
            begun = self.starts.pop(id(response.request), None)
            if begun is not None:
                self.spans.append((begun[1], now, begun[0]))


def round_trips(spans: list[tuple[float, float, int]]) -> int:
    """Depth of the request dependency chain: requests made one after another by a thread are
    sequential, and a thread's first request comes after every request that was answered before
    that thread started (the work it was handed was waiting on them)."""
    spans = sorted(spans)
    first: dict[int, float] = {}
    for start, _, thread in spans:
        first.setdefault(thread, start)
    depth: list[int] = []
    last: dict[int, int] = {}
    for i, (_start, _, thread) in enumerate(spans):
        base = depth[last[thread]] if thread in last else 0
        for j in range(i):
            if spans[j][2] != thread and spans[j][1] <= first[thread]:
                base = max(base, depth[j])
        depth.append(base + 1)
        last[thread] = i
    return max(depth, default=0)


def main() -> None:
    out, mode, target, *args = sys.argv[1:]
    from huggingface_hub import get_session

    line = Timeline()
    hooks = get_session().event_hooks
    hooks["request"] = [*hooks.get("request", []), line.on_request]
    hooks["response"] = [*hooks.get("response", []), line.on_response]

    def write() -> None:
        with open(out, "w") as handle:
            json.dump({"round_trips": round_trips(line.spans), "requests": len(line.spans)}, handle)

    atexit.register(write)
    if mode == "-m":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *args]
        exec(compile(target, "<baseline>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    main()
