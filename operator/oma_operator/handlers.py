"""kopf handlers, kept thin: read state, call the pure modules, write through the client."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from oma.timeutil import now_iso, parse_iso
from oma_operator.approvals import sync_approvals
from oma_operator.client import Kube, KubeError
from oma_operator.decisions import attempt_record, decide
from oma_operator.metrics import METRICS, Resume, pod_ended_at
from oma_operator.models import GROUP, VERSION, TeamRunSpec
from oma_operator.outcomes import classify
from oma_operator.pods import (
    FINALIZER,
    LABEL_ATTEMPT,
    LABEL_TEAMRUN,
    pod_name,
    run_id_of,
    runner_pod,
)
from oma_operator.status import after_attempt, condition, merge_conditions, started

DEFAULT_IMAGE = os.environ.get("OMA_RUNNER_IMAGE", "ghcr.io/oma/oma:latest")
# A token-less service account for runner pods (the chart creates it in its namespace).
RUNNER_SERVICE_ACCOUNT = os.environ.get("OMA_RUNNER_SERVICE_ACCOUNT") or None
# The port runner pods serve their metrics on (None: they serve none); set by ``main``.
RUNNER_METRICS_PORT: int | None = None
FINAL_PHASES = {"Succeeded", "Failed", "Rejected"}
_kube: Kube | None = None


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube.from_environment()
    return _kube


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = "oma.dev/operator"
    settings.posting.level = 20  # INFO and up become Kubernetes Events
    settings.watching.server_timeout = 60
    # No cluster-wide discovery of namespaces and CRDs: a namespaced operator then needs no
    # cluster-scope RBAC at all (the chart's Role is enough).
    settings.scanning.disabled = True


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    if _kube is not None:
        await _kube.aclose()


@kopf.on.create(GROUP, VERSION, "teamruns")
@kopf.on.resume(GROUP, VERSION, "teamruns")
async def teamrun_present(body: kopf.Body, **_: Any) -> None:
    """Make sure the current attempt has its runner pod (idempotent across restarts).

    Status is written through the client only, and before the pod exists, so a pod outcome
    recorded concurrently can never be overwritten by a stale view of the TeamRun.
    """
    status = dict(body.get("status") or {})
    if status.get("phase") in FINAL_PHASES or status.get("phase") == "AwaitingApproval":
        return
    meta = body["metadata"]
    generation = int(meta.get("generation", 1))
    try:
        spec = TeamRunSpec.model_validate(dict(body["spec"]))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        await kube().patch_teamrun_status(
            meta["namespace"],
            meta["name"],
            {
                "phase": "Failed",
                "observedGeneration": generation,
                "message": f"invalid spec: {problems}",
                "conditions": merge_conditions(
                    status.get("conditions") or [],
                    [condition("Failed", True, "InvalidSpec", problems, generation)],
                ),
            },
        )
        return
    if not status.get("attempt"):
        await kube().patch_teamrun_status(
            meta["namespace"], meta["name"], started(status, 1, run_id_of(dict(body)), generation)
        )
    await _ensure_pod(body, spec, int(status.get("attempt") or 1))


async def _ensure_pod(
    body: kopf.Body, spec: TeamRunSpec, attempt: int, resume: Resume | None = None
) -> None:
    manifest = runner_pod(
        dict(body), spec, attempt, DEFAULT_IMAGE, RUNNER_SERVICE_ACCOUNT, RUNNER_METRICS_PORT
    )
    try:
        await kube().create_pod(body["metadata"]["namespace"], manifest)
    except KubeError as exc:
        if exc.status != 409:  # already there: a restarted operator, or a repeated event
            raise
        return
    if resume is not None:
        METRICS.resumed(resume)
    kopf.info(
        body,
        reason="AttemptStarted",
        message=f"attempt {attempt}: pod {manifest['metadata']['name']}",
    )


@kopf.on.event("", "v1", "pods", labels={LABEL_TEAMRUN: kopf.PRESENT})
async def runner_pod_changed(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    if event.get("type") == "DELETED":
        return
    pod = dict(body)
    meta = pod["metadata"]
    if FINALIZER not in (meta.get("finalizers") or []):
        return  # outcome already recorded
    outcome = classify(pod)
    if not outcome.terminal:
        return
    namespace, name = meta["namespace"], meta["labels"][LABEL_TEAMRUN]
    attempt = int(meta["labels"].get(LABEL_ATTEMPT, "1"))
    teamrun = await kube().get_teamrun(namespace, name)
    if teamrun is not None:
        ended = pod_ended_at(pod) or datetime.now(UTC)
        await _record(teamrun, attempt, outcome, meta["name"], ended)
    await kube().remove_finalizer(namespace, meta["name"], FINALIZER)


async def _record(
    teamrun: dict[str, Any], attempt: int, outcome: Any, pod: str, ended: datetime
) -> None:
    status = dict(teamrun.get("status") or {})
    if any(a.get("attempt") == attempt for a in status.get("attempts") or []):
        return  # recorded before an operator restart
    spec = TeamRunSpec.model_validate(teamrun["spec"])
    decision = decide(outcome, status, spec.retry_policy)
    generation = int(teamrun["metadata"].get("generation", 1))
    record = attempt_record(attempt, outcome, pod, now_iso())
    next_attempt = attempt + 1 if decision.action == "next_attempt" else None
    meta = teamrun["metadata"]
    await kube().patch_teamrun_status(
        meta["namespace"],
        meta["name"],
        after_attempt(status, decision, record, generation, next_attempt),
    )
    METRICS.attempt_ended(outcome.kind)
    METRICS.runner_report(outcome.message)
    kopf.info(
        kopf.Body(teamrun),  # type: ignore[arg-type]
        reason=f"Attempt{outcome.kind.capitalize()}",
        message=f"attempt {attempt} ended: {outcome.reason}; {decision.message}",
    )
    if decision.action == "awaiting_approval":
        refreshed = await kube().get_teamrun(meta["namespace"], meta["name"])
        if refreshed is not None and await sync_approvals(kube(), refreshed, spec):
            await _resume(refreshed, spec)
    if next_attempt is not None:
        await asyncio.sleep(decision.delay_seconds)
        resume = Resume(outcome.kind, ended)
        await _ensure_pod(kopf.Body(teamrun), spec, next_attempt, resume)  # type: ignore[arg-type]


def _awaiting(status: kopf.Status, **_: Any) -> bool:
    return status.get("phase") == "AwaitingApproval"


@kopf.timer(GROUP, VERSION, "teamruns", interval=3.0, when=_awaiting)
async def approvals_pending(body: kopf.Body, **_: Any) -> None:
    """Publish, record and reflect decisions; resume once every request is decided."""
    teamrun = dict(body)
    spec = TeamRunSpec.model_validate(teamrun["spec"])
    if await sync_approvals(kube(), teamrun, spec):
        await _resume(teamrun, spec)


@kopf.on.update(GROUP, VERSION, "approvaldecisions", field="spec.decision")
async def decision_set(body: kopf.Body, **_: Any) -> None:
    meta = body["metadata"]
    teamrun = await kube().get_teamrun(meta["namespace"], body["spec"]["teamRun"])
    if teamrun is None or (teamrun.get("status") or {}).get("phase") != "AwaitingApproval":
        return
    spec = TeamRunSpec.model_validate(teamrun["spec"])
    if await sync_approvals(kube(), teamrun, spec):
        await _resume(teamrun, spec)


async def _resume(teamrun: dict[str, Any], spec: TeamRunSpec) -> None:
    """Start the next attempt after approvals, exactly once (optimistic concurrency)."""
    meta, status = teamrun["metadata"], dict(teamrun.get("status") or {})
    if status.get("phase") != "AwaitingApproval":
        return
    attempt = int(status.get("attempt") or 1) + 1
    generation = int(meta.get("generation", 1))
    update = {
        **started(status, attempt, run_id_of(teamrun), generation),
        "pendingApprovals": 0,
        "conditions": merge_conditions(
            status.get("conditions") or [],
            [
                condition(
                    "AwaitingApproval", False, "Decided", "every request is decided", generation
                ),
                condition(
                    "Progressing",
                    True,
                    "AttemptStarted",
                    f"attempt {attempt} is running",
                    generation,
                ),
            ],
        ),
    }
    try:
        await kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except KubeError as exc:
        if exc.status == 409:
            return  # someone else (another event, a restarted operator) resumed it
        raise
    previous = [a for a in status.get("attempts") or [] if a.get("attempt") == attempt - 1]
    ended = parse_iso(str(previous[-1].get("endedAt", ""))) if previous else None
    resume = Resume("suspended", ended) if ended is not None else None
    await _ensure_pod(kopf.Body(teamrun), spec, attempt, resume)  # type: ignore[arg-type]


@kopf.on.event(GROUP, VERSION, "teamruns")
async def teamrun_event(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    METRICS.teamrun_seen(body, event.get("type"))


@kopf.on.event(GROUP, VERSION, "approvaldecisions")
async def decision_event(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    METRICS.decision_seen(body, event.get("type"))


__all__ = ["pod_name"]
