"""Scale benchmark: a million-tensor MoE audit, time linear in names and flat in patterns.

    python bench/scale_bench.py                  # everything (several minutes: the baseline)
    python bench/scale_bench.py --quick          # small sizes, for a look

Measured, in one run on this machine:
1. Whole audit (load the manifest, integrity, declaration, resolve, cross-check, arms, JSON
   report; the default engine profile, as ``qarm audit -f json``) of synthetic DeepSeek-V3-like,
   Kimi-K2-like and 1M-tensor stress manifests, each generated and then audited in a fresh child
   process of a small parent (wall and CPU seconds, peak RSS).
2. The resolver against a baseline that resolves the way engines do: a loop over every exclude
   entry (exact, substring, ``fnmatch``) and every MIXED key (prefix scan) or every ``re:``
   target and ignore (``re.match`` per pattern) for every module. Both must give the same
   membership (bucket, how, rule) to every module, asserted on the whole set.
3. Linearity: the whole audit at N and 2N tensors. Flatness: the resolver and the whole audit at
   P and 10P patterns.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from synthetic import build  # noqa: E402

from qarm_audit.declarations import read_declaration  # noqa: E402
from qarm_audit.modules.inventory import FUSED_SHARDS, ModuleInfo, build_inventory  # noqa: E402
from qarm_audit.resolve import resolve  # noqa: E402
from qarm_audit.resolve.resolver import EXCLUDED, UNLISTED, Membership  # noqa: E402

# --- the engine-style baseline -------------------------------------------------------------


def _aliases(name: str) -> list[str]:
    out = [name]
    if name.endswith(".lm_head") or name == "lm_head":
        out.append("lm_head")
    for a, b in (
        ("language_model.model.", "model.language_model."),
        ("model.language_model.", "language_model.model."),
    ):
        if name.startswith(a):
            out.append(b + name[len(a) :])
    return out


def baseline_modelopt(declaration, modules: Mapping[str, ModuleInfo]) -> dict[str, Membership]:
    """vLLM's ``is_layer_excluded`` and ``_resolve_quant_algo``: a loop over every entry, for
    every module (vLLM's FusedMoE asks once per layer rather than per expert; SGLang and the
    compressed-tensors paths ask per module, which is what this loop does)."""
    rules = declaration.modelopt
    entries: list[str] = []
    origin: dict[str, str] = {}
    for entry in rules.excludes:
        if entry.endswith("*") and not entry.endswith(".*") and len(entry) > 1:
            for part in (entry[:-1], entry[:-1] + ".*"):
                entries.append(part)
                origin.setdefault(part, entry)
        entries.append(entry)
        origin[entry] = entry
    layers = rules.layers
    out: dict[str, Membership] = {}
    groups: dict[str, list[ModuleInfo]] = {}
    for info in modules.values():
        groups.setdefault(info.engine_name, []).append(info)
    for info in modules.values():
        engine = info.engine_name
        members = groups[engine]
        hit = None
        if engine in entries:  # a list scan, as in the engine
            written = origin[engine]
            hit = Membership(EXCLUDED, "exact" if written == engine else "wildcard", written)
        if hit is None and ".experts" in engine:
            for entry in entries:
                if "experts" in entry and engine in entry:
                    hit = Membership(EXCLUDED, "exact", entry)
                    break
        if hit is None:
            for entry in rules.excludes:
                if any(c in entry for c in "*?[") and fnmatch.fnmatchcase(engine, entry):
                    hit = Membership(EXCLUDED, "wildcard", entry)
                    break
        if hit is None:
            stripped = engine.removeprefix("language_model.")
            for name in (engine, stripped) if stripped != engine else (engine,):
                for entry in entries:
                    if entry and entry != name and entry in name:
                        hit = Membership(EXCLUDED, "substring", origin.get(entry, entry))
                        break
                if hit is not None:
                    break
        fused = len(members) > 1 and engine.endswith(tuple(FUSED_SHARDS))
        if hit is None and fused:
            listed = [m for m in members if m.name in entries]
            if listed and len(listed) == len(members):
                hit = Membership(EXCLUDED, "exact", listed[0].name)
        for info in members:
            if hit is not None:
                out[info.name] = hit
            elif layers is None:
                out[info.name] = (
                    Membership(rules.default_scheme.name, "class", "Linear")
                    if info.kind == "linear"
                    else Membership(UNLISTED, "none")
                )
            else:
                out[info.name] = _baseline_mixed(layers, info, engine)
    return out


def _baseline_mixed(layers: dict[str, str], info: ModuleInfo, engine: str) -> Membership:
    for candidate in _aliases(info.name):
        if candidate in layers:
            return Membership(layers[candidate], "exact", candidate)
    if engine != info.name:
        for candidate in _aliases(engine):
            if candidate in layers:
                how = "experts" if engine.endswith(".experts") else "fused"
                return Membership(layers[candidate], how, candidate)
    for candidate in _aliases(info.name):
        prefix = candidate + "."
        for key in layers:  # strategy 3: the first key, in map order, under the prefix
            if key.startswith(prefix):
                return Membership(layers[key], "prefix", key)
    if engine.endswith(".experts"):
        prefix = engine[: -len(".experts")] + "."
        for key in layers:
            if key.startswith(prefix):
                return Membership(layers[key], "experts-parent", key)
    return Membership(UNLISTED, "none")


def baseline_compressed_tensors(declaration, modules: Mapping[str, ModuleInfo]):
    """vLLM's ``find_matched_target`` and ``should_ignore_layer``: ``re.match`` per pattern."""
    rules = declaration.compressed_tensors
    out: dict[str, Membership] = {}
    for info in modules.values():
        ignored = None
        for entry in rules.ignore:
            if entry.startswith("re:"):
                if re.match(entry[3:], info.name):
                    ignored = Membership(EXCLUDED, "regex", entry)
                    break
            elif entry == info.name:
                ignored = Membership(EXCLUDED, "exact", entry)
                break
        if ignored is not None:
            out[info.name] = ignored
            continue
        found = None
        for target, scheme in rules.targets.items():
            if target.startswith("re:"):
                if re.match(target[3:], info.name):
                    found = Membership(scheme, "regex", target)
                    break
            elif target == info.name:
                found = Membership(scheme, "exact", target)
                break
        if found is None and info.kind == "linear":
            for target, scheme in rules.targets.items():
                if (
                    not target.startswith("re:")
                    and "." not in target
                    and target.lower() in "linear"
                ):
                    found = Membership(scheme, "class", target)
                    break
        out[info.name] = found or Membership(UNLISTED, "none")
    return out


# --- measurement -------------------------------------------------------------------------------


def child_audit(path: Path) -> dict[str, float]:
    """Whole audit in a fresh interpreter: wall, CPU, peak RSS."""
    code = (
        "import json, resource, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from qarm_audit import audit\n"
        "from qarm_audit.report import render_json\n"
        "w, c = time.perf_counter(), time.process_time()\n"
        f"text = render_json(audit({str(path)!r}))\n"  # the default engine, as `qarm audit`
        "print(json.dumps({'wall': time.perf_counter() - w, 'cpu': time.process_time() - c,\n"
        "  'rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,\n"
        "  'tensors': json.loads(text)['totals']['tensors']}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def resolver_times(checkpoint, with_baseline: bool) -> dict[str, float]:
    """CPU seconds of our resolver and of the baseline, on the same modules, collector off."""
    gc.disable()
    declaration = read_declaration(checkpoint.documents)
    modules = build_inventory(t for s in checkpoint.shards for t in s.tensors)
    start = time.process_time()
    ours = resolve(declaration, modules).memberships
    out = {"ours": time.process_time() - start, "modules": len(modules)}
    if with_baseline:
        start = time.process_time()
        base = (
            baseline_modelopt if declaration.modelopt is not None else baseline_compressed_tensors
        )(declaration, modules)
        out["baseline"] = time.process_time() - start
        differ = [n for n in modules if ours[n] != base[n]]
        assert not differ, f"{len(differ)} memberships differ, e.g. {differ[:3]}"
        out["same"] = 1.0
    gc.enable()
    return out


def patterns_of(checkpoint) -> int:
    declaration = read_declaration(checkpoint.documents)
    if declaration.modelopt is not None:
        return len(declaration.modelopt.excludes)
    return len(declaration.compressed_tensors.targets) + len(declaration.compressed_tensors.ignore)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=["audit", "resolver", "flat"], action="append")
    args = parser.parse_args()
    parts = set(args.only or ["audit", "resolver", "flat"])
    big, half = ("quick", "quick-half") if args.quick else ("stress", "half")
    tmp = Path(tempfile.mkdtemp(prefix="qarm-scale-"))
    if "audit" in parts:
        whole_audits(args.quick, big, half, tmp)
    if "resolver" in parts:
        resolvers(big)
    if "flat" in parts:
        flatness(half, 300, tmp)
    return 0


def make_manifest(
    path: Path, shape: str, family: str, patterns: int, index: str = "transformers"
) -> None:
    """Generate in a child process: a parent holding a million built entries slows a child
    audit down by a third on this machine (and lends it its peak RSS)."""
    command = [sys.executable, str(ROOT / "bench" / "synthetic.py"), shape, "-o", str(path)]
    command += ["--family", family, "--patterns", str(patterns), "--index", index]
    subprocess.run(command, check=True, capture_output=True)


def whole_audits(quick: bool, big: str, half: str, tmp: Path) -> None:
    print("| case | tensors | patterns | wall s | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for shape, family, index in (
        ("deepseek", "modelopt", "transformers"),
        ("kimi", "modelopt", "transformers"),
        (half, "modelopt", "transformers"),
        (big, "modelopt", "transformers"),
        (big, "modelopt", "other"),
        (half, "compressed-tensors", "transformers"),
        (big, "compressed-tensors", "transformers"),
    ):
        if quick and shape in ("deepseek", "kimi"):
            continue
        path = tmp / f"{shape}-{family}.manifest.json"
        make_manifest(path, shape, family, 500, index)
        result = child_audit(path)
        label = f"{shape} {family}" + (", index kept verbatim" if index == "other" else "")
        print(
            f"| {label} | {int(result['tensors'])} | 500 | "
            f"{result['wall']:.2f} | {result['cpu']:.2f} | {result['rss_mib']:.0f} |"
        )
        path.unlink()
    print()


def resolvers(big: str) -> None:
    print("| resolver case | modules | patterns | qarm CPU s | baseline CPU s | speed-up | same |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for family in ("modelopt", "compressed-tensors"):
        checkpoint = build(big, family, 500)
        r = resolver_times(checkpoint, with_baseline=True)
        print(
            f"| {big} {family} | {int(r['modules'])} | {patterns_of(checkpoint)} | "
            f"{r['ours']:.2f} | {r['baseline']:.1f} | {r['baseline'] / r['ours']:.0f}x | yes |"
        )
    print()


def flatness(half: str, base: int, tmp: Path) -> None:
    print("| flatness | patterns | resolver CPU s | whole audit CPU s |")
    print("|---|---:|---:|---:|")
    for family in ("modelopt", "compressed-tensors"):
        for count in (base, base * 10):
            path = tmp / "flat.manifest.json"
            make_manifest(path, half, family, count)
            whole = child_audit(path)  # before this process holds a checkpoint
            checkpoint = build(half, family, count)
            r = resolver_times(checkpoint, with_baseline=False)
            del checkpoint
            print(f"| {half} {family} | {count} | {r['ours']:.2f} | {whole['cpu']:.2f} |")
            path.unlink()
    print()


if __name__ == "__main__":
    sys.exit(main())
