"""Credential redaction for values about to be persisted (reference §1.4).

``redact_value`` is what ``RedactingStore`` applies to every value it writes: a JSON object or
array is redacted structurally and re-serialised compactly; anything else is free text. Every
replacement is the literal ``[redacted]``. Redaction is lossy on purpose and best-effort: it
catches the usual credential shapes, not every secret a text can contain.

The patterns avoid nested unbounded repetition (and use possessive quantifiers where a name is
scanned), so redacting a megabyte of text stays linear.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import orjson

from oma import jsonutil

REDACTED = "[redacted]"

_SENSITIVE_PARTS = re.compile(
    r"api[_-]?key|secret|password|passwd|pwd|private[_-]?key|access[_-]?key|accesstoken"
    r"|refreshtoken|idtoken|githubtoken|authorization|auth[_-]?token|cookie|session"
    r"|credential|bearer",
    re.IGNORECASE,
)
_TOKEN_NAME = re.compile(r"token|.*[_-]token|token[_-].*", re.IGNORECASE | re.DOTALL)


def is_sensitive_name(name: str) -> bool:
    """True for property / assignment names whose value is a credential (reference list)."""
    return _SENSITIVE_PARTS.search(name) is not None or _TOKEN_NAME.fullmatch(name) is not None


# A name in an assignment: starts at a word boundary; possessive so a long word never backtracks.
_NAME = r"(?<![\w.-])(?P<nq>[\"']?)(?P<name>[A-Za-z_][\w.-]*+)(?P=nq)"

_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    re.DOTALL,
)
_AUTHORIZATION = re.compile(r"\b(authorization[ \t]*:[ \t]*)(?:bearer[ \t]+)?[^\r\n,;}]+", re.I)
_BEARER = re.compile(r"\b(bearer[ \t]+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_QUOTED_ASSIGNMENT = re.compile(
    _NAME + r"(?P<sep>[ \t]*[:=][ \t]*)(?P<q>[\"'])(?P<value>(?:\\.|(?!(?P=q))[^\\\r\n])*)(?P=q)"
)
_UNQUOTED_ASSIGNMENT = re.compile(
    _NAME + r"(?P<sep>[ \t]*[:=][ \t]*)(?![\"'\s]|\[redacted\])(?P<value>[^,;}\]\r\n]+)"
)
_TOKEN_LITERALS = re.compile(
    r"\bsk-[A-Za-z0-9_-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9_]{20,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}"
    r"|\bxox[baprs]-[A-Za-z0-9-]{10,}"
)


def _quoted(match: re.Match[str]) -> str:
    if not is_sensitive_name(match["name"]):
        return match[0]
    prefix = match[0][: match.start("value") - match.start(0)]
    return f"{prefix}{REDACTED}{match['q']}"


def _unquoted(match: re.Match[str]) -> str:
    if not is_sensitive_name(match["name"]):
        return match[0]
    return match[0][: match.start("value") - match.start(0)] + REDACTED


def compile_patterns(patterns: Iterable[re.Pattern[str] | str]) -> tuple[re.Pattern[str], ...]:
    """Caller patterns as compiled regexes (strings are compiled as they are)."""
    return tuple(p if isinstance(p, re.Pattern) else re.compile(p) for p in patterns)


def redact_text(text: str, patterns: Iterable[re.Pattern[str]] = ()) -> str:
    """Free-text redaction: the default rules in order, then every match of each pattern."""
    text = _PEM.sub(REDACTED, text)
    text = _AUTHORIZATION.sub(lambda m: m[1] + REDACTED, text)
    text = _BEARER.sub(lambda m: m[1] + REDACTED, text)
    text = _QUOTED_ASSIGNMENT.sub(_quoted, text)
    text = _UNQUOTED_ASSIGNMENT.sub(_unquoted, text)
    text = _TOKEN_LITERALS.sub(REDACTED, text)
    for pattern in patterns:
        # re.sub replaces every match: the JS "force the g flag" rule holds by construction.
        text = pattern.sub(REDACTED, text)
    return text


def redact_structure(value: Any, patterns: Iterable[re.Pattern[str]] = ()) -> Any:
    """A copy of a JSON value: sensitive property values replaced whole, strings redacted."""
    patterns = tuple(patterns)
    if isinstance(value, dict):
        return {
            key: REDACTED if is_sensitive_name(key) else redact_structure(item, patterns)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_structure(item, patterns) for item in value]
    if isinstance(value, str):
        return redact_text(value, patterns)
    return value  # numbers, booleans, null


def redact_value(value: str, patterns: Iterable[re.Pattern[str]] = ()) -> str:
    """Redact a stored value: structurally if it is a JSON object or array, else as text."""
    patterns = tuple(patterns)
    if value.lstrip()[:1] in ("{", "["):
        parsed = _parse_json(value)
        if isinstance(parsed, dict | list):
            return jsonutil.dumps(redact_structure(parsed, patterns))
    return redact_text(value, patterns)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_json(text: str) -> Any:
    """Parse strict JSON (as JavaScript's JSON.parse would); ``None`` if it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:  # lone surrogates or huge integers: legal JSON orjson refuses
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
