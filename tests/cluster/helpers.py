"""Small helpers shared by the cluster tests (they work against any cluster)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from devcluster.kube import JSON, ApiError, KubeClient

T = TypeVar("T")
IMAGE = "busybox:1.36"  # ignored by the devcluster node agent; used by real kubelets


async def wait_for(
    probe: Callable[[], Awaitable[T | None]], limit: float, what: str, interval: float = 0.2
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``limit``s."""
    deadline = time.monotonic() + limit
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:.0f}s waiting for {what}")
        await asyncio.sleep(interval)


def pod(name: str, script: str, **spec: Any) -> JSON:
    """A one-container pod running ``sh -c script``; ``spec`` entries override the pod spec."""
    container: JSON = {"name": "main", "image": IMAGE, "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [container],
            **spec,
        },
    }


async def get_or_none(kube: KubeClient, path: str) -> JSON | None:
    try:
        return await kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def wait_phase(kube: KubeClient, path: str, phases: set[str], limit: float = 60) -> JSON:
    async def probe() -> JSON | None:
        obj = await kube.get(path)
        return obj if obj.get("status", {}).get("phase") in phases else None

    return await wait_for(probe, limit, f"{path} to reach phase {sorted(phases)}")


async def wait_gone(kube: KubeClient, path: str, limit: float = 60) -> None:
    async def probe() -> bool:
        return await get_or_none(kube, path) is None

    await wait_for(probe, limit, f"{path} to disappear")
