"""JSON: the report model, serialised with a fixed key order; the schema is ``qarm schema``."""

from __future__ import annotations

import json

from .model import Report


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


def json_schema() -> str:
    return json.dumps(Report.model_json_schema(), indent=2, sort_keys=True) + "\n"
