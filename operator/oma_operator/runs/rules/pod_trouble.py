"""A runner pod that cannot start, told while its attempt waits (pure).

The start timeout (``watchdog``) is when such an attempt counts as failed; until then the run's
users should not have to find the pod to learn why nothing happens. A container waiting for a
reason that needs a person (a Secret or ConfigMap missing, an image that cannot be pulled, a
runner that keeps crashing), or a pod no node can take, is trouble: the TeamRun gets the
``PodStuck`` condition (True, the reason, the cause) and a ``Warning`` Event naming the cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from oma_operator.resources.bodies import PodBody
from oma_operator.resources.phases import ConditionType

CONDITION: ConditionType = "PodStuck"
# Waiting reasons that do not pass by themselves (ContainerCreating, PodInitializing do).
STUCK_REASONS = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "RunContainerError",
    }
)


# Reasons the kubelet alternates between for one cause (a pull fails, then backs off): told once.
_CAUSES = {
    "ErrImagePull": "image",
    "ImagePullBackOff": "image",
    "ErrImageNeverPull": "image",
    "InvalidImageName": "image",
    "CrashLoopBackOff": "crash",
    "RunContainerError": "crash",
    "CreateContainerConfigError": "config",
    "CreateContainerError": "config",
}


def same_cause(reason: str | None, other: str | None) -> bool:
    """Whether two reasons tell the same trouble (told already, not again)."""
    if reason is None or other is None:
        return False
    return _CAUSES.get(reason, reason) == _CAUSES.get(other, other)


@dataclass(frozen=True)
class PodTrouble:
    reason: str  # the Kubernetes reason: CreateContainerConfigError, Unschedulable, ...
    cause: str  # the kubelet's or the scheduler's message: what to fix


def pod_trouble(pod: PodBody) -> PodTrouble | None:
    """Why the pod cannot start (its first container that says so), or None."""
    status = pod.get("status") or {}
    containers = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    for container in containers:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in STUCK_REASONS:
            cause = waiting.get("message") or f"container {container.get('name', '?')}: {reason}"
            return PodTrouble(str(reason), str(cause))
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return PodTrouble("Unschedulable", str(condition.get("message") or "no node fits"))
    return None


def trouble_message(pod_name: str, attempt: int, trouble: PodTrouble, timeout: int | None) -> str:
    """What the condition and the Event say."""
    then = (
        f"; the attempt fails if the pod has not started {timeout}s after it was created"
        if timeout is not None
        else ""
    )
    return (
        f"attempt {attempt}: pod {pod_name} cannot start: {trouble.reason}: {trouble.cause}{then}"
    )
