"""The result of a team run."""

from __future__ import annotations

from dataclasses import dataclass, field

from oma.agent.result import AgentRunResult, RunIdentity, RunStatus
from oma.approval.models import ApprovalDecisionRecord, ApprovalRequest
from oma.budget.state import BudgetReport
from oma.llm.types import TokenUsage
from oma.tasks.task import Task


@dataclass
class TeamRunResult:
    """How a run ended (or stopped to wait): its status and identity (run id, attempt), every
    task with its result, token usage, and the approvals it waits on or has recorded."""

    status: RunStatus
    identity: RunIdentity
    tasks: list[Task]
    task_results: dict[str, AgentRunResult] = field(default_factory=dict)
    agent_results: dict[str, AgentRunResult] = field(default_factory=dict)
    total_token_usage: TokenUsage = field(default_factory=TokenUsage)
    goal: str | None = None
    pending_approvals: list[ApprovalRequest] = field(default_factory=list)
    approval_decisions: list[ApprovalDecisionRecord] = field(default_factory=list)
    budget: BudgetReport | None = None  # limits and spend, when the run has a budget

    @property
    def success(self) -> bool:
        return self.status.code == "ok"
