"""Runner pods that will never report an outcome on their own (pure, exhaustively tested).

Two cases. A pod that never starts (an image that cannot be pulled, no node that fits, a missing
Secret) stays ``Pending`` forever: after ``startTimeoutSeconds`` it counts as a failed attempt.
A pod on a lost node stays ``Running`` in the API because its kubelet is gone: the node
controller only flips the pod's ``Ready`` condition to False and leaves the container statuses
the kubelet last wrote (running, ready). The kubelet always updates both together, so that
combination means the node stopped reporting. After ``nodeLossGraceSeconds`` more the attempt
counts as a disruption; the old runner, if it still runs, is fenced by the next attempt's claim.

The limits travel with the pod as annotations, so the pod alone decides (no TeamRun read).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from oma.timeutil import format_iso, parse_iso
from oma_operator.resources.bodies import PodBody, PodStatus
from oma_operator.runs.rules.outcomes import Outcome

START_TIMEOUT_ANNOTATION = "oma.dev/start-timeout-seconds"
NODE_LOSS_GRACE_ANNOTATION = "oma.dev/node-loss-grace-seconds"


@dataclass(frozen=True)
class Deadline:
    """``outcome`` applies at ``due`` unless the pod changes before."""

    due: datetime
    outcome: Outcome


def deadline(pod: PodBody) -> Deadline | None:
    """When a not-yet-terminal pod is to be given up on, if it looks stuck (else None)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    phase = status.get("phase", "Pending")
    if phase == "Pending" and not _any_container_started(status):
        limit = _seconds(annotations.get(START_TIMEOUT_ANNOTATION))
        created = _time(meta.get("creationTimestamp"))
        if limit is None or created is None:
            return None
        message = f"the runner did not start within {limit}s: {_why_pending(status)}"
        return Deadline(
            created + timedelta(seconds=limit), Outcome("crash", "StartTimeout", message)
        )
    lost_since = _node_lost_since(status) if phase in ("Running", "Unknown") else None
    grace = _seconds(annotations.get(NODE_LOSS_GRACE_ANNOTATION))
    if lost_since is None or grace is None:
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    message = (
        f"node {node} stopped reporting (pod not ready since {format_iso(lost_since)}) and the "
        f"runner gave no word for {grace}s more; a newer attempt takes over and fences it"
    )
    return Deadline(
        lost_since + timedelta(seconds=grace), Outcome("disruption", "NodeLost", message)
    )


def _node_lost_since(status: PodStatus) -> datetime | None:
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    since = _time((ready or {}).get("lastTransitionTime"))
    if status.get("phase") == "Unknown" or status.get("reason") == "NodeLost":
        return since or _time(status.get("startTime"))
    if ready is None or ready.get("status") == "True" or since is None:
        return None
    containers = status.get("containerStatuses") or []
    kubelet_says_ready = bool(containers) and all(
        c.get("ready") and "running" in (c.get("state") or {}) for c in containers
    )
    return since if kubelet_says_ready else None


def _any_container_started(status: PodStatus) -> bool:
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def _why_pending(status: PodStatus) -> str:
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return ": ".join(p for p in (waiting.get("reason"), waiting.get("message")) if p)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            parts = (condition.get("reason") or "Unschedulable", condition.get("message"))
            return ": ".join(p for p in parts if p)
    return "the pod is still pending (not scheduled to any node)"


def _seconds(text: Any) -> int | None:
    try:
        value = int(str(text))
    except ValueError:
        return None
    return value if value >= 0 else None


def _time(text: Any) -> datetime | None:
    return parse_iso(str(text)) if text else None
