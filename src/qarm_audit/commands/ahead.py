"""What an audit of a large folder works out ahead, while the shards' headers are read.

The declaration depends on the documents alone, and what the ``re:`` patterns of a
compressed-tensors declaration match depends on the module names alone, which the index
lists before any header is read. A forked copy of the process (``sources/aside.py``) parses
the declaration and matches the index's names meanwhile; the audit takes both when it gets
there. Neither changes what the audit reports: the declaration is the one the audit would
parse (it parses it itself where the copy gives none), and what a name matches is the same
wherever it is worked out (a name the index does not list is matched here, as before).
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson

from ..declarations import Declaration, read_declaration
from ..resolve.compressed_tensors import regex_lists
from ..resolve.matchers import Primed, adopt, prime_elsewhere
from ..sources.aside import Aside

AHEAD_MIN_BYTES = 4 << 20
"""Documents and index together at least this large (an index of some 60 000 tensors) are
worth a forked copy of the process; a smaller folder reads faster than a copy starts."""


class AuditAhead:
    """Started by the folder reader (``start`` is an :data:`~qarm_audit.sources.Ahead`) once
    the documents and the index are read; asked by the audit for the declaration, then to
    take what the patterns match before it resolves. :meth:`close` when the audit ends."""

    def __init__(self) -> None:
        self._aside: Aside[object] | None = None
        self._documents: dict[str, str] | None = None
        self._declaration: Declaration | None = None

    def start(self, documents: dict[str, str], index: bytes | None) -> None:
        size = sum(map(len, documents.values())) + (len(index) if index is not None else 0)
        if self._aside is not None or size < AHEAD_MIN_BYTES:
            return
        self._documents = documents
        self._aside = Aside(lambda: _worked_out(documents, index))

    def declaration(self, documents: dict[str, str]) -> Declaration:
        """:func:`read_declaration` of ``documents``: the one parsed ahead where it is theirs."""
        if self._declaration is not None and documents == self._documents:
            return self._declaration
        if self._aside is not None and self._declaration is None and documents == self._documents:
            got = self._aside.next()
            if isinstance(got, Declaration):
                self._declaration = got
                return got
        return read_declaration(documents)  # the same, or its error, worked out here

    def take_matches(self) -> None:
        """Take what the index's names match, once the declaration was taken from ahead."""
        if self._aside is None or self._declaration is None:
            return
        got = self._aside.next()
        self.close()
        if isinstance(got, tuple):
            for primed in got:
                if isinstance(primed, Primed):
                    adopt(primed)

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


def _worked_out(documents: dict[str, str], index: bytes | None) -> Iterator[object]:
    """In the child: the declaration, then what the index's module names match (an error
    ends the child, and the audit works that part out itself)."""
    declaration = read_declaration(documents)
    yield declaration
    rules = declaration.compressed_tensors
    lists = regex_lists(rules) if rules is not None else []
    names = _module_names(index) if lists and index is not None else None
    if names:
        yield tuple(prime_elsewhere(patterns, where, names) for patterns, where in lists)


def _module_names(index: bytes) -> list[str] | None:
    """The modules of the tensors an index lists, once each; None for what is no index (the
    folder reader names what is wrong with it)."""
    try:
        parsed = orjson.loads(index)
    except orjson.JSONDecodeError:
        return None
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict):
        return None
    return list(dict.fromkeys(name.rpartition(".")[0] for name in weight_map))
