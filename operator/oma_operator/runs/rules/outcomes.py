"""What happened to a runner pod, from its status alone (pure, exhaustively tested).

Disruptions (evictions, preemption, node drain, a drained runner) do not count as failures and
have their own budget; OOM kills have theirs; crashes are failures retried after a backoff; a
model provider's outage (exit 14) is waited out, bounded by time rather than a count, and so is a
tool the run recorded that changed on its server (exit 15: the run holds until it is back).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, get_args

from oma.pod_contract import Exit, TerminationReport
from oma_operator.resources.bodies import PodBody, PodStatus, TeamRunStatus

Kind = Literal[
    "running",
    "succeeded",
    "suspended",
    "fenced",
    "permanent",
    "disruption",
    "oom",
    "crash",
    "outage",
    "tool_changed",
]
TERMINAL: frozenset[Kind] = frozenset(get_args(Kind)) - {"running"}  # every kind but running
EXIT_KINDS: dict[int, Kind] = {
    Exit.OK: "succeeded",
    Exit.SUSPENDED: "suspended",
    Exit.DRAINED: "disruption",
    Exit.FENCED: "fenced",
    Exit.PERMANENT: "permanent",
    Exit.CHECKPOINT_LOST: "permanent",
    Exit.MODEL_UNAVAILABLE: "outage",
    Exit.TOOL_CHANGED: "tool_changed",
}


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    reason: str
    message: str = ""
    exit_code: int | None = None

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL

    @cached_property
    def report(self) -> TerminationReport | None:
        """The runner's termination report, when the message is one (parsed once)."""
        return TerminationReport.parse(self.message) if self.message else None

    @property
    def said(self) -> str:
        """The message for a person: the runner report's own message (never its JSON), or
        what the kubelet or the operator said."""
        report = self.report
        if report is None:
            return self.message
        if report.message:
            return report.message
        if report.status == "ok":
            return "the run completed"
        return f"the runner ended with status {report.status or 'unknown'}"


def classify(pod: PodBody) -> Outcome:
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    terminated = _terminated(status)
    exit_code = terminated.get("exitCode") if terminated else None
    message = (terminated or {}).get("message", "") or status.get("message", "")
    disruption = _disruption_reason(status)
    if phase == "Succeeded":
        succeeded = Outcome("succeeded", "Completed", message, exit_code)
        if succeeded.report is not None and succeeded.report.status == "suspended":
            # A runner that stops to wait for approval exits 0 (its pod shows Completed, not
            # Error); one from before said so by exit 10 (below).
            return Outcome("suspended", "AwaitingApproval", message, exit_code)
        return succeeded
    if phase != "Failed":
        if pod.get("metadata", {}).get("deletionTimestamp"):
            return Outcome("running", "Terminating", message)
        return Outcome("running", phase, message)
    if status.get("reason") == "Evicted":
        return Outcome("disruption", "Evicted", status.get("message", ""), exit_code)
    if terminated and terminated.get("reason") == "OOMKilled":
        return Outcome("oom", "OOMKilled", message, exit_code)
    if exit_code in EXIT_KINDS and exit_code != 0:
        kind = EXIT_KINDS[exit_code]
        if exit_code == Exit.CHECKPOINT_LOST:
            return Outcome(kind, "CheckpointLost", message, exit_code)
        if exit_code == Exit.PERMANENT and _said_tool_changed(message):
            # A runner image from before exit 15 said a changed MCP tool only in its report.
            return Outcome("tool_changed", "ToolChanged", message, exit_code)
        reason = {
            "suspended": "AwaitingApproval",
            "disruption": disruption or "Drained",
            "fenced": "Fenced",
            "permanent": "PermanentFailure",
            "outage": "ModelUnavailable",
            "tool_changed": "ToolChanged",
        }[kind]
        return Outcome(kind, reason, message, exit_code)
    if disruption is not None:
        return Outcome("disruption", disruption, message, exit_code)
    if terminated and terminated.get("reason") == "ContainerStatusUnknown":
        # The kubelet could not find the container any more (its runtime lost it, or the node
        # restarted): the runner did not fail, it was taken away; the next attempt resumes.
        return Outcome("disruption", "ContainerLost", message, exit_code)
    if pod.get("metadata", {}).get("deletionTimestamp"):
        # Deleted by a person or a controller and killed after its grace period (a tool
        # outlasted it, exit 137): taken away, not crashed; the next attempt resumes.
        return Outcome("disruption", "PodDeleted", message, exit_code)
    return Outcome("crash", (terminated or {}).get("reason") or "Error", message, exit_code)


MCP_TOOL_CHANGED = "MCP_TOOL_CHANGED"  # oma.tools.mcp.McpToolChangedError.code


def _said_tool_changed(message: str) -> bool:
    report = TerminationReport.parse(message) if message else None
    return report is not None and report.message.startswith(f"{MCP_TOOL_CHANGED}: ")


SUCCESS_NOT_CONFIRMED = "SuccessNotConfirmed"
COMPLETED_UNCONFIRMED = "CompletedUnconfirmed"  # a success the store could not be read for


def confirmed(outcome: Outcome, progress: dict[str, Any], unreadable: str | None = None) -> Outcome:
    """A runner pod's success as the run's store confirms it: every task of the checkpoint
    completed (``progress``: what ``progress.read_progress`` read).

    A store that could not be read (``unreadable``: why) confirms nothing and denies nothing:
    the pod's word stands, with a reason that says it was not confirmed. Taking it for a
    disruption would start attempt after attempt against a store the operator cannot reach
    while the runners can (a Secret fixed after the operator read it), until the disruption
    budget ran out; and only the node may write a runner pod's status (the runner-pods policy).

    The pod's exit code and report are only what its status says, and a status is not proof of
    work done; the checkpoint is written by the runner as the work happens. A success the store
    does not show is taken for a disruption: the next attempt resumes from the checkpoint (and
    ends at once if the work was in fact done), so nothing is lost and nothing passes unrun.
    """
    if outcome.kind != "succeeded":
        return outcome
    if unreadable is not None:  # the message stays the runner's report (parsed for counts)
        return Outcome(outcome.kind, COMPLETED_UNCONFIRMED, outcome.message, outcome.exit_code)
    done, _, total = str(progress.get("taskSummary") or "").partition("/")
    if done.isdigit() and done == total and int(total) > 0:
        return outcome
    seen = f"tasks {progress['taskSummary']} completed" if "taskSummary" in progress else None
    if seen is None:
        seen = "no checkpoint" if "lastCheckpointAt" not in progress else "no tasks"
    return Outcome(
        "disruption",
        SUCCESS_NOT_CONFIRMED,
        f"the runner pod reported success (exit {outcome.exit_code}), but the run's store "
        f"shows {seen}: not taken for the run's end; the next attempt "
        "resumes from the checkpoint",
        outcome.exit_code,
    )


def _terminated(status: PodStatus) -> dict[str, Any] | None:
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if "terminated" in state:
            found: dict[str, Any] = state["terminated"]
            return found
    return None


def _disruption_reason(status: PodStatus) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return str(condition.get("reason") or "DisruptionTarget")
    return None


def outcome_when_gone(pod: PodBody) -> Outcome:
    """The outcome of a runner pod that left the API before its outcome was recorded (someone
    removed its tracking finalizer, then it was deleted), from the last state seen of it.

    A pod that had ended counts as it ended. One that had not (running, pending, terminating)
    was taken away mid-run: a disruption, so the next attempt resumes from the checkpoint.
    """
    seen = classify(pod)
    if seen.terminal:
        return seen
    terminated = _terminated(pod.get("status") or {})
    return Outcome(
        "disruption",
        "PodLost",
        f"the runner pod was deleted while {seen.reason} and before the operator recorded its "
        "outcome (its tracking finalizer had been removed); the next attempt resumes",
        terminated.get("exitCode") if terminated else None,
    )


UntrackedAction = Literal["let_go", "record", "track", "await_deletion"]


def untracked_action(pod: PodBody, attempt: int, status: TeamRunStatus) -> UntrackedAction:
    """What to do about a runner pod of ``attempt`` that has no tracking finalizer, given its
    TeamRun's ``status``. Usually its outcome was recorded and the finalizer removed by an
    earlier operator process (``let_go``). If the finalizer was removed by hand instead, an
    ended pod is recorded now (``record``), a live one gets its finalizer back so that its end
    is seen (``track``), and a deleting one, which cannot take new finalizers, is recorded
    when it is gone (``await_deletion``)."""
    if int(status.get("attempt") or 0) != attempt or status.get("phase") != "Running":
        return "let_go"  # an older attempt's pod, or a run that is not waiting on this pod
    if any(a.get("attempt") == attempt for a in status.get("attempts") or []):
        return "let_go"
    if classify(pod).terminal:
        return "record"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "await_deletion"
    return "track"
