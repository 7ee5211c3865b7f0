"""JSON: the report model, serialised with a fixed key order; the schema is ``qarm schema``."""

from __future__ import annotations

import json
from typing import Any

from .model import SCHEMA_VERSION, Report

SCHEMA_ID = f"https://github.com/qarm-audit/qarm-audit/schema/report-{SCHEMA_VERSION}.json"
"""The schema's ``$id``: one per schema version."""


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


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
