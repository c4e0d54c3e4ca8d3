"""Acting on ``spec.suspend`` and ``spec.cancel`` (``oma_operator.runs.rules.holds``) over the API.

A running attempt is stopped by deleting its pod: the runner drains at its next durable
boundary and exits, and the recording of its end applies the hold. A run with no pod running
is held at once with one conditioned status write. A cleared ``suspend`` moves the run to
``Queued``; the caller then takes it up as any queued run.
"""

from __future__ import annotations

from typing import Any

from oma_operator import events, runtime
from oma_operator.approvals.sync import close_pending
from oma_operator.k8s.errors import CHANGED_OR_GONE
from oma_operator.k8s.watched import WATCHED
from oma_operator.later import LATER
from oma_operator.resources.bodies import TeamRunBody, TeamRunStatus
from oma_operator.resources.specs import TeamRunSpecError, spec_of
from oma_operator.runs.rules.decisions import Hold
from oma_operator.runs.rules.holds import action_for, held, hold_of, resumed
from oma_operator.runs.rules.pods import pod_name
from oma_operator.runs.run_queue import RUN_QUEUE

ASKS = ("suspend", "cancel")


def may_ask(teamrun: TeamRunBody) -> bool:
    """Cheap test on a raw TeamRun (every watch event): whether ``apply_hold`` may act."""
    spec = teamrun.get("spec") or {}
    phase = (teamrun.get("status") or {}).get("phase")
    return any(spec.get(field) is True for field in ASKS) or phase == "Suspended"


async def apply_hold(teamrun: TeamRunBody) -> TeamRunBody | None:
    """Do what the TeamRun's hold asks now. Returns the TeamRun as written when a suspended
    run was let go (``Queued``: the caller starts it), else None. A failed write raises."""
    try:
        spec = spec_of(teamrun)
    except TeamRunSpecError:
        return None  # refused elsewhere (InvalidSpec)
    meta, status = teamrun["metadata"], (teamrun.get("status") or {})
    action = action_for(status.get("phase"), hold_of(spec))
    if action is None or meta.get("deletionTimestamp"):
        return None
    if action == "resume":
        written = await _write(teamrun, resumed(status, int(meta.get("generation", 1))))
        if written is not None:
            await events.info(written, "Unsuspended", str(written["status"].get("message")))
        return written
    hold: Hold = "cancel" if action == "cancel" else "suspend"
    if await _stop_pod(teamrun, status, hold):
        return None  # its end, when recorded, applies the hold
    await hold_without_pod(teamrun, hold)
    return None


async def _stop_pod(teamrun: TeamRunBody, status: TeamRunStatus, hold: Hold) -> bool:
    """Delete the current attempt's pod if one exists; whether one does (ended or not)."""
    attempt = int(status.get("attempt") or 0)
    if status.get("phase") != "Running" or attempt < 1:
        return False
    if any(a.get("attempt") == attempt for a in status.get("attempts") or []):
        return False  # that attempt's end is recorded: a backoff before the next one
    namespace, name = teamrun["metadata"]["namespace"], teamrun["metadata"]["name"]
    pod = pod_name(name, attempt)
    found = await runtime.kube().get_pod(namespace, pod)
    if found is None:
        return False
    phase = (found.get("status") or {}).get("phase")
    if phase in ("Pending", "Running") and not found["metadata"].get("deletionTimestamp"):
        # Written first (the status is the operator's): the pod's end is the hold's, also if
        # the hold is cleared before it is recorded.
        await runtime.kube().patch_teamrun_status(namespace, name, {"stoppedForHold": pod})
        await runtime.kube().delete_pod(namespace, pod)
        ends = "ends Cancelled" if hold == "cancel" else "is Suspended"
        await events.info(
            teamrun,
            "Cancelling" if hold == "cancel" else "Suspending",
            f"pod {pod} drains at its next durable boundary; then the run {ends}",
        )
    return True


async def hold_without_pod(teamrun: TeamRunBody, hold: Hold) -> None:
    """Hold a run none of whose pods runs (queued, waiting, in a backoff, never started):
    no attempt starts, a pending start or backoff is dropped."""
    meta = teamrun["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    LATER.cancel((namespace, name), uid)
    RUN_QUEUE.release(uid)
    fresh = await runtime.kube().get_teamrun(namespace, name)
    if fresh is None or fresh["metadata"].get("uid") != uid:
        return
    status = fresh.get("status") or {}
    # Decided again on the TeamRun as it is now: an outcome recorded meanwhile (a final phase)
    # stands, and a pod that exists now is stopped rather than held over.
    try:
        now = hold_of(spec_of(fresh))
    except TeamRunSpecError:
        return
    if now is None or action_for(status.get("phase"), now) is None:
        return
    hold = now
    if await _stop_pod(fresh, status, hold):
        return
    update = held(status, hold, int(fresh["metadata"].get("generation", 1)))
    written = await _write(fresh, update)
    if written is not None:
        reason = "Cancelled" if hold == "cancel" else "Suspended"
        await events.info(written, reason, update["message"])
        if hold == "cancel" and status.get("phase") == "AwaitingApproval":
            await close_pending(runtime.kube(), written)  # its reviewers need decide nothing


def hold_now(teamrun: TeamRunBody) -> Hold | None:
    """The hold of the TeamRun's newest spec, for a pod about to be created: ``teamrun`` as
    given or as the watch shows it now, whichever has the higher ``metadata.generation`` (it
    counts spec changes; a hold set during a backoff is newer than the copy the start was
    decided from, and a just-cleared ``suspend`` newer than a lagging watch)."""
    meta = teamrun["metadata"]
    seen = WATCHED.get(meta["namespace"], meta["name"])
    ours = seen is not None and seen["metadata"].get("uid") == meta.get("uid")
    current = seen if ours and seen and _generation(seen) > _generation(teamrun) else teamrun
    try:
        return hold_of(spec_of(current))
    except TeamRunSpecError:
        return None


def _generation(teamrun: TeamRunBody) -> int:
    try:
        return int(teamrun["metadata"].get("generation") or 0)
    except (TypeError, ValueError):
        return 0


async def _write(teamrun: TeamRunBody, update: dict[str, Any]) -> TeamRunBody | None:
    """The status update, conditioned on the TeamRun as read; None if it changed meanwhile
    (that change's own event decides again) or is gone."""
    meta = teamrun["metadata"]
    try:
        return await runtime.kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except CHANGED_OR_GONE:
        return None
