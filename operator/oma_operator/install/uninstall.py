"""What the chart's pre-delete hook runs (``oma-operator --stop-deployment NAME``): stop the
operator while its RBAC still exists.

``helm uninstall`` deletes the operator's Deployment, Role and ServiceAccount together. An
operator pod stopping then meets 403s in its cleanup, and the tracking finalizers it could not
remove keep runner pods, and so their namespace, ``Terminating`` (measured on a real node).
Scaling the Deployment to zero first lets its pod stop as it should, releasing them; whatever
it still left (a pod killed outright) is released here, with the same account.
"""

from __future__ import annotations

import asyncio
import logging
import time

from oma_operator import runtime
from oma_operator.install.release import release_runner_pods

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5


async def stop_operator(namespace: str, deployment: str, wait_seconds: float) -> int:
    """Scale ``deployment`` to zero, wait (at most ``wait_seconds``) until its pods are gone,
    then release what runner pods remain tracked. An operator pod that does not stop in time
    (e.g. on a lost node) is logged, not fatal: failing would block ``helm uninstall``, and the
    runner pods are released here either way. 2, and nothing scaled, when the Deployment has
    no matchLabels."""
    try:
        await runtime.connect()
        body = await runtime.kube().get_deployment(namespace, deployment)
        labels = body["spec"]["selector"].get("matchLabels") or {}
        if not labels:  # an empty selector would wait for every pod of the namespace
            log.error("%s/%s has no matchLabels: not the operator's", namespace, deployment)
            return 2
        await runtime.kube().scale_deployment(namespace, deployment, 0)
        selector = ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
        deadline = time.monotonic() + wait_seconds
        while pods := await runtime.kube().list_pods(namespace, selector):
            if time.monotonic() > deadline:
                names = [pod["metadata"]["name"] for pod in pods]
                log.error("the operator's pods %s did not stop within %.0fs", names, wait_seconds)
                break
            await asyncio.sleep(POLL_SECONDS)
        else:
            log.info("deployment %s/%s scaled to 0, its pods are gone", namespace, deployment)
        released = await release_runner_pods([namespace])
        log.info("released %d runner pods the operator had left", released)
        return 0
    finally:
        await runtime.close()
