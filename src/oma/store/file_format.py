"""The ``FileStore`` state file: ``{"version": 1, "entries": [...]}``, read strictly.

Every way a file can be wrong (not JSON, truncated, another version, malformed entries) raises
``StoreCorruptError`` naming the file and the problem. A store never silently starts empty over
a file it could not read.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from oma import jsonutil
from oma.errors import StoreCorruptError, StoreError
from oma.store.base import MemoryEntry
from oma.timeutil import format_iso, parse_iso

STATE_FILE_VERSION = 1


def decode_state_file(location: str, data: bytes) -> dict[str, MemoryEntry]:
    # jsonutil, not orjson alone: the reference writes lone surrogates as "\\ud800" escapes, and
    # such a file is valid. Its fallback parser recurses per level, hence RecursionError.
    try:
        root = jsonutil.loads(data)
    except (ValueError, RecursionError) as exc:
        raise StoreCorruptError(location, f"not valid JSON ({exc})") from exc
    if not isinstance(root, dict):
        raise StoreCorruptError(location, "the top level is not a JSON object")
    if root.get("version") != STATE_FILE_VERSION:
        raise StoreCorruptError(
            location,
            f"unsupported state file version {root.get('version')!r} "
            f"(this store reads version {STATE_FILE_VERSION})",
        )
    raw_entries = root.get("entries")
    if not isinstance(raw_entries, list):
        raise StoreCorruptError(location, 'missing "entries" array')
    entries: dict[str, MemoryEntry] = {}
    for index, raw in enumerate(raw_entries):
        entry = _decode_entry(location, index, raw)
        previous = entries.get(entry.key)
        if previous is not None:  # a duplicate key updates the first, as a Map would
            entry = entry.model_copy(update={"created_at": previous.created_at})
        entries[entry.key] = entry
    return entries


def _decode_entry(location: str, index: int, raw: Any) -> MemoryEntry:
    where = f"entry {index}"
    if not isinstance(raw, dict):
        raise StoreCorruptError(location, f"malformed entry: {where} is not an object")
    for field in ("key", "value", "createdAt"):
        if not isinstance(raw.get(field), str):
            raise StoreCorruptError(location, f'malformed entry: {where} has no string "{field}"')
    created = _utc(parse_iso(raw["createdAt"]))
    if created is None:
        raise StoreCorruptError(
            location, f"malformed entry: {where} has unparsable createdAt {raw['createdAt']!r}"
        )
    metadata = raw.get("metadata")
    if "metadata" in raw and not isinstance(metadata, dict):
        raise StoreCorruptError(location, f"malformed entry: {where} has non-object metadata")
    expires = raw.get("expiresAtTurn")
    # A non-numeric expiry is dropped rather than rejected: the reference reader does the same.
    is_turn = isinstance(expires, int) and not isinstance(expires, bool)
    expires_at_turn = expires if is_turn else None
    return MemoryEntry(
        key=raw["key"],
        value=raw["value"],
        metadata=metadata,
        created_at=created,
        expires_at_turn=expires_at_turn,
    )


def _utc(moment: datetime | None) -> datetime | None:
    # "0001-01-01T00:00:00+01:00" parses but has no UTC form: writing it back would raise.
    try:
        return moment.astimezone(UTC) if moment is not None else None
    except OverflowError:
        return None


def encode_state_file(entries: dict[str, MemoryEntry]) -> bytes:
    rows: list[dict[str, Any]] = []
    for entry in entries.values():
        row: dict[str, Any] = {"key": entry.key, "value": entry.value}
        if entry.metadata is not None:
            row["metadata"] = entry.metadata
        row["createdAt"] = format_iso(entry.created_at)
        if entry.expires_at_turn is not None:
            row["expiresAtTurn"] = entry.expires_at_turn
        rows.append(row)
    # jsonutil escapes lone surrogates and writes integers beyond 64 bits, which orjson refuses.
    try:
        return jsonutil.dumps_bytes({"version": STATE_FILE_VERSION, "entries": rows})
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreError(
            f"cannot encode the store state as JSON ({exc}); nothing was written. Metadata must "
            "be JSON: strings, numbers, booleans, null, lists and objects with string keys"
        ) from exc
