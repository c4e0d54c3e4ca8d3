"""JSON in and out: orjson on the fast path, the standard library for what orjson refuses.

orjson rejects lone UTF-16 surrogates (``"\\ud800"``) and integers beyond 64 bits, both of which
are legal JSON text that the TypeScript implementation reads and writes. Falling back keeps such
documents loadable instead of turning them into corruption errors.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: str | bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
        return json.loads(text)  # raises json.JSONDecodeError (a ValueError) if really invalid


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
