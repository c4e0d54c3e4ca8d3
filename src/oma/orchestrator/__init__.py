"""Orchestration: running teams over tasks, plans and goals, with checkpoints and restore."""

from oma.orchestrator.activation import CheckpointConfigError
from oma.orchestrator.context import FatalRunError
from oma.orchestrator.events import OrchestratorEvent, ProgressCallback
from oma.orchestrator.identity import RunIdConflictError
from oma.orchestrator.options import CheckpointOptions
from oma.orchestrator.orchestrator import OpenMultiAgent
from oma.orchestrator.restore import InvalidCheckpointStateError
from oma.orchestrator.results import TeamRunResult

__all__ = [
    "CheckpointConfigError",
    "CheckpointOptions",
    "FatalRunError",
    "InvalidCheckpointStateError",
    "OpenMultiAgent",
    "OrchestratorEvent",
    "ProgressCallback",
    "RunIdConflictError",
    "TeamRunResult",
]
