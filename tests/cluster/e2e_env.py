"""What the operator end-to-end tests need besides the cluster, given the same way on any cluster.

Runner pods must reach the store, and the tests must read the store and the side effects the
pods left. On the local devcluster, pods are processes on this machine: the stores are the
session's loopback servers and the image name is ignored. With ``E2E_CLUSTER=existing`` pods run
wherever the cluster puts them, so the tests are told where things are:

- ``OMA_E2E_REDIS_URL``: a Redis URL as runner pods reach it, e.g.
  ``redis://redis.oma-e2e.svc:6379/0``; ``OMA_E2E_REDIS_LOCAL_URL``: the same server as this
  process reaches it (e.g. through ``kubectl port-forward``), default: the same URL.
- ``OMA_E2E_POSTGRES_DSN`` and ``OMA_E2E_POSTGRES_LOCAL_DSN``: the same for PostgreSQL.
- ``OMA_E2E_RUNNER_IMAGE``: an image with ``oma-runner`` that the cluster's nodes have
  (``hack/build-image``, then e.g. ``kind load``), default ``localhost/oma:dev``.
- ``OMA_E2E_CONTEXT``: the kubeconfig context (``kube_access.py``; default: the current one);
  ``OMA_E2E_CLUSTER_WIDE``: what to do with oma's CRDs and policies that differ
  (``cluster_wide.py``).

A test whose endpoint is not given is skipped, naming the variable. The side effects of the
built-in ``ledger_append`` and ``tally`` tools go to a Redis list per test (``OMA_LEDGER_URL``),
never to a file, so the same assertions hold wherever the pods ran.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oma.tools import records
from oma.tools.records import RecordLocation

EXISTING = os.environ.get("E2E_CLUSTER", "") == "existing"
# Inside ``python -m devcluster sandbox`` the local cluster's node is a real kubelet with
# containerd: pods run the image hack/build-image built, and reach the servers the tests start
# at the sandbox's host address.
SANDBOX_HOST_IP = os.environ.get("OMA_DEVCLUSTER_HOST_IP", "")
REAL_NODE = not EXISTING and bool(SANDBOX_HOST_IP)
DEVCLUSTER_IMAGE = "oma-runner:test"  # ignored by the node agent; named so pods are valid
REAL_NODE_IMAGE = "localhost/oma:dev"


@dataclass(frozen=True)
class Endpoint:
    """One server, as runner pods reach it and as this test process reaches it."""

    for_pods: str
    for_tests: str


def endpoint_from_env(name: str, local_name: str, what: str) -> Endpoint:
    for_pods = os.environ.get(name, "")
    if not for_pods:
        pytest.skip(f"E2E_CLUSTER=existing: set {name} to {what} reachable from runner pods")
    return Endpoint(for_pods, os.environ.get(local_name, "") or for_pods)


def runner_image() -> str:
    if EXISTING:
        return os.environ.get("OMA_E2E_RUNNER_IMAGE", "") or REAL_NODE_IMAGE
    return REAL_NODE_IMAGE if REAL_NODE else DEVCLUSTER_IMAGE


def for_pods(url: str) -> str:
    """A URL of a server the tests started, as pods reach it (the same on the node agent)."""
    return url.replace("@127.0.0.1:", f"@{SANDBOX_HOST_IP}:") if REAL_NODE else url


def operator_env(kubeconfig: Path, **extra: str) -> dict[str, str]:
    """The environment of an operator process the tests start: the cluster and runner image."""
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "OMA_RUNNER_IMAGE": runner_image(),
        **extra,
    }


@dataclass(frozen=True)
class SideEffects:
    """One test's ledger and tally: Redis lists every attempt's pod writes and the test reads."""

    redis: Endpoint
    prefix: str

    @classmethod
    def fresh(cls, redis: Endpoint) -> SideEffects:
        return cls(redis, f"e2e:{uuid.uuid4().hex[:12]}")

    def env(self) -> list[dict[str, str]]:
        """``spec.runner.env`` entries pointing both tools at this test's lists."""
        return [
            {"name": f"OMA_{name}_{suffix}", "value": value}
            for name in ("LEDGER", "TALLY")
            for suffix, value in (
                ("URL", self.redis.for_pods),
                ("KEY", f"{self.prefix}:{name.lower()}"),
            )
        ]

    def _location(self, name: str) -> RecordLocation:
        return RecordLocation(url=self.redis.for_tests, key=f"{self.prefix}:{name}")

    async def ledger(self) -> list[str]:
        """The ledger's entries, in the order they were applied."""
        return [str(record["entry"]) for record in await records.read(self._location("ledger"))]

    async def tally(self) -> list[dict[str, Any]]:
        """Every tally record (one per run of the tool: a repeat shows a re-executed call)."""
        return await records.read(self._location("tally"))


def teamrun_store(redis: Endpoint, body: dict[str, Any], namespace: str) -> Any:
    """A TeamRun's part of its Redis store as the test process reaches it (what its runner and
    the operator see: the namespace's tenant part). Close it with ``aclose``."""
    from oma.store import PrefixedStore, RedisStore, tenant_prefix

    inner = RedisStore(redis.for_tests, namespace=body["spec"]["store"]["redis"]["namespace"])
    return PrefixedStore(inner, tenant_prefix(namespace))
