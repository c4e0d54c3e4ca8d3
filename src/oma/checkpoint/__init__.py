"""Checkpoints: snapshot models (v1-v4), strict validation, and the ``Checkpoint`` manager."""

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
    "Checkpoint",
    "CheckpointSnapshot",
    "CheckpointSnapshotV1",
    "CheckpointSnapshotV2",
    "CheckpointSnapshotV3",
    "CheckpointSnapshotV4",
    "CheckpointSnapshotV5",
    "CompletedTaskCheckpoint",
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
    "is_checkpoint_key",
    "parse_snapshot",
    "snapshot_metadata",
]
