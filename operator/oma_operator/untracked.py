"""Runner pods whose outcome nobody may have recorded: their tracking finalizer was removed by
hand, so the operator did not see them end, or did not see them go.

A run must not stay ``Running`` with no pod. The usual case (a pod an earlier operator process
recorded and let go of) costs one TeamRun read per pod, once per operator process.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from oma_operator import runtime
from oma_operator.attempts import record_outcome
from oma_operator.metrics import pod_ended_at
from oma_operator.outcomes import classify, outcome_when_gone, untracked_action
from oma_operator.pods import FINALIZER, LABEL_ATTEMPT, LABEL_TEAMRUN

log = logging.getLogger(__name__)


def _owner(pod: dict[str, Any]) -> tuple[str, str, int]:
    meta = pod["metadata"]
    return (
        meta["namespace"],
        meta["labels"][LABEL_TEAMRUN],
        int(meta["labels"].get(LABEL_ATTEMPT, "1")),
    )


async def _status(namespace: str, name: str) -> dict[str, Any] | None:
    teamrun = await runtime.kube().get_teamrun(namespace, name)
    if teamrun is None or teamrun["metadata"].get("deletionTimestamp"):
        return None
    return dict(teamrun.get("status") or {})


async def pod_gone(pod: dict[str, Any]) -> None:
    """A runner pod left the API without this process recording its outcome: if nobody did,
    record what it last showed, or a lost pod (``outcome_when_gone``)."""
    namespace, name, attempt = _owner(pod)
    status = await _status(namespace, name)
    if status is None or untracked_action(pod, attempt, status) == "let_go":
        return
    outcome = outcome_when_gone(pod)
    log.warning(
        "pod %s/%s is gone unrecorded: %s", namespace, pod["metadata"]["name"], outcome.message
    )
    ended = pod_ended_at(pod) or datetime.now(UTC)
    await record_outcome(namespace, name, attempt, outcome, pod["metadata"]["name"], ended)


async def untracked_pod(pod: dict[str, Any]) -> bool:
    """A runner pod without the tracking finalizer, not let go of by this process. Record it if
    it ended unrecorded, or give a live one its finalizer back. True when the operator is done
    with the pod; False when events of it still matter (tracked again, or being deleted)."""
    namespace, name, attempt = _owner(pod)
    status = await _status(namespace, name)
    if status is None:
        return True
    action = untracked_action(pod, attempt, status)
    meta = pod["metadata"]
    if action == "record":
        outcome = classify(pod)
        log.warning(
            "pod %s/%s ended with its finalizer removed, unrecorded: %s",
            namespace,
            meta["name"],
            outcome.message,
        )
        ended = pod_ended_at(pod) or datetime.now(UTC)
        await record_outcome(namespace, name, attempt, outcome, meta["name"], ended)
    elif action == "track":
        log.warning(
            "pod %s/%s lost its tracking finalizer; adding it back", namespace, meta["name"]
        )
        await runtime.kube().add_finalizer(pod, FINALIZER)
        return False
    return action != "await_deletion"
