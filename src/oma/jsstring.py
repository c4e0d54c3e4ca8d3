"""Strings as the TypeScript reference measures and trims them, where it matters for what is
hashed or compared (approval request ids and hashes, run ids).

Python's ``str.strip()`` removes U+001C-U+001F and U+0085 and keeps U+FEFF; JavaScript's
``trim()`` does the opposite. A request id computed from a boundary trimmed the Python way would
differ from the reference's. Lengths the reference checks are counted in UTF-16 code units, as
JavaScript's ``length`` is (an emoji counts 2).
"""

from __future__ import annotations

# ECMAScript WhiteSpace and LineTerminator: what String.prototype.trim removes.
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """``text.trim()`` as JavaScript computes it."""
    return text.strip(JS_WHITESPACE)


def utf16_length(text: str) -> int:
    """``text.length`` as JavaScript computes it: UTF-16 code units."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)
