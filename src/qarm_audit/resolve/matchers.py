"""Pattern sets matched flat in the number of patterns.

Engines loop over every pattern for every module; an auditor of million-tensor checkpoints
cannot. Each pattern is filed under its literal prefix (what any name it matches must start
with), so a name is tried only against the few patterns whose prefix it starts with; patterns
with no literal prefix (``*q_proj``, ``re:.*attn``) share one alternation. The deciding pattern
is the first, in declaration order, of the candidates that match.
"""

from __future__ import annotations

import contextlib
import fnmatch
import re
import signal
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import TypeAlias

from ..errors import PatternError

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
    except (OverflowError, ValueError) as exc:  # a{4294967296}: a count beyond re's range
        raise PatternError(where, f"pattern {pattern!r} does not compile: {exc}") from None
    except RecursionError:  # groups nested deeper than re's parser recurses
        raise PatternError(
            where, f"pattern {pattern!r} does not compile: its groups are nested too deeply"
        ) from None
    except MemoryError:
        raise PatternError(where, f"pattern {pattern!r} is too large to compile") from None


def glob_prefix(pattern: str) -> str:
    """The literal start of a shell wildcard: everything before its first ``*``, ``?`` or ``[``."""
    for i, char in enumerate(pattern):
        if char in "*?[":
            return pattern[:i]
    return pattern


def _top_level_bar(pattern: str) -> bool:
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
        i += 1
    return False


def regex_prefix(pattern: str) -> str:
    """The literal text every ``re.match`` of ``pattern`` starts with (possibly empty).

    Conservative: stops at the first metacharacter, drops a literal that a quantifier makes
    optional, and gives up on a top-level alternation."""
    if _top_level_bar(pattern):
        return ""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1].isalnum():
                break  # \d, \w, \b, ...: a class, not a literal
            literal, step = pattern[i + 1], 2
        elif char in ".^$*+?{}[]|()":
            break
        else:
            literal, step = char, 1
        after = pattern[i + step] if i + step < len(pattern) else ""
        if after in ("*", "?", "{"):
            break
        out.append(literal)
        if after == "+":
            break
        i += step
    return "".join(out)


class PrefixIndex:
    """Pattern numbers filed by literal prefix; a name's candidates in a few dict lookups."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        self.by_prefix: dict[str, list[int]] = {}
        for number, prefix in enumerate(prefixes):
            self.by_prefix.setdefault(prefix, []).append(number)
        self.lengths = sorted({len(p) for p in self.by_prefix})

    def candidates(self, name: str) -> list[int]:
        found: list[int] = []
        get = self.by_prefix.get
        size = len(name)
        for length in self.lengths:
            if length > size:
                break
            numbers = get(name[:length])
            if numbers:
                found += numbers
        return found


class FirstMatch:
    """The first pattern, in declaration order, that ``re.match``-es a name (start-anchored)."""

    def __init__(self, patterns: Sequence[str], where: str) -> None:
        self.patterns = list(patterns)
        self.where = where
        self.compiled = [compile_user_regex(p, where) for p in self.patterns]
        self.index = PrefixIndex([regex_prefix(p) for p in self.patterns])

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
        for number in sorted(self.index.candidates(name)):
            if self.compiled[number].match(name):
                return number
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
        self.compiled: dict[int, re.Pattern[str]] = {}
        """Compiled on first use: most patterns are never a candidate for any name."""
        self.index = PrefixIndex([glob_prefix(p) for p in self.patterns])

    def first(self, name: str) -> str | None:
        for number in sorted(self.index.candidates(name)):
            compiled = self.compiled.get(number)
            if compiled is None:
                compiled = self.compiled[number] = re.compile(
                    fnmatch.translate(self.patterns[number])
                )
            if compiled.match(name):
                return self.patterns[number]
        return None


Trie: TypeAlias = dict[str, "Trie"]
"""A character trie; the key ``""`` marks the end of a word."""


def trie_regex(words: Sequence[str]) -> str:
    """One regex matching any of ``words``, with shared prefixes factored into a trie.

    ``re`` tries the alternatives of a flat alternation one by one at every position; factored,
    it walks only the branch the text follows, so a search stays flat in the number of words.

    Built without recursion (a word may be longer than the interpreter's stack is deep): a run
    of single-child nodes is escaped in one piece, then each branching node is written once its
    children are, deepest first."""
    trie: Trie = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def branches(node: Trie) -> list[tuple[str, Trie]]:
        """(the literal run from ``node`` down to the next branching or end node, that node)."""
        out = []
        for char, child in sorted(node.items()):
            if not char:
                continue
            run = [char]
            while len(child) == 1 and "" not in child:
                char, child = next(iter(child.items()))
                run.append(char)
            out.append((re.escape("".join(run)), child))
        return out

    written: dict[int, str] = {}
    pending: list[tuple[Trie, bool]] = [(trie, False)]
    while pending:
        node, ready = pending.pop()
        if not ready:
            pending.append((node, True))
            pending.extend((child, False) for _, child in branches(node))
            continue
        parts = [run + written.pop(id(child)) for run, child in branches(node)]
        if not parts:
            written[id(node)] = ""
            continue
        body = "(?:" + "|".join(parts) + ")" if len(parts) > 1 else parts[0]
        if "" in node:
            body = body + "?" if len(parts) > 1 else f"(?:{body})?"
        written[id(node)] = body
    return written[id(trie)]


class SubstringSet:
    """vLLM's legacy stage: an entry excludes every name it is a substring of."""

    def __init__(self, entries: Sequence[str]) -> None:
        self.entries = [e for e in entries if e]
        self._any: re.Pattern[str] | None = None
        self._prefilter = bool(self.entries)
        if self.entries:
            try:
                self._any = re.compile(trie_regex(sorted(set(self.entries))))
            except (RecursionError, OverflowError, re.error):
                # entries nested hundreds deep (a, aa, aaa, ...) outgrow re's compiler: the
                # same answer comes from the plain loop below, without the prefilter
                self._prefilter = False

    def first(self, name: str) -> str | None:
        """The first entry (other than the name itself) found inside ``name``."""
        if not self.entries:
            return None
        if self._prefilter and (self._any is None or not self._any.search(name)):
            return None
        for entry in self.entries:
            if entry != name and entry in name:
                return entry
        return None
