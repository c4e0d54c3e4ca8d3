"""Canonical JSON exactly as the TypeScript implementation computes it for approval hashes.

Numbers are formatted like JavaScript's ``Number.prototype.toString`` (``1`` not ``1.0``,
``1e+21``, ``1e-7``, ``-0`` as ``0``), integers are first rounded to the nearest double as
``JSON.parse`` would, strings escape only quote, backslash, control characters and lone
surrogates (non-ASCII stays raw, U+2028/U+2029 included), and object keys are sorted by UTF-16
code units. Anything that is not plain JSON data is refused with ``APPROVAL_VALIDATION_ERROR``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from oma.approval.errors import DurableApprovalError

# The writer recurses once per level; refusing deeper content keeps that far from Python's stack
# limit (a RecursionError would escape as an untyped crash). Snapshots cannot hold deeper
# content anyway (oma.checkpoint.validation.MAX_SNAPSHOT_DEPTH).
MAX_CONTENT_DEPTH = 256

_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON, exactly the text the TypeScript implementation hashes."""
    parts: list[str] = []
    _write(value, parts, set())
    return "".join(parts)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write(value: Any, out: list[str], active: set[int]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(js_string(value))
    elif isinstance(value, int | float):
        out.append(js_number(value))
    elif isinstance(value, list):
        _enter(value, active)
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, active)
        out.append("]")
        active.discard(id(value))
    elif isinstance(value, dict):
        _enter(value, active)
        out.append("{")
        for index, key in enumerate(sorted(value, key=_utf16_key)):
            if index:
                out.append(",")
            out.append(js_string(key))
            out.append(":")
            _write(value[key], out, active)
        out.append("}")
        active.discard(id(value))
    else:
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR",
            f"Approval content must be plain JSON data; found a {type(value).__name__}.",
        )


def readable_json(value: Any, indent: int | None = None) -> str:
    """``value`` as its canonical JSON holds it (the same numbers, string escapes and key
    order: ``1000000`` even when Python holds ``1000000.0``), laid out for reading: on one line
    with ``", "`` and ``": "``, or with ``indent``, one item a line (as ``json.dumps`` lays it
    out). Only for display: hashes bind ``canonical_json``."""
    parts: list[str] = []
    _write_readable(value, parts, set(), indent, 0)
    return "".join(parts)


def _write_readable(
    value: Any, out: list[str], active: set[int], indent: int | None, level: int
) -> None:
    if not isinstance(value, list | dict) or not value:
        _write(value, out, active)
        return
    _enter(value, active)
    if indent is None:
        inner, separator, closing = "", ", ", ""
    else:
        inner = "\n" + " " * (indent * (level + 1))
        separator, closing = "," + inner, "\n" + " " * (indent * level)
    out.append("[" if isinstance(value, list) else "{")
    out.append(inner)
    if isinstance(value, list):
        for index, item in enumerate(value):
            if index:
                out.append(separator)
            _write_readable(item, out, active, indent, level + 1)
    else:
        for index, key in enumerate(sorted(value, key=_utf16_key)):
            if index:
                out.append(separator)
            out.append(js_string(key))
            out.append(": ")
            _write_readable(value[key], out, active, indent, level + 1)
    out.append(closing)
    out.append("]" if isinstance(value, list) else "}")
    active.discard(id(value))


def _enter(container: list[Any] | dict[Any, Any], active: set[int]) -> None:
    if len(active) >= MAX_CONTENT_DEPTH:
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR",
            f"Approval content is nested deeper than {MAX_CONTENT_DEPTH} levels.",
        )
    if id(container) in active:
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR", "Approval content contains a cycle."
        )
    if isinstance(container, dict) and not all(isinstance(key, str) for key in container):
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR", "Approval content object keys must be strings."
        )
    active.add(id(container))


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def js_string(text: str) -> str:
    """``JSON.stringify`` of a string (well-formed variant: lone surrogates escaped)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[char])
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def js_number(number: int | float) -> str:
    """``JSON.stringify`` of a number, after JavaScript's parse-to-double rounding."""
    try:
        as_double = float(number)
    except OverflowError:
        as_double = math.inf
    if not math.isfinite(as_double):
        raise DurableApprovalError(
            "APPROVAL_VALIDATION_ERROR", "Approval content contains a non-finite number."
        )
    if as_double == 0:
        return "0"
    sign = "-" if as_double < 0 else ""
    digits, exponent = _shortest_digits(abs(as_double))
    return sign + _format_js(digits, exponent)


def _shortest_digits(positive: float) -> tuple[str, int]:
    """Shortest round-trip digits ``d1d2...dk`` and ``n`` with value = 0.d1...dk * 10**n."""
    mantissa, _, exp_text = repr(positive).partition("e")
    whole, _, fraction = mantissa.partition(".")
    exponent = int(exp_text) if exp_text else 0
    if fraction == "0":
        fraction = ""
    digits = (whole + fraction).lstrip("0")
    leading_zeros = len(whole + fraction) - len((whole + fraction).lstrip("0"))
    point = len(whole) - leading_zeros + exponent
    return digits.rstrip("0"), point


def _format_js(digits: str, n: int) -> str:
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    exponent = n - 1
    sign = "+" if exponent >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(exponent)}"
