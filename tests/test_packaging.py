"""The wheel and sdist build, pass ``twine check``, and the wheel runs from a clean venv."""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import MANIFESTS, REPO

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.skipif(
        importlib.util.find_spec("build") is None or importlib.util.find_spec("twine") is None,
        reason="needs the dev extra: pip install '.[dev]' (build, twine)",
    ),
]


def _isolated_env() -> dict[str, str]:
    """The environment without PYTHONPATH, which would put a checkout ahead of the wheel."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=_isolated_env(),
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


def test_wheel_and_sdist_build_check_and_run_isolated(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # Without isolation when hatchling is here (no network needed); else build fetches it.
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-isolation"]
    _run(sys.executable, "-m", "build", *isolation, "--outdir", dist, REPO, cwd=tmp_path)
    wheels = sorted(dist.glob("qarm_audit-*.whl"))
    sdists = sorted(dist.glob("qarm_audit-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1

    names = set(zipfile.ZipFile(wheels[0]).namelist())
    assert "qarm_audit/py.typed" in names
    profiles = {n for n in names if n.startswith("qarm_audit/engines/profiles/")}
    assert {f"qarm_audit/engines/profiles/{p}.toml" for p in ("vllm", "sglang", "name-probe")} <= (
        profiles
    )
    assert not any("__pycache__" in n or n.startswith("tests/") for n in names)
    licence = [n for n in names if ".dist-info/" in n and n.endswith("LICENSE")]
    assert licence, "the Apache-2.0 text travels in the wheel"
    assert "Apache License" in zipfile.ZipFile(wheels[0]).read(licence[0]).decode()
    import tarfile

    with tarfile.open(sdists[0]) as sdist:
        assert any(m.name.endswith("/LICENSE") for m in sdist.getmembers())
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "qarm = qarm_audit.cli:main" in zipfile.ZipFile(wheels[0]).read(entry_points).decode()

    _run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists, cwd=tmp_path)

    # A clean venv holding only the wheel; its dependencies are borrowed from this environment
    # through a .pth file (appended after the venv's own site-packages, and .pth files there,
    # such as an editable install's, are not processed), so no network is needed.
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    own_site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
        ).stdout.strip()
    )
    borrowed = [
        p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()
    ]
    (own_site / "_borrowed_deps.pth").write_text("\n".join(borrowed) + "\n")
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--ignore-installed",
        wheels[0],
        cwd=tmp_path,
    )
    where = _run(python, "-c", "import qarm_audit; print(qarm_audit.__file__)", cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(own_site), where.stdout

    qarm = env / "bin" / "qarm"
    assert _run(qarm, "--version", cwd=tmp_path).stdout.strip() == "qarm, version 0.1.0"
    result = subprocess.run(
        [str(qarm), "audit", str(MANIFESTS / "seed-mtp-w4a16.manifest.json"), "-f", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=_isolated_env(),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "warnings"
    assert report["engine"]["name"] == "vllm"  # the profile TOML came from the wheel
