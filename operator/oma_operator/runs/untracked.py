"""Runner pods whose outcome nobody may have recorded: their tracking finalizer was removed by
hand, so the operator did not see them end, or did not see them go.

A run must not stay ``Running`` with no pod. The usual case (a pod an earlier operator process
recorded and let go of) costs one TeamRun read per pod, once per operator process.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from oma_operator import runtime
from oma_operator.resources.bodies import PodBody, TeamRunStatus
from oma_operator.runs.attempts import record_outcome
from oma_operator.runs.metrics import pod_ended_at
from oma_operator.runs.rules.outcomes import outcome_when_gone, untracked_action
from oma_operator.runs.rules.pods import FINALIZER, attempt_of, made_for

log = logging.getLogger(__name__)


async def _teamrun_status(pod: PodBody) -> TeamRunStatus | None:
    """The status of the pod's TeamRun, or None when the TeamRun is gone or going, or the pod
    is not one the operator made for it (nothing of such a pod is recorded or tracked)."""
    namespace, name, attempt = attempt_of(pod)
    teamrun = await runtime.kube().get_teamrun(namespace, name)
    if teamrun is None or teamrun["metadata"].get("deletionTimestamp"):
        return None
    if not made_for(pod, teamrun, attempt):
        return None
    return teamrun.get("status") or {}


async def _record(pod: PodBody, why: str) -> None:
    """Record what the pod last showed (``outcome_when_gone``: as it ended, or a lost pod)."""
    namespace = pod["metadata"]["namespace"]
    outcome = outcome_when_gone(pod)
    log.warning("pod %s/%s %s: %s", namespace, pod["metadata"]["name"], why, outcome.message)
    ended = pod_ended_at(pod) or datetime.now(UTC)
    await record_outcome(pod, outcome, ended)


async def pod_gone(pod: PodBody) -> None:
    """A runner pod left the API without this process recording its outcome: if nobody did,
    record it."""
    status = await _teamrun_status(pod)
    if status is not None and untracked_action(pod, attempt_of(pod)[2], status) != "let_go":
        await _record(pod, "is gone unrecorded")


async def untracked_pod(pod: PodBody) -> bool:
    """A runner pod without the tracking finalizer, not let go of by this process. Record it if
    it ended unrecorded, or give a live one its finalizer back. True when the operator is done
    with the pod; False when events of it still matter (tracked again, or being deleted)."""
    status = await _teamrun_status(pod)
    if status is None:
        return True
    action = untracked_action(pod, attempt_of(pod)[2], status)
    if action == "record":
        await _record(pod, "ended with its finalizer removed, unrecorded")
    elif action == "track" and not runtime.RELEASING:
        meta = pod["metadata"]
        log.warning(
            "pod %s/%s lost its tracking finalizer; adding it back", meta["namespace"], meta["name"]
        )
        await runtime.kube().add_finalizer(pod, FINALIZER)
    return action in ("let_go", "record")
