"""``re:`` patterns as the ``regex`` module reads them, written in Python's ``re`` syntax.

vLLM compiles compressed-tensors ``re:`` targets and ignores with ``import regex as re``
(``vllm/model_executor/layers/quantization/utils/config_utils.py`` line 9, every modelled
release). The two modules differ on one thing a declaration writes: an inline flag group in mid
pattern (``.*(?i)_PROJ$``). Python's ``re`` refuses it ("global flags not at the start of the
expression", Python 3.11); the ``regex`` module takes it, and since its release 2023.12.23
("Inline flags can now be turned off and apply to what follows",
mrabarnett/mrab-regex) the flags apply from where they stand to the end of the enclosing group
or pattern, later alternatives of that group included, and ``(?-i)`` turns one off again. vLLM
0.30 to 0.33 require ``regex`` with no bound, so every current install reads it that way.

That reading is a scoped group in ``re``: ``a(?i)b|c`` is ``a(?i:b)|(?i:c)``. Only a pattern
``re`` refuses is rewritten, and only where the rewrite is exact: a verbose flag (``x``, which
changes how the rest is parsed), a comment group or a conditional group leave it as written, for
the matcher to refuse by name.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from .matchers import MAX_PATTERN_LENGTH

_parser: Any = importlib.import_module("re._parser")

_FLAGS = re.compile(r"\(\?([aiLmsux]*)(?:-([imsx]*))?\)")
"""A flag group with no ``:``: global at the start in ``re``, scoped to what follows in
``regex``."""
_OPENER = re.compile(r"\((?:\?(?:[:=!>]|<[=!]|P<[^>]*>|<[^>]*>|[aiLmsu]*(?:-[ims]*)?:))?")
"""Every other group opener this rewrite passes through unchanged (no ``x``)."""


class _Untranslatable(Exception):
    pass


def regex_module_form(pattern: str) -> str:
    """``pattern`` with its mid-pattern flag groups scoped as the ``regex`` module scopes them;
    ``pattern`` itself where ``re`` takes it or no exact rewrite exists."""
    if "(?" not in pattern or len(pattern) > MAX_PATTERN_LENGTH:
        return pattern  # over the cap: the matcher refuses it by name, unread
    try:
        _parser.parse(pattern)
        return pattern
    except re.error:
        pass
    except (OverflowError, ValueError, RecursionError, MemoryError):
        return pattern
    try:
        alternatives, end = _body(pattern, 0)
    except (_Untranslatable, RecursionError):
        return pattern
    written = "|".join(alternatives)
    if end != len(pattern) or len(written) > MAX_PATTERN_LENGTH:
        return pattern  # an unbalanced ")", or grown past the cap: the matcher names it
    return written


def _body(p: str, i: int) -> tuple[list[str], int]:
    """The alternatives of a group body from ``i`` to its closing ``)`` (not consumed), with
    flag groups written as scoped groups over what follows them."""
    alternatives: list[str] = []
    current: list[str] = []
    n = len(p)
    while i < n:
        char = p[i]
        if char == "\\":
            current.append(p[i : i + 2])
            i += 2
        elif char == "[":
            end = _class_end(p, i)
            current.append(p[i:end])
            i = end
        elif char == "|":
            alternatives.append("".join(current))
            current = []
            i += 1
        elif char == ")":
            break
        elif char == "(":
            flags = _FLAGS.match(p, i)
            if flags is not None:
                if not (flags[1] or flags[2]):
                    raise _Untranslatable  # "(?)", "(?-)": no flag, an error in both
                if "x" in flags[1]:
                    raise _Untranslatable  # verbose: the rest is parsed another way
                rest, i = _body(p, flags.end())
                scope = flags[0][:-1] + ":"
                current.append(f"{scope}{rest[0]})")
                alternatives.append("".join(current))
                alternatives.extend(f"{scope}{r})" for r in rest[1:])
                return alternatives, i
            opener = _OPENER.match(p, i)
            if opener is None or p.startswith(("(?#", "(?("), i):
                raise _Untranslatable
            inner, end = _body(p, opener.end())
            if end >= n:
                raise _Untranslatable
            current.append(opener[0] + "|".join(inner) + ")")
            i = end + 1
        else:
            current.append(char)
            i += 1
    alternatives.append("".join(current))
    return alternatives, i


def _class_end(p: str, i: int) -> int:
    """The index after the ``]`` that closes the class opened at ``i``."""
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1  # a "]" first in the class is a literal
    while j < len(p):
        if p[j] == "\\":
            j += 2
            continue
        if p[j] == "]":
            return j + 1
        j += 1
    raise _Untranslatable
