"""Reading one setting's text: what each kind of value accepts, and the error that names it.

Pure: a function takes the variable's name and its text and returns the value or raises
``SettingsError`` saying which variable was wrong and what to write instead.
"""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting the operator cannot run with; the message names it and says what to write.
    Never transient: the operator stops at its start and nothing has run yet."""


def seconds(variable: str, text: str, default: float) -> float:
    """A positive number of seconds (fractions allowed); empty: ``default``."""
    return _positive(variable, text, default, "seconds")


def rate(variable: str, text: str, default: float) -> float:
    """A positive number a second (fractions allowed); empty: ``default``."""
    return _positive(variable, text, default, "requests a second")


def _positive(variable: str, text: str, default: float, unit: str) -> float:
    text = text.strip()
    try:
        value = float(text) if text else default
    except ValueError:
        raise SettingsError(f"{variable}={text!r} is not a number of {unit}") from None
    if not 0 < value < float("inf"):  # also refuses nan
        raise SettingsError(f"{variable}={text!r} must be more than 0 {unit}")
    return value


def byte_count(variable: str, text: str, default: int) -> int:
    """A whole number of bytes, more than 0; empty: ``default``."""
    return _whole(variable, text, default, "a number of bytes, more than 0")


def count(variable: str, text: str, default: int) -> int:
    """A whole number, at least 1; empty: ``default``."""
    return _whole(variable, text, default, "a whole number, at least 1")


def _whole(variable: str, text: str, default: int, must_be: str) -> int:
    text = text.strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise SettingsError(f"{variable}={text!r} must be {must_be}")
    return int(text)


def boolean(variable: str, text: str) -> bool:
    """true/false or 1/0 (any case); empty: false."""
    text = text.strip().lower()
    if text not in ("", "0", "1", "false", "true"):
        raise SettingsError(f"{variable}={text!r}: give true or false (or 1 or 0)")
    return text in ("1", "true")


YEAR_SECONDS = 31_536_000


def time_to_live(variable: str, text: str) -> int | None:
    """Whole seconds from 0 to a year; empty: None (kept)."""
    text = text.strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) > YEAR_SECONDS:
        raise SettingsError(
            f"{variable}={text!r}: give whole seconds, 0 to {YEAR_SECONDS} (a year), or "
            "leave it unset to keep finished TeamRuns"
        )
    return int(text)


def names(text: str) -> tuple[str, ...]:
    """Comma-separated names, blanks dropped."""
    return tuple(name.strip() for name in text.split(",") if name.strip())
