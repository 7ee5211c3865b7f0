"""Ignoring findings on purpose: every ignore names a code, a module pattern and a reason.

Ignores come from ``qarm.toml`` (``[[ignore]]``) or ``pyproject.toml`` (``[[tool.qarm.ignore]]``)
in the current folder (or the file ``--config`` names), and from ``--ignore CODE[:MODULE-PATTERN]``
with ``--ignore-reason``. An ignored finding is moved to the report's ``ignored`` list with its
reason, never dropped; an ignore that matches nothing becomes an ``ignore-unmatched`` note.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import FetchError, UsageError
from ..findings import CODES
from .model import FindingRow, IgnoredRow, Report


class PolicyError(UsageError):
    """An ignore rule is malformed: unknown code, no reason, or an unreadable config file."""


@dataclass(frozen=True)
class IgnoreRule:
    code: str
    module: str
    """fnmatch pattern over the finding's module (``*`` for every module)."""
    reason: str
    origin: str
    """Where the rule was written: ``qarm.toml``, ``pyproject.toml`` or ``--ignore``."""

    def matches(self, code: str, module: str) -> bool:
        return code == self.code and fnmatch.fnmatchcase(module, self.module)


def _rule(raw: Any, origin: str) -> IgnoreRule:
    if not isinstance(raw, dict):
        raise PolicyError(origin, "each ignore must be a table with code, module and reason")
    unknown = sorted(set(raw) - {"code", "module", "reason"})
    if unknown:
        raise PolicyError(origin, f"ignore has unknown keys {unknown}")
    code, module, reason = raw.get("code"), raw.get("module", "*"), raw.get("reason")
    if not isinstance(code, str) or code not in CODES:
        raise PolicyError(origin, f"ignore names unknown code {code!r}")
    if not isinstance(module, str) or not module:
        raise PolicyError(origin, f"ignore of {code}: module must be a pattern string")
    if not isinstance(reason, str) or not reason.strip():
        raise PolicyError(origin, f"ignore of {code}:{module} has no reason; a reason is mandatory")
    return IgnoreRule(code=code, module=module, reason=reason.strip(), origin=origin)


def _read_ignores(file: Path, origin: str, table: tuple[str, ...]) -> list[IgnoreRule]:
    try:
        with open(file, "rb") as handle:
            data: Any = tomllib.load(handle)
    except OSError as exc:
        raise FetchError(origin, f"cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(origin, f"not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise PolicyError(origin, "not valid TOML: nested too deeply") from None
    for key in table:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    if not isinstance(data, dict):
        raise PolicyError(origin, "the qarm table is not a table")
    raw = data.get("ignore", [])
    if not isinstance(raw, list):
        raise PolicyError(origin, "ignore must be an array of tables ([[ignore]])")
    return [_rule(item, origin) for item in raw]


def load_config_ignores(folder: Path) -> list[IgnoreRule]:
    """Ignores from ``qarm.toml``, else from ``pyproject.toml``'s ``[tool.qarm]``, in ``folder``."""
    for name, table in (("qarm.toml", ()), ("pyproject.toml", ("tool", "qarm"))):
        file = folder / name
        if not file.is_file():
            continue
        rules = _read_ignores(file, name, table)
        if rules or name == "qarm.toml":
            return rules
    return []


def load_config_file(file: Path) -> list[IgnoreRule]:
    """Ignores from one named file (``--config``): ``[[tool.qarm.ignore]]`` in a file named
    ``pyproject.toml``, ``[[ignore]]`` in any other."""
    table = ("tool", "qarm") if file.name == "pyproject.toml" else ()
    return _read_ignores(file, str(file), table)


def parse_cli_ignores(specs: Sequence[str], reason: str | None) -> list[IgnoreRule]:
    """``CODE[:MODULE-PATTERN]`` from the command line; ``--ignore-reason`` is mandatory."""
    if specs and not (reason and reason.strip()):
        raise PolicyError("--ignore", "give the reason with --ignore-reason")
    out = []
    for spec in specs:
        code, _, module = spec.partition(":")
        out.append(_rule({"code": code, "module": module or "*", "reason": reason}, "--ignore"))
    return out


def first_match(rules: Iterable[IgnoreRule], code: str, module: str) -> IgnoreRule | None:
    for rule in rules:
        if rule.matches(code, module):
            return rule
    return None


def apply_ignores(report: Report, rules: Sequence[IgnoreRule]) -> Report:
    """Move every finding an ignore rule matches (the first rule that matches gives the reason)
    from refusals, warnings or notes to ``ignored``, recompute the verdict, and add an
    ``ignore-unmatched`` note for each rule that matched nothing."""
    if not rules:
        return report
    used: set[int] = set()
    ignored = list(report.ignored)
    kept: dict[str, list[FindingRow]] = {}
    for key, rows in (
        ("refusals", report.refusals),
        ("warnings", report.warnings),
        ("notes", report.notes),
    ):
        kept[key] = []
        for row in rows:
            index = next((i for i, r in enumerate(rules) if r.matches(row.code, row.module)), None)
            if index is None:
                kept[key].append(row)
                continue
            used.add(index)
            rule = rules[index]
            ignored.append(IgnoredRow(**row.model_dump(), reason=rule.reason, origin=rule.origin))
    unmatched = [
        FindingRow(
            code="ignore-unmatched",
            severity=CODES["ignore-unmatched"][0].value,
            module="",
            tensor="",
            message=f"{rule.origin}: ignore {rule.code}:{rule.module} matched no finding "
            f"(reason given: {rule.reason})",
        )
        for i, rule in enumerate(rules)
        if i not in used
    ]
    notes = sorted([*kept["notes"], *unmatched], key=lambda r: (r.code, r.module, r.tensor))
    verdict = "refused" if kept["refusals"] else "warnings" if kept["warnings"] else "clean"
    return report.model_copy(
        update={
            "verdict": verdict,
            "refusals": kept["refusals"],
            "warnings": kept["warnings"],
            "notes": notes,
            "ignored": ignored,
        }
    )
