"""kopf handlers, kept thin: read state, call the pure modules, write through the client."""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from oma.timeutil import now_iso
from oma_operator import events, runtime
from oma_operator.approvals.rules.reviewers import missing_creator
from oma_operator.approvals.sync import close_pending, sync_approvals
from oma_operator.install.release import release_runner_pods
from oma_operator.k8s.errors import CHANGED_OR_GONE
from oma_operator.k8s.watched import WATCHED
from oma_operator.later import LATER
from oma_operator.resources.bodies import TeamRunBody, decision_view, pod_view, teamrun_view
from oma_operator.resources.models import GROUP, VERSION
from oma_operator.resources.phases import FINAL_PHASES, WAITING_PHASES
from oma_operator.resources.specs import TeamRunSpecError, spec_of
from oma_operator.runs import trouble
from oma_operator.runs.attempts import (
    ensure_pod,
    record_outcome,
    recording,
    resume_after_approvals,
    resume_of,
    retry_pod_creation,
    store_progress,
)
from oma_operator.runs.deadlines import TIMERS
from oma_operator.runs.held_runs import apply_hold, may_ask
from oma_operator.runs.metrics import METRICS, pod_ended_at
from oma_operator.runs.queued_runs import queue_run, start_attempt, start_queued
from oma_operator.runs.retention import FINISHED
from oma_operator.runs.retries import retry_requested, retry_run
from oma_operator.runs.rules.concurrency import Slot, frees_slot, slot_of
from oma_operator.runs.rules.holds import action_for, hold_of
from oma_operator.runs.rules.outcomes import classify
from oma_operator.runs.rules.pods import FINALIZER, LABEL_TEAMRUN, attempt_of, labelled_attempt
from oma_operator.runs.rules.progress import changed, poll_due, polled_conditions
from oma_operator.runs.rules.status import backoff_left, condition, ended, merge_conditions
from oma_operator.runs.run_queue import INDEX_KEY, RUN_QUEUE
from oma_operator.runs.stuck_pods import reflect_pod_trouble
from oma_operator.runs.untracked import pod_gone, untracked_pod
from oma_operator.stores import STORES
from oma_operator.ticker import TICKER

WATCH_WORKERS = 500  # objects handled at once, per watched resource
# Pods whose outcome this process recorded or found recorded, and let go of (bounded): their
# late events cost no API reads. A restarted operator reads each pod's TeamRun once, which is
# harmless (recording is idempotent).
_let_go: OrderedDict[str, None] = OrderedDict()
LET_GO_MEMORY = 10_000
# TeamRuns taken up by this process (their uids, until deleted): a listing of the watch after
# the first one (kopf lists again when the API server answers 410 Gone) starts nothing again.
_taken_up: set[str] = set()
APPROVAL_POLL_SECONDS = 3.0  # how soon a decision made outside Kubernetes (oma approvals) shows
POD_RETRY_SECONDS = 5.0  # how soon a refused runner pod creation is tried again
log = logging.getLogger(__name__)


class _DecisionsDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds an object's "essence" (a deep copy of it) at every watch event of every
    resource, to compare it with its last handled one; only ApprovalDecisions have a handler
    that compares (``decision_set``). For TeamRuns and pods the copy was thrown away: 5 % of the
    operator's CPU at scale. Their essence is empty now, and nothing reads it."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        if body.get("kind") != "ApprovalDecision":
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)


# What kopf keeps of an ApprovalDecision to tell a change of ``spec.decision`` (its only update
# handler): not the request's content or summary, which may be as large as oma lets content be
# (an annotation holds at most 256 KiB in all; a 125 KB tool input made kopf's copy too long).
DIFFBASE = _DecisionsDiffBase(
    prefix="kopf.zalando.org",
    key="last-handled-configuration",
    ignored_fields=["spec.content", "spec.summary"],
)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    settings.persistence.finalizer = "oma.dev/operator"
    settings.persistence.diffbase_storage = DIFFBASE
    settings.posting.level = 20  # INFO and up become Kubernetes Events
    settings.watching.server_timeout = 60
    # No cluster-wide discovery of namespaces and CRDs: a namespaced operator then needs no
    # cluster-scope RBAC at all (the chart's Role is enough).
    settings.scanning.disabled = True
    # kopf runs one worker per object with events, unbounded by default: 3,000 TeamRuns created
    # at once meant 3,000 handlers at once, and the memory of that peak is never given back
    # (docs/performance.md). Bounded, a burst is worked through a few hundred objects at a
    # time; idle workers leave soon so that their places go to objects that wait. No handler
    # sleeps for long in a worker (backoffs are waited out apart: attempts._after_backoff).
    settings.queueing.worker_limit = WATCH_WORKERS
    settings.queueing.idle_timeout = 0.5
    TICKER.on_error, TICKER.on_success = trouble.report, trouble.cleared
    TICKER.every(APPROVAL_POLL_SECONDS, "AwaitingApproval", approvals_pending, "approvals")
    TICKER.every(runtime.settings().progress_seconds, "Running", progress, "progress")
    TICKER.every(POD_RETRY_SECONDS, "Running", retry_pod_creation, "pod-retry")
    RUN_QUEUE.attach(kwargs["teamrun_slots"])  # kopf hands every handler its indices by name
    WATCHED.attach(kwargs["teamrun_bodies"])
    kube = runtime.kube()
    kube.teamrun_written = WATCHED.wrote  # a write's answer is newer than the watch's copy
    kube.limit_rate(runtime.settings().api_qps, runtime.settings().api_burst)
    RUN_QUEUE.start(start_queued)


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    await TICKER.close()
    await LATER.close()
    await FINISHED.close()
    await RUN_QUEUE.close()
    await TIMERS.close()
    await release_runner_pods(runtime.settings().namespaces)
    await STORES.close()
    await runtime.close()


async def teamrun_present(body: TeamRunBody) -> float:
    """Make sure the current attempt has its runner pod (idempotent across restarts); the
    seconds left of a crash backoff when that attempt may not start yet (else 0).

    Status is written through the client only, and before the pod exists, so a pod outcome
    recorded concurrently can never be overwritten by a stale view of the TeamRun.
    """
    status = body.get("status") or {}
    if status.get("phase") in FINAL_PHASES:
        return 0.0
    try:
        spec = spec_of(body)
    except TeamRunSpecError as exc:
        await _refuse(body, "InvalidSpec", str(exc), exc.problems)
        return 0.0
    # Before any pod starts, and before a hold is acted on too (a run let go while the
    # operator was down must not start unchecked). A run already under way was checked when
    # it started: an operator run without the policy since then publishes none of its
    # requests (approvals.sync.sync_approvals) rather than fail it under a live pod.
    unknown_creator = missing_creator(spec.approvals, body, runtime.settings().creator_recorded)
    if unknown_creator is not None and not status.get("attempt"):
        await _refuse(body, "CreatorUnknown", unknown_creator, unknown_creator)
        return 0.0
    if action_for(status.get("phase"), hold_of(spec)) is not None:
        written = await apply_hold(body)  # suspended, cancelled, or let go: then queued
        if written is not None:
            await _start_or_queue(written)
        return 0.0
    if status.get("phase") in WAITING_PHASES:
        return 0.0
    if not status.get("attempt") or status.get("phase") == "Queued":
        await _start_or_queue(body)
        return 0.0
    wait = backoff_left(status, datetime.now(UTC))
    if wait > 0:  # an operator restarted during a crash backoff waits out the rest of it
        return wait
    await ensure_pod(body, spec, int(status.get("attempt") or 1))
    return 0.0


async def _make_present(body: TeamRunBody) -> None:
    """``teamrun_present``, then again later if it failed or must wait (``later``)."""
    meta = body["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta.get("uid")
    try:
        wait = await teamrun_present(body)
    except Exception as exc:
        delay = LATER.failed(key)
        LATER.after(delay, key, lambda: _present_again(key, uid), "starting the run", uid)
        await trouble.report(body, "starting the run", exc)
        return
    LATER.succeeded(key)
    if wait > 0:
        then = "the rest of a crash backoff"
        LATER.after(wait, key, lambda: _present_again(key, uid), then, uid)
    await trouble.cleared(body)


async def _retry(teamrun: TeamRunBody, requested: str) -> None:
    """``oma retry``: the failed run queued again, then started like any queued run. A failed
    write is tried again later (a finished run gets no more watch events to do it)."""
    meta = teamrun["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta.get("uid")
    try:
        written = await retry_run(teamrun, requested)
    except Exception as exc:
        delay = LATER.failed(key)
        again = lambda: _retry_again(key, uid, requested)  # noqa: E731
        LATER.after(delay, key, again, "retrying the failed run", uid)
        await trouble.report(teamrun, "retrying the failed run", exc)
        return
    LATER.succeeded(key)
    if written is None:
        return
    if written.refused is not None:
        await events.warn(written.teamrun, "RetryRefused", written.refused)
        return
    message = str((written.teamrun.get("status") or {}).get("message"))
    await events.info(written.teamrun, "Retried", message)
    await _make_present(written.teamrun)


async def _retry_again(key: tuple[str, str], uid: str | None, requested: str) -> None:
    fresh = await runtime.kube().get_teamrun(*key)
    ours = fresh is not None and fresh["metadata"].get("uid") == uid
    if fresh is not None and ours and retry_requested(fresh) == requested:
        await _retry(fresh, requested)


async def _hold(teamrun: TeamRunBody) -> None:
    """``spec.suspend`` or ``spec.cancel`` set (or ``suspend`` cleared): act on it, and take a
    run let go up as a queued one. A failed write is tried again later."""
    meta = teamrun["metadata"]
    key, uid = (meta["namespace"], meta["name"]), meta.get("uid")
    try:
        written = await apply_hold(teamrun)
    except Exception as exc:
        delay = LATER.failed(key)
        LATER.after(delay, key, lambda: _present_again(key, uid), "suspending or cancelling", uid)
        await trouble.report(teamrun, "suspending or cancelling the run", exc)
        return
    LATER.succeeded(key)
    if written is not None:
        await _make_present(written)


async def _present_again(key: tuple[str, str], uid: str | None) -> None:
    body = WATCHED.get(*key)  # as the watch shows it now; None once finished or deleted
    if body is not None and body["metadata"].get("uid") == uid:
        await _make_present(body)


async def _start_or_queue(teamrun: TeamRunBody) -> None:
    """A new run, or a queued one seen again (a restarted operator): its first (or next)
    attempt starts if a slot is free, else it waits as ``Queued``."""
    status = teamrun.get("status") or {}
    attempt = int(status.get("attempt") or 0) + 1
    waits = RUN_QUEUE.reserve(teamrun, attempt)
    if waits is not None:
        if status.get("phase") != "Queued":
            await queue_run(teamrun, waits)
        return
    written = await start_attempt(teamrun, attempt)
    if written is None:  # started meanwhile by the queue (or another event): nothing to do
        return
    await ensure_pod(written, spec_of(written), attempt, resume_of(status, attempt))


async def _refuse(teamrun: TeamRunBody, reason: str, message: str, detail: str) -> None:
    """End a TeamRun that cannot run as written before any pod exists: ``Failed``."""
    meta, status = teamrun["metadata"], (teamrun.get("status") or {})
    generation = int(meta.get("generation", 1))
    await runtime.kube().patch_teamrun_status(
        meta["namespace"],
        meta["name"],
        {
            "phase": "Failed",
            "observedGeneration": generation,
            "message": message,
            "completionTime": now_iso(),
            "conditions": merge_conditions(
                status.get("conditions") or [],
                [
                    condition("Failed", True, reason, detail, generation),
                    *ended(False, reason, detail, generation),
                ],
            ),
        },
    )
    await events.warn(teamrun, reason, message)


@kopf.on.event("", "v1", "pods", labels={LABEL_TEAMRUN: kopf.PRESENT})
async def runner_pod_changed(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    pod = pod_view(body)
    meta = pod["metadata"]
    if not labelled_attempt(pod):
        return  # an empty TeamRun name or a bad attempt number: no run's pod (and none to read)
    if event.get("type") == "DELETED":
        TIMERS.disarm(meta["uid"])
        if meta["uid"] not in _let_go:
            await pod_gone(pod)  # nobody may have recorded it (a finalizer removed by hand)
        _let_go.pop(meta["uid"], None)
        return
    if meta["uid"] in _let_go:
        return  # outcome already recorded (a late event may still show the finalizer)
    if FINALIZER not in (meta.get("finalizers") or []):
        # Recorded by an earlier operator process, or the finalizer was removed by hand.
        if await untracked_pod(pod):
            _remember(meta["uid"])
        return
    outcome = classify(pod)
    if not outcome.terminal:
        TIMERS.arm(pod)  # a pod that never starts, or whose node is lost, reports nothing
        await reflect_pod_trouble(pod)  # and says why it does not start, while it waits
        return
    TIMERS.disarm(meta["uid"])
    namespace, name, _attempt = attempt_of(pod)
    ended = pod_ended_at(pod) or datetime.now(UTC)
    try:
        await record_outcome(pod, outcome, ended)
    except Exception as exc:
        ref: TeamRunBody = {"metadata": {"namespace": namespace, "name": name}}
        await trouble.report(ref, f"recording how pod {meta['name']} ended", exc)
        raise
    await runtime.kube().remove_finalizer(namespace, meta["name"], FINALIZER, pod)
    _remember(meta["uid"])


def _remember(uid: str) -> None:
    _let_go[uid] = None
    while len(_let_go) > LET_GO_MEMORY:
        _let_go.popitem(last=False)


async def approvals_pending(teamrun: TeamRunBody) -> None:
    """Publish, record and reflect decisions; resume once every request is decided."""
    spec = spec_of(teamrun)
    if await sync_approvals(runtime.kube(), teamrun, spec):
        await resume_after_approvals(teamrun, spec)


async def progress(teamrun: TeamRunBody) -> None:
    """Mirror tasks done/total and the last checkpoint time from the store into the status,
    and whether the checkpoint was too large to poll (``CheckpointPolled``).

    The visit's copy may be seconds old (visits of a namespace take turns): the run is taken
    as the operator knows it now (``WATCHED``), before the store is read and again, under the
    run's recording lock, before the write. A run that ended meanwhile is not written (its
    end carries the same figures), and nothing is written that its end wrote already."""
    meta = teamrun["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    current = _running_now(namespace, name, meta.get("uid"))
    if current is None:
        return
    status = current.get("status") or {}
    if not poll_due(status, datetime.now(UTC), runtime.settings().progress_seconds):
        return  # a run that just started: its end (most short runs) writes the same at once
    spec = spec_of(current)
    polled = await store_progress(current, spec)
    async with recording(namespace, name):
        latest = _running_now(namespace, name, meta.get("uid"))
        if latest is None or (latest.get("status") or {}).get("attempt") != status.get("attempt"):
            return
        status, generation = (
            latest.get("status") or {},
            int(latest["metadata"].get("generation", 1)),
        )
        update = changed(status, polled.progress, runtime.settings().progress_seconds)
        conditions = polled_conditions(status, polled, generation)
        if conditions is None:
            if update:
                await runtime.kube().patch_teamrun_status(namespace, name, update)
            return
        # The whole list is written: only over the status it was made from (the next poll
        # tries again after a conflict).
        update["conditions"] = conditions
        with contextlib.suppress(*CHANGED_OR_GONE):
            await runtime.kube().patch_teamrun_status(
                namespace, name, update, resource_version=latest["metadata"]["resourceVersion"]
            )


def _running_now(namespace: str, name: str, uid: str | None) -> TeamRunBody | None:
    """The TeamRun as the operator knows it now, if it is (still) this one and ``Running``."""
    body = WATCHED.get(namespace, name)
    if body is None or body["metadata"].get("uid") != uid:
        return None
    return body if (body.get("status") or {}).get("phase") == "Running" else None


@kopf.on.update(GROUP, VERSION, "approvaldecisions", field="spec.decision")
async def decision_set(body: kopf.Body, **_: Any) -> None:
    meta = body["metadata"]
    teamrun = await runtime.kube().get_teamrun(meta["namespace"], body["spec"]["teamRun"])
    phase = (teamrun.get("status") or {}).get("phase") if teamrun is not None else None
    if teamrun is not None and phase in FINAL_PHASES:
        await close_pending(runtime.kube(), teamrun)  # decided too late: say so on it
        return
    if teamrun is None or phase != "AwaitingApproval":
        return
    spec = spec_of(teamrun)
    if await sync_approvals(runtime.kube(), teamrun, spec):
        await resume_after_approvals(teamrun, spec)


@kopf.index(GROUP, VERSION, "teamruns")
async def teamrun_slots(body: kopf.Body, **_: Any) -> dict[str, Slot]:
    """Every TeamRun's slot view (``runs.run_queue``): kopf starts no handler before it is full.
    A coroutine, as the one below: kopf runs a plain function in a thread of its executor, and
    that hop per watch event cost a tenth of the operator's CPU at scale."""
    return {INDEX_KEY: slot_of(teamrun_view(body))}


@kopf.index(GROUP, VERSION, "teamruns")
async def teamrun_bodies(body: kopf.Body, **_: Any) -> dict[tuple[str, str], TeamRunBody]:
    """Every unfinished TeamRun as last seen (``k8s.watched``): ``watched_entry``."""
    return watched_entry(teamrun_view(body))


def watched_entry(body: TeamRunBody) -> dict[tuple[str, str], TeamRunBody]:
    """A TeamRun's entry in the index of watched bodies, for writes conditioned on what was
    seen; none for a finished one (nothing writes it again but a late outcome). An empty
    mapping, not None: kopf keeps an object's earlier entry when its index function returns
    None, so every finished run stayed in the index as it last ran (its memory, and a stale
    ``Running`` copy that the progress poll then wrote over the run's end)."""
    if (body.get("status") or {}).get("phase") in FINAL_PHASES:
        return {}
    meta = {k: v for k, v in body["metadata"].items() if k != "managedFields"}  # most of its size
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    return {key: teamrun_view({**body, "metadata": meta})}


@kopf.on.event(GROUP, VERSION, "teamruns")
async def teamrun_event(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    kind = event.get("type")
    teamrun = teamrun_view(body)
    METRICS.teamrun_seen(teamrun, kind)
    TICKER.seen(teamrun, kind)
    FINISHED.seen(teamrun, kind)
    meta = teamrun["metadata"]
    WATCHED.seen(teamrun)
    uid = str(meta.get("uid"))
    requested = retry_requested(teamrun) if kind != "DELETED" else None
    if requested is not None:
        await _retry(teamrun, requested)
    elif kind == "MODIFIED" and may_ask(teamrun):
        await _hold(teamrun)
    elif kind == "ADDED" or (kind is None and uid not in _taken_up):
        # Created, or listed when this operator's watch starts: the run needs its current
        # attempt. Not kopf's create and resume handlers, which cost a patch per TeamRun (a
        # copy of its spec in an annotation): the watch event is enough. A later listing
        # (kopf lists again after the API server's 410 Gone) takes up no run twice.
        _taken_up.add(uid)
        await _make_present(teamrun)
    elif kind == "DELETED":
        _taken_up.discard(uid)
        WATCHED.forget(meta["namespace"], meta["name"])
        LATER.cancel((meta["namespace"], meta["name"]), uid)
    if RUN_QUEUE.active and frees_slot(kind, teamrun):
        RUN_QUEUE.kick()  # a run ended, waits or was deleted: a queued one may start


@kopf.on.event(GROUP, VERSION, "approvaldecisions")
async def decision_event(body: kopf.Body, event: kopf.RawEvent, **_: Any) -> None:
    METRICS.decision_seen(decision_view(body), event.get("type"))
