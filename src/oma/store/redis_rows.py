"""``RedisStore``'s rows as read back: decoded, or a ``StoreCorruptError`` naming the store,
the key and the field (``oma.store.damaged``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from oma.errors import StoreCorruptError
from oma.store import damaged
from oma.store.base import Entries, MemoryEntry, Metadata

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ENTRY_WIDTH = 5  # key, value, metadata, created, expiry (see redis_scripts.READ)
_STORE = "RedisStore"


def corrupt(where: str, key: str | bytes, problem: str) -> StoreCorruptError:
    return damaged.corrupt(where, key, problem, _STORE)


def text(raw: bytes | str, where: str, key: str | bytes, what: str) -> str:
    return damaged.text(raw, where, key, what, _STORE)


def metadata(raw: bytes | str | None, where: str, key: str, what: str) -> Metadata | None:
    return damaged.metadata_of(raw, where, key, what, _STORE)


def entries(rows: Sequence[bytes | str | None], where: str, layout: Sequence[str]) -> Entries:
    """Entries from the READ script's (or ``get``'s) flat rows (``layout``: the store's Redis
    keys, ``redis_scripts.FIELDS``): the listing fails on a damaged one rather than leave it
    out."""
    found: Entries = []
    for start in range(0, len(rows), ENTRY_WIDTH):
        key, value, meta, made, expiry_turn = rows[start : start + ENTRY_WIDTH]
        assert key is not None and value is not None  # READ and get return only stored keys
        name = text(key, where, key, "its key")
        found.append(
            MemoryEntry(
                key=name,
                value=text(value, where, name, f"its value ({layout[0]})"),
                metadata=metadata(meta, where, name, f"its metadata ({layout[2]})"),
                created_at=created(made, where, name, layout[3]),
                expires_at_turn=expiry(expiry_turn, where, name, layout[4]),
            )
        )
    return found


def created(raw: bytes | str | None, where: str, key: str, field: str) -> datetime:
    if raw is None:
        raise corrupt(where, key, f"it has no creation time ({field})")
    micros = damaged.integer(raw)
    if micros is None:
        problem = f"its creation time {damaged.excerpt(raw)} ({field}) is not an integer"
        raise corrupt(where, key, problem)
    try:
        return EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise corrupt(where, key, f"its creation time ({field}) is out of range") from None


def expiry(raw: bytes | str | None, where: str, key: str, field: str) -> int | None:
    if raw is None:
        return None
    turn = damaged.integer(raw)
    if turn is None:
        problem = f"its expiry turn {damaged.excerpt(raw)} ({field}) is not an integer"
        raise corrupt(where, key, problem)
    return turn
