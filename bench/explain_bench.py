"""Explain benchmark: ``qarm explain FOLDER NAME`` for a name the checkpoint holds and for one
it does not (a typo), as a whole process, against ``qarm audit FOLDER -f json`` of the same
folder, alternated in one run. A name it holds is explained from the audit's own parts, so it
should cost about the audit; an unknown name exits 2 with the closest names, and finding them
should cost no more than the audit the name was meant for.

    python bench/explain_bench.py --keep /tmp/perf-bench   # reuses folder_bench's MoE folder
    python bench/explain_bench.py --quick                  # small sizes, for a look

Cases:
- ``found``: the MoE folder below and ``model.layers.3.mlp.experts.7.gate_proj``, which it holds;
- ``moe``: the 985 791-tensor DeepSeek-like folder of ``bench/folder_bench.py`` (ModelOpt
  MIXED_PRECISION), and ``model.layers.3.mlp.experts.7.gate_prj``: over a million names are
  alike, and all of them score within a few points of each other;
- ``long``: 300 modules whose names are 6 000 characters long, each a few dozen characters
  from the others, and a query as long (a similarity whose cost grows with the product of the
  two lengths took seconds per hundred names here).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import folder_bench
import installed
import machine

TYPO = "model.layers.3.mlp.experts.7.gate_prj"
FOUND = "model.layers.3.mlp.experts.7.gate_proj"


def long_names(folder: Path) -> str:
    """Write the ``long`` checkpoint with the safetensors library; return its query."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = random.Random(1)
    base = "".join(rng.choice("abcdefghij.") for _ in range(6000))
    tensors = {}
    for i in range(300):
        name = list(base)
        for _ in range(50):
            name[rng.randrange(len(name))] = rng.choice("klmnop")
        tensors[f"m{i}.{''.join(name)}.weight"] = np.zeros((4, 4), dtype=np.float16)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return f"m7.{base[:-3]}zzz"


def explain(folder: Path, name: str) -> list[str]:
    return [sys.executable, "-m", "qarm_audit", "explain", str(folder), name]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="folder for the checkpoints (kept, reused)")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="qarm-explain-"))
    moe = base / ("folder-quick-modelopt" if args.quick else "folder-modelopt")
    folder_bench.generate(moe, "tiny" if args.quick else "folder", "--folder", "moe")
    long = base / "explain-long-names"
    query = long_names(long)
    # each case: folder, name, the exit explain must give (0: explained, 2: not found)
    cases = {"found": (moe, FOUND, 0), "moe": (moe, TYPO, 2), "long": (long, query, 2)}
    for folder, name, _exit in cases.values():
        installed.warm(explain(folder, name), folder_bench.ENV)
        installed.warm(folder_bench.qarm(folder), folder_bench.ENV)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    for _ in range(args.repeat):
        for case, (folder, name, code) in cases.items():
            runs = results.setdefault(case, {"explain": [], "audit": []})
            runs["audit"].append(folder_bench.measure(folder_bench.qarm(folder)))
            runs["explain"].append(folder_bench.measure(explain(folder, name), exits=(code,)))
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {machine.describe()}")
    print("| case | explain wall s | audit wall s | explain CPU s | audit CPU s | CPU ratio | "
          "CPU ratio by pair |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        e, a = results[case]["explain"], results[case]["audit"]
        cpu_e, cpu_a = folder_bench.median(e, "cpu"), folder_bench.median(a, "cpu")
        print(
            f"| {case} | {folder_bench.median(e, 'wall'):.2f} | "
            f"{folder_bench.median(a, 'wall'):.2f} | {cpu_e:.2f} | {cpu_a:.2f} | "
            f"{cpu_e / cpu_a:.2f} | {folder_bench.by_pair(e, a)} |"
        )
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
