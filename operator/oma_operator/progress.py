"""A running TeamRun's progress as its store has it: tasks done/total and the last save time.

The runner has no Kubernetes credentials, so the operator reads the latest checkpoint (the same
summary ``oma checkpoint show`` prints) and mirrors two facts into the TeamRun's status.
"""

from __future__ import annotations

from typing import Any

from oma.checkpoint import Checkpoint
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.summary import summarize
from oma.store.base import MemoryStore


async def read_progress(store: MemoryStore, run_id: str) -> dict[str, Any] | None:
    """``taskSummary`` and ``lastCheckpointAt`` for the status, or None before the first save."""
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if snapshot is None:
        return None
    summary = summarize(snapshot, checkpoint_key(run_id), None)
    progress: dict[str, Any] = {"lastCheckpointAt": summary.saved_at}
    if summary.tasks:
        done = summary.task_counts.get("completed", 0)
        progress["taskSummary"] = f"{done}/{len(summary.tasks)}"
    return progress


def changed(status: dict[str, Any], progress: dict[str, Any]) -> dict[str, Any]:
    """The part of ``progress`` that differs from ``status`` (empty: no write needed)."""
    return {key: value for key, value in progress.items() if status.get(key) != value}
