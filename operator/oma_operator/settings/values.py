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
    text = text.strip()
    try:
        value = float(text) if text else default
    except ValueError:
        raise SettingsError(f"{variable}={text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise SettingsError(f"{variable}={text!r} must be more than 0 seconds")
    return value


def byte_count(variable: str, text: str, default: int) -> int:
    """A whole number of bytes, more than 0; empty: ``default``."""
    text = text.strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise SettingsError(f"{variable}={text!r} must be a number of bytes, more than 0")
    return int(text)


def rate(variable: str, text: str, default: float) -> float:
    """A positive number a second (fractions allowed); empty: ``default``."""
    text = text.strip()
    try:
        value = float(text) if text else default
    except ValueError:
        raise SettingsError(f"{variable}={text!r} is not a number of requests a second") from None
    if not 0 < value < float("inf"):  # also refuses nan
        raise SettingsError(f"{variable}={text!r} must be more than 0 requests a second")
    return value


def count(variable: str, text: str, default: int) -> int:
    """A whole number, at least 1; empty: ``default``."""
    text = text.strip()
    if not text:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise SettingsError(f"{variable}={text!r} must be a whole number, at least 1")
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
