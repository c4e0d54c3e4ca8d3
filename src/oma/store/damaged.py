"""Reading what a store server holds: a trust boundary (docs/stores.md, "Damaged data").

Anything a store's own writes cannot have left (bytes that are not UTF-8, metadata that is not a
JSON object, a count or time that is not a number) is a ``StoreCorruptError`` naming the store,
the key and the field, and saying what to do: a listing fails rather than leave a key out, and
nothing is written over it. ``RedisStore`` and ``PostgresStore`` decode their rows with these.
"""

from __future__ import annotations

import re

from oma import jsonutil
from oma.errors import StoreCorruptError
from oma.store.base import Metadata

_EXCERPT = 60  # characters of a damaged field quoted in a message
_INTEGER = re.compile(r"-?[0-9]+")


def corrupt(where: str, key: str | bytes, problem: str, store: str) -> StoreCorruptError:
    """The error for the damaged data of ``key`` in the store ``where`` (``store``: the class
    whose ``delete`` removes a key's entry and journal)."""
    return StoreCorruptError(
        f"{where}: the data of key {excerpt(key)}",
        problem,
        remedy=(
            "Restore the key from a backup, or delete it (oma checkpoint delete for a run's "
            f"checkpoint, {store}.delete otherwise: it removes the entry and the journal of the "
            "key); until then every listing of the store fails on it."
        ),
    )


def excerpt(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw
    shown = repr(text[:_EXCERPT])
    return shown if len(text) <= _EXCERPT else f"{shown}... ({len(text)} characters)"


def text(raw: bytes | memoryview | str, where: str, key: str | bytes, what: str, store: str) -> str:
    """UTF-8 text as the stores write it (lone surrogates pass, as written)."""
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        problem = f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        raise corrupt(where, key, problem, store) from None


def metadata_of(
    raw: bytes | str | None, where: str, key: str, what: str, store: str
) -> Metadata | None:
    """Metadata JSON: an object, or absent."""
    if raw is None:
        return None
    try:
        metadata = jsonutil.loads(raw)
    except ValueError as exc:  # not JSON, nested too deeply, not UTF-8: all ValueErrors
        detail = " ".join(str(exc).split())[:200]
        raise corrupt(where, key, f"{what} is not valid JSON ({detail})", store) from None
    if not isinstance(metadata, dict):
        raise corrupt(where, key, f"{what} is not a JSON object: {excerpt(raw)}", store)
    return metadata


def integer(raw: bytes | str) -> int | None:
    """The decimal integer a store writes, or None for anything else."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    return int(text) if _INTEGER.fullmatch(text) else None
