"""qarm-audit: check a quantized checkpoint's declaration against the tensors it ships.

The typed library API (``py.typed``)::

    from qarm_audit import audit

    report = audit("fixtures/manifests/seed-mtp-w4a16.manifest.json", engine="vllm")
    print(report.verdict, [r.code for r in report.warnings])

``audit``, ``diff`` and ``explain`` return pydantic models (``Report``, ``DiffReport``,
``Explanation``); every error they raise on purpose is a ``QarmError`` carrying the ``ExitCode``
the command line maps it to.
"""

from __future__ import annotations

from .commands.audit import audit
from .commands.diff import diff
from .commands.explain import explain
from .errors import ExitCode, QarmError
from .report.diff_model import DiffReport
from .report.explain_model import Explanation
from .report.model import Report
from .report.policy import IgnoreRule
from .runtime import VERSION

__version__ = VERSION

__all__ = [
    "DiffReport",
    "ExitCode",
    "Explanation",
    "IgnoreRule",
    "QarmError",
    "Report",
    "__version__",
    "audit",
    "diff",
    "explain",
]
