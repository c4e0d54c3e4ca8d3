"""Forks on Kubernetes: a TeamRun with spec.forkFrom starts from a finished run's past boundary
in its namespace's part of the store, replays what was committed before it, and runs the rest
under its own run id; the parent's checkpoint is not written. (That a tenant's fork never finds
another tenant's run is the store part's doing: tests/engine/test_fork.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma.checkpoint.history import load_history
from oma.checkpoint.keys import checkpoint_key
from oma.tools import records
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster

SCRIPT: list[dict[str, Any]] = [
    *(
        {"tool_calls": [{"id": f"p{n}", "name": "ledger_append", "input": {"entry": f"e{n}"}}]}
        for n in range(4)
    ),
    {"text": "all recorded"},
]


async def _ledger_keys(effects: SideEffects) -> list[str]:
    location = records.RecordLocation(url=effects.redis.for_tests, key=f"{effects.prefix}:ledger")
    return [str(record["key"]) for record in await records.read(location)]


@pytest.mark.timeout(300)
async def test_a_teamrun_forked_from_a_past_boundary_replays_before_it_and_runs_after_it(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
    e2e_redis: Endpoint,
) -> None:
    parent = teamrun("parent", SCRIPT, effects)
    await kube.create(TEAMRUNS.format(ns=namespace), parent)
    done = await finished(kube, namespace, "parent", 120)
    assert done["phase"] == "Succeeded", done
    parent_run = parent["spec"]["runId"]
    parent_keys = await _ledger_keys(effects)
    assert [k.rsplit(":", 1)[1] for k in parent_keys] == ["p0", "p1", "p2", "p3"]
    store = teamrun_store(e2e_redis, parent, namespace)
    try:
        history = await load_history(store, checkpoint_key(parent_run))
        assert history is not None
        committed = [b.seq for b in history.boundaries() if b.what == "1 tool call committed"]
        seq = committed[1]  # p0 and p1 committed there
        before = await store.journal_get(checkpoint_key(parent_run), history=True)
    finally:
        await store.aclose()

    child = teamrun("child", SCRIPT, effects)
    child["spec"]["store"] = parent["spec"]["store"]  # the same store, the same tenant part
    child["spec"]["forkFrom"] = {"runId": parent_run, "seq": seq}
    await kube.create(TEAMRUNS.format(ns=namespace), child)
    done = await finished(kube, namespace, "child", 120)
    assert done["phase"] == "Succeeded", done
    child_run = child["spec"]["runId"]
    new = [k for k in await _ledger_keys(effects) if k not in parent_keys]
    assert [k.rsplit(":", 1)[1] for k in new] == ["p2", "p3"]  # p0, p1 replayed, not run
    assert all(k.startswith(f"{child_run}:") for k in new)
    store = teamrun_store(e2e_redis, parent, namespace)
    try:
        after = await store.journal_get(checkpoint_key(parent_run), history=True)
        assert after == before  # the parent's checkpoint was not written
        forked = await load_history(store, checkpoint_key(child_run))
        assert forked is not None
        assert forked.boundaries()[0].what == f"forked from {parent_run} at boundary {seq}"
    finally:
        await store.aclose()
