"""Finished TeamRuns deleted once their time to live has passed: ``spec.ttlSecondsAfterFinished``,
else the operator's default (``OMA_TTL_SECONDS_AFTER_FINISHED``, the chart's
``retention.ttlSecondsAfterFinished``), else never.

The clock starts when the run finished: the ``lastTransitionTime`` of its final condition
(``Succeeded`` or ``Failed``, which a rejected run has too), so an operator restart neither
resets nor loses it (the watch's initial listing arms every timer again). The TeamRun is deleted
with its uid as a precondition (a newer TeamRun of the same name is left alone); its runner pods
go with it (owner references). The run's store records (checkpoint, attempt log, approval rows)
stay, unless the operator is told to remove them (``retention.deleteStoreRecords``,
``OMA_DELETE_STORE_RECORDS``): then they go before the TeamRun the operator deletes, and after
any TeamRun deleted otherwise (best effort: an operator that is down then misses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

from oma.checkpoint.stored import remove_run
from oma.timeutil import parse_iso
from oma_operator import runtime
from oma_operator.k8s.watched import WATCHED
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.phases import FINAL_PHASES
from oma_operator.resources.specs import TeamRunSpecError, run_id_of, spec_of
from oma_operator.stores import STORES

log = logging.getLogger(__name__)
RETRY_SECONDS = 30.0  # after an API error while deleting


def ttl_of(teamrun: TeamRunBody, default: int | None) -> int | None:
    """The TeamRun's time to live once finished, in seconds (None: kept)."""
    own = (teamrun.get("spec") or {}).get("ttlSecondsAfterFinished")
    if isinstance(own, int) and not isinstance(own, bool) and own >= 0:
        return own
    return default


def finished_at(teamrun: TeamRunBody) -> datetime | None:
    """When the run reached its final phase (None: it has not)."""
    status = teamrun.get("status") or {}
    if status.get("phase") not in FINAL_PHASES:
        return None
    for condition in status.get("conditions") or []:
        final = condition.get("type") in ("Succeeded", "Failed", "Cancelled")
        if final and condition.get("status") == "True":
            found = parse_iso(str(condition.get("lastTransitionTime") or ""))
            if found is not None:
                return found
    return datetime.now(UTC)  # a final phase without its condition: count from now


def own_run_id(teamrun: TeamRunBody) -> str | None:
    """The run id whose store records are this TeamRun's alone: its default one
    (``<namespace>.<name>``). None when its spec names another: a run id set by hand may be
    another run's (a TeamRun that resumed or reused it), whose records, approval rows
    included, a deletion of this TeamRun must not take."""
    meta = teamrun["metadata"]
    default = f"{meta['namespace']}.{meta['name']}"
    return default if run_id_of(teamrun) == default else None


async def remove_store_records(teamrun: TeamRunBody) -> None:
    """The run's checkpoint, attempt log and approval rows, from its store (nothing for a run
    id it does not own, or a spec that names no usable store)."""
    meta = teamrun["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    run_id = own_run_id(teamrun)
    if run_id is None:
        log.info(
            "%s: store records kept: its runId is set in its spec (maybe another run's)", where
        )
        return
    try:
        spec = spec_of(teamrun)
    except TeamRunSpecError:
        return  # refused before it ran: no store of its own to clean
    store = await STORES.store_of(runtime.kube(), meta["namespace"], spec)
    removed = await remove_run(store, run_id)
    log.info(
        "%s: store records removed (checkpoint: %s, approval rows: %d)",
        where,
        "yes" if removed.checkpoint else "none",
        removed.approval_rows,
    )


class FinishedRuns:
    def __init__(self) -> None:
        self.default_ttl: int | None = None
        # retention.deleteStoreRecords: a deleted TeamRun's store records go too.
        self.delete_store_records = False
        self._timers: dict[str, tuple[datetime, asyncio.Task[None]]] = {}
        self._cleanups: set[asyncio.Task[None]] = set()

    def seen(self, teamrun: TeamRunBody, event_type: str | None) -> None:
        """Every TeamRun event: arm, re-arm or drop the run's timer."""
        meta = teamrun.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        if event_type == "DELETED":
            self._drop(uid)
            if self.delete_store_records:
                self._clean_up(teamrun)
            return
        ended, ttl = finished_at(teamrun), ttl_of(teamrun, self.default_ttl)
        if ended is None or ttl is None:
            self._drop(uid)
            return
        due = ended.timestamp() + ttl
        current = self._timers.get(uid)
        if current is not None and current[0].timestamp() == due:
            return
        self._drop(uid)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        when = datetime.fromtimestamp(due, UTC)
        task = asyncio.create_task(self._expire(uid, namespace, name, when), name=f"ttl {name}")
        self._timers[uid] = (when, task)

    def armed(self, uid: str) -> datetime | None:
        current = self._timers.get(uid)
        return current[0] if current is not None else None

    def _clean_up(self, teamrun: TeamRunBody) -> None:
        """A TeamRun deleted by anyone: its store records, in a task of its own (best effort:
        what fails is logged; ``oma checkpoint delete`` and ``prune`` remain)."""
        meta = teamrun.get("metadata") or {}

        async def clean() -> None:
            namespace, name = str(meta.get("namespace")), str(meta.get("name"))
            if WATCHED.get(namespace, name) is not None:
                return  # created again under its name: the new run owns those records now
            try:
                await remove_store_records(teamrun)
            except Exception:
                log.exception(
                    "%s/%s: its store records could not be removed; remove them with "
                    "oma checkpoint delete / prune",
                    meta.get("namespace"),
                    meta.get("name"),
                )

        task = asyncio.create_task(clean(), name=f"store records {meta.get('name')}")
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def close(self) -> None:
        if self._cleanups:  # cleanups under way get 10 s in all, then are left
            await asyncio.wait(list(self._cleanups), timeout=10)
        tasks = [task for _, task in self._timers.values()]
        for uid in list(self._timers):
            self._drop(uid)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _expire(self, uid: str, namespace: str, name: str, due: datetime) -> None:
        try:
            while True:
                wait = (due - datetime.now(UTC)).total_seconds()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    # Read again: it may have been retried (oma retry) or had its time to live
                    # changed since the timer was armed; the delete is conditioned on this read.
                    found = await runtime.kube().get_teamrun(namespace, name)
                    if found is None or found["metadata"].get("uid") != uid:
                        return
                    ended, ttl = finished_at(found), ttl_of(found, self.default_ttl)
                    if ended is None or ttl is None:
                        return
                    if ended.timestamp() + ttl > datetime.now(UTC).timestamp() + 1:
                        due = datetime.fromtimestamp(ended.timestamp() + ttl, UTC)
                        continue
                    if self.delete_store_records:
                        # First, so that a failure leaves the TeamRun to try again with.
                        await remove_store_records(found)
                    version = found["metadata"].get("resourceVersion")
                    if not await runtime.kube().delete_teamrun(namespace, name, uid, version):
                        continue  # it changed since it was read: look again
                except Exception:  # an API or store error: the TeamRun stays, so try again
                    log.exception(
                        "deleting finished TeamRun %s/%s failed; retrying", namespace, name
                    )
                    due = datetime.now(UTC).replace(microsecond=0)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                log.info(
                    "%s/%s: deleted, its time to live after finishing has passed", namespace, name
                )
                return
        finally:
            current = self._timers.get(uid)
            if current is not None and current[1] is asyncio.current_task():
                del self._timers[uid]

    def _drop(self, uid: str) -> None:
        current = self._timers.pop(uid, None)
        if current is not None and current[1] is not asyncio.current_task():
            current[1].cancel()


FINISHED = FinishedRuns()
