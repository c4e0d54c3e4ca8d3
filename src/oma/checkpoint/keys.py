"""Where checkpoints live in a store: ``__oma_checkpoint__/<runId>/latest``."""

from __future__ import annotations

from oma.store.reserved import CHECKPOINT_KEY_PREFIX

DEFAULT_CHECKPOINT_KEY = f"{CHECKPOINT_KEY_PREFIX}latest"


def checkpoint_key(run_id: str | None = None) -> str:
    """The latest-snapshot key of a run (the run id is inserted verbatim, not escaped)."""
    if not run_id:
        return DEFAULT_CHECKPOINT_KEY
    return f"{CHECKPOINT_KEY_PREFIX}{run_id}/latest"


def is_checkpoint_key(key: str) -> bool:
    """True for a key under the checkpoint prefix (``__oma_checkpoint__/``)."""
    return key.startswith(CHECKPOINT_KEY_PREFIX)


def tool_record_key(checkpoint_key: str) -> str:
    """Where a run keeps the MCP tools its agents saw (``oma.tools.mcp.record``), beside its
    checkpoint: ``__oma_checkpoint__/<runId>/mcp-tools``."""
    return checkpoint_key.removesuffix("latest") + "mcp-tools"


def events_journal_key(checkpoint_key: str) -> str:
    """Where a run keeps its event journal in a store (``oma.journal.store_sink``), beside its
    checkpoint: ``__oma_checkpoint__/<runId>/events``."""
    return checkpoint_key.removesuffix("latest") + "events"


def segments_journal_key(checkpoint_key: str) -> str:
    """Where a journal's bases keep their long lists (``oma.checkpoint.segments``), beside the
    checkpoint: ``__oma_checkpoint__/<runId>/segments``."""
    return checkpoint_key.removesuffix("latest") + "segments"


def is_segments_key(key: str) -> bool:
    """Whether ``key`` holds a checkpoint's segments (beside it, not a checkpoint of its own)."""
    return key.startswith(CHECKPOINT_KEY_PREFIX) and key.endswith("/segments")
