"""What pyproject.toml promises a user: true version floors, the licence, links that work from
the package index page, and install steps that work on a fresh machine."""

from __future__ import annotations

import ast
import os
import re
import tomllib
from importlib.metadata import PackageNotFoundError, version

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
URL = PROJECT["urls"]["Repository"]


def _floors(requirements: list[str]) -> dict[str, Version]:
    out = {}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        lows = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
        if lows:
            out[requirement.name] = max(lows)
    return out


RUNTIME = _floors(PROJECT["dependencies"])
TEST = _floors(PROJECT["optional-dependencies"]["test"])


def test_every_dependency_has_a_floor() -> None:
    names = {Requirement(t).name for t in PROJECT["dependencies"]}
    assert names == set(RUNTIME)


@pytest.mark.parametrize("name", sorted({**RUNTIME, **TEST}))
def test_installed_versions_meet_the_floors(name: str) -> None:
    """Always: the installed version is allowed. With QARM_LOWEST_VERSIONS=1 (the CI step that
    installs with uv's lowest-direct resolution): it IS the floor, so a floor names a release
    that exists and installs beside the others (``safetensors>=0.6`` would install 0.6.1)."""
    floor = {**RUNTIME, **TEST}[name]
    try:
        installed = Version(version(name))
    except PackageNotFoundError:
        pytest.skip(f"{name} is not installed")
    assert installed >= floor
    if os.environ.get("QARM_LOWEST_VERSIONS") == "1":
        assert installed == floor, f"{name}: the floor {floor} is not installable; {installed} is"


def _imports(folder: str) -> set[str]:
    found = set()
    for path in (REPO / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_safetensors_is_a_test_dependency_only() -> None:
    """The package reads headers itself; the tests write real files with the library (its
    ``TensorSpec`` is 0.8's)."""
    assert "safetensors" not in _imports("src")
    assert "safetensors" not in RUNTIME and TEST["safetensors"] >= Version("0.8")
    assert {"safetensors", "markdown_it", "jsonschema", "numpy"} <= _imports("tests")


def test_the_ci_runs_the_suite_on_the_lowest_versions() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "--resolution lowest-direct" in ci and "QARM_LOWEST_VERSIONS=1" in ci


def test_the_licence_is_the_apache_text_declared() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_readme_links_are_absolute() -> None:
    """The README is the package index page too, where a relative link leads nowhere."""
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links
    assert [link for link in links if not link.startswith(f"{URL}/")] == []
    for link in links:
        path = link.removeprefix(f"{URL}/blob/main/").split("#")[0]
        assert (REPO / path).exists(), link


def test_install_steps_make_a_virtual_environment_first() -> None:
    readme = (REPO / "README.md").read_text()
    quickstart = (REPO / "docs" / "quickstart.md").read_text()
    assert readme.index("python3 -m venv") < readme.index("pip install .")
    assert quickstart.index("python3 -m venv") < quickstart.index("pip install .")


def test_ci_doc_installs_nothing_that_is_not_released() -> None:
    """No release is on the package index yet: every install names the repository."""
    for doc in ("ci.md", "quickstart.md"):
        text = (REPO / "docs" / doc).read_text()
        installs = re.findall(r"pip install (\S+)", text)
        assert installs, doc
        assert "qarm-audit" not in installs, doc
        assert all(i.startswith((".", '"', "'", "git+")) or "git+" in i for i in installs), (
            doc,
            installs,
        )
