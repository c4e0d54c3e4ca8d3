"""Checkpoints: snapshot models (v1-v4), strict validation, and the ``Checkpoint`` manager."""

from oma.checkpoint.fork import ForkError, ForkResult, fork_run
from oma.checkpoint.history import Boundary, History, load_history
from oma.checkpoint.keys import DEFAULT_CHECKPOINT_KEY, checkpoint_key, is_checkpoint_key
from oma.checkpoint.manager import Checkpoint, decode_snapshot, snapshot_metadata
from oma.checkpoint.queue_snapshot import (
    PlanRevision,
    TaskQueueSnapshot,
    TaskQueueSnapshotV1,
    TaskQueueSnapshotV2,
    TaskSnapshot,
    TaskStatus,
)
from oma.checkpoint.retention import HistoryPolicy
from oma.checkpoint.runner_state import (
    InFlightTask,
    PendingToolCall,
    RunnerPhase,
    TokenUsage,
    ToolCallCommit,
    ToolCallRecord,
    ToolResultBlock,
    ToolUseBlock,
)
from oma.checkpoint.snapshot import (
    CURRENT_SNAPSHOT_VERSION,
    CheckpointSnapshot,
    CheckpointSnapshotV1,
    CheckpointSnapshotV2,
    CheckpointSnapshotV3,
    CheckpointSnapshotV4,
    CheckpointSnapshotV5,
    CompletedTaskCheckpoint,
    MessageBusSnapshot,
    RunIdentityCheckpoint,
    RunMode,
    SharedMemorySnapshot,
)
from oma.checkpoint.validation import parse_snapshot
from oma.store.reserved import CHECKPOINT_KEY_PREFIX

__all__ = [
    "CHECKPOINT_KEY_PREFIX",
    "CURRENT_SNAPSHOT_VERSION",
    "DEFAULT_CHECKPOINT_KEY",
    "Boundary",
    "Checkpoint",
    "CheckpointSnapshot",
    "CheckpointSnapshotV1",
    "CheckpointSnapshotV2",
    "CheckpointSnapshotV3",
    "CheckpointSnapshotV4",
    "CheckpointSnapshotV5",
    "CompletedTaskCheckpoint",
    "ForkError",
    "ForkResult",
    "History",
    "HistoryPolicy",
    "InFlightTask",
    "MessageBusSnapshot",
    "PendingToolCall",
    "PlanRevision",
    "RunIdentityCheckpoint",
    "RunMode",
    "RunnerPhase",
    "SharedMemorySnapshot",
    "TaskQueueSnapshot",
    "TaskQueueSnapshotV1",
    "TaskQueueSnapshotV2",
    "TaskSnapshot",
    "TaskStatus",
    "TokenUsage",
    "ToolCallCommit",
    "ToolCallRecord",
    "ToolResultBlock",
    "ToolUseBlock",
    "checkpoint_key",
    "decode_snapshot",
    "fork_run",
    "is_checkpoint_key",
    "load_history",
    "parse_snapshot",
    "snapshot_metadata",
]
