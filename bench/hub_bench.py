"""Benchmark: ``qarm audit owner/name@sha`` against huggingface_hub's own header reader.

A DeepSeek-V3-0324-shaped NVFP4 checkpoint (61 layers, 256 routed experts, ModelOpt NVFP4 with
the real ``hf_quant_config.json`` from tests/data/realworld) is split into 163 shards and served
by ``tests/hubserver.HubServer`` with an injected latency per request. Every shard is a
``SparseFile``: its header is real, its tensor data is zeros that are never materialised.

Measured in the same run, each with a fresh Hub cache and a fresh connection pool:

* qarm: ``open_source("owner/name@sha")`` then ``audit(checkpoint)`` (the whole audit),
* baseline: ``HfApi(endpoint=...).get_safetensors_metadata(repo, revision=sha)`` alone.

For each: wall time, response-body bytes the server sent, requests, and round trips (the
longest chain of requests in which each starts after the previous one's answer arrived).

    python bench/hub_bench.py                       # 163 shards, 50 ms per request
    python bench/hub_bench.py --latency 0 --repeat 3
    python bench/hub_bench.py --layers 4 --experts 8 --shards 6   # a quick look

Not run by CI (tests/test_hub.py runs it once at a tiny size so that it keeps working).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

import httpx2  # noqa: E402
from huggingface_hub import HfApi, close_session, get_session  # noqa: E402
from huggingface_hub.utils import (  # noqa: E402
    are_progress_bars_disabled,
    disable_progress_bars,
    enable_progress_bars,
)

import hubserver  # noqa: E402
from hubserver import HubServer, RepoSpec, SparseFile, point_huggingface_hub_at  # noqa: E402
from qarm_audit.commands.audit import audit  # noqa: E402
from qarm_audit.sources import hub as qarm_hub  # noqa: E402
from qarm_audit.sources import open_source  # noqa: E402
from qarm_audit.sources.header import DTYPE_BITS  # noqa: E402

REPO = "bench/deepseek-v3-nvfp4"
DECLARATION = ROOT / "tests/data/realworld/aic-deepseek-v3-0324-nvfp4/hf_quant_config.json"
HIDDEN, MOE_INTER, DENSE_INTER, VOCAB = 7168, 2048, 18432, 129280

Spec = tuple[str, str, tuple[int, ...]]


# -- the checkpoint --------------------------------------------------------------------------


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * DTYPE_BITS[dtype] // 8


def _nvfp4(module: str, out: int, inp: int) -> list[Spec]:
    return [
        (f"{module}.weight", "U8", (out, inp // 2)),
        (f"{module}.weight_scale", "F8_E4M3", (out, inp // 16)),
        (f"{module}.weight_scale_2", "F32", ()),
        (f"{module}.input_scale", "F32", ()),
    ]


def _bf16(module: str, *shape: int) -> list[Spec]:
    return [(f"{module}.weight", "BF16", shape)]


def tensors(layers: int = 61, experts: int = 256, dense: int = 3) -> list[Spec]:
    """DeepSeek-V3 names and shapes in NVFP4: experts and dense MLPs quantized, attention,
    norms, router, embeddings and the MTP layer (the last one) in BF16."""
    out: list[Spec] = _bf16("model.embed_tokens", VOCAB, HIDDEN)
    for i in range(layers + 1):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        out += _bf16(f"{p}.input_layernorm", HIDDEN) + _bf16(
            f"{p}.post_attention_layernorm", HIDDEN
        )
        out += _bf16(f"{a}.q_a_proj", 1536, HIDDEN) + _bf16(f"{a}.q_a_layernorm", 1536)
        out += _bf16(f"{a}.q_b_proj", 24576, 1536) + _bf16(f"{a}.kv_a_layernorm", 512)
        out += _bf16(f"{a}.kv_a_proj_with_mqa", 576, HIDDEN) + _bf16(f"{a}.kv_b_proj", 32768, 512)
        out += _bf16(f"{a}.o_proj", HIDDEN, 16384)
        mtp = i == layers

        def linear(module: str, o: int, n: int, mtp: bool = mtp) -> list[Spec]:
            return _bf16(module, o, n) if mtp else _nvfp4(module, o, n)

        if i < dense:
            for proj, o, n in (
                ("gate_proj", DENSE_INTER, HIDDEN),
                ("up_proj", DENSE_INTER, HIDDEN),
                ("down_proj", HIDDEN, DENSE_INTER),
            ):
                out += linear(f"{p}.mlp.{proj}", o, n)
            continue
        out += _bf16(f"{p}.mlp.gate", experts, HIDDEN)
        out.append((f"{p}.mlp.gate.e_score_correction_bias", "F32", (experts,)))
        projections = (
            ("gate_proj", MOE_INTER, HIDDEN),
            ("up_proj", MOE_INTER, HIDDEN),
            ("down_proj", HIDDEN, MOE_INTER),
        )
        for e in range(experts):
            for proj, o, n in projections:
                out += linear(f"{p}.mlp.experts.{e}.{proj}", o, n)
        for proj, o, n in projections:
            out += linear(f"{p}.mlp.shared_experts.{proj}", o, n)
        if mtp:
            out += _bf16(f"{p}.eh_proj", HIDDEN, 2 * HIDDEN) + _bf16(f"{p}.enorm", HIDDEN)
            out += _bf16(f"{p}.hnorm", HIDDEN) + _bf16(f"{p}.shared_head.head", VOCAB, HIDDEN)
            out += _bf16(f"{p}.shared_head.norm", HIDDEN)
    return out + _bf16("model.norm", HIDDEN) + _bf16("lm_head", VOCAB, HIDDEN)


def split(specs: list[Spec], count: int) -> list[list[Spec]]:
    """Pack tensors in model order into ``count`` shards of at most the same byte size, as
    ``save_pretrained(max_shard_size=...)`` does (the smallest size that gives ``count``)."""

    def pack(cap: int) -> list[list[Spec]]:
        shards: list[list[Spec]] = [[]]
        size = 0
        for spec in specs:
            n = _nbytes(spec[1], spec[2])
            if shards[-1] and size + n > cap:
                shards.append([])
                size = 0
            shards[-1].append(spec)
            size += n
        return shards

    lo, hi = 1, sum(_nbytes(s[1], s[2]) for s in specs)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(pack(mid)) > count:
            lo = mid + 1
        else:
            hi = mid
    return pack(lo)


def header(specs: list[Spec]) -> tuple[bytes, int]:
    """(prefix + header, data bytes) as the safetensors library lays a file out: compact JSON,
    tensors by descending dtype width then name, padded with spaces to 8 bytes."""
    document: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in sorted(specs, key=lambda s: (-DTYPE_BITS[s[1]], s[0])):
        n = _nbytes(dtype, shape)
        document[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + n],
        }
        offset += n
    raw = json.dumps(document, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, offset


@dataclass
class Checkpoint:
    files: dict[str, Any]
    header_bytes: int
    shards: int
    tensors: int
    header_lengths: list[int] = field(default_factory=list)


def build(shards: int, layers: int, experts: int) -> Checkpoint:
    specs = tensors(layers, experts, dense=min(3, layers))
    parts = split(specs, shards)
    files: dict[str, Any] = {}
    weight_map: dict[str, str] = {}
    header_bytes = 0
    lengths = []
    total = 0
    for i, part in enumerate(parts, 1):
        name = f"model-{i:05d}-of-{len(parts):06d}.safetensors"
        head, data = header(part)
        files[name] = SparseFile(head, len(head) + data)
        header_bytes += len(head)
        lengths.append(len(head) - 8)
        total += data
        weight_map.update((spec[0], name) for spec in part)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode()
    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": HIDDEN,
        "num_hidden_layers": layers,
        "n_routed_experts": experts,
        "moe_intermediate_size": MOE_INTER,
    }
    files["config.json"] = json.dumps(config, indent=2).encode()
    files["hf_quant_config.json"] = DECLARATION.read_bytes()
    return Checkpoint(files, header_bytes, len(parts), len(specs), lengths)


# -- measuring -------------------------------------------------------------------------------


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

    def on_request(self, request: httpx2.Request) -> None:
        thread = self._thread()
        with self.lock:
            self.starts[id(request)] = (thread, time.perf_counter())

    def on_response(self, response: httpx2.Response) -> None:
        now = time.perf_counter()
        with self.lock:
            begun = self.starts.pop(id(response.request), None)
            if begun is not None:
                self.spans.append((begun[1], now, begun[0]))

    def round_trips(self) -> int:
        """Depth of the request dependency chain: requests made one after another by a thread
        are sequential, and a thread's first request comes after every request that was
        answered before that thread started (the work it was handed was waiting on them)."""
        spans = sorted(self.spans)
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


@contextmanager
def timeline() -> Iterator[Timeline]:
    close_session()
    client = get_session()
    line = Timeline()
    hooks = client.event_hooks
    saved = {k: list(v) for k, v in hooks.items()}
    client.event_hooks = {
        "request": [*saved.get("request", []), line.on_request],
        "response": [*saved.get("response", []), line.on_response],
    }
    try:
        yield line
    finally:
        close_session()


@dataclass
class Run:
    seconds: float
    bytes: int
    requests: int
    round_trips: int
    extra: dict[str, float] = field(default_factory=dict)


class Server:
    """The checkpoint behind a HubServer, in a child process (the Hub is not in the client's
    process: its CPU must not compete with the client's) or, for a quick test, in this one."""

    def __init__(self, shards: int, layers: int, experts: int, latency: float, in_process: bool):
        self.in_process = in_process
        if in_process:
            self._local = _Served(shards, layers, experts, latency)
            self.info = self._local.info
        else:
            ctx = multiprocessing.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(
                target=_serve, args=(child, shards, layers, experts, latency), daemon=True
            )
            self._proc.start()
            self.info = self._conn.recv()

    def call(self, command: str) -> Any:
        if self.in_process:
            return self._local.call(command)
        self._conn.send(command)
        return self._conn.recv()

    def close(self) -> None:
        if self.in_process:
            self._local.server.stop()
            self._local.restore()
        else:
            self._conn.send("stop")
            self._proc.join(timeout=10)


class _Served:
    def __init__(self, shards: int, layers: int, experts: int, latency: float) -> None:
        started = time.perf_counter()
        checkpoint = build(shards, layers, experts)
        spec = RepoSpec.from_files(REPO, checkpoint.files)
        self.restore = _memoize_parameter_counts()
        self.server = HubServer({REPO: spec}, latency=latency).start()
        # The first model_info counts the parameters of every shard; later ones reuse it.
        with urllib.request.urlopen(f"{self.server.endpoint}/api/models/{REPO}") as answer:
            answer.read()
        self.server.reset_counters()
        self.info = {
            "endpoint": self.server.endpoint,
            "sha": spec.sha,
            "shards": checkpoint.shards,
            "tensors": checkpoint.tensors,
            "header_bytes": checkpoint.header_bytes,
            "header_lengths": checkpoint.header_lengths,
            "shard_files": [f for f in checkpoint.files if f.endswith(".safetensors")],
            "build_s": time.perf_counter() - started,
        }

    def call(self, command: str) -> Any:
        if command == "reset":
            self.server.reset_counters()
            return None
        return {
            "bytes": self.server.bytes_sent,
            "requests": self.server.request_count,
            "by_path": dict(self.server.bytes_by_path),
            "shard_gets": self.server.count("GET", "*.safetensors"),
        }


def _memoize_parameter_counts() -> Callable[[], None]:
    """The Hub answers ``model_info`` from its database; the test server re-parses every shard
    header for the ``safetensors`` parameter count on each call (a second for this checkpoint).
    Count once per file instead, so that the listing costs what it costs on the Hub."""
    counts: dict[int, Any] = {}
    original = hubserver._safetensors_parameters

    def cached(blob: Any) -> Any:
        key = id(blob.source)
        if key not in counts:
            counts[key] = original(blob)
        return counts[key]

    hubserver._safetensors_parameters = cached

    def restore() -> None:
        hubserver._safetensors_parameters = original

    return restore


def _serve(conn: Any, shards: int, layers: int, experts: int, latency: float) -> None:
    served = _Served(shards, layers, experts, latency)
    conn.send(served.info)
    try:
        while (command := conn.recv()) != "stop":
            conn.send(served.call(command))
    finally:
        served.server.stop()


def run_qarm(server: Server, cache: Path) -> Run:
    info = server.info
    shard_paths = {f"/{REPO}/resolve/{info['sha']}/{f}" for f in info["shard_files"]}
    with point_huggingface_hub_at(info["endpoint"], cache_dir=cache), timeline() as line:
        server.call("reset")
        start = time.perf_counter()
        checkpoint = open_source(f"{REPO}@{info['sha']}")
        fetched = time.perf_counter()
        report = audit(checkpoint)
        end = time.perf_counter()
    stats = server.call("stats")
    documents = sum(n for p, n in stats["by_path"].items() if p not in shard_paths)
    header_reads = sum(n for p, n in stats["by_path"].items() if p in shard_paths)
    if report.totals.shards != len(shard_paths):
        raise SystemExit(f"qarm audited {report.totals.shards} shards of {len(shard_paths)}")
    return Run(
        end - start,
        stats["bytes"],
        stats["requests"],
        line.round_trips(),
        {
            "fetch_seconds": fetched - start,
            "compute_seconds": end - fetched,
            "document_bytes": documents,
            "header_read_bytes": header_reads,
            "shard_requests": stats["shard_gets"],
            "verdict": report.verdict,
        },
    )


def run_baseline(server: Server, cache: Path) -> Run:
    info = server.info
    with point_huggingface_hub_at(info["endpoint"], cache_dir=cache), timeline() as line:
        server.call("reset")
        start = time.perf_counter()
        api = HfApi(endpoint=info["endpoint"])
        meta = api.get_safetensors_metadata(REPO, revision=info["sha"])
        end = time.perf_counter()
    stats = server.call("stats")
    tensors = sum(len(f.tensors) for f in meta.files_metadata.values())
    if tensors != info["tensors"]:
        raise SystemExit(f"huggingface_hub read {tensors} tensors of {info['tensors']}")
    return Run(end - start, stats["bytes"], stats["requests"], line.round_trips())


def bench(
    *,
    shards: int = 163,
    layers: int = 61,
    experts: int = 256,
    latency: float = 0.05,
    repeat: int = 1,
    in_process: bool = False,
    out: Any = sys.stdout,
) -> dict[str, Any]:
    bars_were_off = are_progress_bars_disabled()
    disable_progress_bars()
    qarm_runs: list[Run] = []
    base_runs: list[Run] = []
    server = Server(shards, layers, experts, latency, in_process)
    try:
        info = server.info
        with tempfile.TemporaryDirectory(prefix="qarm-hub-bench-") as tmp:
            for i in range(repeat):
                qarm_runs.append(run_qarm(server, Path(tmp) / f"qarm-{i}"))
                base_runs.append(run_baseline(server, Path(tmp) / f"hf-{i}"))
    finally:
        server.close()
        if not bars_were_off:
            enable_progress_bars()
    q = min(qarm_runs, key=lambda r: r.seconds)
    b = min(base_runs, key=lambda r: r.seconds)
    workers = qarm_hub.WORKERS
    documents = 3  # config.json, hf_quant_config.json, model.safetensors.index.json
    floor = documents + math.ceil(info["shards"] / workers)
    needed = info["header_bytes"] + int(q.extra["document_bytes"])
    lengths = info["header_lengths"]
    result = {
        "shards": info["shards"],
        "tensors": info["tensors"],
        "header_bytes": info["header_bytes"],
        "header_length_min_median_max": [
            min(lengths),
            int(statistics.median(lengths)),
            max(lengths),
        ],
        "headers_over_100kB": sum(n + 8 > 100_000 for n in lengths),
        "latency_s": latency,
        "cpus": os.cpu_count(),
        "workers": workers,
        "server": "this process" if in_process else "child process",
        "build_s": info["build_s"],
        "qarm": q.__dict__,
        "baseline": b.__dict__,
        "all_seconds": {
            "qarm": [r.seconds for r in qarm_runs],
            "baseline": [r.seconds for r in base_runs],
        },
        "time_ratio": q.seconds / b.seconds,
        "fetch_time_ratio": q.extra["fetch_seconds"] / b.seconds,
        "bytes_ratio": q.bytes / needed,
        "bytes_needed": needed,
        "round_trip_floor": floor,
    }
    _table(result, out)
    return result


def _table(r: dict[str, Any], out: Any) -> None:
    q, b = r["qarm"], r["baseline"]
    lo, mid, hi = r["header_length_min_median_max"]
    print(
        f"{r['shards']} shards, {r['tensors']} tensors, headers {lo}/{mid}/{hi} bytes "
        f"(min/median/max; {r['headers_over_100kB']} over 100 kB), {r['header_bytes']} header "
        f"bytes in all; {r['latency_s'] * 1000:g} ms per request; {r['cpus']} CPUs; "
        f"qarm workers {r['workers']}; server in {r['server']}; qarm verdict "
        f"{r['qarm']['extra']['verdict']}",
        file=out,
    )
    rows = [
        ("wall time (s)", f"{q['seconds']:.3f}", f"{b['seconds']:.3f}", r["time_ratio"]),
        (
            "  qarm fetch only (s)",
            f"{q['extra']['fetch_seconds']:.3f}",
            f"{b['seconds']:.3f}",
            r["fetch_time_ratio"],
        ),
        ("  qarm audit compute (s)", f"{q['extra']['compute_seconds']:.3f}", "", None),
        ("bytes received", str(q["bytes"]), str(b["bytes"]), q["bytes"] / b["bytes"]),
        ("requests", str(q["requests"]), str(b["requests"]), q["requests"] / b["requests"]),
        (
            "round trips",
            str(q["round_trips"]),
            str(b["round_trips"]),
            q["round_trips"] / b["round_trips"],
        ),
    ]
    print(f"{'':26}{'qarm':>12}{'huggingface_hub':>18}{'qarm/hf':>10}", file=out)
    for label, a, c, ratio in rows:
        text = f"{ratio:.2f}" if ratio is not None else ""
        print(f"{label:26}{a:>12}{c:>18}{text:>10}", file=out)
    needed = r["bytes_needed"]
    print("targets:", file=out)
    print(
        f"  time   qarm whole audit / hf call = {r['time_ratio']:.2f} (target <= 0.50: "
        f"{'met' if r['time_ratio'] <= 0.5 else 'MISSED'}); fetch only {r['fetch_time_ratio']:.2f}",
        file=out,
    )
    print(
        f"  bytes  {q['bytes']} / (headers {r['header_bytes']} + listing and documents "
        f"{q['extra']['document_bytes']} = {needed}) = {r['bytes_ratio']:.4f} (target <= 1.05: "
        f"{'met' if r['bytes_ratio'] <= 1.05 else 'MISSED'})",
        file=out,
    )
    limit = r["round_trip_floor"] + 3
    print(
        f"  round trips {q['round_trips']} (floor {r['round_trip_floor']} = 3 documents + "
        f"ceil({r['shards']}/{r['workers']}); target <= {limit}: "
        f"{'met' if q['round_trips'] <= limit else 'MISSED'})",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=163)
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--experts", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the fastest is shown")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument(
        "--in-process", action="store_true", help="run the server in this process (quicker start)"
    )
    args = parser.parse_args(argv)
    result = bench(
        shards=args.shards,
        layers=args.layers,
        experts=args.experts,
        latency=args.latency,
        repeat=args.repeat,
        in_process=args.in_process,
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
