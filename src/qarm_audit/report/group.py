"""Findings with one cause, grouped for the eye: the table and the markdown show one row per
cause (the code and the message with the module's own name taken out), with the count and
the first modules; the JSON keeps every row.

Also the words a reader counts with: ``1 refusal``, ``2 refusals``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import FindingRow, IgnoredRow

MODULE = "<module>"
"""What stands for each module's name in a grouped row's message and tensor."""

EXAMPLES = 3
"""Modules a grouped row names; the markdown folds the full list beneath the table."""


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 refusal``, ``0 refusals``, ``2 shards``."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


@dataclass
class Group:
    code: str
    message: str
    """The message; in a group of several, with each module's name as :data:`MODULE`."""
    tensor: str
    rows: list[FindingRow | IgnoredRow] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        return [r.module for r in self.rows]

    @property
    def first(self) -> FindingRow | IgnoredRow:
        return self.rows[0]


def _pattern(row: FindingRow | IgnoredRow) -> tuple[str, str]:
    message, tensor = row.message, row.tensor
    if row.module:
        if tensor:
            message = message.replace(tensor, tensor.replace(row.module, MODULE))
        message = message.replace(row.module, MODULE)
        tensor = tensor.replace(row.module, MODULE)
    return message, tensor


def group_findings(rows: Sequence[FindingRow | IgnoredRow]) -> list[Group]:
    """Rows of one code whose messages differ only by the module's name, in first-seen order;
    a row alone keeps its own words. Ignored rows group by reason too."""
    groups: dict[tuple[str, ...], Group] = {}
    for row in rows:
        message, tensor = _pattern(row)
        key: tuple[str, ...] = (row.code, row.severity, message, tensor)
        if isinstance(row, IgnoredRow):
            key += (row.reason, row.origin)
        if not row.module:
            key += (str(len(groups)),)  # a declaration-level finding stands alone
        group = groups.setdefault(key, Group(row.code, message, tensor))
        group.rows.append(row)
    for group in groups.values():
        if len(group.rows) == 1:
            group.message, group.tensor = group.first.message, group.first.tensor
    return list(groups.values())


_ON_MODULES = re.compile(r"\b(\d+) modules\b")


def module_cell(group: Group) -> str:
    """The module column, as plain text: the module; ``N modules: a, b, c, …`` for a group;
    ``a (first of N)`` where one row speaks of N modules (``on 208 modules``)."""
    if len(group.rows) > 1:
        shown = ", ".join(group.modules[:EXAMPLES])
        more = ", …" if len(group.rows) > EXAMPLES else ""
        return f"{len(group.rows)} modules: {shown}{more}"
    row = group.first
    counted = _ON_MODULES.search(row.message)
    if row.module and counted and int(counted.group(1)) > 1:
        return f"{row.module} (first of {counted.group(1)})"
    return row.module
