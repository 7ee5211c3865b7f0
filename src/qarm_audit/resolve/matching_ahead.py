"""A compressed-tensors declaration's ``re:`` entries tried on every module name in a forked
copy of the process while the process groups the tensors into modules.

Trying 500 patterns led by ``.*`` on a quarter of a million module names takes most of a
second even flat in the number of patterns (``matchers.py``), and depends only on the names
(the engine's, for the engine's view), and the patterns, all known once the headers and
documents are read. The copy (``sources/aside.py``) works out what each name matches, as the
pattern set would here, and the process takes that as known before it resolves. Nothing
reported depends on it: a name the copy did not work out (or a copy that could not be made,
or ended) is worked out here, by the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..declarations import Declaration
from ..errors import PatternError
from ..sources.aside import Aside
from ..sources.checkpoint import TensorEntry
from .compressed_tensors import engine_regex
from .matchers import FirstMatch

AHEAD_MIN_TENSORS = 100_000
"""Fewer tensors are matched in a fraction of the time a copy takes to start and send."""

PatternLists = list[tuple[tuple[str, ...], str, bool]]
"""(patterns, where, tried on the engine's names) of each pattern set asked: the resolver's on
the engine's names, the producer view's on the checkpoint's."""

_Worked = tuple[list[str], list[str], list[list[Any]]]
"""The module names, the engine's names for them, and per set what each matches (None: not
worked out)."""


def pattern_lists(
    declaration: Declaration, engine_declaration: Declaration, pattern_module: str
) -> PatternLists:
    """The pattern sets the resolver (the engine's view, compiled as the engine does, on its
    names) and the producer view (compressed-tensors' own ``re``) build, each once."""
    lists: PatternLists = []
    views = ((engine_declaration, pattern_module, True), (declaration, "re", False))
    for source, module, engine in views:
        rules = source.compressed_tensors
        if rules is None:
            continue
        ignore, targets = engine_regex(rules, module)
        for patterns, where in ((ignore, "ignore"), (targets, "targets")):
            key = (tuple(sorted(set(patterns))), where, engine)
            if patterns and key not in lists:
                lists.append(key)
    return lists


class MatchingAhead:
    """Started before the inventory is built; :meth:`take` before the resolver runs.
    ``path``: the engine's name for a checkpoint module (the layer tree's), where it has one."""

    def __init__(
        self,
        lists: PatternLists,
        tensors: Sequence[TensorEntry],
        path: Callable[[str], str] | None = None,
    ) -> None:
        if path is None:  # the engine's names are the checkpoint's: a set is asked once
            lists = list(dict.fromkeys((patterns, where, False) for patterns, where, _ in lists))
        self._lists = lists
        self._aside: Aside[_Worked] | None = None
        if not lists or len(tensors) < AHEAD_MIN_TENSORS:
            return
        try:
            # planned here, as the audit would plan them later: the copy starts on the names
            for patterns, where, _ in lists:
                FirstMatch(patterns, where)
        except PatternError:
            return  # refused: the resolver meets the same refusal where it always does
        self._aside = Aside(lambda: _worked_out(lists, tensors, path))

    @property
    def forked(self) -> bool:
        """Whether a copy is working the names out."""
        return self._aside is not None and self._aside.forked

    def take(self) -> None:
        """Each pattern set learns what the copy worked out (nothing where it gave nothing)."""
        if self._aside is None:
            return
        got = self._aside.next()
        self.close()
        if got is None:
            return
        names, engine_names, outcomes = got
        for (patterns, where, engine), worked in zip(self._lists, outcomes, strict=True):
            FirstMatch(patterns, where).shared.learn(engine_names if engine else names, worked)

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


def _worked_out(
    lists: PatternLists, tensors: Sequence[TensorEntry], path: Callable[[str], str] | None
) -> Iterator[_Worked]:
    """In the copy: the module names the inventory will hold (a name's last dot splits off
    its operand), the engine's names for them, and each set's outcomes."""
    names = list(dict.fromkeys(entry[0].rpartition(".")[0] for entry in tensors))
    engine_names = list(map(path, names)) if path is not None else names
    yield (
        names,
        engine_names,
        [
            FirstMatch(patterns, where).shared.worked_out(engine_names if engine else names)
            for patterns, where, engine in lists
        ],
    )
