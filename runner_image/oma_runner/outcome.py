"""How a runner reports the end of its attempt: its exit code and its termination report (the
contract and its exit-code table: ``oma.pod_contract``)."""

from __future__ import annotations

from pathlib import Path

from oma.orchestrator.results import TeamRunResult
from oma.pod_contract import EXIT_BY_STATUS, Exit, TaskCounts, TerminationReport


def exit_code_for(result: TeamRunResult) -> Exit:
    """A run waiting for approval ends its pod with 0, so the pod shows ``Completed`` rather
    than ``Error`` while it waits; its report's ``status`` (``suspended``) tells the operator
    what happened (``oma run`` still exits 10)."""
    if result.status.code == "suspended":
        return Exit.OK
    return EXIT_BY_STATUS.get(result.status.code, Exit.PERMANENT)


def report_for(result: TeamRunResult, *, pod_attempt: int) -> TerminationReport:
    tasks = result.tasks
    return TerminationReport(
        run_id=result.identity.run_id,
        attempt=result.identity.attempt,
        pod_attempt=pod_attempt,
        status=result.status.code,
        message=result.status.message or "",
        tasks=TaskCounts(
            total=len(tasks),
            completed=sum(task.status == "completed" for task in tasks),
            failed=sum(task.status == "failed" for task in tasks),
        ),
        pending_approvals=[request.id for request in result.pending_approvals],
        budget=result.budget,
    )


def write_termination_message(path: Path, report: TerminationReport) -> None:
    """Best effort: a runner must exit with its code even if the message cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_text(), encoding="utf-8")
    except OSError:
        pass
