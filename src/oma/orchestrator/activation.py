"""Which store and key a run checkpoints to, and the guard against key collisions."""

from __future__ import annotations

from dataclasses import dataclass

from oma.checkpoint.manager import Checkpoint
from oma.errors import OmaError
from oma.orchestrator.options import CheckpointOptions
from oma.orchestrator.saver import ActiveCheckpoint
from oma.store.base import MemoryStore
from oma.store.prefixed import PrefixedStore
from oma.team import Team


class CheckpointConfigError(OmaError):
    """Raised when checkpoint settings cannot work: no store and neither a run id nor a key, or
    ``restore()`` with checkpointing turned off."""

    code = "CHECKPOINT_CONFIG"


@dataclass
class Activation:
    active: ActiveCheckpoint
    checkpoint: Checkpoint


def activate(options: CheckpointOptions, team: Team, fallback_store: MemoryStore) -> Activation:
    """Store: explicit, else the team's shared-memory store, else the orchestrator's own.

    The orchestrator's own store is shared by every run on it, so without an explicit store or a
    team store a ``run_id`` or ``key`` is required: two runs must never share the default key.
    """
    no_store = options.store is None and team.shared_memory_store is None
    if no_store and not (options.run_id or options.key):
        raise CheckpointConfigError(
            "checkpointing without a store needs a runId or key: the orchestrator's "
            "fallback in-memory store is shared by all its runs. Pass "
            "CheckpointOptions(run_id=...), key=..., or store=..."
        )
    store = options.store or team.shared_memory_store or fallback_store
    reuses = _lives_in(team.shared_memory_store, store)
    checkpoint = Checkpoint(store, run_id=options.run_id, key=options.key)
    return Activation(
        active=ActiveCheckpoint(
            checkpoint,
            embed_shared_memory=not reuses,
            fence=options.fence,
            attempt_log=options.attempt_log,
            journal=options.journal,
            history=options.history,
        ),
        checkpoint=checkpoint,
    )


def _lives_in(memory: MemoryStore | None, store: MemoryStore) -> bool:
    """Shared memory kept in the checkpoint store, or in a part of it, is as durable as the
    checkpoint itself: snapshots do not embed it (each one would carry the whole memory)."""
    while isinstance(memory, PrefixedStore):
        if memory is store:
            return True
        memory = memory.inner
    return memory is not None and memory is store
