"""A runner pod that cannot start, reflected on its TeamRun while the attempt waits: the
``PodStuck`` condition and a ``Warning`` Event naming the cause (``rules.pod_trouble``), set at
the first pod event that shows it and cleared once the pod starts. Written only when the
condition changes, from the watch's copy of the TeamRun (no read on the usual path)."""

from __future__ import annotations

from dataclasses import replace

from oma_operator import events, runtime
from oma_operator.k8s.errors import CHANGED_OR_GONE
from oma_operator.k8s.watched import WATCHED
from oma_operator.resources.bodies import PodBody, TeamRunBody
from oma_operator.runs.missing_secrets import missing_secrets_of
from oma_operator.runs.rules.pod_trouble import (
    CONDITION,
    pod_trouble,
    same_cause,
    trouble_message,
)
from oma_operator.runs.rules.pods import attempt_of
from oma_operator.runs.rules.status import condition, merge_conditions
from oma_operator.runs.rules.watchdog import START_TIMEOUT_ANNOTATION

TRIES = 3  # the watch's copy, then the object read again after a conflict


# The runs this operator marked stuck (namespace, name: attempt): the watch's copy may not show
# its own write yet when the pod starts, so the clearing reads the run itself.
_MARKED: dict[tuple[str, str], int] = {}


async def reflect_pod_trouble(pod: PodBody) -> None:
    namespace, name, attempt = attempt_of(pod)
    teamrun = WATCHED.get(namespace, name)
    healthy = pod_trouble(pod) is None
    marked = _MARKED.get((namespace, name)) == attempt
    if healthy and teamrun is None and not marked:
        return  # a finished (or unknown) run's healthy pod: nothing to tell, nothing to read
    if healthy and marked:
        teamrun = None  # read afresh: the watch's copy may predate the mark
    for _try in range(TRIES):
        if teamrun is None:
            teamrun = await runtime.kube().get_teamrun(namespace, name)
            if teamrun is None:
                return
        try:
            await _reflect(pod, teamrun)
            return
        except CHANGED_OR_GONE:
            teamrun = None  # changed since it was seen: read it again


async def _reflect(pod: PodBody, teamrun: TeamRunBody) -> None:
    namespace, name, attempt = attempt_of(pod)
    status = teamrun.get("status") or {}
    if int(status.get("attempt") or 0) != attempt:
        return  # an older attempt's pod: its run has moved on
    conditions = list(status.get("conditions") or [])
    current = next((c for c in conditions if c.get("type") == CONDITION), None)
    stuck = current is not None and current.get("status") == "True"
    trouble = pod_trouble(pod)
    generation = int(teamrun["metadata"].get("generation", 1))
    pod_name = pod["metadata"]["name"]
    key = (namespace, name)
    if trouble is None:
        if not stuck:
            _MARKED.pop(key, None)
            return
        message = f"attempt {attempt}: pod {pod_name} is past what stopped it"
        update = condition(CONDITION, False, "Started", message, generation)
    else:
        if stuck and current is not None and same_cause(current.get("reason"), trouble.reason):
            return  # told already
        if trouble.reason == "CreateContainerConfigError":
            missing = await missing_secrets_of(pod)
            if missing:
                trouble = replace(trouble, cause=f"{trouble.cause} ({missing})")
        annotations = pod["metadata"].get("annotations") or {}
        timeout = str(annotations.get(START_TIMEOUT_ANNOTATION) or "")
        seconds = int(timeout) if timeout.isascii() and timeout.isdigit() else None
        message = trouble_message(pod_name, attempt, trouble, seconds)
        update = condition(CONDITION, True, trouble.reason, message, generation)
    await runtime.kube().patch_teamrun_status(
        namespace,
        name,
        {"conditions": merge_conditions(conditions, [update])},
        resource_version=teamrun["metadata"]["resourceVersion"],
    )
    if trouble is None:
        _MARKED.pop(key, None)
        return
    _MARKED[key] = attempt
    # Once the condition says so: not again at the next pod event.
    await events.warn(teamrun, trouble.reason, message)
