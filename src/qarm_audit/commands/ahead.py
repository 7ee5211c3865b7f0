"""What the audit of a folder works out while the shards' headers are still being read.

The declaration depends on the documents alone, and a ModelOpt list of 250 000 layers takes
half a second to parse. A forked copy of the process (``sources/aside.py``) parses it while
the process reads the headers, and the audit takes it when it gets there. That changes
nothing the audit reports: the declaration is the one the audit would parse, and where the
copy gives none (it could not be made, died, or the parse failed) the audit parses it itself,
meeting the same error where it would have.

Each header's tensors are grouped into modules as the header comes in
(:class:`~qarm_audit.modules.inventory.ShardInventory`), while copies of the process parse
the later ones: the audit takes the modules joined in the checkpoint's order of shards, which
are those :func:`~qarm_audit.modules.inventory.build_inventory` gives, and builds them itself
where they cannot be joined so.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..declarations import Declaration, read_declaration
from ..modules.inventory import ModuleInfo, ShardInventory
from ..sources.aside import Aside
from ..sources.checkpoint import ShardHeader

AHEAD_MIN_BYTES = 1 << 20
"""Documents at least this large are parsed in a forked copy; a smaller declaration parses
in milliseconds, less than a copy takes to start."""


class AuditAhead:
    """Told by the folder reader (an :class:`~qarm_audit.sources.Ahead`) the documents, then
    each header; asked by the audit for the declaration and the modules, where it wants them
    (``declaration``, ``modules``: whether it does). :meth:`close` when the audit ends."""

    def __init__(self, *, declaration: bool = True, modules: bool = True) -> None:
        self._wanted = declaration
        self._aside: Aside[Declaration] | None = None
        self._documents: dict[str, str] | None = None
        self._declaration: Declaration | None = None
        self._inventory = ShardInventory() if modules else None

    def documents(self, documents: dict[str, str]) -> None:
        if (
            not self._wanted
            or self._aside is not None
            or sum(map(len, documents.values())) < AHEAD_MIN_BYTES
        ):
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

    def header(self, shard: ShardHeader) -> None:
        if self._inventory is not None:
            self._inventory.add(shard)

    def modules(self, shards: Sequence[ShardHeader]) -> dict[str, ModuleInfo] | None:
        """The modules of ``shards``' tensors, grouped as the headers came in; None where they
        cannot be joined so (see :class:`ShardInventory`): the caller builds them."""
        return self._inventory.inventory(shards) if self._inventory is not None else None

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


def _parsed(documents: dict[str, str]) -> Iterator[Declaration]:
    """In the copy: the declaration (an error ends the copy, and the audit parses it)."""
    yield read_declaration(documents)
