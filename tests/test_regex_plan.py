"""``re:`` patterns: the same first match as a plain per-pattern ``re.match`` loop, whichever
engine runs each pattern, and a guard whose verdict depends on the input only.

The plain loop is what engines do (vLLM's ``find_matched_target``); qarm files patterns by the
literals each must contain, matches them in re2 where re2 has their exact semantics for the
name at hand and in Python's ``re`` elsewhere. Hostile names (newlines before the end, Unicode
digits, the Kelvin sign, control characters) and patterns of every construct are compared.
"""

from __future__ import annotations

import contextlib
import re
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from qarm_audit.errors import PatternError
from qarm_audit.resolve import matchers
from qarm_audit.resolve.matchers import FirstMatch
from qarm_audit.resolve.mxfp4 import _skips
from qarm_audit.resolve.regex_plan import plan

PROPERTY = settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PIECES = [
    "a", "b", "1", ".", r"\.", r"\d", r"\w", r"\s", r"\b", r"\B", "$", "^", r"\Z", r"\A",
    "[a-c]", "[^a]", r"[\d_]", "(?i:k)", "(?s:.)", "(?=a)", "(?!b)", "(a)\\1", "(?>a+)", "a++",
    "é", "\u212a", "٣", "\n", "-",
]  # fmt: skip
QUANT = ["", "", "", "*", "+", "?", "{1,2}", "*?", "{,2}"]


@st.composite
def patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            inner = draw(patterns(depth + 1))
            if draw(st.booleans()):
                inner += "|" + draw(patterns(depth + 1))
            piece = f"(?:{inner})" if draw(st.booleans()) else f"({inner})"
        else:
            piece = draw(st.sampled_from(PIECES))
        quant = draw(st.sampled_from(QUANT))
        if quant and piece in ("$", "^", r"\Z", r"\A", r"\b", r"\B", "(?=a)", "(?!b)", "a++"):
            quant = ""
        parts.append(piece + quant)
    flags = draw(st.sampled_from(["", "", "", "(?i)", "(?m)", "(?s)", "(?a)"]))
    lead = draw(st.sampled_from(["", "", ".*", "a"]))
    return flags + lead + "".join(parts)


NAME_CHARS = ["a", "b", "1", "٣", "\n", " ", ".", "\u212a", "k", "K", "é", "_", "\x1c", "ſ"]
NAMES = st.lists(st.sampled_from(NAME_CHARS), max_size=6).map("".join)


def compiles(pattern: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            re.compile(pattern)
    except (re.error, FutureWarning, DeprecationWarning):
        return False
    return True


def plain_loop(compiled: list[re.Pattern[str]], name: str) -> int | None:
    return next((n for n, c in enumerate(compiled) if c.match(name)), None)


@PROPERTY
@given(st.lists(patterns(), min_size=1, max_size=5), st.lists(NAMES, min_size=1, max_size=6))
@example(
    [r".*layers\.17\.mlp\.experts\.\d+\.(gate|up|down)_proj$"],
    [f"m.layers.17.mlp.experts.{e}.up_proj{end}" for e in ("٣", "3") for end in ("", "\n")],
)
@example([r"a$", r"a\Z"], ["a\n", "a"])
@example([r"(?i)k", r"\w", r"\s"], ["\u212a", "é", "\x1c", "\x0b"])
def test_first_match_is_the_plain_per_pattern_loop(sources: list[str], names: list[str]) -> None:
    sources = [s for s in sources if compiles(s)]
    if not sources:
        return
    try:
        matcher = FirstMatch(sources, "targets")
    except PatternError as exc:
        assert "catastrophic backtracking" in str(exc) or "nests quantifiers" in str(exc)
        return
    compiled = [re.compile(s) for s in sources]
    for name in names:
        expected = plain_loop(compiled, name)
        try:
            got = matcher.first(name)
        except PatternError:
            # refused only where the name is not plain and a pattern needs Python's re unsafely
            assert not (name.isascii() and name.isprintable())
            assert any(p.needs_python(name) and not p.python_safe for p in matcher.plans)
            continue
        assert got == expected, (sources, name)


@PROPERTY
@given(
    st.lists(patterns(), min_size=1, max_size=5),
    st.lists(NAMES, min_size=1, max_size=12),
    st.lists(NAMES, max_size=4),
)
@example(
    [r".*layers\.17\.mlp\.experts\.\d+\.(gate|up|down)_proj$", r".*layers\.1\..*"],
    [f"m.layers.{n}.mlp.experts.{e}.up_proj" for n in (1, 17) for e in ("3", "٣")],
    ["m.layers.17.mlp.experts.0.up_proj"],
)
@example([r"\w", r"(?i)k$", "a$", ".*1"], ["\u212a", "a", "a\n", "b1", "ab", "k"], ["a"])
@example([".*ab", "ab", "(?:ab)+b", "b", ".*b"], ["abab", "ab", "abb", "b", "xab"], [])
def test_many_names_at_once_are_each_names_first_match(
    sources: list[str], names: list[str], asked_before: list[str]
) -> None:
    """``firsts`` (one pass of each pattern over all the names that hold its literal) gives
    each name the plain loop's first match, whatever names were asked one by one before; and
    where any name meets a refusing pattern, it leaves every name to ``first``."""
    sources = [s for s in sources if compiles(s)]
    if not sources:
        return
    try:
        matcher = FirstMatch(sources, "targets")
    except PatternError:
        return
    compiled = [re.compile(s) for s in sources]
    expected: list[int | str | None] = []
    for name in names:
        try:
            one = matcher.first(name)
        except PatternError:
            expected.append("refused")
            continue
        assert one == plain_loop(compiled, name), (sources, name)
        expected.append(one)
    matcher.shared.memo.clear()
    for name in asked_before:
        with contextlib.suppress(PatternError):
            matcher.first(name)
    got = matcher.firsts(names)
    assert got == (None if "refused" in expected else expected), (sources, names)


@PROPERTY
@given(
    st.lists(patterns(), min_size=1, max_size=5),
    st.lists(NAMES, min_size=1, max_size=12, unique=True),
    st.lists(NAMES, max_size=4),
)
@example(
    [r".*layers\.17\.mlp\.experts\.\d+\.(gate|up|down)_proj$", r".*layers\.1\..*"],
    [f"m.layers.{n}.mlp.experts.{e}.up_proj" for n in (1, 17) for e in ("3", "0")],
    ["m.layers.1.mlp.experts.0.up_proj", "m.layers.2.x"],
)
def test_outcomes_learned_from_a_copy_answer_as_the_names_own(
    sources: list[str], names: list[str], others: list[str]
) -> None:
    """What a copy of the process worked out (``worked_out``, then ``learn`` in a set that
    knew nothing) gives each name the plain loop's first match: asked for the same names in
    one call (read as learned, not looked up one by one), then for other names, then one by
    one. A set that knew nothing knows nothing after working names out."""
    sources = [s for s in sources if compiles(s)]
    if not sources:
        return
    try:
        FirstMatch(sources, "targets")
    except PatternError:
        return
    compiled = [re.compile(s) for s in sources]
    matchers._pattern_set.cache_clear()  # the copy: a set that knows nothing yet either
    copy = FirstMatch(sources, "targets")
    worked = copy.shared.worked_out(names)
    # knowing nothing before, it knows nothing after: what it learns next is kept in order
    assert copy.shared.learned_for(names) is None and not copy.shared.memo
    copy.shared.prime(names)  # primed knowing nothing: kept in order, as worked out
    if all(n.isascii() and n.isprintable() for n in names):
        assert copy.shared.learned_for(names) == worked
    expected: list[int | str | None] = []
    for name in names:
        try:
            expected.append(copy.first(name))  # the plain loop's, as the test above shows
        except PatternError:
            expected.append("refused")
    matchers._pattern_set.cache_clear()  # the process: a set that knows nothing yet
    matcher = FirstMatch(sources, "targets")
    assert matcher.shared is not copy.shared
    matcher.shared.learn(list(names), worked)
    got = matcher.firsts(list(names))
    assert got == (None if "refused" in expected else expected), (sources, names)
    if None not in worked:
        assert matcher.shared.learned_for(list(names)) is worked  # read as learned, kept
    for name in [*others, *names]:
        with contextlib.suppress(PatternError):
            assert matcher.first(name) == plain_loop(compiled, name), (sources, name)
    # a few names asked alone are worked out again: what was learned is kept in order
    assert (matcher.shared.learned_for(list(names)) is worked) == (None not in worked)
    assert matcher.firsts(names) == got


def test_learned_outcomes_are_indexed_once_enough_names_are_asked_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Up to the bound, a name asked alone is worked out again and the learned outcomes stay
    in order; past it they are indexed, and every answer stays the same."""
    monkeypatch.setattr(matchers, "ASKED_BEFORE_INDEXING", 3)
    sources = [r"a\.\d+\.x", r".*\.y"]
    names = ["a.1.x", "b.2.y", "a.3.x", "c"]
    matchers._pattern_set.cache_clear()
    worked = FirstMatch(sources, "targets").shared.worked_out(names)
    matchers._pattern_set.cache_clear()
    matcher = FirstMatch(sources, "targets")
    matcher.shared.learn(names, worked)
    answers = [0, 1, 0, None]
    for asked, name in enumerate(["a.9.x", "q.y", "zz"], start=1):
        assert matcher.first(name) == [0, 1, None][asked - 1]
        assert matcher.shared.learned_for(names) is worked, asked
    assert [matcher.first(n) for n in names[:1]] == answers[:1]  # the fourth: indexed now
    assert matcher.shared.learned_for(names) is None
    assert matcher.firsts(names) == answers
    assert [matcher.first(n) for n in names] == answers


@PROPERTY
@given(patterns(), st.lists(st.sampled_from([*NAME_CHARS, ".", "."]), max_size=8).map("".join))
@example("a.", "a.b")
@example(r"a\b", "a.b")
@example(r"a\.\b", "a.b")  # a \b past the cut: only the whole name has the answer
@example(r"a\.(?=b)", "a.b")
@example("(?:.?.?)*[xy]", "mx.y")
def test_an_mxfp4_skip_entry_is_the_regex_transformers_matches(key: str, name: str) -> None:
    """transformers' ``re.match(rf"(?:{key})(?:(?<=\\.)|(?=\\.|$))", name)``, matched without
    running Python's re where it could backtrack without end (or refused by name)."""
    whole = rf"(?:{key})(?:(?<=\.)|(?=\.|$))"
    if not compiles(whole):
        return
    try:
        got = _skips(key, name)
    except PatternError:
        assert not plan(whole).python_safe  # refused only where Python's re may not end
        return
    assert got == (re.match(whole, name) is not None), (key, name)


@PROPERTY
@given(patterns(), NAMES)
def test_re2_has_the_exact_answer_where_the_plan_says_so(pattern: str, name: str) -> None:
    if not compiles(pattern):
        return
    planned = plan(pattern)
    if planned.needs_python(name):
        return
    assert (planned.re2.match(name) is not None) == (re.match(pattern, name) is not None)


@PROPERTY
@given(patterns(), NAMES)
def test_a_match_holds_the_patterns_required_literals(pattern: str, name: str) -> None:
    if not compiles(pattern):
        return
    found = re.match(pattern, name)
    if found is not None:
        assert all(literal in found.group() for literal in plan(pattern).literals)


def test_the_issue_patterns_run_in_re2_with_a_literal_each() -> None:
    planned = plan(r".*layers\.17\.mlp\.experts\.\d+\.(gate|up|down)_proj$")
    assert planned.re2 is not None
    assert planned.literals[0] == "layers.17.mlp.experts."
    assert plan(r".*layers\.17\.self_attn\..*").literals == ("layers.17.self_attn.",)


def test_many_dotstar_patterns_are_a_verdict_not_a_deadline() -> None:
    """Hundreds of ``.*``-led patterns against thousands of names: the answer the plain loop
    gives, and no refusal whatever the machine's load."""
    sources = [rf".*layers\.{n}\.self_attn\..*" for n in range(300)]
    sources += [rf".*layers\.{n}\.mlp\.experts\.\d+\.(gate|up|down)_proj$" for n in range(300)]
    matcher = FirstMatch(sources, "ignore")
    compiled = [re.compile(s) for s in sources]
    names = [
        f"model.layers.{n}.mlp.experts.{e}.up_proj" for n in range(0, 300, 7) for e in range(9)
    ]
    names += [f"model.layers.{n}.self_attn.q_proj" for n in range(300)]
    assert [matcher.first(n) for n in names] == [plain_loop(compiled, n) for n in names]


@pytest.mark.parametrize(
    "pattern",
    [
        r"(?=a)(a|aa)+b",
        r"(a)\1(a|aa)*b",
        r"(?!x)(\w+\s?)+$",
        r"(?=.)(.*)*x",
        r"(?!z)(?:..?)*[\x00\x01]",  # an optional in a repeat: (?:.|..)* spelled otherwise
        r"(?!z)(?:(?:ab)?c?)+d",
    ],
)
def test_a_pattern_only_python_can_run_that_backtracks_is_refused_at_once(pattern: str) -> None:
    with pytest.raises(PatternError, match="catastrophic backtracking"):
        FirstMatch([pattern], "targets")


def test_an_exponential_pattern_is_linear_in_re2() -> None:
    """``(a|aa)*$`` takes exponential time in Python's re on a long run of ``a``s and a bad
    end; re2 answers at once, and the same way each time."""
    matcher = FirstMatch([r"(a|aa)*c$"], "targets")
    assert [matcher.first("a" * 80 + "bc") for _ in range(3)] == [None] * 3
    assert matcher.first("a" * 80 + "c") == 0


def test_a_name_only_python_can_answer_is_refused_for_an_unsafe_pattern() -> None:
    matcher = FirstMatch([r"(a|aa)*c$"], "targets")
    with pytest.raises(PatternError, match=r"not printable ASCII|is not; Python's re"):
        matcher.first("a" * 40 + "c\n")
    assert FirstMatch([r"ab$"], "targets").first("ab\n") == 0  # safe: Python's re answers
    optional = FirstMatch([r"(?:a?)*c$"], "targets")  # re2 runs it; Python's re would not end
    assert optional.first("a" * 40 + "c") == 0
    with pytest.raises(PatternError, match=r"is not; Python's re"):
        optional.first("a" * 40 + "c\n")
