"""Attempt lifecycle over the API: create an attempt's pod, record how it ended, start the next.

Recording is serialized per TeamRun (the pod watch and the watchdog can both see one ending) and
idempotent (an attempt already in the history is not recorded again, e.g. after a restart).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from oma.errors import OmaError
from oma.store.base import MemoryStore
from oma.timeutil import now_iso, parse_iso
from oma_operator import events, runtime
from oma_operator.approvals.sync import sync_approvals
from oma_operator.k8s.errors import KubeConflict, KubeError
from oma_operator.k8s.watched import WATCHED
from oma_operator.later import LATER, Key
from oma_operator.resources.bodies import PodBody, TeamRunBody, TeamRunStatus, teamrun_view
from oma_operator.resources.models import TeamRunSpec
from oma_operator.resources.phases import ConditionType
from oma_operator.resources.specs import run_id_of, spec_of, work_digest
from oma_operator.runs.held_runs import hold_now, hold_without_pod
from oma_operator.runs.metrics import METRICS, Resume
from oma_operator.runs.rules.decisions import attempt_record, decide, end_event_type
from oma_operator.runs.rules.holds import hold_of
from oma_operator.runs.rules.outcomes import (
    COMPLETED_UNCONFIRMED,
    SUCCESS_NOT_CONFIRMED,
    Outcome,
    confirmed,
)
from oma_operator.runs.rules.pods import (
    FINALIZER,
    attempt_of,
    made_for,
    not_made_for,
    runner_pod,
)
from oma_operator.runs.rules.progress import (
    CheckpointTooLargeToPoll,
    Polled,
    read_output,
    read_progress,
)
from oma_operator.runs.rules.status import (
    after_attempt,
    backoff_left,
    condition,
    merge_conditions,
    queued,
    started,
)
from oma_operator.runs.run_queue import RUN_QUEUE
from oma_operator.stores import STORES

log = logging.getLogger(__name__)
T = TypeVar("T")
RECORD_TRIES = 5  # conflicting writes in a row (kopf's own, progress) before giving up for now
# Held weakly: a TeamRun's lock lives while a write holds or awaits it, so the registry does not
# keep one lock per run ever seen (3,000 runs: 3,000 locks, for the operator's lifetime).
_recording: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)
POD_CREATED: ConditionType = "PodCreated"  # False while the current attempt's pod is refused


def recording(namespace: str, name: str) -> asyncio.Lock:
    """The lock every write of a TeamRun's status made from what the operator knows of it
    holds (an attempt's end, the progress poll): one at a time per TeamRun."""
    key = (namespace, name)
    lock = _recording.get(key)
    if lock is None:
        lock = _recording[key] = asyncio.Lock()
    return lock


def about(body: TeamRunBody | PodBody, kind: str) -> dict[str, Any]:
    """A log record's ``extra`` naming the object it is about, as kopf's own lines do (the
    ``[namespace/name]`` prefix, or ``object`` in JSON lines)."""
    meta = body["metadata"]
    ref = {"kind": kind, "name": meta["name"], "namespace": meta["namespace"]}
    return {"k8s_ref": {**ref, "uid": meta.get("uid")}, "k8s_skip": True}


async def ensure_pod(
    teamrun: TeamRunBody, spec: TeamRunSpec, attempt: int, resume: Resume | None = None
) -> None:
    """Create the attempt's pod unless it exists (a restarted operator, a repeated event).

    A refused creation (anything but 409: invalid, forbidden by a quota, a server error) is not
    raised, since most callers are watch events that nobody retries: it is recorded as the
    ``PodCreated=False`` condition with the API's message, and ``retry_pod_creation`` (run
    periodically) tries again until the pod exists.
    """
    meta = teamrun["metadata"]
    if meta.get("deletionTimestamp"):
        return  # the TeamRun is going away: its pods are being garbage-collected
    hold = hold_now(teamrun)
    if hold is not None:  # suspended or cancelled since this start was decided
        await hold_without_pod(teamrun, hold)
        return
    manifest = runner_pod(teamrun, spec, attempt, runtime.settings().runner)
    pod = manifest["metadata"]["name"]
    try:
        await runtime.kube().create_pod(meta["namespace"], manifest)
    except KubeError as exc:
        if not isinstance(exc, KubeConflict):
            await _creation_failed(teamrun, attempt, pod, exc)
            return
        # It exists: created before (by us, or by a retry meanwhile), or someone else's pod
        # holds the name, which would leave the attempt waiting for a pod that never reports.
        existing = await runtime.kube().get_pod(meta["namespace"], pod)
        if existing is None:  # gone in between: not ours to wait for; created on the retry
            gone = KubeConflict(409, f"pod {pod} existed, then went away before it was read")
            await _creation_failed(teamrun, attempt, pod, gone)
            return
        if not made_for(existing, teamrun, attempt):
            squatted = KubeConflict(
                409,
                f"a pod named {pod} exists that the operator did not make for this attempt "
                "(other labels, or no controller reference to this TeamRun): delete it and "
                "the attempt starts",
            )
            await _creation_failed(teamrun, attempt, pod, squatted)
            return
        created = False
    else:
        created = True
        if hold_now(teamrun) is not None:
            # Held between the check above and the creation: stop it at once (it drains, and
            # its recorded end applies the hold).
            await runtime.kube().delete_pod(meta["namespace"], pod)
    refused_before = pod_creation_failed(teamrun.get("status") or {})
    if refused_before:
        await _note_pod_creation(meta["namespace"], meta["name"], attempt, pod, None)
    if not created:
        return
    log.info("attempt %d: pod %s created", attempt, pod, extra=about(teamrun, "TeamRun"))
    if refused_before:  # answers the PodCreateFailed warning(s), so posted in any mode
        await events.info(
            teamrun, "PodCreated", f"attempt {attempt}: pod {pod} created after the refusals"
        )
    await events.info(teamrun, "AttemptStarted", f"attempt {attempt}: pod {pod}")
    if resume is not None:
        METRICS.resumed(resume)
        await events.info(teamrun, "Resumed", resumed_message(teamrun, attempt, pod, resume.after))


def resumed_message(teamrun: TeamRunBody, attempt: int, pod: str, after: str) -> str:
    """What the ``Resumed`` Event says: from the checkpoint only when one was saved."""
    start = (
        "resumes from the latest checkpoint"
        if (teamrun.get("status") or {}).get("checkpointSaved")
        else "starts from the beginning (no earlier attempt saved a checkpoint)"
    )
    return f"attempt {attempt} (pod {pod}) {start} after attempt {attempt - 1} ended ({after})"


def pod_creation_failed(status: TeamRunStatus) -> bool:
    """Whether the last try to create the current attempt's pod was refused."""
    found = next((c for c in status.get("conditions") or [] if c.get("type") == POD_CREATED), None)
    return found is not None and found.get("status") == "False"


def pod_to_retry(status: TeamRunStatus) -> int | None:
    """The attempt whose pod is to be created again (its creation was refused), if any: the
    run is still running that attempt and no outcome of it is recorded."""
    if status.get("phase") != "Running" or not pod_creation_failed(status):
        return None
    attempt = int(status.get("attempt") or 0)
    if attempt < 1 or any(a.get("attempt") == attempt for a in status.get("attempts") or []):
        return None
    return attempt


def resume_of(status: TeamRunStatus, attempt: int) -> Resume | None:
    """Why and since when ``attempt`` waited to start: how the one before it ended."""
    previous = [a for a in status.get("attempts") or [] if a.get("attempt") == attempt - 1]
    ended = parse_iso(str(previous[-1].get("endedAt", ""))) if previous else None
    return Resume(str(previous[-1].get("outcome")), ended) if previous and ended else None


async def retry_pod_creation(teamrun: TeamRunBody) -> None:
    """Periodic work on running TeamRuns: create again a pod whose creation was refused.
    ``teamrun`` is the watch's view; only a run whose status says so is read again."""
    if pod_to_retry(teamrun.get("status") or {}) is None:
        return
    meta = teamrun["metadata"]
    fresh = await runtime.kube().get_teamrun(meta["namespace"], meta["name"])
    if fresh is None:
        return
    status = fresh.get("status") or {}
    attempt = pod_to_retry(status)
    if attempt is None or backoff_left(status, datetime.now(UTC)) > 0:
        return
    spec = spec_of(fresh)
    await ensure_pod(fresh, spec, attempt, resume_of(status, attempt))


async def _creation_failed(teamrun: TeamRunBody, attempt: int, pod: str, exc: KubeError) -> None:
    meta = teamrun["metadata"]
    log.warning("creating pod %s/%s failed (retrying): %s", meta["namespace"], pod, exc)
    await events.warn(teamrun, "PodCreateFailed", f"attempt {attempt}: pod {pod}: {exc}")
    await _note_pod_creation(meta["namespace"], meta["name"], attempt, pod, exc)


async def _note_pod_creation(
    namespace: str, name: str, attempt: int, pod: str, error: KubeError | None
) -> None:
    """Set ``PodCreated`` (False with the API's message, or True once the pod exists), on a
    fresh read and only while ``attempt`` is still the current one."""
    async with recording(namespace, name):
        teamrun = await runtime.kube().get_teamrun(namespace, name)
        if teamrun is None:
            return
        status = teamrun.get("status") or {}
        if int(status.get("attempt") or 0) != attempt:
            return
        if error is None and not pod_creation_failed(status):
            return
        generation = int(teamrun["metadata"].get("generation", 1))
        if error is None:
            update = condition(POD_CREATED, True, "Created", f"pod {pod} created", generation)
        else:
            message = f"pod {pod} of attempt {attempt}: {error}; retrying"
            update = condition(POD_CREATED, False, "CreateFailed", message, generation)
        conditions = merge_conditions(status.get("conditions") or [], [update])
        await runtime.kube().patch_teamrun_status(namespace, name, {"conditions": conditions})


async def record_outcome(
    pod_body: PodBody,
    outcome: Outcome,
    ended: datetime,
    on_recorded: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Write the attempt's end into the status, then start what the retry policy says.
    ``on_recorded`` runs once the outcome is in the status (by this call or an earlier one),
    before any backoff.

    The end is believed only from the pod the operator made for this TeamRun (by uid) and
    attempt (``rules.pods.not_made_for``): a pod dressed as a runner pod by someone else, or one
    left over from an earlier TeamRun of the same name, ends nothing (a Warning Event says
    so). A success is believed only when the run's store confirms it (``confirmed``)."""
    namespace, name, attempt = attempt_of(pod_body)
    pod = pod_body["metadata"]["name"]

    async def recorded() -> None:
        if on_recorded is not None:
            await on_recorded()

    async with recording(namespace, name):
        # The watch's copy first, its resourceVersion a precondition: read only if it changed.
        teamrun = WATCHED.get(namespace, name) or await runtime.kube().get_teamrun(namespace, name)
        output_read: dict[str, Any] = {}  # a success's output, read once whatever the retries
        for _ in range(RECORD_TRIES):
            if teamrun is None:
                await recorded()
                return
            foreign = not_made_for(pod_body, teamrun, attempt)
            if foreign is not None:
                await _ignore_foreign_pod(teamrun, pod, attempt, foreign)
                return
            status = teamrun.get("status") or {}
            if any(a.get("attempt") == attempt for a in status.get("attempts") or []):
                await recorded()
                return  # recorded before (another watcher, or before an operator restart)
            spec = spec_of(teamrun)
            progress, unreadable = await _end_progress(teamrun, spec, outcome)
            outcome = confirmed(outcome, progress, unreadable)
            stopped = status.get("stoppedForHold") == pod
            decision = decide(outcome, status, spec.retry_policy, attempt, hold_of(spec), stopped)
            generation = int(teamrun["metadata"].get("generation", 1))
            record = attempt_record(attempt, outcome, pod, now_iso())
            next_attempt = attempt + 1 if decision.action == "next_attempt" else None
            update = after_attempt(
                status, decision, record, generation, next_attempt, outcome.report
            )
            update |= progress
            update |= await _output(teamrun, spec, decision.action, output_read)
            if not status.get("workDigest"):  # started by an older operator (the spec is frozen)
                update["workDigest"] = work_digest(teamrun)
            if (outcome.report and outcome.report.checkpointed) or update.get("lastCheckpointAt"):
                update["checkpointSaved"] = True  # from now on, an attempt must find a checkpoint
            try:
                await runtime.kube().patch_teamrun_status(
                    namespace, name, update, resource_version=teamrun["metadata"]["resourceVersion"]
                )
                break
            except KubeConflict:
                pass  # changed since it was read: read it again
            teamrun = await runtime.kube().get_teamrun(namespace, name)
        else:
            raise KubeConflict(
                409,
                f"TeamRun {namespace}/{name} kept changing while {pod}'s end was "
                "being recorded; the pod keeps its finalizer until it is",
            )
        # What the next pod is built from.
        teamrun = teamrun_view({**teamrun, "status": {**status, **update}})
        await recorded()
    log.info(
        "attempt %d ended: %s (%s); %s",
        attempt,
        outcome.kind,
        outcome.reason,
        decision.message,
        extra=about(pod_body, "Pod"),
    )
    METRICS.attempt_ended(outcome.kind)
    METRICS.runner_report(outcome.report)
    unconfirmed = outcome.reason in (SUCCESS_NOT_CONFIRMED, COMPLETED_UNCONFIRMED)
    kind = end_event_type(outcome.kind, decision.action, unconfirmed=unconfirmed)
    post = events.warn if kind == "Warning" else events.info
    await post(
        teamrun,
        "Attempt" + outcome.kind.title().replace("_", ""),  # AttemptOutage, AttemptToolChanged
        f"attempt {attempt} ended: {outcome.reason}; {decision.message}",
    )
    if decision.action == "awaiting_approval":
        refreshed = await runtime.kube().get_teamrun(namespace, name)
        if refreshed is not None and await sync_approvals(runtime.kube(), refreshed, spec):
            await resume_after_approvals(refreshed, spec)
    if next_attempt is not None:
        resume = Resume(outcome.kind, ended)

        async def start() -> None:
            await ensure_pod(teamrun, spec, next_attempt, resume)

        if decision.delay_seconds <= 0:
            await start()
        else:  # waited out apart: a watch worker is not held for minutes (kopf caps them)
            _after_backoff(decision.delay_seconds, start, (namespace, name))


async def _ignore_foreign_pod(teamrun: TeamRunBody, pod: str, attempt: int, why: str) -> None:
    """A pod labelled as this TeamRun's attempt that the operator did not make for it ended:
    nothing is recorded (the caller lets go of the pod), and the run's users are told."""
    meta = teamrun["metadata"]
    message = f"pod {pod} is labelled as attempt {attempt} of this run, but {why}: its end "
    message += "is ignored"
    log.warning("TeamRun %s/%s: %s", meta["namespace"], meta["name"], message)
    await events.warn(teamrun, "ForeignPodIgnored", message)


def _after_backoff(seconds: float, start: Callable[[], Awaitable[None]], key: Key) -> None:
    """Start the next attempt after its backoff, in a task of its own (``later``: dropped if
    the TeamRun is deleted meanwhile). A restarted operator that finds the run before its pod
    exists waits out what is left (``nextAttemptAfter``)."""
    LATER.after(seconds, key, start, "starting the next attempt after its backoff")


STORE_READ_SECONDS = 15.0  # a store that accepts and never answers holds no recording longer


async def store_progress(teamrun: TeamRunBody, spec: TeamRunSpec) -> Polled:
    """Tasks done/total and the last checkpoint time from the run's store, for the poll: none
    from a checkpoint too large to poll (``settings.poll_read_limit_bytes``), or from a store that
    did not answer within ``STORE_READ_SECONDS``."""
    try:
        return Polled(await _progress(teamrun, spec, runtime.settings().poll_read_limit_bytes))
    except CheckpointTooLargeToPoll as exc:
        return Polled(too_large=str(exc))
    except (KubeError, OmaError, TimeoutError) as exc:
        log.warning("no progress for %s: %s", teamrun["metadata"]["name"], exc or "timed out")
        return Polled(answered=False)


async def _read_store(
    teamrun: TeamRunBody, spec: TeamRunSpec, read: Callable[[MemoryStore], Awaitable[T]]
) -> T:
    """``read`` of the run's store, within ``STORE_READ_SECONDS``."""
    async with asyncio.timeout(STORE_READ_SECONDS):
        return await read(
            await STORES.store_of(runtime.kube(), teamrun["metadata"]["namespace"], spec)
        )


async def _progress(
    teamrun: TeamRunBody, spec: TeamRunSpec, read_limit: int | None = None
) -> dict[str, Any]:
    budget = spec.budget.run_budget() if spec.budget is not None else None
    run_id = run_id_of(teamrun)

    async def read(store: MemoryStore) -> dict[str, Any]:
        return await read_progress(store, run_id, read_limit, budget) or {}

    return await _read_store(teamrun, spec, read)


async def _progress_or_error(
    teamrun: TeamRunBody, spec: TeamRunSpec
) -> tuple[dict[str, Any], str | None]:
    """The store's progress (read whatever its size), and why the store could not be read
    (None: it was)."""
    name = teamrun["metadata"]["name"]
    try:
        return await _progress(teamrun, spec), None
    except (KubeError, OmaError, TimeoutError) as exc:
        why = str(exc) or "the store did not answer in time"
        log.warning("no progress for %s: %s", name, why)
        return {}, why


async def _output(
    teamrun: TeamRunBody, spec: TeamRunSpec, action: str, read: dict[str, Any]
) -> dict[str, Any]:
    """A succeeded run's ``output`` for its status (``rules.progress.run_output``); nothing
    for another end, or when the store cannot tell it (logged: the success stands). ``read``
    keeps what was read, so a write retried after a conflict does not read it again."""
    if action != "succeeded":
        return {}
    if "output" not in read:
        namespace = teamrun["metadata"]["namespace"]
        run_id = run_id_of(teamrun)
        where = f"oma checkpoint show --run-id {run_id} --tenant {namespace} --store <its store>"

        async def load(store: MemoryStore) -> dict[str, Any] | None:
            return await read_output(store, run_id, where)

        try:
            read["output"] = await _read_store(teamrun, spec, load)
        except (KubeError, OmaError, TimeoutError) as exc:
            log.warning("no output for %s: %s", teamrun["metadata"]["name"], exc or "timed out")
            read["output"] = None
    return {"output": read["output"]} if read["output"] is not None else {}


async def _end_progress(
    teamrun: TeamRunBody, spec: TeamRunSpec, outcome: Outcome
) -> tuple[dict[str, Any], str | None]:
    """The store's progress at an attempt's end. A success is confirmed against it; when the
    store cannot be read, its Secret is read afresh (it may have been fixed since) and the
    store tried once more before the success is left unconfirmed."""
    progress, error = await _progress_or_error(teamrun, spec)
    if error is not None and outcome.kind == "succeeded":
        STORES.forget_secrets(teamrun["metadata"]["namespace"])
        progress, error = await _progress_or_error(teamrun, spec)
    return progress, error


async def give_up(pod: PodBody, outcome: Outcome) -> None:
    """End an attempt whose pod will not report by itself (see ``watchdog``).

    The outcome is recorded first, with the watchdog's reason (e.g. which Secret is missing):
    the deleted pod's own end, seen a moment later, must not be taken for the attempt's (it is
    recorded once). The finalizer goes last, so a restart anywhere in between finds the pod
    again and repeats only what is left (recording is idempotent).
    """
    meta = pod["metadata"]
    namespace = meta["namespace"]
    log.info("giving up on pod %s/%s: %s", namespace, meta["name"], outcome.message)

    async def delete() -> None:
        await runtime.kube().delete_pod(namespace, meta["name"])

    now = datetime.now(UTC)
    await record_outcome(pod, outcome, now, on_recorded=delete)
    await runtime.kube().remove_finalizer(namespace, meta["name"], FINALIZER, pod)


async def resume_after_approvals(teamrun: TeamRunBody, spec: TeamRunSpec) -> None:
    """Start the next attempt after approvals, exactly once (optimistic concurrency), or queue
    it when a concurrency limit leaves no slot."""
    meta, status = teamrun["metadata"], (teamrun.get("status") or {})
    if status.get("phase") != "AwaitingApproval":
        return
    attempt = int(status.get("attempt") or 1) + 1
    generation = int(meta.get("generation", 1))
    decided = condition(
        "AwaitingApproval", False, "Decided", "every request is decided", generation
    )
    waits = RUN_QUEUE.reserve(teamrun, attempt)
    if waits is not None:
        update = queued(status, run_id_of(teamrun), waits, generation)
    else:
        update = started(status, attempt, run_id_of(teamrun), generation, work_digest(teamrun))
    update["pendingApprovals"] = 0
    update["conditions"] = merge_conditions(update["conditions"], [decided])
    try:
        await runtime.kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except KubeError as exc:
        if waits is None:
            RUN_QUEUE.release(meta["uid"])
        if isinstance(exc, KubeConflict):
            return  # someone else (another event, a restarted operator) resumed it
        raise
    if waits is None:
        await ensure_pod(teamrun, spec, attempt, resume_of(status, attempt))
