"""Kubernetes Events about a TeamRun, posted through the client.

kopf's ``kopf.info``/``kopf.warn`` work only inside a kopf handler (they need its event queue);
the operator also acts from its own periodic loops (approval polls, pod-creation retries,
watchdog), where they raise ``LookupError``. Posting here works from anywhere, and a failure to
post is logged, never raised: an Event is a report, not part of the run's state.

Each Event is one API request, so by default (``notable``) the operator posts only those that
tell what the status does not or that need a person: warnings, resumed attempts, ends other than
success, holds, retries. The routine ones (``ROUTINE``: a run queued, an attempt started, an
attempt succeeded) are in ``status.conditions`` with their times; ``all`` posts them too
(``--events``, env ``OMA_EVENTS``, the chart's ``operator.events``). Every message has the
Secret values the operator read masked (``masking``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

import httpx

from oma.timeutil import now_iso
from oma_operator import masking, runtime
from oma_operator.k8s.errors import KubeError
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import GROUP, VERSION
from oma_operator.settings import Verbosity

log = logging.getLogger(__name__)
COMPONENT = "oma-operator"
MESSAGE_LIMIT = 1024  # the API server keeps at most this much of an Event's message
# What ``notable`` leaves out: the ordinary path of a run, which its conditions record anyway.
ROUTINE = frozenset({"Queued", "AttemptStarted", "AttemptSucceeded"})


def posted(reason: str, verbosity: Verbosity) -> bool:
    """Whether an Event of ``reason`` is posted under the operator's ``--events``."""
    return verbosity == "all" or reason not in ROUTINE


def event_body(
    teamrun: TeamRunBody, reason: str, message: str, kind: Literal["Normal", "Warning"]
) -> dict[str, Any]:
    meta = teamrun["metadata"]
    now = now_iso()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TeamRun",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": masking.mask(message)[:MESSAGE_LIMIT],
        "type": kind,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": os.environ.get("HOSTNAME", COMPONENT),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def info(teamrun: TeamRunBody, reason: str, message: str) -> None:
    if posted(reason, runtime.settings().events):
        await _post(event_body(teamrun, reason, message, "Normal"))


async def warn(teamrun: TeamRunBody, reason: str, message: str) -> None:
    await _post(event_body(teamrun, reason, message, "Warning"))


async def _post(event: dict[str, Any]) -> None:
    try:
        await runtime.kube().create_event(event["metadata"]["namespace"], event)
    except (KubeError, httpx.HTTPError) as exc:
        log.warning("could not post event %s: %s", event["reason"], exc)
