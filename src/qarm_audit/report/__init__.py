"""Renderers of the one report model: terminal table, markdown, JSON, GitHub annotations."""

from __future__ import annotations

from .model import Report
from .render_github import render_github
from .render_json import json_schema, render_json, render_json_bytes
from .render_markdown import render_markdown, verdict_line

FORMATS = ("table", "markdown", "json", "github")

__all__ = [
    "FORMATS",
    "Report",
    "json_schema",
    "render_github",
    "render_json",
    "render_json_bytes",
    "render_markdown",
    "verdict_line",
]
