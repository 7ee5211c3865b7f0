"""Renderers of the one report model: terminal table, markdown, JSON."""

from __future__ import annotations

from .model import Report
from .render_json import json_schema, render_json
from .render_markdown import render_markdown, verdict_line

FORMATS = ("table", "markdown", "json")

__all__ = ["FORMATS", "Report", "json_schema", "render_json", "render_markdown", "verdict_line"]
