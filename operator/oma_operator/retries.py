"""Failed runs taken up again on request: ``oma retry NAME`` sets the TeamRun's annotation
``oma.dev/retry`` to the time it asked; the operator, seeing a ``Failed`` run whose request it
has not handled, records the retry in ``status.retries``, resets the failure budget and moves
the run to ``Queued``, from where its next attempt starts as any queued run's does (under the
concurrency limits, resuming from the checkpoint). A ``Rejected`` run is not retried: a reviewer
ended it.
"""

from __future__ import annotations

from typing import Any

from oma_operator import runtime
from oma_operator.client import KubeError
from oma_operator.models import RETRY_ANNOTATION
from oma_operator.status import retried


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


async def retry_run(teamrun: dict[str, Any], requested: str) -> dict[str, Any] | None:
    """Record the retry and queue the run: the TeamRun as written, or None when it changed
    since it was seen (the event of that change handles the request, once)."""
    meta, status = teamrun["metadata"], dict(teamrun.get("status") or {})
    update = retried(status, requested, int(meta.get("generation", 1)))
    try:
        return await runtime.kube().patch_teamrun_status(
            meta["namespace"], meta["name"], update, resource_version=meta["resourceVersion"]
        )
    except KubeError as exc:
        if exc.status in (404, 409):
            return None
        raise
