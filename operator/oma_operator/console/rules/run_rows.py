"""The runs pages (pure): a row per TeamRun, and one run's attempts as a timeline."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oma_operator.console.rules.inbox_rows import waited
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.phases import FINAL_PHASES


@dataclass(frozen=True)
class RunRow:
    namespace: str
    name: str
    phase: str
    attempt: int
    tasks: str  # "2/3 done" as the operator summarises them
    spend: str  # status.budgetSummary ("" without a budget)
    checkpoint_age: str  # since the last checkpoint ("" before the first)
    pending_approvals: int
    message: str


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    pod: str
    ended: str
    outcome: str
    reason: str
    exit_code: str
    message: str


@dataclass(frozen=True)
class RunActions:
    """The buttons a run's page offers (the API server still decides who may use them)."""

    suspend: bool
    resume: bool
    cancel: bool
    retry: bool


def run_row(teamrun: TeamRunBody, now: datetime) -> RunRow:
    meta, status = teamrun["metadata"], teamrun.get("status") or {}
    checkpoint = str(status.get("lastCheckpointAt") or "")
    return RunRow(
        namespace=str(meta.get("namespace") or ""),
        name=meta["name"],
        phase=str(status.get("phase") or "Pending"),
        attempt=int(status.get("attempt") or 0),
        tasks=str(status.get("taskSummary") or ""),
        spend=str(status.get("budgetSummary") or ""),
        checkpoint_age=waited(checkpoint, now) if checkpoint else "",
        pending_approvals=int(status.get("pendingApprovals") or 0),
        message=str(status.get("message") or ""),
    )


def run_rows(teamruns: list[TeamRunBody], now: datetime) -> list[RunRow]:
    rows = [run_row(t, now) for t in teamruns]
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def timeline(teamrun: TeamRunBody) -> list[AttemptRow]:
    """Every recorded attempt, the latest first."""
    attempts: list[dict[str, Any]] = (teamrun.get("status") or {}).get("attempts") or []
    rows = [
        AttemptRow(
            attempt=int(a.get("attempt") or 0),
            pod=str(a.get("pod") or ""),
            ended=str(a.get("endedAt") or ""),
            outcome=str(a.get("outcome") or ""),
            reason=str(a.get("reason") or ""),
            exit_code="" if a.get("exitCode") is None else str(a.get("exitCode")),
            message=str(a.get("message") or ""),
        )
        for a in attempts
    ]
    return sorted(rows, key=lambda r: r.attempt, reverse=True)


def actions(teamrun: TeamRunBody) -> RunActions:
    spec, status = teamrun.get("spec") or {}, teamrun.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    live = phase not in FINAL_PHASES and spec.get("cancel") is not True
    return RunActions(
        suspend=live and spec.get("suspend") is not True,
        resume=live and spec.get("suspend") is True,
        cancel=live,
        retry=phase == "Failed",
    )
