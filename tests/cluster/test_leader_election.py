"""Leader election against a real API server: of two operator processes exactly one leads; the
other takes over within 15 s of the leader being killed (SIGKILL), at once when it stops on
purpose (SIGTERM releases the Lease); a leader that can no longer renew (its RBAC taken away,
its Lease stolen, its event loop stuck) stops acting before anyone else may start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma_operator.election.elector import LOST_EXIT, Elector
from oma_operator.k8s.client import Kube
from tests.cluster.conftest import ClusterHandle
from tests.cluster.election_kit import (
    LEASE,
    TAKE_OVER_LIMIT,
    TIMING,
    Pair,
    holder,
    leases,
    said,
)
from tests.cluster.helpers import wait_for
from tests.cluster.operator_kit import crds_installed
from tests.cluster.operators import token_kubeconfig

pytestmark = pytest.mark.cluster
__all__ = ["crds_installed"]


@pytest.fixture
async def pair(
    cluster: ClusterHandle, namespace: str, crds_installed: None, tmp_path: Path
) -> AsyncIterator[Pair]:
    two = Pair(cluster, namespace, tmp_path)
    try:
        for process in two.processes.values():
            process.start()
        yield two
    finally:
        for process in two.processes.values():
            await asyncio.to_thread(process.stop)


async def first_leader(kube: KubeClient, namespace: str, pair: Pair) -> str:
    async def led() -> str | None:
        name = (await holder(kube, namespace)).removeprefix("op-")
        return name if name in ("a", "b") and pair.leading(name) else None

    leader = await wait_for(led, 60, "one of the two operators to lead")
    await asyncio.sleep(TIMING.retry_period * 2)  # the standby has looked at the lease by now
    assert not pair.leading(pair.other(leader)), "both operators said they lead"
    assert said(
        pair.logs[pair.other(leader)],
        f"standing by: lease {namespace}/{LEASE} is held by op-{leader}",
    )
    assert not said(pair.logs[pair.other(leader)], "Starting Kopf"), "the standby started kopf"
    return leader


@pytest.mark.timeout(180)
async def test_of_two_operators_one_leads_and_the_other_takes_over_within_15s_of_a_kill(
    kube: KubeClient, namespace: str, pair: Pair
) -> None:
    leader = await first_leader(kube, namespace, pair)
    standby = pair.other(leader)
    before = (await kube.get(f"{leases(namespace)}/{LEASE}"))["spec"].get("leaseTransitions", 0)
    killed = time.monotonic()
    pair.processes[leader].kill()  # SIGKILL: no release, the lease must run out

    async def took_over() -> bool:
        return await holder(kube, namespace) == f"op-{standby}" and pair.leading(standby)

    await wait_for(took_over, TAKE_OVER_LIMIT + 10, "the standby to take over")
    elapsed = time.monotonic() - killed
    print(f"take-over after SIGKILL of the leader: {elapsed:.1f} s")
    # At least a lease duration (the standby cannot tell a dead leader from a slow one), at
    # most the issue's bound.
    assert TIMING.lease_seconds - TIMING.renew_deadline < elapsed <= TAKE_OVER_LIMIT
    after = (await kube.get(f"{leases(namespace)}/{LEASE}"))["spec"]["leaseTransitions"]
    assert after == before + 1
    # The killed one, started again (as the kubelet would), stands by.
    pair.processes[leader].start()
    await wait_for(
        lambda: asyncio.sleep(0, said(pair.logs[leader], f"is held by op-{standby}")),
        30,
        "the restarted operator to stand by",
    )
    assert await holder(kube, namespace) == f"op-{standby}"


@pytest.mark.timeout(180)
async def test_a_leader_stopped_with_sigterm_hands_over_at_once(
    kube: KubeClient, namespace: str, pair: Pair
) -> None:
    leader = await first_leader(kube, namespace, pair)
    standby = pair.other(leader)
    stopping = time.monotonic()
    status = await asyncio.to_thread(pair.processes[leader].terminate)
    stopped = time.monotonic() - stopping
    assert status == 0, pair.logs[leader].read_text()[-3000:]
    assert said(pair.logs[leader], f"released lease {namespace}/{LEASE}")

    async def took_over() -> bool:
        return await holder(kube, namespace) == f"op-{standby}" and pair.leading(standby)

    await wait_for(took_over, TAKE_OVER_LIMIT, "the standby to take over")
    elapsed = time.monotonic() - stopping
    print(
        f"SIGTERM: the leader stopped in {stopped:.1f} s; take-over {elapsed - stopped:.1f} s later"
    )
    # The standby's next look (a retry period, jittered), not the lease's expiry.
    assert elapsed - stopped < TIMING.retry_period * 1.2 + 2.0 < TIMING.lease_seconds


@pytest.mark.timeout(60)
async def test_a_standby_stopped_with_sigterm_exits_without_touching_the_lease(
    kube: KubeClient, namespace: str, pair: Pair
) -> None:
    leader = await first_leader(kube, namespace, pair)
    version = (await kube.get(f"{leases(namespace)}/{LEASE}"))["metadata"]["resourceVersion"]
    status = await asyncio.to_thread(pair.processes[pair.other(leader)].terminate)
    assert status == 0
    lease = await kube.get(f"{leases(namespace)}/{LEASE}")
    assert lease["spec"]["holderIdentity"] == f"op-{leader}"
    assert int(lease["metadata"]["resourceVersion"]) >= int(version)


# -- one leader's access cut: in-process electors, each with its own account ----------------
async def elector_account(
    kube: KubeClient, namespace: str, name: str, *, bound: bool = True
) -> None:
    """A ServiceAccount allowed exactly what the chart's Role allows on leases."""
    await kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    await kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
    )
    await kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )


class Watched:
    """An in-process elector, and when it started and stopped leading (monotonic)."""

    def __init__(self, kube: Kube, namespace: str, identity: str) -> None:
        self.lost_at: float | None = None
        self.lost_why = ""
        self.led_at: float | None = None
        self.elector = Elector(
            kube, namespace=namespace, name=LEASE, identity=identity, on_lost=self._lost
        )

    def _lost(self, reason: str) -> None:
        self.lost_at, self.lost_why = time.monotonic(), reason

    async def lead(self) -> None:
        await self.elector.acquire()
        self.led_at = time.monotonic()
        await self.elector.keep()


@pytest.fixture
async def accounts(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, tmp_path: Path
) -> AsyncIterator[dict[str, Kube]]:
    clients: dict[str, Kube] = {}
    try:
        for name in ("elector-a", "elector-b"):
            await elector_account(kube, namespace, name)
            config = await token_kubeconfig(
                kube, cluster, namespace, name, tmp_path / f"{name}.kubeconfig"
            )
            clients[name] = await Kube.connect(kubeconfig=str(config))
        yield clients
    finally:
        for client in clients.values():
            await client.aclose()


async def two_electors(
    accounts: dict[str, Kube], namespace: str
) -> tuple[Watched, Watched, list[asyncio.Task[None]]]:
    a = Watched(accounts["elector-a"], namespace, "elector-a")
    b = Watched(accounts["elector-b"], namespace, "elector-b")
    task_a = asyncio.create_task(a.lead())
    await wait_for(lambda: asyncio.sleep(0, a.elector.leading), 30, "elector-a to lead")
    task_b = asyncio.create_task(b.lead())
    await asyncio.sleep(TIMING.retry_period)  # b has looked once and stands by
    assert not b.elector.leading
    return a, b, [task_a, task_b]


async def cancelled(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.timeout(90)
async def test_a_leader_whose_lease_writes_are_refused_stops_before_the_standby_starts(
    kube: KubeClient, namespace: str, accounts: dict[str, Kube]
) -> None:
    a, b, tasks = await two_electors(accounts, namespace)
    try:
        cut = time.monotonic()
        await kube.delete(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/elector-a"
        )
        await wait_for(lambda: asyncio.sleep(0, b.led_at), TAKE_OVER_LIMIT + 5, "elector-b to lead")
        assert a.lost_at is not None, "elector-a never stopped"
        assert b.led_at is not None
        print(
            f"RBAC cut: a stopped after {a.lost_at - cut:.1f} s, b led after {b.led_at - cut:.1f} s"
            f" ({a.lost_why})"
        )
        assert a.lost_at < b.led_at  # never two acting at once
        assert a.lost_at - cut <= TIMING.renew_deadline + TIMING.retry_period + 1
        assert b.led_at - cut <= TAKE_OVER_LIMIT
    finally:
        await cancelled(tasks)


@pytest.mark.timeout(60)
async def test_a_leader_whose_lease_was_taken_stops_at_its_next_renewal(
    kube: KubeClient, namespace: str, accounts: dict[str, Kube]
) -> None:
    a = Watched(accounts["elector-a"], namespace, "elector-a")
    task = asyncio.create_task(a.lead())
    try:
        await wait_for(lambda: asyncio.sleep(0, a.elector.leading), 30, "elector-a to lead")
        lease: dict[str, Any] = await kube.get(f"{leases(namespace)}/{LEASE}")
        lease["spec"]["holderIdentity"] = "thief"  # written with the version read: it wins
        stolen = await kube.replace(f"{leases(namespace)}/{LEASE}", lease)
        taken = time.monotonic()
        await wait_for(lambda: asyncio.sleep(0, a.lost_at), 10, "elector-a to stop")
        assert a.lost_at is not None
        assert a.lost_at - taken <= TIMING.retry_period + 1
        assert "held by thief" in a.lost_why
        after = await kube.get(f"{leases(namespace)}/{LEASE}")
        assert after["metadata"]["resourceVersion"] == stolen["metadata"]["resourceVersion"]
    finally:
        await cancelled([task])


@pytest.mark.timeout(60)
async def test_a_leader_whose_event_loop_is_stuck_is_stopped_by_its_watchdog(
    kube: KubeClient, namespace: str, accounts: dict[str, Kube]
) -> None:
    a = Watched(accounts["elector-a"], namespace, "elector-a")
    task = asyncio.create_task(a.lead())
    try:
        await wait_for(lambda: asyncio.sleep(0, a.elector.leading), 30, "elector-a to lead")
        stuck = time.monotonic()
        time.sleep(TIMING.renew_deadline + 2)  # noqa: ASYNC251 - the loop stuck on purpose
        assert a.lost_at is not None, "the watchdog did not stop the stuck leader"
        # Within the renew deadline of the last renewal, which was at most a retry period ago.
        assert a.lost_at - stuck <= TIMING.renew_deadline + 0.5
        assert "watchdog" in a.lost_why
    finally:
        await cancelled([task])


@pytest.mark.timeout(60)
async def test_a_leader_that_loses_its_lease_exits_with_the_lost_status(
    kube: KubeClient, namespace: str, pair: Pair
) -> None:
    leader = await first_leader(kube, namespace, pair)
    lease: dict[str, Any] = await kube.get(f"{leases(namespace)}/{LEASE}")
    lease["spec"]["holderIdentity"] = "thief"
    await kube.replace(f"{leases(namespace)}/{LEASE}", lease)
    process = pair.processes[leader]
    status = await wait_for(lambda: asyncio.sleep(0, process.exited()), 15, "the leader to exit")
    assert status == LOST_EXIT
    assert said(pair.logs[leader], "stopped leading: lease")
    # It stopped without its cleanup: it wrote nothing on the way out.
    assert not said(pair.logs[leader], "released lease")
