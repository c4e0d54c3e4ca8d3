"""Failed runs taken up again on request: ``oma retry NAME`` sets the TeamRun's annotation
``oma.dev/retry`` to the time it asked; the operator, seeing a ``Failed`` run whose request it
has not handled, records the retry in ``status.retries``, resets the failure budget and moves
the run to ``Queued``, from where its next attempt starts as any queued run's does (under the
concurrency limits, resuming from the checkpoint). A ``Rejected`` run is not retried: a reviewer
ended it.

A Failed run's spec may be fixed before the retry, but an approval holds only for the spec it
was given under: a run whose spec changed since its last attempt started (``status.workDigest``)
while the ledger holds approved requests whose work has not run yet is not retried. The request
is recorded as refused, with why, and the run stays Failed; with the spec put back, or without
such approvals, a new ``oma retry`` goes ahead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oma_operator import runtime
from oma_operator.approval_resources import decision_name
from oma_operator.approvals import approved_not_run
from oma_operator.client import KubeError
from oma_operator.models import RETRY_ANNOTATION
from oma_operator.pods import run_id_of
from oma_operator.reviewers import editors_of
from oma_operator.specs import TeamRunSpecError, spec_of, work_digest
from oma_operator.status import retried, retry_refused
from oma_operator.stores import STORES


@dataclass(frozen=True)
class Retry:
    """A handled retry request: the TeamRun as written, and why it was refused (None: queued)."""

    teamrun: dict[str, Any]
    refused: str | None = None


def retry_requested(teamrun: dict[str, Any]) -> str | None:
    """The retry request to handle now, if any (the annotation's value)."""
    status = teamrun.get("status") or {}
    if status.get("phase") != "Failed" or (teamrun["metadata"].get("deletionTimestamp")):
        return None
    requested = (teamrun["metadata"].get("annotations") or {}).get(RETRY_ANNOTATION)
    if not isinstance(requested, str) or not requested:
        return None
    handled = {record.get("requested") for record in status.get("retries") or []}
    return None if requested in handled else requested


async def retry_refusal(teamrun: dict[str, Any]) -> str | None:
    """Why the run may not be retried as its spec now stands, or None. Reads the run's store
    only when the spec's work changed since its last attempt started."""
    meta, status = teamrun["metadata"], teamrun.get("status") or {}
    attempt = int(status.get("attempt") or 0)
    if attempt == 0 or status.get("workDigest") == work_digest(teamrun):
        return None  # nothing ran yet, or it runs what its reviewers saw
    try:
        spec = spec_of(teamrun)
    except TeamRunSpecError as exc:
        return f"its spec is not valid ({exc.problems}): fix it, then oma retry"
    store = await STORES.store_of(runtime.kube(), meta["namespace"], spec)
    approved = await approved_not_run(store, run_id_of(teamrun))
    if not approved:
        return None
    decisions = ", ".join(
        f"approvaldecision {decision_name(meta['name'], record.request.id)} (approved by "
        f"{record.decision.reviewer.id if record.decision else '?'})"
        for record in approved[:5]
    )
    more = f" and {len(approved) - 5} more" if len(approved) > 5 else ""
    editors = editors_of(teamrun, runtime.CREATOR_RECORDED)
    by = f" (edited by {', '.join(editors)})" if editors else ""
    return (
        f"its spec{by} changed since attempt {attempt} started, and {decisions}{more} "
        "approved work it has not run yet: an approval holds only for the spec it was given "
        "under. Put the spec back as it was (only the hold and placement fields may differ), "
        "or create a new TeamRun with the new spec, whose requests are asked anew"
    )


async def retry_run(teamrun: dict[str, Any], requested: str) -> Retry | None:
    """Record the retry and queue the run, or record why it is refused; None when the TeamRun
    changed since it was seen (the event of that change handles the request, once)."""
    meta, status = teamrun["metadata"], dict(teamrun.get("status") or {})
    refusal = await retry_refusal(teamrun)
    if refusal is None:
        update = retried(status, requested, int(meta.get("generation", 1)))
    else:
        update = retry_refused(status, requested, refusal)
    try:
        written = await runtime.kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except KubeError as exc:
        if exc.status in (404, 409):
            return None
        raise
    return Retry(written, refusal)
