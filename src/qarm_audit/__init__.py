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

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import ExitCode, QarmError
from .runtime import VERSION

if TYPE_CHECKING:
    from .commands.audit import audit
    from .commands.diff import diff
    from .commands.explain import explain
    from .report.diff_model import DiffReport
    from .report.explain_model import Explanation
    from .report.model import Report
    from .report.policy import IgnoreRule

__version__ = VERSION

_LAZY = {
    "audit": ".commands.audit",
    "diff": ".commands.diff",
    "explain": ".commands.explain",
    "DiffReport": ".report.diff_model",
    "Explanation": ".report.explain_model",
    "Report": ".report.model",
    "IgnoreRule": ".report.policy",
}
"""Imported on first use: ``qarm audit`` imports neither ``diff`` nor ``explain`` (nor the
pydantic models only they build), and ``import qarm_audit.cli`` pays for what it runs."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
