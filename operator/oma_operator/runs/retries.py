"""Failed runs taken up again on request: ``oma retry NAME`` sets the TeamRun's annotation
``oma.dev/retry`` to the time it asked; the operator, seeing a ``Failed`` run whose request it
has not handled, records the retry in ``status.retries``, resets the failure budget and moves
the run to ``Queued``, from where its next attempt starts as any queued run's does (under the
concurrency limits, resuming from the checkpoint). A ``Rejected`` run is not retried: a reviewer
ended it.

A Failed run's spec may be fixed before the retry, but an approval holds only for the spec it
was given under: a run whose spec changed since its last attempt started (``status.workDigest``)
while approvals stand for work it has not finished (``approved_work``) is not retried. The
request is recorded as refused, with why, and the run stays Failed; with the spec put back, or
without such approvals, a new ``oma retry`` goes ahead.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

from oma.approval.ledger import ApprovalRecord
from oma_operator import runtime
from oma_operator.approvals.approved_work import approved_not_run
from oma_operator.approvals.rules.resources import decision_name
from oma_operator.approvals.rules.reviewers import editors_of
from oma_operator.k8s.errors import CHANGED_OR_GONE
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import RETRY_ANNOTATION
from oma_operator.resources.specs import TeamRunSpecError, run_id_of, spec_of, work_digest
from oma_operator.runs.attempts import STORE_READ_SECONDS
from oma_operator.runs.rules.status import RETRY_REFUSED, retried, retry_refused
from oma_operator.stores import STORES

SPEC_INVALID, SPEC_NOT_RECORDED = "SpecInvalid", "SpecNotRecorded"


@dataclass(frozen=True)
class Retry:
    """A handled retry request: the TeamRun as written, and why it was refused (None: queued)."""

    teamrun: TeamRunBody
    refused: str | None = None


def retry_requested(teamrun: TeamRunBody) -> str | None:
    """The retry request to handle now, if any (the annotation's value)."""
    status = teamrun.get("status") or {}
    if status.get("phase") != "Failed" or (teamrun["metadata"].get("deletionTimestamp")):
        return None
    requested = (teamrun["metadata"].get("annotations") or {}).get(RETRY_ANNOTATION)
    if not isinstance(requested, str) or not requested:
        return None
    handled = {record.get("requested") for record in status.get("retries") or []}
    return None if requested in handled else requested


@dataclass(frozen=True)
class Refusal:
    """Why a retry is not acted on: ``reason`` for ``status.retries``, ``message`` for people."""

    reason: str
    message: str


# Refusals found by reading the store, by (TeamRun uid, digest its attempts ran under): a
# Failed run's checkpoint and approvals do not change, so asking again reads nothing.
_REFUSED: OrderedDict[tuple[str, str], Refusal] = OrderedDict()
REFUSALS_KEPT = 1024


async def retry_refusal(teamrun: TeamRunBody) -> Refusal | None:
    """Why the run may not be retried as its spec now stands, or None. Reads the run's store
    (within ``STORE_READ_SECONDS``) only when the spec's work changed since its last attempt
    started, and once per TeamRun and recorded spec."""
    meta, status = teamrun["metadata"], teamrun.get("status") or {}
    recorded = str(status.get("workDigest") or "")
    if int(status.get("attempt") or 0) == 0 or recorded == work_digest(teamrun):
        return None  # nothing ran yet, or it runs what its reviewers saw
    key = (str(meta.get("uid") or ""), recorded)
    if key in _REFUSED:
        return _REFUSED[key]
    try:
        spec = spec_of(teamrun)
    except TeamRunSpecError as exc:
        return Refusal(SPEC_INVALID, f"its spec is not valid ({exc.problems}): fix it, then retry")
    async with asyncio.timeout(STORE_READ_SECONDS):
        store = await STORES.store_of(runtime.kube(), meta["namespace"], spec)
        approved = await approved_not_run(store, run_id_of(teamrun))
    refusal = refusal_for(teamrun, approved, runtime.settings().creator_recorded)
    if refusal is not None and key[0]:
        _REFUSED[key] = refusal
        while len(_REFUSED) > REFUSALS_KEPT:
            _REFUSED.popitem(last=False)
    return refusal


def refusal_for(
    teamrun: TeamRunBody, approved: list[ApprovalRecord], editors_recorded: bool
) -> Refusal | None:
    """The refusal of a retry whose spec differs from the one its attempts ran under, given the
    approvals still standing for work to come (``approved_work``); None when there are none."""
    if not approved:
        return None
    meta, status = teamrun["metadata"], teamrun.get("status") or {}
    decisions = ", ".join(
        f"approvaldecision {decision_name(meta['name'], record.request.id)} (approved by "
        f"{record.decision.reviewer.id if record.decision else '?'})"
        for record in approved[:5]
    )
    more = f" and {len(approved) - 5} more" if len(approved) > 5 else ""
    standing = f"{decisions}{more} approved work it has not finished"
    fix = (
        "an approval holds only for the spec it was given under. Put the spec back as it was "
        "(only the hold and placement fields may differ), or create a new TeamRun with the new "
        "spec, whose requests are asked anew"
    )
    attempt = int(status.get("attempt") or 0)
    if not status.get("workDigest"):
        return Refusal(
            SPEC_NOT_RECORDED,
            f"no record says which spec attempt {attempt} ran under (it was started by an "
            f"operator from before 2026-12-06), and {standing}: {fix}",
        )
    editors = editors_of(teamrun, editors_recorded)
    by = f" (edited by {', '.join(editors)})" if editors else ""
    return Refusal(
        RETRY_REFUSED,
        f"its spec{by} changed since attempt {attempt} started, and {standing}: {fix}",
    )


async def retry_run(teamrun: TeamRunBody, requested: str) -> Retry | None:
    """Record the retry and queue the run, or record why it is refused; None when the TeamRun
    changed since it was seen (the event of that change handles the request, once)."""
    meta, status = teamrun["metadata"], (teamrun.get("status") or {})
    refusal = await retry_refusal(teamrun)
    if refusal is None:
        update = retried(status, requested, int(meta.get("generation", 1)))
    else:
        update = retry_refused(status, requested, refusal.message, refusal.reason)
    try:
        written = await runtime.kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except CHANGED_OR_GONE:
        return None
    return Retry(written, refusal.message if refusal is not None else None)
