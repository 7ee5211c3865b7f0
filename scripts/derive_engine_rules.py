"""Derive an engine release's rule facts from its released wheel, by reading its source.

Regenerate (the JSON is committed under ``src/qarm_audit/engines/releases/``)::

    pip download --no-deps vllm==X -d DIR && python scripts/derive_engine_rules.py DIR/vllm-X-*.whl
    python scripts/derive_engine_rules.py DIR/sglang-X-*.whl --check   # exit 1 and a diff if stale

The wheel (or an unpacked copy: a folder holding ``vllm/`` or ``sglang/``) is read with
:mod:`ast` and as text only: the engine is never imported and none of its code is copied.

What it writes, for one release of one engine (``engines/releases/<engine>-<release>.json``)

``format``, ``engine``, ``release``
    ``"qarm-engine-release/1"``, ``"vllm"`` or ``"sglang"``, the wheel's ``__version__``.
``commit``
    What citations pin: the commit the wheel's ``_version.py`` records (vLLM writes the
    abbreviation, ``g4ba787ec9`` -> ``4ba787ec9``), or the release tag (``v0.5.23``) where it
    records none (SGLang).
``requires``
    The wheel's ``Requires-Dist`` lines for the kernel libraries the rules depend on
    (``humming-kernels``, ``flashinfer-python``), as the release pins them.
``facts``
    Booleans and lists the profile's rules are gated on (a rule's ``facts`` table):
    vLLM ``mla_model_types`` (the text model types ``is_deepseek_mla`` names, sorted),
    ``humming_preferred`` (``_HUMMING_PREFERRED_CAPABILITIES`` of
    ``quantization/utils/humming/priority.py``; empty where the file is absent),
    ``humming_priority`` (that list is not empty and ``kernels/linear`` calls
    ``prioritize_humming``), ``humming_nvfp4_input_schema`` (``HummingNvFp4LinearKernel``
    passes an ``input_schema``: W4A4 checkpoints keep NVFP4 activations where Humming can run
    them), ``humming_mxfp8_input_schema`` (the same of ``HummingMxfp8LinearKernel``),
    ``b12x_nvfp4_w4a16`` (``init_nvfp4_linear_kernel``'s weight-only kernels include B12X's),
    ``w4a8_fp8_activations`` and ``w4a8_int_activations`` (the 8-bit dynamic per-token
    activations compressed-tensors' ``_is_fp8_w4a8`` and ``_is_dynamic_token_w4a8_int`` take:
    of their own type, or of either where they test none, as 0.30's do),
    ``linear_backends`` and ``moe_backends`` (the ``LinearBackend`` and ``MoEBackend``
    literals of ``config/kernel.py``), ``moe_kernel_oracle`` (the NVFP4 and MXFP4 MoE backend
    oracles are ``MoEKernelOracle`` subclasses of ``fused_moe/oracle/base.py``, whose words
    their log lines take: the backend unquoted, 0.34.0 on), ``stacked_shard_tracking`` (the
    loader's check of an unquantized checkpoint names each shard of a fused projection that
    was not loaded, ``pop_missing_shards``: 0.34.0 on); SGLang
    ``ct_w4a4_marlin_weight_only`` (compressed-tensors NVFP4 W4A4 on sm100+ honours
    ``--fp4-gemm-backend marlin`` by running weight-only), ``fp4_gemm_backends`` (the
    ``Fp4GemmRunnerBackend`` values), ``moe_runner_backends`` and ``fp8_gemm_backends``
    (``MOE_RUNNER_BACKEND_CHOICES`` and ``FP8_GEMM_RUNNER_BACKEND_CHOICES`` of
    ``srt/arg_groups/choices.py``).
``anchors``
    ``"<path>#<anchor>"`` -> ``"L<first>-<last>"``: for every ``anchor`` of the profile's rules
    and load errors, the innermost statement of ``<path>`` holding a string that contains it
    (implicitly joined strings and f-strings count, a formatted field as ``{}``), or the
    ``def``/``class``/assignment of that name; ``null`` where the release has none. A rule whose
    anchor is absent from a release it applies to fails the tests: the rule is not that
    release's.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from qarm_audit.engines.profile import CITED_SECTIONS

FORMAT = "qarm-engine-release/1"
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "qarm_audit" / "engines"
RELEASES_DIR = PACKAGE / "releases"
PROFILES_DIR = PACKAGE / "profiles"
REPO_PREFIX = {"vllm": "", "sglang": "python/"}
"""What the repository's paths have before the wheel's (``python/sglang/...``)."""
PINNED = ("humming-kernels", "flashinfer-python")


class DeriveError(Exception):
    pass


class Wheel:
    """A wheel file or an unpacked folder, read as text."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def names(self) -> Iterator[str]:
        if self._zip is not None:
            yield from self._zip.namelist()
        else:
            yield from (p.relative_to(self.path).as_posix() for p in self.path.rglob("*"))

    def read(self, name: str) -> str | None:
        if self._zip is not None:
            try:
                return self._zip.read(name).decode("utf-8")
            except KeyError:
                return None
        file = self.path / name
        return file.read_text("utf-8") if file.is_file() else None


def _string_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
            for v in node.values
        )
    return None


def _named(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def _scope(tree: ast.AST, path: str) -> ast.AST | None:
    """The ``def``/``class`` reached by the dotted ``path`` (``Config.from_config``)."""
    node: ast.AST | None = tree
    for name in path.split("."):
        node = next((c for c in ast.walk(node) if _named(c, name)), None) if node else None
    return node


def _by_line(text: str, tree: ast.AST, anchor: str) -> tuple[int, int] | None:
    """The innermost statement spanning the first line of ``tree`` whose text holds
    ``anchor`` (code, a name, a comment)."""
    lo = getattr(tree, "lineno", 1)
    hi = getattr(tree, "end_lineno", None) or len(text.splitlines())
    line = next(
        (n for n, t in enumerate(text.splitlines(), 1) if lo <= n <= hi and anchor in t), None
    )
    if line is None:
        return None
    spans = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return min(spans, key=lambda s: s[1] - s[0]) if spans else (line, line)


def find_anchor(text: str, anchor: str) -> str | None:
    """``L<first>-<last>`` of the innermost statement holding ``anchor``, or None.

    ``Scope.name:text`` looks for ``text`` inside that ``def`` or ``class`` only; a bare
    ``Scope.name`` (no spaces) is that definition itself.
    """
    tree: ast.AST | None = ast.parse(text)
    scope, sep, rest = anchor.partition(":")
    if sep and " " not in scope:
        tree, anchor = _scope(tree, scope) if tree else None, rest
    elif re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", anchor):
        node = _scope(tree, anchor) if tree else None
        if not isinstance(node, ast.stmt):
            return None
        first, last = node.lineno, node.end_lineno or node.lineno
        return f"L{first}" if first == last else f"L{first}-{last}"
    if tree is None:
        return None
    best: tuple[int, int] | None = None

    def visit(node: ast.AST, stmt: ast.stmt | None) -> None:
        nonlocal best
        if isinstance(node, ast.stmt):
            stmt = node
            if _named(node, anchor):
                span = (node.lineno, node.end_lineno or node.lineno)
                if best is None or span[0] < best[0]:
                    best = span
        value = _string_of(node)
        if value is not None and anchor in value and stmt is not None:
            span = (stmt.lineno, stmt.end_lineno or stmt.lineno)
            if best is None or span[0] < best[0]:
                best = span
            return
        for child in ast.iter_child_nodes(node):
            visit(child, stmt)

    visit(tree, None)
    if best is None:
        best = _by_line(text, tree, anchor)
    if best is None:
        return None
    first, last = best
    return f"L{first}" if first == last else f"L{first}-{last}"


def _literal(text: str, name: str) -> Any:
    for node in ast.parse(text).body:
        if _named(node, name):
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if value is not None:
                try:
                    return ast.literal_eval(value)
                except ValueError:
                    if isinstance(value, ast.Call) and value.args:
                        return ast.literal_eval(value.args[0])
                    if isinstance(value, ast.Subscript):
                        return ast.literal_eval(value.slice)
    return None


def _version(wheel: Wheel, engine: str) -> tuple[str, str | None]:
    text = wheel.read(f"{engine}/_version.py")
    if text is None:
        raise DeriveError(f"{engine}/_version.py not in {wheel.path}")
    release = _literal(text, "__version__")
    commit = _literal(text, "__commit_id__")
    if not isinstance(release, str):
        raise DeriveError(f"no __version__ in {engine}/_version.py")
    if isinstance(commit, str) and re.fullmatch(r"g?[0-9a-f]{7,40}", commit):
        return release, commit.removeprefix("g")
    return release, None


def _requires(wheel: Wheel, engine: str, release: str) -> list[str]:
    text = wheel.read(f"{engine}-{release}.dist-info/METADATA") or ""
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist: "):
            spec = line.removeprefix("Requires-Dist: ").split(";")[0].strip()
            if any(spec.startswith(name) for name in PINNED):
                out.append(spec)
    return sorted(out)


def _vllm_facts(wheel: Wheel) -> dict[str, Any]:
    priority = wheel.read("vllm/model_executor/layers/quantization/utils/humming/priority.py")
    preferred = (
        sorted(_literal(priority, "_HUMMING_PREFERRED_CAPABILITIES") or ()) if priority else []
    )
    linear = wheel.read("vllm/model_executor/kernels/linear/__init__.py") or ""

    def schema_passed(path: str) -> bool:
        text = wheel.read(f"vllm/model_executor/kernels/linear/{path}") or ""
        return any(
            isinstance(node, ast.keyword) and node.arg == "input_schema"
            for node in ast.walk(ast.parse(text))
        )

    init = next(
        (
            n
            for n in ast.walk(ast.parse(linear))
            if isinstance(n, ast.FunctionDef) and n.name == "init_nvfp4_linear_kernel"
        ),
        None,
    )
    a16 = ast.get_source_segment(linear, init) or "" if init else ""
    a16 = a16.split("a16_kernels = (", 1)[1].split(")", 1)[0] if "a16_kernels = (" in a16 else ""
    kernel_config = wheel.read("vllm/config/kernel.py") or ""
    loader = wheel.read("vllm/model_executor/model_loader/default_loader.py") or ""
    oracles = [
        wheel.read(f"vllm/model_executor/layers/fused_moe/oracle/{name}.py") or ""
        for name in ("nvfp4", "mxfp4")
    ]
    backends = _literal(kernel_config, "LinearBackend")
    moe = _literal(kernel_config, "MoEBackend")
    return {
        "mla_model_types": _mla_model_types(wheel),
        "humming_preferred": preferred,
        "humming_priority": bool(preferred) and "prioritize_humming(" in linear,
        "humming_nvfp4_input_schema": schema_passed("nvfp4/humming.py"),
        "humming_mxfp8_input_schema": schema_passed("mxfp8/humming.py"),
        "b12x_nvfp4_w4a16": "B12xNvFp4W4A16LinearKernel" in a16,
        "w4a8_fp8_activations": _w4a8_activations(wheel, "_is_fp8_w4a8", "float"),
        "w4a8_int_activations": _w4a8_activations(wheel, "_is_dynamic_token_w4a8_int", "int"),
        "linear_backends": list(backends) if isinstance(backends, tuple) else [],
        "moe_backends": list(moe) if isinstance(moe, tuple) else [],
        "moe_kernel_oracle": all("(MoEKernelOracle[" in oracle for oracle in oracles),
        "stacked_shard_tracking": "pop_missing_shards" in loader,
    }


def _w4a8_activations(wheel: Wheel, predicate: str, typed: str) -> list[str]:
    """The 8-bit dynamic per-token activations compressed-tensors' ``predicate``
    (``_is_fp8_w4a8``, ``_is_dynamic_token_w4a8_int``) takes: those of ``typed`` (``float`` or
    ``int``) alone where it tests ``input_quant.type``, either where it tests none."""
    path = "vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py"
    tree = ast.parse(wheel.read(path) or "")
    function = next((n for n in ast.walk(tree) if _named(n, predicate)), None)
    tests_type = function is not None and any(
        isinstance(node, ast.Attribute)
        and node.attr == "type"
        and isinstance(node.value, ast.Name)
        and node.value.id == "input_quant"
        for node in ast.walk(function)
    )
    other = "int" if typed == "float" else "float"
    return [f"{typed} dynamic token"] + ([] if tests_type else [f"{other} dynamic token"])


def _mla_model_types(wheel: Wheel) -> list[str]:
    """The text model types ``is_deepseek_mla`` names first (``model_type in (...)``): the
    models vLLM builds multi-head latent attention for, given their config's key."""
    text = wheel.read("vllm/transformers_utils/model_arch_config_convertor.py") or ""
    function = next((n for n in ast.walk(ast.parse(text)) if _named(n, "is_deepseek_mla")), None)
    for node in ast.walk(function) if function is not None else ():
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.comparators[0], ast.Tuple)
        ):
            return sorted(ast.literal_eval(node.comparators[0]))
    return []


def _enum_values(text: str, name: str) -> list[str]:
    """The string values of ``class <name>(Enum)``'s members, in source order."""
    cls = next((n for n in ast.walk(ast.parse(text)) if _named(n, name)), None)
    if not isinstance(cls, ast.ClassDef):
        return []
    return [
        n.value.value
        for n in cls.body
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
    ]


def _sglang_facts(wheel: Wheel) -> dict[str, Any]:
    ct = wheel.read("sglang/srt/layers/quantization/compressed_tensors/compressed_tensors.py")
    fp4 = wheel.read("sglang/srt/layers/quantization/fp4_utils.py") or ""
    choices = wheel.read("sglang/srt/arg_groups/choices.py") or ""
    moe = _literal(choices, "MOE_RUNNER_BACKEND_CHOICES") if choices else None
    fp8 = _literal(choices, "FP8_GEMM_RUNNER_BACKEND_CHOICES") if choices else None
    return {
        "ct_w4a4_marlin_weight_only": "--fp4-gemm-backend marlin is weight-only" in (ct or ""),
        "fp4_gemm_backends": _enum_values(fp4, "Fp4GemmRunnerBackend"),
        "moe_runner_backends": list(moe) if isinstance(moe, list | tuple) else [],
        "fp8_gemm_backends": list(fp8) if isinstance(fp8, list | tuple) else [],
    }


FACTS = {"vllm": _vllm_facts, "sglang": _sglang_facts}


def _anchors(engine: str) -> list[tuple[str, str]]:
    """(repository path, anchor) of every rule, load error and declaration error of the
    engine's profile."""
    data = tomllib.loads((PROFILES_DIR / f"{engine}.toml").read_text("utf-8"))
    out = []
    for item in [entry for key in CITED_SECTIONS for entry in data.get(key, [])]:
        source = item.get("source")
        if not source:
            continue
        path = source.split(" ", 2)[1].split("@", 1)[0]
        out += [(path, anchor) for anchor in item.get("anchor", [])]
    return sorted(set(out))


def derive(wheel: Wheel, engine: str) -> dict[str, Any]:
    release, commit = _version(wheel, engine)
    anchors: dict[str, str | None] = {}
    for path, anchor in _anchors(engine):
        text = wheel.read(path.removeprefix(REPO_PREFIX[engine]))
        anchors[f"{path}#{anchor}"] = find_anchor(text, anchor) if text is not None else None
    return {
        "format": FORMAT,
        "engine": engine,
        "release": release,
        "commit": commit or f"v{release}",
        "requires": _requires(wheel, engine, release),
        "facts": FACTS.get(engine, lambda _: {})(wheel),
        "anchors": anchors,
    }


def _engine_of(wheel: Wheel) -> str:
    for engine in REPO_PREFIX:
        if wheel.read(f"{engine}/_version.py") is not None:
            return engine
    raise DeriveError(f"{wheel.path}: neither vllm/ nor sglang/ with a _version.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("wheel", type=Path, nargs="+", help="wheels or unpacked folders")
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff if stale")
    args = parser.parse_args(argv)
    stale = 0
    for path in args.wheel:
        try:
            wheel = Wheel(path)
            engine = _engine_of(wheel)
            data = derive(wheel, engine)
        except (DeriveError, OSError, SyntaxError, zipfile.BadZipFile) as exc:
            print(f"derive_engine_rules: {path}: {exc}", file=sys.stderr)
            return 2
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        out = RELEASES_DIR / f"{engine}-{data['release']}.json"
        if args.check:
            old = out.read_text("utf-8") if out.is_file() else ""
            if old != text:
                stale = 1
                sys.stdout.writelines(
                    difflib.unified_diff(
                        old.splitlines(keepends=True),
                        text.splitlines(keepends=True),
                        fromfile=f"{out} (committed)",
                        tofile=f"{out} (derived)",
                    )
                )
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, "utf-8")
        missing = sorted(k for k, v in data["anchors"].items() if v is None)
        print(f"wrote {out}: {len(data['anchors'])} anchors, absent {missing}")
    return stale


if __name__ == "__main__":
    sys.exit(main())
