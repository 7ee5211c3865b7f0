"""Folder benchmark: ``qarm audit FOLDER -f json`` as a whole process, on real checkpoint folders,
against the orjson parse floor of the same headers and index, alternated in one run.

    python bench/folder_bench.py                 # 985 791 tensors / 198 shards (~15 min here)
    python bench/folder_bench.py --quick         # small sizes, for a look
    python bench/folder_bench.py --keep /tmp/f   # keep (and reuse) the generated folders

The folders are written by ``bench/synthetic.py --folder``: a declaration, the index as
``transformers`` writes it, and 198 ``.safetensors`` shards whose headers are laid out as the
safetensors library writes them and whose tensor data is a sparse hole (tens of TB apparent,
a few hundred MB on disk).

Cases (each qarm run alternated with a floor run of the same folder):
- ``modelopt``: DeepSeek-like MoE, ModelOpt MIXED_PRECISION with 246 168 ``quantized_layers``;
- ``ct``: the same tensors declared by compressed-tensors with 500 ``re:`` targets and ignores
  led by ``.*`` (``re:.*layers\\.17\\.mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$``);
- ``ct-10x``: the same with 5 000 patterns (flatness);
- ``modelopt-half``: half the experts, 493 k tensors (linearity);
- ``modelopt-hub-index``: the ``modelopt`` checkpoint with its index as huggingface_hub's
  ``save_torch_state_dict`` writes it (indent 2, the keys in model order, not sorted);
- ``sound`` / ``refused``: 61 440 expert modules, each of its own shape, sound or all refused.

The floor: a process that reads every shard's 8-byte prefix and header, parses each header and
the index with ``orjson.loads``, and exits. Reported: wall seconds, CPU seconds (user + system,
of the child alone) and peak RSS, the median of ``--repeat`` runs each; and the CPU ratio of
each floor run to the qarm run right after it (median, min-max), which shows a machine whose
speed drifted during the run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import installed  # noqa: E402
import machine  # noqa: E402

ENV = installed.environment({**os.environ, "PYTHONPATH": str(ROOT / "src")})

FLOOR = """
import orjson, os, struct, sys
root = sys.argv[1]
with open(os.path.join(root, "model.safetensors.index.json"), "rb") as handle:
    index = orjson.loads(handle.read())
for file in dict.fromkeys(index["weight_map"].values()):
    with open(os.path.join(root, file), "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        orjson.loads(handle.read(length))
"""

FLOOR_KEPT = """
import gc, orjson, os, struct, sys
gc.disable()
root = sys.argv[1]
with open(os.path.join(root, "model.safetensors.index.json"), "rb") as handle:
    index = orjson.loads(handle.read())
kept = []
for file in dict.fromkeys(index["weight_map"].values()):
    with open(os.path.join(root, file), "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        kept.append(orjson.loads(handle.read(length)))
os._exit(0)
"""


def measure(command: list[str], exits: tuple[int, ...] = (0, 1)) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS (MiB) of one child process, which must exit with
    one of ``exits``."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    error = child.stderr.read().decode() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in exits:
        raise SystemExit(f"{command} exited {child.returncode}: {error}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss": usage.ru_maxrss / 1024,
        "sys": usage.ru_stime,
        "faults": usage.ru_minflt,
        "exit": child.returncode,
    }


def qarm(folder: Path) -> list[str]:
    return [sys.executable, "-m", "qarm_audit", "audit", str(folder), "-f", "json"]


def floor(folder: Path, script: str = FLOOR) -> list[str]:
    return [sys.executable, "-c", script, str(folder)]


def generate(folder: Path, shape: str, *options: str) -> None:
    if (folder / "model.safetensors.index.json").exists():
        return
    command = [sys.executable, str(ROOT / "bench" / "synthetic.py"), shape, "-o", str(folder)]
    subprocess.run([*command, *options], check=True, env=ENV, capture_output=True)


def declared_again(source: Path, folder: Path, shape: str, *options: str) -> None:
    """``folder``: the shards and index of ``source`` (hard links), another declaration."""
    if (folder / "model.safetensors.index.json").exists():
        return
    scratch = folder.with_name(folder.name + ".scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    generate(scratch, shape, *options)  # a small price: the shards are holes
    folder.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.suffix == ".safetensors" or path.name.endswith(".index.json"):
            os.link(path, folder / path.name)
    shutil.copy(scratch / "config.json", folder / "config.json")
    shutil.rmtree(scratch)


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def by_pair(qarm_runs: list[dict[str, float]], floor_runs: list[dict[str, float]]) -> str:
    """The CPU ratio of each floor run and the qarm run right after it: median (min-max). A
    machine whose speed drifts during the run shows here as a wide range."""
    ratios = [q["cpu"] / f["cpu"] for q, f in zip(qarm_runs, floor_runs, strict=True)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="folder for the checkpoints (kept, reused)")
    parser.add_argument("--only", action="append", help="run only these cases")
    parser.add_argument(
        "--kept-floor", action="store_true", help="also a floor that keeps what it parsed"
    )
    args = parser.parse_args()
    big, half, unlike = (
        ("folder-quick", "tiny", "unlike-quick")
        if args.quick
        else ("folder", "folder-half", "unlike")
    )
    base = args.keep or Path(tempfile.mkdtemp(prefix="qarm-folders-"))
    ct = ("--family", "compressed-tensors", "--style", "dotstar")
    folders = {
        "modelopt": (base / f"{big}-modelopt", big, ("--folder", "moe")),
        "ct": (base / f"{big}-ct", big, ("--folder", "moe", *ct, "--patterns", "500")),
        "modelopt-half": (base / f"{half}-modelopt", half, ("--folder", "moe")),
        "modelopt-hub-index": (
            base / f"{big}-modelopt-hub-index",
            big,
            ("--folder", "moe", "--index", "huggingface_hub"),
        ),
        "sound": (base / f"{unlike}-sound", unlike, ("--folder", "sound")),
        "refused": (base / f"{unlike}-refused", unlike, ("--folder", "refused")),
    }
    cases = ["modelopt", "ct", "ct-10x", "modelopt-half", "modelopt-hub-index", "sound", "refused"]
    if args.only:
        cases = [c for c in cases if c in args.only]
    for case in cases:
        if case == "ct-10x":
            source = folders["ct"][0]
            generate(source, *folders["ct"][1:2], *folders["ct"][2])
            declared_again(source, base / f"{big}-ct-10x", big, "--folder", "moe", *ct,
                           "--patterns", "5000")  # fmt: skip
            folders[case] = (base / f"{big}-ct-10x", big, ())
        else:
            folder, shape, options = folders[case]
            generate(folder, shape, *options)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    if cases:  # every module either side imports, in the bytecode cache (installed.py)
        installed.warm(floor(folders[cases[0]][0]), ENV)
        installed.warm(qarm(folders[cases[0]][0]), ENV)
    for _ in range(args.repeat):
        for case in cases:
            folder = folders[case][0]
            runs = results.setdefault(case, {"qarm": [], "floor": [], "kept": []})
            runs["floor"].append(measure(floor(folder)))
            if args.kept_floor:
                runs["kept"].append(measure(floor(folder, FLOOR_KEPT)))
            runs["qarm"].append(measure(qarm(folder)))
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {machine.describe()}")
    print("| case | qarm wall s | floor wall s | wall ratio | qarm CPU s | floor CPU s | "
          "CPU ratio | CPU ratio by pair | qarm peak RSS MiB | exit |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        q, f = results[case]["qarm"], results[case]["floor"]
        print(
            f"| {case} | {median(q, 'wall'):.2f} | {median(f, 'wall'):.2f} | "
            f"{median(q, 'wall') / median(f, 'wall'):.2f} | {median(q, 'cpu'):.2f} | "
            f"{median(f, 'cpu'):.2f} | {median(q, 'cpu') / median(f, 'cpu'):.2f} | "
            f"{by_pair(q, f)} | {max(r['rss'] for r in q):.0f} | {int(q[0]['exit'])} |"
        )
    if args.kept_floor:
        print(
            "\n| case | qarm wall s | kept floor wall s | wall ratio to kept | qarm system CPU s "
            "| kept floor system CPU s | floor system CPU s | qarm minor faults "
            "| kept floor minor faults | floor minor faults | kept floor peak RSS MiB |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for case in cases:
            q, k, f = (results[case][side] for side in ("qarm", "kept", "floor"))
            print(
                f"| {case} | {median(q, 'wall'):.2f} | {median(k, 'wall'):.2f} | "
                f"{median(q, 'wall') / median(k, 'wall'):.2f} | {median(q, 'sys'):.2f} | "
                f"{median(k, 'sys'):.2f} | {median(f, 'sys'):.2f} | {median(q, 'faults'):.0f} | "
                f"{median(k, 'faults'):.0f} | {median(f, 'faults'):.0f} | "
                f"{max(r['rss'] for r in k):.0f} |"
            )
    derived = []
    if {"ct", "ct-10x"} <= set(cases):
        derived.append(("ct-10x / ct (10x patterns)", "ct-10x", "ct"))
    if {"modelopt", "modelopt-half"} <= set(cases):
        derived.append(("modelopt / modelopt-half (2x tensors)", "modelopt", "modelopt-half"))
    if {"modelopt", "modelopt-hub-index"} <= set(cases):
        derived.append(
            ("modelopt-hub-index / modelopt (index order)", "modelopt-hub-index", "modelopt")
        )
    if {"sound", "refused"} <= set(cases):
        derived.append(("refused / sound (all refused, unlike)", "refused", "sound"))
    for label, a, b in derived:
        qa, qb = results[a]["qarm"], results[b]["qarm"]
        print(
            f"\n{label}: wall {median(qa, 'wall') / median(qb, 'wall'):.2f}x, "
            f"CPU {median(qa, 'cpu') / median(qb, 'cpu'):.2f}x"
        )
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
