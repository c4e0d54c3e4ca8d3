"""Text as a reviewer may safely read it: every character that can hide, move, reorder or break
what a terminal shows becomes a visible escape (pure).

Hidden are the C0 and C1 control characters and DEL (escape sequences conceal text, retitle the
terminal, move the cursor; a carriage return or newline starts a fake line), the format
characters (Unicode category Cf: bidi marks, embeddings, overrides and isolates, zero-width
spaces and joiners, the byte order mark, tag characters), the line and paragraph separators,
lone surrogates, characters this Python's Unicode tables do not know (a newer terminal may take
one for a format character) and a few letters that show nothing (Hangul fillers, the combining
grapheme joiner).

``visible`` is for words: a hidden character becomes ``\\n``, ``\\r``, ``\\t``, ``\\xNN``,
``\\uNNNN`` or ``\\UNNNNNNNN``, so a value stays on its one line. Backslashes are left as they
are: the exact content, shown as JSON, tells a written ``\\u202e`` (``"\\\\u202e"``) from an
escaped character. ``visible_json`` is for JSON text: a hidden character inside a string
becomes a JSON escape, so the text still parses to the same value. Only the display changes:
whatever is hashed, stored or sent keeps its characters.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

LEGEND = "(control, bidi and invisible characters are shown escaped, as \\x1b, \\u202e or \\n)"

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp"})
# Letters and marks that render as nothing or blank space, used to pad or split words unseen.
_BLANK = frozenset("\u034f\u115f\u1160\u3164\uffa0")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Printable ASCII is never hidden: only other characters are looked up.
_CANDIDATE = re.compile(r"[^ -~]")
# JSON's whitespace between tokens: raw in JSON text only as its layout (a JSON writer escapes
# every control character inside a string).
_JSON_LAYOUT = frozenset("\n\r\t")


def is_hidden(char: str) -> bool:
    """Whether ``char`` (one character) may hide, move, reorder or break what is shown."""
    return char in _BLANK or unicodedata.category(char) in _HIDDEN_CATEGORIES


def hides(text: str) -> bool:
    """Whether ``text`` holds a hidden character (``visible`` would change it)."""
    return any(is_hidden(match.group()) for match in _CANDIDATE.finditer(text))


def hides_in(value: Any) -> bool:
    """Whether JSON data holds a hidden character in any of its strings or object keys
    (level by level, without recursion: content may nest deeply)."""
    level = [value]
    while level:
        children: list[Any] = []
        for item in level:
            if isinstance(item, str):
                if hides(item):
                    return True
            elif isinstance(item, dict):
                children.extend(item)
                children.extend(item.values())
            elif isinstance(item, list):
                children.extend(item)
        level = children
    return False


def visible(text: str) -> str:
    """``text`` with every hidden character escaped, on as many lines as it had: one."""
    return _CANDIDATE.sub(_escape_word, text)


def visible_json(text: str) -> str:
    """JSON text with every hidden character inside its strings escaped as JSON escapes
    (``\\u202e``; beyond the BMP a surrogate pair): it parses to the same value. Its layout
    (newlines and indentation between tokens) is kept."""
    return _CANDIDATE.sub(_escape_json, text)


def _escape_word(match: re.Match[str]) -> str:
    char = match.group()
    if not is_hidden(char):
        return char
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _escape_json(match: re.Match[str]) -> str:
    char = match.group()
    if char in _JSON_LAYOUT or not is_hidden(char):
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
