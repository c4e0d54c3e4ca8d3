"""oma: durable multi-agent LLM runs. The names below are the public API."""

from oma.approval import (
    ApprovalDecisionRecord,
    ApprovalRequest,
    DurableApprovalError,
    create_approval_request,
    hash_approval_request,
)
from oma.errors import (
    CheckpointDecodeError,
    CheckpointError,
    CheckpointValidationError,
    OmaError,
    StoreCorruptError,
    StoreError,
)
from oma.llm.scripted import ScriptedAdapter
from oma.orchestrator import CheckpointOptions, OpenMultiAgent, OrchestratorEvent, TeamRunResult
from oma.store import FileStore, InMemoryStore, MemoryEntry, MemoryStore
from oma.tasks import PlanArtifact, TaskSpec
from oma.team import AgentConfig, Team
from oma.tools import ToolContext, ToolResult, define_tool

__version__ = "0.1.0"

__all__ = [
    "AgentConfig",
    "ApprovalDecisionRecord",
    "ApprovalRequest",
    "CheckpointDecodeError",
    "CheckpointError",
    "CheckpointOptions",
    "CheckpointValidationError",
    "DurableApprovalError",
    "FileStore",
    "InMemoryStore",
    "MemoryEntry",
    "MemoryStore",
    "OmaError",
    "OpenMultiAgent",
    "OrchestratorEvent",
    "PlanArtifact",
    "ScriptedAdapter",
    "StoreCorruptError",
    "StoreError",
    "TaskSpec",
    "Team",
    "TeamRunResult",
    "ToolContext",
    "ToolResult",
    "__version__",
    "create_approval_request",
    "define_tool",
    "hash_approval_request",
]
