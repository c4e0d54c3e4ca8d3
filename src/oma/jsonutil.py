"""JSON in and out: orjson on the fast path, the standard library for what orjson refuses.

orjson rejects lone UTF-16 surrogates (``"\\ud800"``) and reads integers beyond 64 bits as
floats, yet both are legal JSON text that the TypeScript implementation reads and writes.
Falling back keeps such documents loadable, and exact, instead of corrupt or altered.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# orjson reads an integer literal beyond 64 bits as a float (2**64 + 1 -> 1.8446744073709552e19)
# without a word. Any run of 19 digits may be one: such text goes to the exact parser.
_LONG_DIGITS_TEXT = re.compile(r"\d{19}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{19}")


def loads(data: str | bytes) -> Any:
    """Parse JSON text; anything that is not JSON (or nested too deeply) is a ``ValueError``."""
    long_digits = (
        _LONG_DIGITS_BYTES.search(data)
        if isinstance(data, bytes)
        else _LONG_DIGITS_TEXT.search(data)
    )
    if long_digits is None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # lone surrogates, or really invalid: the standard library decides
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    try:
        return json.loads(text)  # json.JSONDecodeError (a ValueError) if really invalid
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply to parse") from exc


def dumps(value: Any) -> str:
    """Compact JSON text (no whitespace), non-ASCII kept raw where it can be."""
    try:
        return orjson.dumps(value).decode("utf-8")
    except TypeError:
        # ensure_ascii makes lone surrogates into escapes, so the text stays valid UTF-8.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def dumps_bytes(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:
        return dumps(value).encode("utf-8")
