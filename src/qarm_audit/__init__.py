"""qarm-audit: check a quantized checkpoint's declaration against the tensors it ships."""

from __future__ import annotations

from .audit import audit
from .errors import ExitCode, QarmError
from .report.model import Report

__version__ = "0.1.0"

__all__ = ["ExitCode", "QarmError", "Report", "__version__", "audit"]
