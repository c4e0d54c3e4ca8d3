"""A running TeamRun's progress as its store has it: tasks done/total and the last save time.

The runner has no Kubernetes credentials, so the operator reads the latest checkpoint (the same
summary ``oma checkpoint show`` prints) and mirrors two facts into the TeamRun's status. A
checkpoint kept as a journal carries both in its head (``journal_head``: a few hundred bytes),
so the poll does not read the snapshot.
"""

from __future__ import annotations

from typing import Any

from oma.checkpoint import Checkpoint
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.summary import summarize
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal


async def read_progress(store: MemoryStore, run_id: str) -> dict[str, Any] | None:
    """``taskSummary`` and ``lastCheckpointAt`` for the status, or None before the first save."""
    if supports_journal(store):
        head = await store.journal_head(checkpoint_key(run_id))
        from_head = _from_head(head.metadata) if head is not None else None
        if from_head is not None:
            return from_head
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if snapshot is None:
        return None
    summary = summarize(snapshot, checkpoint_key(run_id), None)
    progress: dict[str, Any] = {"lastCheckpointAt": summary.saved_at}
    if summary.tasks:
        done = summary.task_counts.get("completed", 0)
        progress["taskSummary"] = f"{done}/{len(summary.tasks)}"
    return progress


def _from_head(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """Progress from a journal head's metadata; ``None`` when it has none that makes sense
    (then the journal itself is read)."""
    meta = metadata or {}
    counts, saved = meta.get("progress"), meta.get("createdAt")
    if not isinstance(counts, dict) or not isinstance(saved, str):
        return None
    tasks, done = counts.get("tasks"), counts.get("completed")
    if type(tasks) is not int or type(done) is not int or not 0 <= done <= tasks:
        return None
    progress: dict[str, Any] = {"lastCheckpointAt": saved}
    if tasks:
        progress["taskSummary"] = f"{done}/{tasks}"
    return progress


def changed(status: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any]:
    """The part of ``progress`` that differs from ``status`` (empty: no write needed)."""
    return {key: value for key, value in progress.items() if status.get(key) != value}
