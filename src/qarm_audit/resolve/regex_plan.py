"""How one ``re:`` pattern is matched: in re2 (linear time) where re2 has its exact semantics,
else in Python's ``re`` where it cannot backtrack catastrophically, else refused. Every verdict
follows from the pattern and the name alone, never from time or load.

A pattern is read by Python's own parser (``re._parser``, the tree ``re.compile`` compiles), and
that tree is written out again in re2's syntax, node by node: literals and classes as code
points, groups without captures, repeats as counted repeats. Nodes re2 has no equivalent for
(lookarounds, backreferences, conditionals, atomic groups, possessive repeats) leave the
pattern to Python's ``re``. Greedy and lazy repeats find a match exactly when the other does,
so ``re.match`` (is there a match at the start?) gives one answer in both engines, except where
their classes or anchors differ, which depends on the name: ``$`` also matches before a final
newline in Python, ``\\d \\w \\s \\b`` and case folding are Unicode in Python and ASCII in re2.
A name holding a newline (for a pattern with ``$``) or anything but printable ASCII (for one with
classes or ``(?i)``) is therefore matched by Python's ``re``, only where the pattern is safe.

Safe for Python's backtracking: at most one repeat of more than one item in the whole pattern,
and none nested in another or around an alternation. Such a match cannot take more than
quadratic steps in the name.

Required literals: text any match must contain (a run of literals outside any optional part),
so a name that holds none of a pattern's is never tried against it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter, ne
from typing import Any

import re2

_parser: Any = importlib.import_module("re._parser")
_c: Any = importlib.import_module("re._constants")

IGNORECASE = 2
MULTILINE = 8
DOTALL = 16

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern re2 refuses goes to Python's re, silently
_OPTIONS.never_capture = True

_CATEGORIES = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}


class _NoEquivalent(Exception):
    """A node re2 has no exact equivalent for."""


@dataclass(frozen=True)
class Plan:
    """How a compiled pattern is matched."""

    re2: Any | None
    """The re2 form, or None where re2 cannot take the pattern."""
    newline_sensitive: bool
    """Holds a ``$`` (not multi-line): a name with a newline goes to Python's ``re``."""
    class_sensitive: bool
    """Holds ``\\d \\w \\s \\b`` (or their negations) or ``(?i)``: a name that is not printable
    ASCII goes to Python's ``re``."""
    python_safe: bool
    """Python's backtracking cannot blow up on it (see the module docstring)."""
    literals: tuple[str, ...]
    """Text every match contains (the longest first), possibly none."""

    def needs_python(self, name: str) -> bool:
        """True where only Python's ``re`` has the pattern's exact answer for ``name``."""
        if self.re2 is None:
            return True
        if self.newline_sensitive and "\n" in name:
            return True
        return self.class_sensitive and not (name.isascii() and name.isprintable())


def plan(pattern: str) -> Plan:
    """The plan for a pattern that ``re.compile`` accepts."""
    tree = _parser.parse(pattern)
    writer = _Writer()
    try:
        text = writer.seq(_items(tree), tree.state.flags)
        compiled = re2.compile(text, _OPTIONS)
    except (_NoEquivalent, re2.error):
        compiled = None
    repeats, nested = _repeats(_items(tree))
    runs: list[str] = []
    if not tree.state.flags & IGNORECASE:
        _required(_items(tree), runs)
    literals = tuple(sorted({r for r in runs if r}, key=lambda r: (-len(r), r)))
    return Plan(
        re2=compiled,
        newline_sensitive=writer.dollar,
        class_sensitive=writer.classes,
        python_safe=repeats <= 1 and not nested,
        literals=literals,
    )


_ANCHOR_START = getattr(getattr(re2, "_Anchor", None), "ANCHOR_START", None)
"""re2's anchor for ``re.match``: a match starting at the name's start (None where the
wrapper does not expose it, and its own ``match`` is used)."""


def _matcher(compiled: Any) -> Any:
    """re2's own matcher behind the wrapper's ``compiled``, or None where it cannot be reached
    (the wrapper's ``match`` maps byte offsets back to characters for a match object, which
    costs four times the match)."""
    regexp = getattr(compiled, "_regexp", None)
    if regexp is None or _ANCHOR_START is None or not hasattr(regexp, "Match"):
        return None
    return regexp


_NONE = (-1, -1)
"""The span re2's matcher gives for no match."""


def re2_match(compiled: Any) -> Any:
    """``name -> bool``: does ``compiled`` (an re2 pattern) match at the start of ``name``,
    through re2's matcher where it can be reached, else through the wrapper."""
    regexp, anchor = _matcher(compiled), _ANCHOR_START
    if regexp is None:
        return lambda name: compiled.match(name) is not None

    def match(name: str) -> bool:
        data = name.encode("utf-8")
        return bool(regexp.Match(anchor, data, 0, len(data))[0] != _NONE)

    return match


def re2_match_many(compiled: Any) -> Callable[[Sequence[str]], list[bool]] | None:
    """``names -> [bool]``: :func:`re2_match` of each name, in one call of re2's matcher per
    name without a Python frame around it; None where re2's matcher cannot be reached."""
    regexp, anchor = _matcher(compiled), _ANCHOR_START
    if regexp is None:
        return None

    def match_many(names: Sequence[str]) -> list[bool]:
        data = list(map(str.encode, names))
        spans = map(regexp.Match, repeat(anchor), data, repeat(0), map(len, data))
        return list(map(ne, map(_WHOLE, spans), repeat(_NONE)))

    return match_many


_WHOLE = itemgetter(0)


def _char(code: int) -> str:
    if 0xD800 <= code <= 0xDFFF:  # a lone surrogate: re2 reads UTF-8, which cannot hold one
        raise _NoEquivalent
    return f"\\x{{{code:x}}}"


class _Writer:
    """Python's parse tree written out in re2's syntax."""

    def __init__(self) -> None:
        self.dollar = False
        self.classes = False

    def seq(self, items: list[Any], flags: int) -> str:
        return "".join(self.node(op, av, flags) for op, av in items)

    def _fold(self, flags: int, code: int) -> None:
        if flags & IGNORECASE:
            if code > 0x7F:  # Python and re2 fold some non-ASCII letters differently
                raise _NoEquivalent
            self.classes = True

    def node(self, op: Any, av: Any, flags: int) -> str:
        name = op.name
        if name == "LITERAL":
            self._fold(flags, av)
            return _fold_group(flags, _char(av))
        if name == "NOT_LITERAL":
            self._fold(flags, av)
            return _fold_group(flags, f"[^{_char(av)}]")
        if name == "ANY":
            return "(?s:.)" if flags & DOTALL else "[^\\n]"
        if name == "IN":
            return _fold_group(flags, self._class(av, flags))
        if name == "AT":
            return self._at(av.name, flags)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, body = av
            bound = "" if high is _c.MAXREPEAT else str(high)
            return f"(?:{self.seq(_items(body), flags)}){{{low},{bound}}}"
        if name == "SUBPATTERN":
            _group, add, remove, body = av
            return f"(?:{self.seq(_items(body), (flags | add) & ~remove)})"
        if name == "BRANCH":
            return "(?:" + "|".join(self.seq(_items(b), flags) for b in av[1]) + ")"
        raise _NoEquivalent  # ASSERT, ASSERT_NOT, GROUPREF*, ATOMIC_GROUP, POSSESSIVE_REPEAT

    def _class(self, items: list[Any], flags: int) -> str:
        out = []
        negate = False
        for op, av in items:
            name = op.name
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                self._fold(flags, av)
                out.append(_char(av))
            elif name == "RANGE":
                self._fold(flags, av[0])
                self._fold(flags, av[1])
                out.append(f"{_char(av[0])}-{_char(av[1])}")
            elif name == "CATEGORY" and av.name in _CATEGORIES:
                self.classes = True
                out.append(_CATEGORIES[av.name])
            else:
                raise _NoEquivalent
        if not out:
            raise _NoEquivalent
        return "[" + ("^" if negate else "") + "".join(out) + "]"

    def _at(self, where: str, flags: int) -> str:
        if where == "AT_BEGINNING":
            return "(?m:^)" if flags & MULTILINE else "^"
        if where == "AT_BEGINNING_STRING":
            return "\\A"
        if where == "AT_END":
            if flags & MULTILINE:
                return "(?m:$)"
            self.dollar = True  # Python: the end, or before a final newline
            return "\\z"
        if where == "AT_END_STRING":
            return "\\z"
        if where == "AT_BOUNDARY":
            self.classes = True
            return "\\b"
        raise _NoEquivalent  # \B: Python's never matches an empty name, re2's does


def _items(sequence: Any) -> list[Any]:
    """The (opcode, argument) items of a parse-tree sequence: a ``SubPattern``'s own list
    (``list()`` of one calls its ``__getitem__`` once per item), or the sequence listed."""
    data = getattr(sequence, "data", None)
    return data if isinstance(data, list) else list(sequence)


def _fold_group(flags: int, text: str) -> str:
    return f"(?i:{text})" if flags & IGNORECASE else text


def _repeats(items: list[Any]) -> tuple[int, bool]:
    """(repeats of more than one item, whether one holds another repeat or an alternation)."""
    count, nested = 0, False
    for op, av in items:
        name = op.name
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            _low, high, body = av
            many = high is _c.MAXREPEAT or high > 1
            inner, deeper = _repeats(_items(body))
            count += inner + (1 if many else 0)
            nested = nested or deeper or (many and (inner > 0 or _has_choice(_items(body))))
        elif name == "BRANCH":
            for branch in av[1]:
                inner, deeper = _repeats(_items(branch))
                count += inner
                nested = nested or deeper
        elif name in ("SUBPATTERN", "ATOMIC_GROUP", "ASSERT", "ASSERT_NOT"):
            inner, deeper = _repeats(_body(name, av))
            count += inner
            nested = nested or deeper
        elif name == "GROUPREF_EXISTS":
            for branch in av[1:]:
                if branch is not None:
                    inner, deeper = _repeats(_items(branch))
                    count += inner
                    nested = nested or deeper
    return count, nested


def _has_choice(items: list[Any]) -> bool:
    """Whether the sequence can match one text in more than one way: an alternation, or an
    item repeated a varying number of times (``?`` included: ``(?:..?)*`` is ``(?:.|..)*``)."""
    for op, av in items:
        name = op.name
        if name in ("BRANCH", "GROUPREF_EXISTS"):
            return True
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, body = av
            if low != high or _has_choice(_items(body)):
                return True
        elif name in ("SUBPATTERN", "ATOMIC_GROUP", "ASSERT", "ASSERT_NOT") and _has_choice(
            _body(name, av)
        ):
            return True
    return False


def _body(name: str, av: Any) -> list[Any]:
    """The sequence inside a group or an assertion node."""
    return _items(av) if name == "ATOMIC_GROUP" else _items(av[-1])


def _required(items: list[Any], runs: list[str]) -> None:
    """Append to ``runs`` the literal runs every match of the sequence ``items`` holds."""
    run: list[str] = []
    for op, av in items:
        name = op.name
        if name == "LITERAL":
            run.append(chr(av))
            continue
        runs.append("".join(run))
        run = []
        if name == "SUBPATTERN" and not av[1] & IGNORECASE:
            _required(_items(av[3]), runs)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") and av[0] >= 1:
            _required(_items(av[2]), runs)
        elif name == "ATOMIC_GROUP":
            _required(_items(av), runs)
    runs.append("".join(run))


def looks_past_its_match(pattern: str) -> bool:
    """Whether the pattern (one ``re.compile`` accepts) asserts anything of the text past
    where it stands (``$``, ``\\Z``, ``\\b``, ``\\B``, a lookaround): only such a pattern can
    match up to a place in a text and not in the text cut there."""
    return _asserts(_items(_parser.parse(pattern)))


def _asserts(items: list[Any]) -> bool:
    for op, av in items:
        name = op.name
        if name in ("ASSERT", "ASSERT_NOT") or (name == "AT" and av.name in _RIGHT_CONTEXT):
            return True
        if any(map(_asserts, _inside(name, av))):
            return True
    return False


def _inside(name: str, av: Any) -> list[list[Any]]:
    """The sequences a node of the parse tree holds."""
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT", "SUBPATTERN"):
        return [_items(av[-1])]
    if name == "ATOMIC_GROUP":
        return [_items(av)]
    if name == "BRANCH":
        return [_items(branch) for branch in av[1]]
    if name == "GROUPREF_EXISTS":
        return [_items(branch) for branch in av[1:] if branch is not None]
    return []


_RIGHT_CONTEXT = frozenset({"AT_END", "AT_END_STRING", "AT_BOUNDARY", "AT_NON_BOUNDARY"})
