"""Letting go of runner pods when the operator stops, so nothing it leaves blocks deletion.

A runner pod carries the ``oma.dev/outcome`` finalizer so that its end cannot be missed. With no
operator left to remove it (``helm uninstall``, a scaled-down Deployment), that finalizer would
keep the pod, and so its namespace, ``Terminating`` for ever. A stopping operator therefore
removes it from every runner pod it watches. Nothing is lost by that: the next operator puts it
back on live pods of current attempts, records pods that ended meanwhile from their status, and
counts a pod that was deleted meanwhile as a disruption whose next attempt resumes from the
checkpoint (``runs.untracked``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from oma_operator import runtime
from oma_operator.k8s.errors import KubeError
from oma_operator.runs.rules.pods import FINALIZER, LABEL_TEAMRUN

log = logging.getLogger(__name__)


async def release_runner_pods(namespaces: Sequence[str]) -> int:
    """Remove the tracking finalizer from the runner pods of ``namespaces`` (empty: all);
    best effort, pod by pod. Returns how many pods were let go."""
    runtime.RELEASING = True  # a pod event handled meanwhile must not put the finalizer back
    released = 0
    scopes: list[str | None] = list(namespaces) or [None]
    for namespace in scopes:
        try:
            pods = await runtime.kube().list_pods(namespace, LABEL_TEAMRUN)
        except (KubeError, httpx.HTTPError) as exc:
            log.warning("cannot list runner pods in %s to release them: %s", namespace, exc)
            continue
        for pod in pods:
            meta = pod["metadata"]
            if FINALIZER not in (meta.get("finalizers") or []):
                continue
            try:
                await runtime.kube().remove_finalizer(
                    meta["namespace"], meta["name"], FINALIZER, pod
                )
                released += 1
            except (KubeError, httpx.HTTPError) as exc:
                log.warning("cannot release pod %s/%s: %s", meta["namespace"], meta["name"], exc)
    if released:
        log.info("released %d runner pods (tracking finalizer removed on the way out)", released)
    return released
