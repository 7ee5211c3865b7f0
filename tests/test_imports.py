"""A run imports what it uses: the declared format's models, and rich only for a table.

Imports are most of a small audit's time (a CI gate on a few thousand tensors), so ``qarm
audit -f json`` on a ModelOpt checkpoint must not build the pydantic models of every other
format, nor load ``diff``, ``explain``, rich or huggingface_hub.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MANIFESTS

RUN = """
import atexit, json, runpy, sys
out, sys.argv = sys.argv[1], ["qarm", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
runpy.run_module("qarm_audit", run_name="__main__")
"""

OTHER_FORMATS = {
    f"qarm_audit.declarations.{name}"
    for name in ("awq", "gptq", "compressed_tensors", "fp8", "mxfp4")
}
NOT_AUDIT = {"qarm_audit.commands.diff", "qarm_audit.commands.explain", "huggingface_hub"}


def _loaded(tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return set(json.loads(out.read_text()))


def test_a_json_audit_loads_its_format_only_and_no_rich(tmp_path: Path) -> None:
    manifest = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
    loaded = _loaded(tmp_path, "audit", str(manifest), "-f", "json")
    assert "qarm_audit.declarations.modelopt" in loaded
    assert not loaded & (OTHER_FORMATS | NOT_AUDIT)
    assert not {m for m in loaded if m == "rich" or m.startswith("rich.")}


@pytest.mark.parametrize("fmt", ["table", "markdown", "github"])
def test_each_format_loads_what_it_draws(tmp_path: Path, fmt: str) -> None:
    manifest = MANIFESTS / "transformers-finegrained-fp8-llama.manifest.json"
    loaded = _loaded(tmp_path, "audit", str(manifest), "-f", fmt)
    assert "qarm_audit.declarations.fp8" in loaded
    assert not loaded & (OTHER_FORMATS - {"qarm_audit.declarations.fp8"})
    assert ("rich" in loaded) == (fmt == "table")


def test_the_library_api_is_there_on_first_use() -> None:
    import qarm_audit

    assert qarm_audit.audit.__module__ == "qarm_audit.commands.audit"
    assert qarm_audit.Report.__name__ == "Report"
    assert set(qarm_audit.__all__) <= set(dir(qarm_audit))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = qarm_audit.nothing  # type: ignore[attr-defined]


BUILT = """
import atexit, json, runpy, sys
out, sys.argv = sys.argv[1], ["qarm", *sys.argv[2:]]

def built():
    from pydantic import BaseModel
    return sorted(
        f"{name}.{value.__name__}"
        for name, module in list(sys.modules.items())
        if name.startswith("qarm_audit")
        for value in list(vars(module).values())
        if isinstance(value, type)
        and issubclass(value, BaseModel)
        and value.__module__ == name
        and value.__pydantic_complete__
    )

atexit.register(lambda: open(out, "w").write(json.dumps(built())))
runpy.run_module("qarm_audit", run_name="__main__")
"""


def test_an_audit_builds_the_validators_of_the_models_it_uses_only(tmp_path: Path) -> None:
    """pydantic builds a model's validator at its first use (``defer_build``), not when its
    module is imported: a ModelOpt audit without ``--probe-scalars`` builds neither the
    bitsandbytes model its module defines nor the report's probe section."""
    out = tmp_path / "built.json"
    manifest = MANIFESTS / "seed-nvfp4-w4a4.manifest.json"
    done = subprocess.run(
        [sys.executable, "-c", BUILT, str(out), "audit", str(manifest), "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    built = set(json.loads(out.read_text()))
    assert "qarm_audit.declarations.modelopt.HfQuantConfig" in built
    assert "qarm_audit.report.model.Report" in built
    assert "qarm_audit.declarations.bitsandbytes.BnbConfig" not in built
    assert "qarm_audit.report.model.ProbeInfo" not in built
