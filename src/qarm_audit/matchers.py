"""Pattern sets compiled once and matched in C: flat in the number of patterns.

Engines loop over every pattern for every module; an auditor of million-tensor checkpoints
cannot. Each set compiles to one alternation; the deciding pattern is looked up only on a hit.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

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
        self.compiled = [compile_user_regex(p, where) for p in self.patterns]
        self._any: re.Pattern[str] | None = None
        if self.patterns:
            try:
                self._any = re.compile("|".join(f"(?:{p})" for p in self.patterns))
            except re.error:
                self._any = None  # back-references across groups: fall back to the loop

    def first(self, name: str) -> int | None:
        """Index of the first matching pattern, or None."""
        if self._any is not None and not self._any.match(name):
            return None
        for i, pattern in enumerate(self.compiled):
            if pattern.match(name):
                return i
        return None


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
