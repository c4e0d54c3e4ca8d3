"""Starting runs that wait for a slot, and queueing new ones (see ``run_queue``).

Every start is a status patch conditioned on the TeamRun's resourceVersion, so the queue's loop
and a handler racing for the same run start it once.
"""

from __future__ import annotations

from oma_operator import events, runtime
from oma_operator.k8s.errors import KubeConflict, KubeError, KubeNotFound
from oma_operator.k8s.watched import WATCHED
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.specs import TeamRunSpecError, run_id_of, spec_of, work_digest
from oma_operator.runs.attempts import ensure_pod, resume_of
from oma_operator.runs.rules.concurrency import Slot
from oma_operator.runs.rules.holds import hold_of
from oma_operator.runs.rules.status import admitted, queued, started
from oma_operator.runs.run_queue import RUN_QUEUE


async def start_attempt(teamrun: TeamRunBody, attempt: int) -> TeamRunBody | None:
    """Move a new or queued run (whose slot is reserved) to ``Running`` in ``attempt``, exactly
    once: the TeamRun as written, or None if it is no longer new or queued (another event or
    the queue started it, or it changed); its reservation is then given back unless it runs."""
    meta = teamrun["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    for _ in range(5):  # kopf's own writes (finalizer, handler progress) move resourceVersion
        status = teamrun.get("status") or {}
        phase = status.get("phase")
        if (status.get("attempt") and phase != "Queued") or phase not in (None, "Queued"):
            if phase != "Running":
                RUN_QUEUE.release(uid)  # it ended, is held or waits for approvals: no slot
            return None
        if _held(teamrun):
            RUN_QUEUE.release(uid)  # suspended or cancelled before it started
            return None
        if teamrun["metadata"].get("deletionTimestamp"):
            RUN_QUEUE.release(uid)
            return None
        generation = int(teamrun["metadata"].get("generation", 1))
        was_queued = status.get("phase") == "Queued"
        update = (admitted if was_queued else started)(
            status, attempt, run_id_of(teamrun), generation, work_digest(teamrun)
        )
        try:
            return await runtime.kube().patch_teamrun_status(
                namespace, name, update, resource_version=teamrun["metadata"]["resourceVersion"]
            )
        except KubeNotFound:  # deleted meanwhile
            RUN_QUEUE.release(uid)
            return None
        except KubeConflict:
            pass  # changed since it was read: read it again below
        except KubeError:
            RUN_QUEUE.release(uid)
            raise
        fresh = await runtime.kube().get_teamrun(namespace, name)
        if fresh is None or fresh["metadata"].get("uid") != uid:
            RUN_QUEUE.release(uid)
            return None
        teamrun = fresh
    RUN_QUEUE.release(uid)
    raise KubeConflict(409, f"TeamRun {namespace}/{name} kept changing while it was being started")


async def start_queued(slot: Slot) -> None:
    """The queue's start of a run it reserved a slot for (``RunQueue`` loop), from the watch's
    copy of it (``start_attempt`` reads it again if it changed since)."""
    seen = WATCHED.get(slot.namespace, slot.name)
    teamrun = seen or await runtime.kube().get_teamrun(slot.namespace, slot.name)
    if teamrun is None or teamrun["metadata"].get("uid") != slot.uid:
        RUN_QUEUE.release(slot.uid)
        return
    status = teamrun.get("status") or {}
    if status.get("phase") != "Queued":
        if status.get("phase") != "Running":
            RUN_QUEUE.release(slot.uid)
        return
    attempt = int(status.get("attempt") or 0) + 1
    written = await start_attempt(teamrun, attempt)
    if written is not None:
        await ensure_pod(written, spec_of(written), attempt, resume_of(status, attempt))


async def queue_run(teamrun: TeamRunBody, why: str) -> None:
    """Hold a new run back for a slot (``status.phase: Queued``)."""
    meta, status = teamrun["metadata"], (teamrun.get("status") or {})
    generation = int(meta.get("generation", 1))
    update = queued(status, run_id_of(teamrun), why, generation)
    await runtime.kube().patch_teamrun_status(meta["namespace"], meta["name"], update)
    await events.info(teamrun, "Queued", update["message"])


def _held(teamrun: TeamRunBody) -> bool:
    try:
        return hold_of(spec_of(teamrun)) is not None
    except TeamRunSpecError:
        return False
