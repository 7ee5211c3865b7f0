"""JSON: the report model, serialised with a fixed key order; the schema is ``qarm schema``."""

from __future__ import annotations

import json
from typing import Any

import orjson

from .model import SCHEMA_VERSION, ModuleRow, Report

SCHEMA_ID = f"https://github.com/qarm-audit/qarm-audit/schema/report-{SCHEMA_VERSION}.json"
"""The schema's ``$id``: one per schema version."""


def render_json(report: Report) -> str:
    """``report.model_dump_json(indent=2)``, byte for byte (see :func:`render_json_bytes`)."""
    return render_json_bytes(report).decode()


def render_json_bytes(report: Report) -> bytes:
    """``report.model_dump_json(indent=2)`` and a newline, UTF-8, byte for byte, with the module
    rows (a MoE report holds hundreds of thousands) written by orjson: pydantic dumps the rest,
    and orjson writes the whole with the same two-space layout and the same escapes
    (``tests/test_render_json.py`` compares the two on every code point). What orjson cannot
    write as pydantic does, an integer beyond 64 bits, or rows whose keys are not the row
    type's (pydantic leaves an extra key out), takes pydantic's own path. Bytes, so that a
    report of tens of megabytes is written out without being decoded and encoded again."""
    rows = report.modules
    if rows and set(map(tuple, rows)) != {_ROW_KEYS}:
        return _by_pydantic(report)
    rest = report.model_dump(mode="json", exclude={"modules"})
    document = {name: rows if name == "modules" else rest[name] for name in _FIELDS}
    try:
        return orjson.dumps(document, option=_LAYOUT)
    except orjson.JSONEncodeError:
        return _by_pydantic(report)


def _by_pydantic(report: Report) -> bytes:
    return (report.model_dump_json(indent=2) + "\n").encode()


_ROW_KEYS = tuple(ModuleRow.__annotations__)
_LAYOUT = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE  # the newline without a copy
_FIELDS = tuple(Report.model_fields)


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what ``qarm audit --format json`` prints: one report
    for one source, an array of reports for several (``qarm audit A B -f json``)."""
    report = Report.model_json_schema(ref_template="#/$defs/{model}")
    definitions = report.pop("$defs", {})
    definitions["Report"] = report
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "qarm audit report",
        "description": (
            f"qarm audit --format json, schema_version {SCHEMA_VERSION}: a Report for one "
            "source, an array of Reports (in the order given) for several."
        ),
        "oneOf": [
            {"$ref": "#/$defs/Report"},
            {"type": "array", "items": {"$ref": "#/$defs/Report"}},
        ],
        "$defs": definitions,
    }


def json_schema() -> str:
    return json.dumps(report_schema(), indent=2, sort_keys=True) + "\n"
