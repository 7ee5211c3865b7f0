"""One escaper per output format, applied to every string that comes from outside qarm.

Tensor and module names, declaration keys and values, shard file names, what a server answered
and what the environment holds are hostile: each renderer passes them through the escaper of its
format, and writes only its own text raw.

* :func:`visible`: every format but JSON and GitHub workflow commands. Control characters (C0,
  DEL, C1), line and paragraph separators, lone surrogates and the invisible bidirectional and
  zero-width format characters are written as Python escapes (``\\x1b``, ``\\n``, ``\\u2028``),
  so a string is always one line, sends no terminal sequence and hides nothing.
* :func:`md_text`, :func:`md_code`, :func:`md_html`: markdown prose and table cells, code spans
  (with a fence longer than any run of backticks inside, so they cannot be closed early), and
  text inside HTML (``<summary>``); none can end a table row, open HTML or a comment, or forge an
  entity or a link. In prose and HTML text, a word GitHub would turn into a mention, a link or
  an issue reference is a code span. :func:`md_fence` gives a fenced block a fence no line of
  it can close.
* :func:`term`, :func:`term_line`: the terminal, always a rich :class:`~rich.text.Text`, never
  markup; a line of its own is never wrapped, so nothing from outside starts a line.
* :func:`gh_data`, :func:`gh_property`: GitHub workflow commands, as the runner unescapes them.

Stderr lines go through :func:`visible`, and every output but the ``github`` format's through
:func:`no_command`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text


_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\ud800-\udfff"
    "\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)
"""What :func:`visible` writes as an escape: C0 and C1 controls and DEL; the soft hyphen; the
combining grapheme joiner; the Arabic letter mark; the Hangul fillers; the Mongolian vowel
separator; zero-width spaces and joiners, the
left-to-right and right-to-left marks; U+2028 and U+2029 (line and paragraph separators); the
bidirectional embeddings, overrides and isolates; word joiners and invisible operators; the
byte-order mark; interlinear annotation marks; variation selectors and tag characters (each
draws nothing, so ``up_proj`` with one appended looked like ``up_proj``); lone surrogates."""

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` on one line with nothing hidden: see :data:`_HIDDEN`."""
    return _HIDDEN.sub(_escape, text)


_COMMAND_START = re.compile(r"^([^\S\n]*):(?=:)", re.MULTILINE)


def no_command(text: str) -> str:
    """``text`` with no line that a GitHub runner reads as a workflow command: one that starts
    with ``::`` once its leading spaces are trimmed (a source label or a module name can stand
    first on a line of the verdict, the table or the scheme map). That first colon is written
    ``\\x3a``, as :func:`visible` writes what it escapes. For every output but the
    ``github`` format's own commands."""
    return _COMMAND_START.sub(r"\1\\x3a", text)


# -- markdown -----------------------------------------------------------------------------------


_EMPHASIS = re.compile(r"[*~]|(?<![^\W_])_|_(?![^\W_])")
"""``*`` and ``~`` anywhere, ``_`` unless between two letters or digits (``down_proj``), where
it can neither open nor close emphasis."""


_LINKABLE = re.compile(r"[@\uff20\ufe6b#]|://|www\.|gh-[0-9]", re.IGNORECASE)
"""What GitHub reads, in the text of a rendered document, as a mention (``@org/team``), an
e-mail or web address (``x@y.z``, ``https://``, ``www.``) or an issue reference (``#1``,
``GH-1``, ``owner/repo#1``): it links or notifies, wherever the word came from. Inside code it
does neither, so a word holding one of these is shown as code."""


def md_text(text: str) -> str:
    """Markdown prose or a table cell: shown as written, whatever it holds.

    Backslashes, ``&``, ``<``, backticks and ``|`` are escaped (``\\|`` also inside a table), as
    are the emphasis marks that could pair up, and ``](`` cannot start a link target; the line
    cannot end (see :func:`visible`). A word (between spaces) that GitHub would make a mention,
    a link or an issue reference (:data:`_LINKABLE`) is a code span."""
    shown = visible(text)
    if _LINKABLE.search(shown) is None:
        return _md_prose(shown, first=True)
    return _by_word(shown, _md_code_word, _md_prose)


def _md_code_word(word: str) -> str:
    """A word as code in prose or in a table cell: each ``|`` stands between two code spans as
    ``\\|``, which both read as ``|`` (in a span outside a table, ``\\|`` would show its
    backslash)."""
    return "\\|".join(map(partial(md_code, table=False), word.split("|")))


def _by_word(shown: str, code: Callable[[str], str], prose: Callable[..., str]) -> str:
    """``shown`` with each word holding what :data:`_LINKABLE` finds as ``code(word)``, and each
    run of the other words as ``prose(run, first=...)``, spaced as they were."""
    parts: list[str] = []
    plain: list[str] = []
    for word in shown.split(" "):
        if _LINKABLE.search(word) is None:
            plain.append(word)
            continue
        if plain:
            parts.append(prose(" ".join(plain), first=not parts))
            plain.clear()
        parts.append(code(word))
    if plain:
        parts.append(prose(" ".join(plain), first=not parts))
    return " ".join(parts)


def _md_prose(shown: str, *, first: bool) -> str:
    """:func:`md_text` of text already :func:`visible`; ``first``: it begins the line."""
    escaped = (
        shown.replace("\\", "\\\\")
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace("`", "&#96;")
        .replace("|", "\\|")
        .replace("](", "]\\(")
    )
    escaped = _EMPHASIS.sub(r"\\\g<0>", escaped)
    return _LEADING.sub(_lead, escaped, count=1) if first else escaped


_LEADING = re.compile(r"^(?: |[#>+=\[-]|[0-9]+[.)])")
"""What would start a block (a heading, a quote, a list, a link definition, an indented code
block) where the text begins a line or a list item."""


def _lead(match: re.Match[str]) -> str:
    found = match.group()
    if found == " ":
        return "&#32;"
    return found[:-1] + "\\" + found[-1]


_TICKS = re.compile("`+")


def md_code(text: str, *, table: bool = True) -> str:
    """A markdown code span of ``text``: the fence is one backtick longer than the longest run
    inside, padded with a space where the text starts or ends with a backtick or with spaces on
    both sides (CommonMark strips one); nothing at all for an empty text. ``table``: also
    escape ``|``, which a table cell ends on even inside a code span (GitHub removes the
    backslash before the span is read)."""
    shown = visible(text)
    if table:
        shown = shown.replace("|", "\\|")
    if not shown:
        return ""  # an empty cell, not two literal backticks
    fence = "`" * (max(map(len, _TICKS.findall(shown)), default=0) + 1)
    pad = (
        " "
        if shown[0] == "`"
        or shown[-1] == "`"
        or (shown[0] == " " and shown[-1] == " " and shown.strip(" "))
        else ""
    )
    return f"{fence}{pad}{shown}{pad}{fence}"


def md_html(text: str) -> str:
    """Text inside an HTML element of the markdown (``<summary>``), where markdown escapes are
    not read: entities only; a word GitHub would make a mention or a link is ``<code>``, as in
    :func:`md_text`."""
    shown = visible(text)
    if _LINKABLE.search(shown) is None:
        return _html_text(shown)
    return _by_word(shown, lambda word: f"<code>{_html_text(word)}</code>", _html_text)


def _html_text(shown: str, *, first: bool = False) -> str:
    return shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_fence(lines: list[str], info: str = "text") -> list[str]:
    """A fenced code block of ``lines`` (each made :func:`visible`): the fence is longer than
    any run of backticks in the block, so no line closes it early."""
    shown = [visible(line) for line in lines]
    longest = max((len(run) for line in shown for run in _TICKS.findall(line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{info}", *shown, fence]


# -- the terminal -------------------------------------------------------------------------------


def term(text: str, style: str = "") -> Text:
    """A rich ``Text`` of ``text`` made :func:`visible`: rich reads no markup in it. For a table
    cell (each of its lines starts with the table's border)."""
    from rich.text import Text  # here: only a table imports rich

    return Text(visible(text), style=style)


_AFTER_DOT = re.compile(r"(?<=\.)")


def term_dotted(text: str, width: int, style: str = "") -> Text:
    """As :func:`term`, laid out in lines of at most ``width`` that break after a dot or at a
    space (``model.layers.3.`` / ``mlp.down_proj``), so a module name never breaks mid-word
    unless one part of it is longer than ``width``."""
    lines: list[str] = []
    line = ""
    for word in visible(text).split(" "):
        for piece in _AFTER_DOT.split(f" {word}" if line else word):
            if line and len(line) + len(piece) > width:
                lines.append(line.rstrip(" "))
                piece = piece.lstrip(" ")
                line = ""
            line += piece
    lines.append(line)
    from rich.text import Text

    return Text("\n".join(lines), style=style)


def term_line(text: str, style: str = "") -> Text:
    """A line of its own, as :func:`term` but never wrapped (print it with ``crop=False``): no
    string from outside can be pushed to the start of a line (a ``::error`` command to a CI
    runner reading the log); the terminal wraps it for the eye."""
    from rich.text import Text

    return Text(visible(text), style=style, no_wrap=True, overflow="ignore")


# -- GitHub workflow commands ---------------------------------------------------------------------


def gh_data(text: str) -> str:
    """The data of a workflow command (``::error title=...::DATA``), as the runner unescapes it;
    what :func:`visible` escapes is escaped so too (the log shows terminal sequences and
    reorders bidirectional text), but for line breaks, which the runner reads as ``%0A``."""
    shown = _HIDDEN.sub(_escape_but_breaks, text)
    return shown.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_but_breaks(match: re.Match[str]) -> str:
    char = match.group()
    return char if char in "\r\n" else _escape(match)


def gh_property(text: str) -> str:
    """A property value of a workflow command (``title=VALUE``)."""
    return gh_data(text).replace(":", "%3A").replace(",", "%2C")
