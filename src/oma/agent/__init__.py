"""The built-in agent runner and run results."""

from oma.agent.result import AgentRunResult, IdentityLink, RunIdentity, RunStatus, StatusCode
from oma.agent.runner import AgentRunner, RunnerOutcome
from oma.agent.state import PendingCall, RunnerState

__all__ = [
    "AgentRunResult",
    "AgentRunner",
    "IdentityLink",
    "PendingCall",
    "RunIdentity",
    "RunStatus",
    "RunnerOutcome",
    "RunnerState",
    "StatusCode",
]
