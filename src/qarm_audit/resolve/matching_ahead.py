"""A compressed-tensors declaration's ``re:`` entries tried on the module names, most of them
in a forked copy of the process, while the process builds the layer tree and tries the rest.

Trying 500 patterns led by ``.*`` on a quarter of a million module names takes half a second
even flat in the number of patterns (``matchers.py``), and depends only on the names (the
engine's, for the engine's view), and the patterns, all known once the modules are grouped.
The copy (``sources/aside.py``) works out what each name at the back matches, as the
pattern set would here, and the process takes that as known before it resolves. Nothing
reported depends on it: a name the copy did not work out (or a copy that could not be made,
or ended) is worked out here, by the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..declarations import Declaration
from ..errors import PatternError
from ..sources.aside import Aside, usable_cpus
from .compressed_tensors import engine_regex
from .matchers import FirstMatch

AHEAD_MIN_NAMES = 25_000
"""Fewer names are matched in a fraction of the time a copy takes to start and send."""

FRONT_SHARE = 0.35
"""The share of the names the process works out itself: less than half, since it first builds
the layer tree and checks completeness while the copy starts on its share at once."""

FRONT_SHARE_SHARED = 0.5
"""The share where the process has one other CPU (or none): the copy shares it with the index
proof and the producer view's copy, which then hold up the end of the audit, so the process
takes more (0.984x wall by 16 alternated pairs on a 985k-tensor compressed-tensors folder)."""

PatternLists = list[tuple[tuple[str, ...], str, bool]]
"""(patterns, where, tried on the engine's names) of each pattern set asked: the resolver's on
the engine's names, the producer view's on the checkpoint's."""

_Worked = list[list[Any]]
"""Per set, what each name matches (None: not worked out)."""


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
    """Started once the modules are grouped, with their ``names``; :meth:`take` before the
    resolver runs. ``path``: the engine's name for a checkpoint module (the layer tree's),
    where it has one."""

    def __init__(
        self,
        lists: PatternLists,
        names: list[str],
        path: Callable[[str], str] | None = None,
    ) -> None:
        if path is None:  # the engine's names are the checkpoint's: a set is asked once
            lists = list(dict.fromkeys((patterns, where, False) for patterns, where, _ in lists))
        self._lists = lists
        self._names = names
        self._engine_names = names
        self._front = 0
        self._aside: Aside[_Worked] | None = None
        if not lists or len(names) < AHEAD_MIN_NAMES:
            return
        try:
            # planned here, as the audit would plan them later: the copy starts on the names
            for patterns, where, _ in lists:
                FirstMatch(patterns, where)
        except PatternError:
            return  # refused: the resolver meets the same refusal where it always does
        # the engine's names worked out once, before the fork: the copy takes its share of them
        if path is not None:
            self._engine_names = list(map(path, names))
        share = FRONT_SHARE if usable_cpus() > 2 else FRONT_SHARE_SHARED
        self._front = int(len(names) * share)
        back, engine_back = names[self._front :], self._engine_names[self._front :]
        self._aside = Aside(lambda: _worked_out(lists, back, engine_back))

    @property
    def forked(self) -> bool:
        """Whether a copy is working the names out."""
        return self._aside is not None and self._aside.forked

    def take(self) -> None:
        """The front share worked out here, then each pattern set learns what each name
        matches (only the front share where the copy gave nothing)."""
        if not self.forked:
            self.close()
            return
        names, engine_names = self._names, self._engine_names
        front = [
            FirstMatch(patterns, where).shared.worked_out(
                (engine_names if engine else names)[: self._front]
            )
            for patterns, where, engine in self._lists
        ]
        got = self._aside.next() if self._aside is not None else None
        self.close()
        if got is None:
            got = [[None] * (len(names) - self._front)] * len(self._lists)
        for (patterns, where, engine), here, there in zip(self._lists, front, got, strict=True):
            FirstMatch(patterns, where).shared.learn(
                engine_names if engine else names, [*here, *there]
            )

    def close(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None


def _worked_out(
    lists: PatternLists, names: list[str], engine_names: list[str]
) -> Iterator[_Worked]:
    """In the copy: what each of ``names`` (``engine_names``, the engine's names for them, for
    the engine's sets) matches, set by set."""
    yield [
        FirstMatch(patterns, where).shared.worked_out(engine_names if engine else names)
        for patterns, where, engine in lists
    ]
