"""Errors the operator meets while working on a TeamRun, reported on the TeamRun itself.

A failure in a periodic loop or a watch handler used to reach only the operator's log. Here it
becomes a Warning Event ``OperatorError`` and the condition ``Reconciled=False`` with its
message (once per distinct message, not on every retry); the next success sets ``Reconciled``
back to ``True``. Reporting never raises: it is a report, and the work is retried anyway. The
message has every Secret value the operator read masked (``masking``), whatever quotes it.
"""

from __future__ import annotations

import logging

import httpx

from oma_operator import events, masking, runtime
from oma_operator.k8s.errors import KubeError
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.phases import ConditionType
from oma_operator.runs.rules.status import condition, merge_conditions

log = logging.getLogger(__name__)
CONDITION: ConditionType = "Reconciled"
_reported: dict[tuple[str, str], str] = {}


def _key(teamrun: TeamRunBody) -> tuple[str, str]:
    meta = teamrun.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


async def report(teamrun: TeamRunBody, what: str, error: BaseException) -> None:
    """``what`` failed for ``teamrun`` with ``error``; it will be tried again."""
    message = masking.mask(f"{what} failed: {type(error).__name__}: {error}; retrying")[:1024]
    key = _key(teamrun)
    log.warning("%s/%s: %s", *key, message)
    if _reported.get(key) == message:
        return
    _reported[key] = message
    await events.warn(teamrun, "OperatorError", message)
    await _set(teamrun, False, "OperatorError", message)


async def cleared(teamrun: TeamRunBody) -> None:
    """The work on ``teamrun`` succeeded: clear an error reported before (nothing otherwise)."""
    if _reported.pop(_key(teamrun), None) is not None:
        await _set(teamrun, True, "Reconciled", "the operator's last work on it succeeded")


async def _set(teamrun: TeamRunBody, ok: bool, reason: str, message: str) -> None:
    namespace, name = _key(teamrun)
    try:
        fresh = await runtime.kube().get_teamrun(namespace, name)
        if fresh is None:
            return
        generation = int(fresh["metadata"].get("generation", 1))
        current = (fresh.get("status") or {}).get("conditions") or []
        update = condition(CONDITION, ok, reason, message, generation)
        conditions = merge_conditions(current, [update])
        await runtime.kube().patch_teamrun_status(namespace, name, {"conditions": conditions})
    except (KubeError, httpx.HTTPError) as exc:
        log.warning("%s/%s: could not set %s: %s", namespace, name, CONDITION, exc)
