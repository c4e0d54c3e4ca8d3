"""``spec.suspend`` and ``spec.cancel`` on a running TeamRun, through ``oma suspend|resume|
cancel`` against the real API server: the runner drains at its next durable boundary, the run
is ``Suspended`` (no pod, no slot) or ends ``Cancelled`` with its checkpoint readable; a resumed
run repeats no tool call; a run created suspended starts when cleared; a cancel cannot be
taken back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma.checkpoint import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import event_counts, oma, runner_pods, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    operator_log,
    redis_secret,
    status_of,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster

SCRIPT: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "h1", "name": "ledger_append", "input": {"entry": "first"}}]},
    {
        "tool_calls": [{"id": "h2", "name": "ledger_append", "input": {"entry": "second"}}],
        "delay": 4,
    },
    {"text": "done"},
]


async def _phase(kube: KubeClient, namespace: str, name: str, phase: str, limit: float) -> Any:
    async def reached() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, name)
        return status if status.get("phase") == phase else None

    return await wait_for(reached, limit, f"TeamRun {name} to be {phase}")


async def _first_recorded(effects: SideEffects) -> None:
    async def recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(recorded, 90, "the first ledger entry")


async def _pods(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = await runner_pods(kube, namespace)
    return [p for p in pods if p["metadata"]["labels"].get("oma.dev/teamrun") == name]


async def _no_pod_runs(kube: KubeClient, namespace: str, name: str) -> None:
    async def none() -> bool:
        pods = await _pods(kube, namespace, name)
        return all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in pods)

    await wait_for(none, 60, f"no pod of {name} to run")


@pytest.mark.timeout(240)
async def test_suspend_mid_task_then_resume_repeats_no_tool_call(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("pause", SCRIPT, effects))
    await _first_recorded(effects)
    asked = await oma(cluster.kubeconfig, "suspend", "pause", "-n", namespace)
    assert asked.returncode == 0, asked.stderr
    assert "drains at its next durable boundary" in asked.stdout
    status = await _phase(kube, namespace, "pause", "Suspended", 90)
    await _no_pod_runs(kube, namespace, "pause")
    assert [a["outcome"] for a in status["attempts"]] == ["disruption"]
    assert int(status.get("disruptions") or 0) == 0  # a requested drain counts against no budget
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Suspended"]["status"] == "True"
    assert conditions["Progressing"]["status"] == "False"
    again = await oma(cluster.kubeconfig, "suspend", "pause", "-n", namespace)
    assert again.returncode == 1 and "suspended already" in again.stderr
    before = await effects.ledger()
    assert before in (["first"], ["first", "second"])

    resumed = await oma(cluster.kubeconfig, "resume", "pause", "-n", namespace)
    assert resumed.returncode == 0, resumed.stderr
    status = await finished(kube, namespace, "pause", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert await effects.ledger() == ["first", "second"]  # nothing run twice
    assert [a["outcome"] for a in status["attempts"]] == ["disruption", "succeeded"]
    counts = await event_counts(kube, namespace, "pause")
    assert counts.get("Suspending") == 1 and counts.get("Unsuspended") == 1, counts


@pytest.mark.timeout(240)
async def test_resume_right_after_suspend_costs_no_disruption(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """Resumed while the stopped pod still drains (its end not recorded yet, most likely):
    the drain is the hold's, not a disruption, so suspend/resume rounds cannot use up the
    disruption budget and fail the run."""
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("blink", SCRIPT, effects))
    await _first_recorded(effects)
    asked = await oma(cluster.kubeconfig, "suspend", "blink", "-n", namespace)
    assert asked.returncode == 0, asked.stderr
    resumed = await oma(cluster.kubeconfig, "resume", "blink", "-n", namespace)
    assert resumed.returncode == 0, resumed.stderr
    status = await finished(kube, namespace, "blink", 150)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert await effects.ledger() == ["first", "second"]  # nothing run twice
    assert int(status.get("disruptions") or 0) == 0
    first = status["attempts"][0]
    assert first["reason"] in ("StoppedForHold", "Drained"), first


@pytest.mark.timeout(240)
async def test_cancel_ends_cancelled_with_the_checkpoint_readable_and_cannot_be_undone(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
    e2e_redis: Endpoint,
) -> None:
    body = teamrun("stop", SCRIPT, effects)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    await _first_recorded(effects)
    asked = await oma(cluster.kubeconfig, "cancel", "stop", "-n", namespace)
    assert asked.returncode == 0, asked.stderr
    status = await _phase(kube, namespace, "stop", "Cancelled", 90)
    await _no_pod_runs(kube, namespace, "stop")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Cancelled"]["status"] == "True"
    assert conditions["Failed"]["status"] == "False"
    assert conditions["Succeeded"]["status"] == "False"
    done = await effects.ledger()
    assert done in (["first"], ["first", "second"])
    store = teamrun_store(e2e_redis, body, namespace)
    try:  # the store holds a consistent checkpoint of the run as it drained
        snapshot = await Checkpoint(store, run_id=body["spec"]["runId"]).load_latest()
    finally:
        await store.aclose()
    assert isinstance(snapshot, CheckpointSnapshotV4)
    committed = [call for task in snapshot.in_flight_tasks for call in task.tool_calls]
    assert len(committed) == len(done)  # every effect it had is committed, nothing else

    path = f"{TEAMRUNS.format(ns=namespace)}/stop"
    with pytest.raises(ApiError) as refused:  # the hostile case: taking the cancel back
        await kube.patch(path, {"spec": {"cancel": False}})
    assert refused.value.status == 422 and "cancel cannot be set back" in str(refused.value)
    late = await oma(cluster.kubeconfig, "resume", "stop", "-n", namespace)
    assert late.returncode == 1 and "Cancelled: it has finished" in late.stderr
    await _no_pod_runs(kube, namespace, "stop")
    assert (await status_of(kube, namespace, "stop"))["phase"] == "Cancelled"
    assert await effects.ledger() == done


@pytest.mark.timeout(180)
async def test_a_teamrun_created_suspended_starts_only_when_cleared(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    body = teamrun("later", SCRIPT, effects)
    body["spec"]["suspend"] = True
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    await _phase(kube, namespace, "later", "Suspended", 60)
    assert await _pods(kube, namespace, "later") == []
    assert await effects.ledger() == []
    await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/later", {"spec": {"suspend": False}})
    status = await finished(kube, namespace, "later", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert await effects.ledger() == ["first", "second"]
