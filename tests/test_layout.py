"""The package reads as the pipeline: stage packages in order, imports only down the pipeline.

The rule (docs/architecture.md): a module imports only from its own stage and the stages
before it; the one exception is ``report.model``, the row types every stage fills.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "qarm_audit"

STAGES = [
    {"errors", "findings", "frozen", "runtime"},  # the foundation every stage may use
    {"sources"},
    {"declarations"},
    {"modules"},
    {"layers"},
    {"resolve"},
    {"check"},
    {"engines"},
    {"report"},
    {"commands"},
    {"cli", "__init__", "__main__"},
]
RANK = {name: rank for rank, names in enumerate(STAGES) for name in names}
ROW_TYPES = "qarm_audit.report.model"
MAX_TOP_LEVEL = 7
MAX_UPWARD = 10
MAX_LINES = 700


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _stage(dotted: list[str]) -> str:
    return dotted[1] if len(dotted) > 1 else "__init__"


def _imports(path: Path) -> list[list[str]]:
    """Every qarm_audit module this file imports, lazily and under TYPE_CHECKING too."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path)[:-1]
    found: list[list[str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            if target[0] != "qarm_audit":
                continue
            if len(target) == 1:  # from qarm_audit import x / from . import x
                found.extend([*target, alias.name] for alias in node.names)
            else:
                found.append(target)
        elif isinstance(node, ast.Import):
            found.extend(a.name.split(".") for a in node.names if a.name.startswith("qarm_audit"))
    return found


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_lives_in_a_known_stage() -> None:
    stages = {_stage(_module_name(p)) for p in _sources()}
    assert stages <= RANK.keys(), stages - RANK.keys()


def test_imports_run_down_the_pipeline() -> None:
    upward = [
        (".".join(here), ".".join(target))
        for path in _sources()
        for target in _imports(path)
        if RANK[_stage(target)] > RANK[_stage(here := _module_name(path))]
    ]
    assert [u for u in upward if u[1] != ROW_TYPES] == []
    assert len(upward) <= MAX_UPWARD, upward


def test_top_level_holds_few_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


def test_no_source_file_is_too_long() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _sources()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (a name imported from a package counts as its
    ``__init__``), lazily and under TYPE_CHECKING too."""
    modules = {".".join(_module_name(p)): p for p in _sources()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _imports(path):
            while target and ".".join(target) not in modules:
                target = target[:-1]  # qarm_audit.sources.Checkpoint -> qarm_audit.sources
            if target and ".".join(target) != name:
                targets.add(".".join(target))
        graph[name] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of two or more modules that reach one another (strongly connected)."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    found = {
        tuple(sorted({m} | {o for o in reach[m] if m in reach[o]}))
        for m in graph
        if any(m in reach[o] for o in reach[m])
    }
    return sorted(map(list, found))


def test_no_modules_import_each_other() -> None:
    """No circle, not even one closed only by a lazy or TYPE_CHECKING import: each file reads
    without the ones that use it."""
    assert _circles(_import_graph()) == []


def test_a_circle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
