"""The JSON report is pydantic's ``model_dump_json(indent=2)``, byte for byte, however it is
written (``render_json`` lets orjson write the module rows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

from qarm_audit import audit
from qarm_audit.report import render_json
from qarm_audit.report.model import ModuleRow, Report

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "fixtures" / "manifests").glob("*.manifest.json")) + sorted(
    path for path in (ROOT / "fixtures" / "producers").iterdir() if path.is_dir()
)


def _pydantic(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


@pytest.fixture(scope="module")
def report() -> Report:
    return audit(str(ROOT / "fixtures" / "manifests" / "seed-nvfp4-w4a4.manifest.json"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_every_bundled_report_is_pydantics_text(source: Path) -> None:
    report = audit(str(source))
    assert report.modules
    assert render_json(report) == _pydantic(report)


def test_orjson_escapes_every_code_point_as_pydantic_does() -> None:
    dump = TypeAdapter(Any).dump_json
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 2048):
        text = "".join(points[start : start + 2048])
        value = {text: [text, {"k": text}], "e": [], "o": {}}
        assert orjson.dumps(value, option=orjson.OPT_INDENT_2) == dump(value, indent=2)


def _with_rows(report: Report, rows: list[Any]) -> Report:
    return report.model_copy(update={"modules": rows})


def test_names_of_any_character_are_written_as_pydantic_writes_them(report: Report) -> None:
    row = dict(report.modules[0])
    names = ['a"b\\c', "\x00\x1f\x7f\u2028\u2029", "\U0001f600 e\u0301", "</script>"]
    hostile = _with_rows(report, [{**row, "module": name, "rule": name} for name in names])
    assert render_json(hostile) == _pydantic(hostile)


def test_an_integer_beyond_64_bits_takes_pydantics_path(report: Report) -> None:
    row = {**report.modules[0], "tensors": 2**64}
    big = _with_rows(report, [row])
    assert '"tensors": 18446744073709551616' in render_json(big)
    assert render_json(big) == _pydantic(big)


def test_rows_not_of_the_row_type_take_pydantics_path(report: Report) -> None:
    row = report.modules[0]
    assert tuple(ModuleRow.__annotations__) == tuple(row)
    extra = _with_rows(report, [{**row, "extra": 1}])  # pydantic leaves it out
    assert '"extra"' not in render_json(extra)
    assert render_json(extra) == _pydantic(extra)
    shuffled = _with_rows(report, [dict(reversed(list(row.items())))])
    assert render_json(shuffled) == _pydantic(shuffled)
