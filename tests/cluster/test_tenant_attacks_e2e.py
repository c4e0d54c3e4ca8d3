"""One tenant against the others (issue 41, attacks 7 and 8), replayed on the local cluster: a
run waiting on a big checkpoint is polled without the checkpoint being read, and a tenant whose
store accepts connections and never answers holds up no other tenant's decisions. The figures
(RSS, seconds) are bench/tenant_isolation.py's; these tests assert what the operator did."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from devcluster import KubeClient
from tests.cluster.approval_kit import (
    DECISIONS,
    approve_in_store,
    gated,
    pending_decision,
    polled,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, for_pods
from tests.cluster.helpers import create_namespace, delete_namespace, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    store_secret,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, operating
from tests.cluster.waiting_runs import make_checkpoint, make_gated, stored_bytes
from tests.servers.tarpit import Tarpit

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
BULK = 5_000_000  # characters echoed: a checkpoint of some 20 MB


async def _sent_by_redis(url: str) -> int:
    client = aioredis.Redis.from_url(url)
    try:
        return int((await client.info("stats"))["total_net_output_bytes"])
    finally:
        await client.aclose()


@pytest.mark.timeout(300)
async def test_a_run_waiting_on_a_big_checkpoint_is_polled_without_reading_it(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    e2e_redis: Endpoint,
    tmp_path: Path,
) -> None:
    """Attack 7: two waiting runs on 100 MB checkpoints took the operator from 96 MB to
    500-599 MB, re-reading both every 3 s. Now its approval polls read the journal's head and
    the ledger rows: three polls of a run on a 20 MB checkpoint cost Redis a sliver of one."""
    body = make_gated(teamrun("bulky", []))
    await make_checkpoint(body, namespace, e2e_redis.for_tests, BULK, tmp_path)
    size = await stored_bytes(e2e_redis.for_tests, body)
    assert size > 4 * BULK, size  # the echo's input and result, in base and copy
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await pending_decision(kube, namespace, "bulky")  # its pod resumed and waits
    before = await _sent_by_redis(e2e_redis.for_tests)
    await polled(kube, namespace, decision, 3)
    sent = await _sent_by_redis(e2e_redis.for_tests) - before
    assert sent < size / 10, f"Redis sent {sent} bytes in 3 polls of a {size} byte checkpoint"
    status = await status_of(kube, namespace, "bulky")
    assert (status["phase"], status["attempt"]) == ("AwaitingApproval", 1), status


@pytest.mark.timeout(480)
async def test_a_tenant_whose_store_never_answers_holds_up_no_other_tenants_decision(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """Attack 8: one tenant's store Secret pointed at a server that accepts and never answers,
    for 8 waiting runs; another tenant's store-side decision then waited 184-268 s (the
    operator's polls queued behind the tarpit). Now each run and namespace is visited on its
    own, every store call has a deadline: the other tenant's decision shows while the tarpit
    still holds the operator's calls."""
    other = await create_namespace(kube)
    tarpit = await Tarpit().start()
    settings = OperatorSettings(other_namespaces=(other,), env={"OMA_SECRET_TTL_SECONDS": "5"})
    try:
        await store_secret(kube, other, e2e_redis.for_pods)
        async with operating(cluster, kube, namespace, tmp_path / "operator.log", settings):
            stuck = [f"stuck-{i}" for i in range(8)]
            for name in stuck:
                await kube.create(TEAMRUNS.format(ns=namespace), gated(name, effects, "x"))
            body = gated("payer", effects, "charged")
            await kube.create(TEAMRUNS.format(ns=other), body)
            for name in stuck:
                await pending_decision(kube, namespace, name)
            decision = await pending_decision(kube, other, "payer")
            url = base64.b64encode(for_pods(tarpit.url()).encode()).decode()
            await kube.patch(
                f"/api/v1/namespaces/{namespace}/secrets/store", {"data": {"url": url}}
            )

            async def engaged() -> bool:
                return tarpit.connections > 0

            await wait_for(engaged, 60, "the operator to call the tarpit store")
            await approve_in_store(e2e_redis, body, other, decision)
            path = f"{DECISIONS.format(ns=other)}/{decision['metadata']['name']}"

            async def shown() -> bool:
                status = (await kube.get(path)).get("status") or {}
                return status.get("decision") == "Approved"

            # Before the fix: 184-268 s. A poll every 3 s, so a few rounds at most now.
            await wait_for(shown, 45, "the other tenant's decision to show")
            assert (await finished(kube, other, "payer", 120))["phase"] == "Succeeded"
            assert await effects.ledger() == ["charge"]  # the tarpit's runs paid nothing
            for name in stuck:
                status = await status_of(kube, namespace, name)
                assert status["phase"] == "AwaitingApproval", (name, status)
    finally:
        await tarpit.close()
        await delete_namespace(kube, other)
