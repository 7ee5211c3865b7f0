"""Pattern sets matched flat in the number of patterns.

Engines loop over every pattern for every module; an auditor of million-tensor checkpoints
cannot. Wildcards are filed under their literal prefix (what any name they match must start
with), so a name is tried only against the few whose prefix it starts with; ``re:`` patterns
under the literals every match of theirs must contain (found in a name by one Aho-Corasick
pass, whether the pattern starts with them or with ``.*``). The deciding pattern is the first,
in declaration order, of the candidates that match.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate, compress, repeat
from operator import itemgetter
from typing import Any, TypeAlias, TypeVar, cast

import ahocorasick

from ..errors import PatternError
from .regex_plan import Plan, plan, re2_match, re2_match_many

MAX_PATTERN_LENGTH = 4096
MEMO_CAP = 1 << 22
"""Names whose outcome one pattern set remembers (a million-tensor checkpoint has ~250k)."""

ASKED_BEFORE_INDEXING = 4096
"""Names asked one by one while outcomes learned in bulk are kept in order (``_learned``) are
worked out again, up to this many: a fused layer's few hundred names cost less so than
indexing a quarter million learned ones; past it, the learned ones are indexed."""

_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}]\)\s*[+*{]")
"""A quantified group whose body ends in a quantifier: the shape of catastrophic backtracking."""


def compile_user_regex(pattern: str, where: str) -> re.Pattern[str]:
    """Compile a ``re:`` pattern from a declaration, refusing unsafe or broken ones by name."""
    return _guarded(pattern, where, re.compile)


def plan_user_regex(pattern: str, where: str) -> Plan:
    """Plan a ``re:`` pattern from a declaration (parsed once per pattern and process),
    refusing unsafe or broken ones by name, as :func:`compile_user_regex` does."""
    return _guarded(pattern, where, _plan)


_plan = functools.lru_cache(maxsize=16384)(plan)
"""The resolver and the producer view plan the same patterns: once each."""

_T = TypeVar("_T")


def _guarded(pattern: str, where: str, build: Callable[[str], _T]) -> _T:
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(where, f"pattern of {len(pattern)} characters is above the cap")
    if _NESTED_QUANTIFIER.search(pattern):
        raise PatternError(
            where, f"pattern {pattern!r} nests quantifiers (catastrophic backtracking)"
        )
    try:
        return build(pattern)
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


class _PatternSet:
    """A set of ``re:`` patterns, planned once, and what each name it was asked about matched
    (see :class:`FirstMatch`, its views in each order)."""

    def __init__(self, patterns: Sequence[str], where: str) -> None:
        self.patterns = list(patterns)
        self.where = where
        self._memo: dict[str, _Outcome] = {}
        self._learned: tuple[list[str], list[_Outcome]] | None = None
        """Names and their outcomes in the names' order, as :meth:`learn` took them or
        :meth:`prime` worked them out for names none of which were known, kept so until
        :data:`ASKED_BEFORE_INDEXING` names are asked on their own: a caller asking about the
        same names in the same order (:meth:`learned_for`) reads them as they are."""
        self._asked_aside = 0
        """Names asked on their own (:meth:`outcome`) while ``_learned`` was kept."""
        self.plans = [plan_user_regex(p, where) for p in self.patterns]
        self.python: dict[int, re.Pattern[str]] = {}
        """Python's compiled patterns, made where first needed (re2 takes most names)."""
        for pattern, planned in zip(self.patterns, self.plans, strict=True):
            if planned.re2 is None and not planned.python_safe:
                raise PatternError(
                    where,
                    f"pattern {pattern!r} needs Python's re (re2 has no equivalent for it) and "
                    "repeats in a way that can backtrack without end (catastrophic "
                    "backtracking); qarm refuses it",
                )
        self.plain = [
            re2_match(planned.re2) if planned.re2 is not None else self._compiled(number).match
            for number, planned in enumerate(self.plans)
        ]
        """What matches a printable-ASCII name, per pattern: re2 wherever it can."""
        self.alone: list[_Outcome] = [((n,), ()) for n in range(len(self.plans))]
        """The outcome of a name only pattern ``n`` matches, made once."""
        self.many = [
            _many(planned.re2, self.plain[number]) for number, planned in enumerate(self.plans)
        ]
        """:attr:`plain` of many printable-ASCII names at once, per pattern."""
        self.always = [n for n, planned in enumerate(self.plans) if not planned.literals]
        by_literal: dict[str, list[int]] = {}
        for number, planned in enumerate(self.plans):
            if planned.literals:
                by_literal.setdefault(planned.literals[0], []).append(number)
        self.numbers_of = [tuple(numbers) for numbers in by_literal.values()]
        """The patterns filed under each literal, by the literal's place: what the automaton
        finds is that place, a small int, grouped at C speed."""
        self.automaton: Any = None
        if by_literal:
            self.automaton = ahocorasick.Automaton()
            for place, literal in enumerate(by_literal):
                self.automaton.add_word(literal, place)
            self.automaton.make_automaton()

    @property
    def memo(self) -> dict[str, _Outcome]:
        """Each name asked about -> its outcome (what :meth:`learn` took included)."""
        if self._learned is not None:
            names, outcomes = self._learned
            self._learned = None
            self._memo.update(zip(names, outcomes, strict=True))
        return self._memo

    def learned_for(self, names: Sequence[str]) -> list[_Outcome] | None:
        """The outcomes kept in order (see ``_learned``), where they are for exactly ``names``
        (in this order); else None. A quarter million names are compared in
        milliseconds, where looking each up again takes tens of them."""
        learned = self._learned
        if learned is not None and (
            names is learned[0] or (isinstance(names, list) and names == learned[0])
        ):
            return learned[1]
        return None

    def candidates(self, name: str) -> list[int] | tuple[int, ...]:
        """Pattern numbers, in order, that could match ``name``."""
        hits = list(self.automaton.iter(name)) if self.automaton is not None else []
        if not self.always:
            if not hits:
                return ()
            if len(hits) == 1:
                numbers: tuple[int, ...] = self.numbers_of[hits[0][1]]
                return numbers
        found = set(self.always)
        for _end, place in hits:
            found.update(self.numbers_of[place])
        return sorted(found)

    def outcome(self, name: str) -> _Outcome:
        """Every pattern that matches ``name`` and every one that refuses it (by number),
        each tried once per name: the resolver and the producer view ask for the same
        names, each in its own order."""
        if self._learned is not None and self._asked_aside < ASKED_BEFORE_INDEXING:
            self._asked_aside += 1
            memo = self._memo  # the learned names are not indexed yet: worked out again
        else:
            memo = self.memo
        known = memo.get(name)
        if known is not None:
            return known
        numbers = self.candidates(name)
        if not numbers:
            found: _Outcome = _NO_MATCH
        elif name.isascii() and name.isprintable():
            plain = self.plain
            if len(numbers) == 1:
                found = self.alone[numbers[0]] if plain[numbers[0]](name) else _NO_MATCH
            else:
                found = (tuple([n for n in numbers if plain[n](name)]), ())
        else:
            matches: list[int] = []
            refusals: list[tuple[int, PatternError]] = []
            for number in numbers:
                try:
                    if self._match(number, name):
                        matches.append(number)
                except PatternError as exc:
                    refusals.append((number, exc))
            found = (tuple(matches), tuple(refusals))
        if len(memo) >= MEMO_CAP:
            memo.clear()  # a long-lived process audits many checkpoints: stay bounded
        memo[name] = found
        return found

    def prime(self, names: Iterable[str]) -> None:
        """Work out what each of many names matches, as :meth:`outcome` would one by one, for
        a caller about to ask about all of them: each pattern is tried once on every
        printable-ASCII name holding its literal, in one call; other names are left to
        :meth:`outcome`."""
        memo = self.memo
        # the caller asks only where some name is not known (a second asker knows them all)
        todo = list(dict.fromkeys(names))
        if memo:
            todo = [n for n in todo if n not in memo]
        whole = "".join(todo)
        if not (whole.isascii() and whole.isprintable()):
            todo = [n for n in todo if n.isascii() and n.isprintable()]
        if not todo or len(memo) + len(todo) > MEMO_CAP:
            return
        single: dict[int, int] = {}
        """Name (by place) -> the one pattern it matched so far."""
        multi: dict[int, list[int]] = {}
        """Name -> the patterns it matched, where more than one did (rare): in order."""
        for number, owners in sorted(self._candidates_of_all(todo).items()):
            got = list(compress(owners, self.many[number](list(map(todo.__getitem__, owners)))))
            if not (single.keys() & got or multi.keys() & got):
                single.update(zip(got, repeat(number)))
                continue
            for owner in got:
                if owner in multi:
                    multi[owner].append(number)
                elif owner in single:
                    multi[owner] = [single.pop(owner), number]
                else:
                    single[owner] = number
        outcomes = [_NO_MATCH] * len(todo)
        deque(map(outcomes.__setitem__, single, map(self.alone.__getitem__, single.values())), 0)
        shared: dict[tuple[int, ...], _Outcome] = {}
        for owner, numbers in multi.items():
            key = tuple(numbers)
            outcomes[owner] = shared.setdefault(key, (key, ()))
        if memo:
            memo.update(zip(todo, outcomes, strict=True))
        else:  # nothing known before: kept in order, for a caller asking about these names
            self._learned = (todo, outcomes)
            self._asked_aside = 0

    def worked_out(self, names: list[str]) -> list[_Outcome | None]:
        """What each of ``names`` matches, as :meth:`prime` works it out (None for a name it
        leaves to :meth:`outcome`): for :meth:`learn`, here or in another process. A set that
        knew nothing before knows nothing after, so that what it learns is kept in order."""
        knew = bool(self._memo) or self._learned is not None
        self.prime(names)
        learned = self.learned_for(names)
        got: list[_Outcome | None] = (
            list(learned) if learned is not None else list(map(self.memo.get, names))
        )
        if not knew:
            self._learned = None
            self._memo.clear()
        return got

    def learn(self, names: list[str], outcomes: list[_Outcome | None]) -> None:
        """Take what :meth:`worked_out` gave for ``names`` (on the same patterns) as known."""
        if len(self.memo) + len(names) > MEMO_CAP:
            return
        if not self._memo and None not in outcomes:
            self._learned = (names, cast("list[_Outcome]", outcomes))  # looked up if asked
            self._asked_aside = 0
            return
        if None in outcomes:
            self.memo.update((n, o) for n, o in zip(names, outcomes, strict=True) if o is not None)
        else:
            self.memo.update(zip(names, outcomes, strict=True))  # type: ignore[arg-type]

    def _candidates_of_all(self, names: list[str]) -> dict[int, list[int]]:
        """Pattern number -> the names (by place, ascending) that could match it: those
        holding its longest literal, found by one Aho-Corasick pass over the names joined by
        ``\n`` (no printable name holds one, so a literal inside a name is found whole; one
        that spans two names only adds a candidate), and every name for a pattern with none."""
        found: dict[int, list[int]] = {n: list(range(len(names))) for n in self.always}
        if self.automaton is None:
            return found
        hits = list(self.automaton.iter("\n".join(names)))
        # where each name's "\n" stands (one past its end): a hit ending before it is its own
        ends = list(accumulate(map(_PLUS_ONE, map(len, names))))
        owners = list(map(bisect.bisect_right, repeat(ends), map(_HIT_END, hits)))
        places = list(map(_HIT_VALUE, hits))
        # grouped by literal in C: a stable sort keeps each literal's names in text order
        order = sorted(range(len(places)), key=places.__getitem__)
        by_place = list(map(places.__getitem__, order))
        for place in dict.fromkeys(by_place):
            run = order[bisect.bisect_left(by_place, place) : bisect.bisect_right(by_place, place)]
            # a literal found twice in one name: the name once
            holders = list(dict.fromkeys(map(owners.__getitem__, run)))
            for number in self.numbers_of[place]:
                found[number] = holders
        return found

    def _match(self, number: int, name: str) -> bool:
        planned = self.plans[number]
        if planned.re2 is not None and not planned.needs_python(name):
            return planned.re2.match(name) is not None
        if not planned.python_safe:
            shown = name if len(name) <= 80 else name[:77] + "..."
            raise PatternError(
                self.where,
                f"pattern {self.patterns[number]!r} can be matched in linear time only on "
                f"printable ASCII names, and the module name {shown!r} is not; Python's re "
                "could backtrack without end on it (catastrophic backtracking); qarm refuses it",
            )
        return self._compiled(number).match(name) is not None

    def _compiled(self, number: int) -> re.Pattern[str]:
        compiled = self.python.get(number)
        if compiled is None:
            compiled = self.python[number] = compile_user_regex(self.patterns[number], self.where)
        return compiled


def _many(compiled: Any, plain: Callable[[str], Any]) -> Callable[[list[str]], list[bool]]:
    """Whether ``plain`` matches each of many names: re2's matcher called without a Python
    frame per name where it can be, else ``plain`` (re2's wrapper or Python's ``re``)."""
    if compiled is not None:
        many = re2_match_many(compiled)
        if many is not None:
            return many
    return lambda names: [bool(plain(name)) for name in names]


_HIT_END, _HIT_VALUE = itemgetter(0), itemgetter(1)
_PLUS_ONE = (1).__add__

_Outcome: TypeAlias = tuple[tuple[int, ...], tuple[tuple[int, PatternError], ...]]
"""What a name gave: the patterns that match it, and those that refuse it with their errors."""
_NO_MATCH: _Outcome = ((), ())


@functools.lru_cache(maxsize=4)
def _pattern_set(patterns: tuple[str, ...], where: str) -> _PatternSet:
    """One planned set per distinct pattern list (in sorted order), shared by every view."""
    return _PatternSet(patterns, where)


class FirstMatch:
    """The first pattern, in the order given, that ``re.match``-es a name (start-anchored).

    Each pattern is planned once (:mod:`.regex_plan`): a name is tried only against the
    patterns whose required literals it holds (found by one Aho-Corasick pass over the name,
    flat in the number of patterns) and those with none; each candidate is matched in re2
    where re2 has the pattern's exact semantics for that name, else in Python's ``re`` where
    that cannot backtrack catastrophically, else refused. No clock is involved: the same
    patterns and names always give the same answer or the same refusal. Views of the same
    patterns in another order share what each name matched."""

    def __init__(self, patterns: Sequence[str], where: str) -> None:
        self.patterns = list(patterns)
        self.where = where
        canonical = tuple(sorted(set(self.patterns)))
        self.shared = _pattern_set(canonical, where)
        place = {pattern: i for i, pattern in reversed(list(enumerate(self.patterns)))}
        self.rank = [place[pattern] for pattern in canonical]
        """This order's first place of each shared pattern."""

    @property
    def plans(self) -> list[Plan]:
        return self.shared.plans

    def firsts(self, names: Sequence[str]) -> list[int | None] | None:
        """:meth:`first` of each of ``names``, worked out once per distinct outcome (a MoE's
        names share a few); None where :meth:`first` raises for some name (asked name by
        name in the caller's order, it then raises the refusal the caller meets first)."""
        if not self.patterns:  # an ignore list of exact names only: nothing to try
            return [None] * len(names)
        shared = self.shared
        learned = shared.learned_for(names)
        known = learned if learned is not None else list(map(shared.memo.get, names))
        if None in known:  # not every name known yet (a second asker finds them all)
            shared.prime(names)
            learned = shared.learned_for(names)
            known = learned if learned is not None else list(map(shared.memo.get, names))
        outcomes: list[_Outcome] = (
            [o if o is not None else shared.outcome(n) for n, o in zip(names, known, strict=True)]
            if None in known  # not primed: a name not printable ASCII, or too many names
            else cast("list[_Outcome]", known)
        )
        ids = list(map(id, outcomes))
        first: dict[int, int | None] = {}
        for key, outcome in dict(zip(ids, outcomes, strict=True)).items():
            try:
                first[key] = self._first_of(outcome)
            except PatternError:
                return None
        return list(map(first.__getitem__, ids))

    def first(self, name: str) -> int | None:
        """Index of the first matching pattern, or None; a pattern that refuses the name
        before any matches raises its refusal, as trying them in order would."""
        return self._first_of(self.shared.outcome(name))

    def _first_of(self, outcome: _Outcome) -> int | None:
        matches, refusals = outcome
        rank = self.rank
        if not refusals:
            if not matches:
                return None
            if len(matches) == 1:
                return rank[matches[0]]
            return min(rank[n] for n in matches)
        first_match = min((rank[n] for n in matches), default=None)
        place, error = min(((rank[n], exc) for n, exc in refusals), key=itemgetter(0))
        if first_match is None or place < first_match:
            raise error
        return first_match


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
