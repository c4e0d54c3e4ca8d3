"""The checkpoints a store holds, as ``oma checkpoint list`` and ``prune`` see them; the removal
of one (its snapshot or journal and its attempt log; approval rows stay: they are the record of
who decided what); and the removal of everything a finished run keeps (``remove_run``: the
operator's ``retention.deleteStoreRecords``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from oma.approval.ledger import DurableApprovalLedger
from oma.checkpoint.attempts import attempts_key, load_attempt_log
from oma.checkpoint.keys import (
    checkpoint_key,
    events_journal_key,
    is_checkpoint_key,
    is_segments_key,
    segments_journal_key,
    tool_record_key,
)
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.errors import CheckpointError
from oma.journal.store_sink import is_events_key
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from oma.store.reserved import CHECKPOINT_KEY_PREFIX, TENANT_KEY_PREFIX
from oma.timeutil import parse_iso

_AGE = re.compile(r"(\d{1,9})([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class SavedCheckpoint:
    run_id: str | None
    key: str
    saved_at: str | None  # as its last save recorded it (ISO 8601); None: not recorded

    @property
    def saved(self) -> datetime | None:
        return parse_iso(self.saved_at) if self.saved_at else None


@dataclass(frozen=True)
class StoreListing:
    checkpoints: list[SavedCheckpoint]
    tenants: list[str]  # tenants with keys of their own (seen with --tenant)


async def saved_checkpoints(store: MemoryStore) -> StoreListing:
    """Every checkpoint in ``store``, whole snapshots and journals."""
    found: list[SavedCheckpoint] = []
    tenants: set[str] = set()
    for entry in await store.list():
        if entry.key.startswith(CHECKPOINT_KEY_PREFIX) and entry.key.endswith("latest"):
            meta = entry.metadata or {}
            found.append(
                SavedCheckpoint(_text(meta.get("runId")), entry.key, _text(meta.get("createdAt")))
            )
        elif entry.key.startswith(TENANT_KEY_PREFIX):
            tenants.add(entry.key.removeprefix(TENANT_KEY_PREFIX).split("/", 1)[0])
    if supports_journal(store):
        for key in await store.journal_keys():
            # A run's event journal sits beside its checkpoint: not a checkpoint of its own.
            listed = is_checkpoint_key(key) and not is_events_key(key)
            listed = listed and not is_segments_key(key)
            head = await store.journal_head(key) if listed else None
            if head is not None:
                meta = head.metadata or {}
                found.append(
                    SavedCheckpoint(_text(meta.get("runId")), key, _text(meta.get("createdAt")))
                )
            elif key.startswith(TENANT_KEY_PREFIX):
                tenants.add(key.removeprefix(TENANT_KEY_PREFIX).split("/", 1)[0])
    return StoreListing(found, sorted(tenants))


async def remove_checkpoint(store: MemoryStore, key: str) -> bool:
    """Delete the checkpoint under ``key``, its attempt log, its record of MCP tools, and the
    event journal and segments the store keeps for it; ``False`` when neither checkpoint nor
    log was there."""
    journal = await store.journal_version(key) if supports_journal(store) else None
    found = not (
        journal is None
        and await store.get(key) is None
        and await store.get(attempts_key(key)) is None
    )
    # What sits beside a checkpoint goes even when the checkpoint never landed (a first base
    # whose segments were written, then the write lost); the segments before the journal that
    # names them, so no checkpoint is left naming segments that are gone.
    await store.delete(segments_journal_key(key))
    await store.delete(events_journal_key(key))
    if not found:
        return False
    await store.delete(key)
    await store.delete(attempts_key(key))
    await store.delete(tool_record_key(key))
    return True


@dataclass(frozen=True)
class RemovedRun:
    checkpoint: bool  # the checkpoint (and its attempt log) was there and is gone
    approval_rows: int


async def remove_run(store: MemoryStore, run_id: str) -> RemovedRun:
    """Everything a run keeps in ``store``: its checkpoint, attempt log and approval rows (the
    rows are found by the run id their metadata carries). For a run that is over for good: an
    approval row is the record of who decided what."""
    checkpoint = await remove_checkpoint(store, checkpoint_key(run_id))
    rows = await DurableApprovalLedger(store).row_keys(run_id)
    for key in rows:
        await store.delete(key)
    return RemovedRun(checkpoint, len(rows))


async def still_in_use(store: MemoryStore, saved: SavedCheckpoint) -> str | None:
    """Why a checkpoint, however old, may still be a run's to go on with (None: nothing says
    so): its latest attempt has no recorded end (it may be running: a long model or tool call,
    a pod being restarted), or it waits for approval decisions (which can take days)."""
    log = await load_attempt_log(store, saved.key)
    if log is not None and log.attempts:
        last = max(log.attempts, key=lambda record: record.attempt)
        if last.outcome is None:
            return f"attempt {last.attempt} has no recorded end (it may still be running)"
        if last.outcome == "suspended":
            return "it waits for approval decisions"
    try:
        snapshot = await Checkpoint(store, key=saved.key).load_latest()
    except CheckpointError as exc:
        return f"unreadable ({exc.code}): look at it with oma checkpoint show"
    if isinstance(snapshot, CheckpointSnapshotV4):
        decided = {decision.request_id for decision in snapshot.approval_decisions}
        if any(request.id not in decided for request in snapshot.pending_approvals):
            return "it waits for approval decisions"
    return None


def parse_age(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``, ``2w`` (or seconds, ``90s``): ``ValueError`` otherwise."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not an age: give a number and a unit, e.g. 90s, 30m, 12h, 7d, 2w"
        )
    return timedelta(seconds=int(match[1]) * _UNIT_SECONDS[match[2]])


def older_than(
    listing: list[SavedCheckpoint], cutoff: datetime
) -> tuple[list[SavedCheckpoint], list[SavedCheckpoint]]:
    """The checkpoints last saved before ``cutoff``, and those without a recorded save time
    (never pruned: their age is unknown)."""
    stale = [c for c in listing if c.saved is not None and c.saved < cutoff]
    unknown = [c for c in listing if c.saved is None]
    return stale, unknown


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
