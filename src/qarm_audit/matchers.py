"""Pattern sets compiled once and matched in C: flat in the number of patterns.

Engines loop over every pattern for every module; an auditor of million-tensor checkpoints
cannot. Each set compiles to one alternation; the deciding pattern is looked up only on a hit.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from .errors import PatternError

MAX_PATTERN_LENGTH = 4096
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}]\)\s*[+*{]")
"""A quantified group whose body ends in a quantifier: the shape of catastrophic backtracking."""


def compile_user_regex(pattern: str, where: str) -> re.Pattern[str]:
    """Compile a ``re:`` pattern from a declaration, refusing unsafe or broken ones by name."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(where, f"pattern of {len(pattern)} characters is above the cap")
    if _NESTED_QUANTIFIER.search(pattern):
        raise PatternError(
            where, f"pattern {pattern!r} nests quantifiers (catastrophic backtracking)"
        )
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise PatternError(where, f"pattern {pattern!r} does not compile: {exc}") from None


class FirstMatch:
    """The first pattern, in declaration order, that ``re.match``-es a name (start-anchored)."""

    def __init__(self, patterns: Sequence[str], where: str) -> None:
        self.patterns = list(patterns)
        self.where = where
        self.compiled = [compile_user_regex(p, where) for p in self.patterns]
        self._any: re.Pattern[str] | None = None
        if self.patterns:
            try:
                self._any = re.compile("|".join(f"(?:{p})" for p in self.patterns))
            except re.error:
                self._any = None  # back-references across groups: fall back to the loop

    def first(self, name: str) -> int | None:
        """Index of the first matching pattern, or None (under :func:`regex_deadline`)."""
        watch = _WATCH
        if not watch.armed:
            with regex_deadline():
                if watch.armed:
                    return self.first(name)
                return self._first(name)  # no timer can be set here: unguarded
        watch.serial += 1
        watch.current = (self.where, self.patterns, name)
        try:
            return self._first(name)
        finally:
            watch.current = None

    def _first(self, name: str) -> int | None:
        if self._any is not None and not self._any.match(name):
            return None
        for i, pattern in enumerate(self.compiled):
            if pattern.match(name):
                return i
        return None


MATCH_BUDGET = 1.0
"""Seconds one name may take against a declaration's ``re:`` patterns before qarm refuses them."""

TOTAL_BUDGET = 10.0
"""Seconds all the ``re:`` matching of one :func:`regex_deadline` may take, summed."""

TICK = 0.1
"""Seconds between two looks of the watchdog at the match in progress."""


class _Watch:
    """The match in progress, for the watchdog (main thread only, hence no lock)."""

    def __init__(self) -> None:
        self.armed = False
        self.serial = 0
        self.current: tuple[str, list[str], str] | None = None
        self.seen = -1
        self.ticks = 0
        self.total_ticks = 0

    def tick(self, signum: int, frame: FrameType | None) -> None:
        current = self.current
        if current is None:
            return
        self.total_ticks += 1
        if self.serial != self.seen:
            self.seen, self.ticks = self.serial, 0
        self.ticks += 1
        slow = self.ticks * TICK >= MATCH_BUDGET
        if slow or self.total_ticks * TICK >= TOTAL_BUDGET:
            where, patterns, name = current
            self.current = None
            shown = name if len(name) <= 80 else name[:77] + "..."
            spent = (
                f"ran for more than {MATCH_BUDGET:g} s on the module name {shown!r}"
                if slow
                else f"ran for more than {TOTAL_BUDGET:g} s in all (last on {shown!r})"
            )
            listed = ", ".join(repr(p) for p in patterns)
            raise PatternError(
                where,
                f"re: patterns {listed[:300]} {spent} (catastrophic backtracking); qarm stopped "
                "them",
            )


_WATCH = _Watch()


@contextlib.contextmanager
def regex_deadline() -> Iterator[None]:
    """Bound the time ``re:`` patterns may take inside the block: a watchdog (``SIGALRM`` every
    :data:`TICK` s) interrupts a match that runs past :data:`MATCH_BUDGET` or a block whose
    matches sum past :data:`TOTAL_BUDGET`, with a :class:`PatternError`. Python's ``re`` checks
    for signals while it backtracks, so even an exponential match stops.

    Only in the main thread, and only when nothing else uses ``SIGALRM`` or the real-time
    interval timer; elsewhere the block runs unguarded (see docs/reliability.md). Re-entrant.
    """
    watch = _WATCH
    if (
        watch.armed
        or not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL  # None: set outside Python
        or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)
    ):
        yield
        return
    previous = signal.signal(signal.SIGALRM, watch.tick)
    watch.armed, watch.current, watch.seen, watch.total_ticks = True, None, -1, 0
    signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        watch.armed, watch.current = False, None


class WildcardSet:
    """Shell wildcards over the whole dotted name (``fnmatch``: ``*`` crosses dots)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = list(patterns)
        translated = [fnmatch.translate(p) for p in self.patterns]
        self._any = re.compile("|".join(translated)) if translated else None

    def first(self, name: str) -> str | None:
        if self._any is None or not self._any.match(name):
            return None
        for pattern in self.patterns:
            if fnmatch.fnmatchcase(name, pattern):
                return pattern
        return None


class SubstringSet:
    """vLLM's legacy stage: an entry excludes every name it is a substring of."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.entries = [e for e in entries if e]
        self._any = (
            re.compile(
                "|".join(re.escape(e) for e in sorted(set(self.entries), key=len, reverse=True))
            )
            if self.entries
            else None
        )

    def first(self, name: str) -> str | None:
        """The first entry (other than the name itself) found inside ``name``."""
        if self._any is None or not self._any.search(name):
            return None
        for entry in self.entries:
            if entry != name and entry in name:
                return entry
        return None
