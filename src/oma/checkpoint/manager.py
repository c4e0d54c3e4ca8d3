"""``Checkpoint``: save, load and delete the latest snapshot of one run in a ``MemoryStore``."""

from __future__ import annotations

from typing import Any

from oma import jsonutil
from oma.checkpoint.journal import StoredCheckpoint, load_journal
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV1
from oma.checkpoint.validation import MAX_SNAPSHOT_DEPTH, parse_snapshot
from oma.errors import CheckpointDecodeError
from oma.gc_pause import gc_paused
from oma.store.base import MemoryStore, supports_compare_and_set
from oma.store.journal import supports_journal


class Checkpoint:
    """Latest-only snapshots of one run: each save overwrites the previous one.

    ``key`` wins over ``run_id``; with neither, the shared default key is used. Reads find
    the checkpoint in either layout (a journal first, in a store that keeps journals: see
    ``oma.checkpoint.journal``); ``save`` writes a whole snapshot.
    """

    def __init__(
        self, store: MemoryStore, *, run_id: str | None = None, key: str | None = None
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.key = key if key else checkpoint_key(run_id)

    async def save(self, snapshot: CheckpointSnapshot) -> None:
        if isinstance(snapshot, CheckpointSnapshotV1) and snapshot.run_id is None and self.run_id:
            snapshot = snapshot.model_copy(update={"run_id": self.run_id})
        await self.save_text(snapshot.to_json(), snapshot_metadata(snapshot))

    async def save_text(self, text: str, metadata: dict[str, Any]) -> None:
        """Write a snapshot already encoded (``text``: its JSON, ``metadata``: its
        ``snapshot_metadata``), e.g. built incrementally by the orchestrator."""
        await self.store.set(self.key, text, metadata)

    async def load_latest(self) -> CheckpointSnapshot | None:
        """The stored snapshot, strictly validated; ``None`` when the key is absent."""
        snapshot, _ = await self.load_stored()
        return snapshot

    async def load_stored(self) -> tuple[CheckpointSnapshot | None, StoredCheckpoint | None]:
        """The snapshot and where it was found (what a fenced claim compares)."""
        if supports_journal(self.store):
            found = await load_journal(self.store, self.key, MAX_SNAPSHOT_DEPTH)
            if found is not None:
                document, stored = found
                with gc_paused():
                    snapshot = parse_snapshot(document, self.key, depth_checked=stored.within_depth)
                return snapshot, stored
        entry = await self.store.get(self.key)
        if entry is None:
            return None, None
        stored = StoredCheckpoint("snapshot", entry.value, 1, len(entry.value))
        return decode_snapshot(entry.value, self.key), stored

    async def save_if(self, snapshot: CheckpointSnapshot, expected: str | None) -> str | None:
        """Write only if the stored string is still ``expected``; the written string, or
        ``None`` when another writer changed it (the store must offer compare-and-set)."""
        return await self.save_text_if(snapshot.to_json(), snapshot_metadata(snapshot), expected)

    async def save_text_if(
        self, text: str, metadata: dict[str, Any], expected: str | None
    ) -> str | None:
        """``save_if`` of a snapshot already encoded (see ``save_text``)."""
        if not supports_compare_and_set(self.store):
            raise TypeError(f"{type(self.store).__name__} offers no compare_and_set")
        swapped = await self.store.compare_and_set(self.key, expected, text, metadata)
        return text if swapped else None

    load = load_latest

    async def delete(self) -> None:
        await self.store.delete(self.key)


def decode_snapshot(text: str, key: str) -> CheckpointSnapshot:
    """The snapshot stored as ``text`` at ``key``: ``CheckpointDecodeError`` when it is not JSON,
    ``CheckpointValidationError`` when it is not a valid snapshot."""
    with gc_paused():
        try:
            raw, bounded = jsonutil.loads_within(text, MAX_SNAPSHOT_DEPTH)
        except ValueError as exc:
            raise CheckpointDecodeError(key, str(exc)) from exc
        return parse_snapshot(raw, key, depth_checked=bounded)


def snapshot_metadata(snapshot: CheckpointSnapshot) -> dict[str, Any]:
    """Store metadata written next to a snapshot, as the reference writes it."""
    metadata: dict[str, Any] = {"namespace": "checkpoint", "version": snapshot.version}
    run_id = (
        snapshot.run_id if isinstance(snapshot, CheckpointSnapshotV1) else snapshot.identity.run_id
    )
    if run_id is not None:
        metadata["runId"] = run_id
    metadata["createdAt"] = snapshot.created_at
    return metadata
