"""A large folder's declaration, parsed while the shards' headers are read.

The declaration depends on the documents alone, and a ModelOpt list of 250 000 layers takes
half a second to parse. A forked copy of the process (``sources/aside.py``) parses it while
the process reads the headers, and the audit takes it when it gets there. That changes
nothing the audit reports: the declaration is the one the audit would parse, and where the
copy gives none (it could not be made, died, or the parse failed) the audit parses it itself,
meeting the same error where it would have.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..declarations import Declaration, read_declaration
from ..sources.aside import Aside

AHEAD_MIN_BYTES = 1 << 20
"""Documents at least this large are parsed in a forked copy; a smaller declaration parses
in milliseconds, less than a copy takes to start."""


class AuditAhead:
    """Started by the folder reader (``start`` is an :data:`~qarm_audit.sources.Ahead`) once
    the documents are read; asked by the audit for the declaration. :meth:`close` when the
    audit ends."""

    def __init__(self) -> None:
        self._aside: Aside[Declaration] | None = None
        self._documents: dict[str, str] | None = None
        self._declaration: Declaration | None = None

    def start(self, documents: dict[str, str]) -> None:
        if self._aside is not None or sum(map(len, documents.values())) < AHEAD_MIN_BYTES:
            return
        self._documents = documents
        self._aside = Aside(lambda: _parsed(documents))

    def declaration(self, documents: dict[str, str]) -> Declaration:
        """:func:`read_declaration` of ``documents``: the one parsed ahead where it is theirs."""
        if self._declaration is None and self._aside is not None:
            got = self._aside.next()
            self.close()
            if isinstance(got, Declaration):
                self._declaration = got
        if self._declaration is not None and documents == self._documents:
            return self._declaration
        return read_declaration(documents)  # the same, or its error, worked out here

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


def _parsed(documents: dict[str, str]) -> Iterator[Declaration]:
    """In the copy: the declaration (an error ends the copy, and the audit parses it)."""
    yield read_declaration(documents)
