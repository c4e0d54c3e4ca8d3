"""Options of a run: where and whether to checkpoint, run id, metadata, limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from oma.checkpoint.retention import HistoryPolicy
from oma.store.base import MemoryStore


@dataclass
class CheckpointOptions:
    """``store`` defaults to the team's shared-memory store; ``key`` wins over ``run_id``.

    ``fence``: every save is a compare-and-set from this attempt's previous write, and a restore
    first claims the run, so an older attempt that is still alive stops (``CheckpointFencedError``)
    instead of overwriting the newer one. Needs a store with ``compare_and_set``; without one the
    run continues unfenced and a ``fencing_unavailable`` warning is emitted.

    ``attempt_log``: each attempt also appends one record (start time, host, work already done)
    to ``__oma_checkpoint__/<runId>/attempts``, which ``oma checkpoint show`` prints. Off by
    default so a library run writes exactly what the reference writes; ``oma run`` and the
    Kubernetes runner turn it on.

    ``journal`` (on by default): in a store that keeps journals (Redis, PostgreSQL, in-memory),
    a new run keeps its checkpoint as a journal (a snapshot, then one delta per boundary,
    compacted), so a boundary writes what changed instead of the whole snapshot
    (``oma.checkpoint.journal``: 2,400x the final snapshot over 1,000 turns becomes a few
    times it). ``journal=False`` keeps whole snapshots, for a store a TypeScript process reads
    (the reference reads only those). A store without journals (a file, a redacting store)
    keeps snapshots either way, and a run resumed keeps the layout it was found in.

    ``history``: a journal keeps the run's past boundaries, chained, for this retention
    (``oma.checkpoint.retention``; the default keeps every one until the checkpoint is
    deleted), so ``oma checkpoint history`` lists them and any one can be rebuilt; ``None``
    keeps only the latest (compaction replaces the journal). Only the journal layout has it.
    """

    enabled: bool = True
    store: MemoryStore | None = None
    run_id: str | None = None
    key: str | None = None
    fence: bool = False
    attempt_log: bool = False
    journal: bool = True
    history: HistoryPolicy | None = field(default_factory=HistoryPolicy)


CheckpointArg = bool | CheckpointOptions | None


def normalize_checkpoint(value: CheckpointArg) -> CheckpointOptions | None:
    if value is None or value is False:
        return None
    if value is True:
        return CheckpointOptions()
    return value if value.enabled else None
