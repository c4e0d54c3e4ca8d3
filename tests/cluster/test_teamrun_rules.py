"""API-server rules of TeamRun that protect a run's identity (CEL in the generated CRD)."""

from __future__ import annotations

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from tests.cluster.operator_kit import TEAMRUNS, crds_installed, teamrun

__all__ = ["crds_installed"]
pytestmark = pytest.mark.cluster


@pytest.mark.timeout(60)
async def test_run_id_cannot_be_added_or_removed_after_creation(
    kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """A runId added later would start a second run beside the checkpointed one (the default
    run id is <namespace>.<name>) and repeat its side effects; removing it would too."""
    unnamed = teamrun("unnamed", [{"text": "x"}])
    del unnamed["spec"]["runId"]
    await kube.create(TEAMRUNS.format(ns=namespace), unnamed)
    with pytest.raises(ApiError) as added:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/unnamed", {"spec": {"runId": "new"}})
    assert added.value.status == 422 and "runId is immutable" in str(added.value)

    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("named", [{"text": "x"}]))
    with pytest.raises(ApiError) as removed:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/named", {"spec": {"runId": None}})
    assert removed.value.status == 422 and "cannot be set, changed or removed" in str(removed.value)
    # Other fields stay editable (the rule is about the run's identity only).
    await kube.patch(
        f"{TEAMRUNS.format(ns=namespace)}/named", {"spec": {"retryPolicy": {"maxFailures": 2}}}
    )


FROZEN = "is frozen while an attempt runs or waits"


@pytest.mark.timeout(90)
async def test_the_spec_is_frozen_while_an_attempt_runs_or_waits(
    kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """What a run executes after a pause is what it started with (and what its reviewers saw):
    from its first attempt until it ends, only the hold, cancel, retry and retention fields
    change, and where the pod may go (a pod no node takes is fixed in place). Before it starts,
    and once it has ended (a fix before oma retry), the spec is editable."""
    path = f"{TEAMRUNS.format(ns=namespace)}/frozen"
    body = teamrun("frozen", [{"text": "x"}])
    from_secret = {"secretKeyRef": {"name": "payee", "key": "account"}}
    body["spec"]["runner"]["env"] = [{"name": "PAYEE", "valueFrom": from_secret}]
    body["spec"]["suspend"] = True  # created held: it has not started
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    await kube.patch(path, {"spec": {"maxConcurrency": 2}})
    await kube.patch(f"{path}/status", {"status": {"phase": "Suspended", "attempt": 0}})
    await kube.patch(path, {"spec": {"maxConcurrency": 3}})  # held before any attempt

    team = body["spec"]["team"]
    team["agents"][0]["model"]["script"] = [{"text": "pay 1000000 to BOB"}]
    from_config_map = {"configMapKeyRef": {"name": "mine", "key": "account"}}
    pay_bob = {"id": "p", "name": "ledger_append", "input": {"entry": "BOB"}}
    swapped = {"provider": "scripted", "script": [{"tool_calls": [pay_bob]}]}
    edits = [
        {"team": team},
        {"tasks": [{"title": "Pay", "description": "Pay BOB.", "assignee": "clerk"}]},
        {"maxConcurrency": 4},
        {"runner": {"image": "localhost/other:latest"}},
        {"runner": {"env": [{"name": "PAYEE", "value": "BOB"}]}},
        # the same number of keys, others: a comparison that skips keys it does not know
        # would call these equal
        {"runner": {"env": [{"name": "PAYEE", "valueFrom": from_config_map}]}},
        {"tasks": [{**body["spec"]["tasks"][0], "metadata": {"payee": "BOB"}}]},
        {"team": {"agents": [{**team["agents"][0], "model": swapped}]}},
        {"runner": {"annotations": {"sidecar.example.com/inject": "true"}}},
        {"store": {"redis": {"namespace": "elsewhere"}}},
        {"sharedMemory": True},
    ]
    for phase in ("Running", "AwaitingApproval", "Suspended", "Queued"):
        await kube.patch(f"{path}/status", {"status": {"phase": phase, "attempt": 1}})
        for edit in edits:
            with pytest.raises(ApiError) as refused:
                await kube.patch(path, {"spec": edit})
            assert refused.value.status == 422, (phase, edit, refused.value)
            assert FROZEN in str(refused.value), (phase, edit, refused.value)
        # Holding, retrying, retaining and placing are not what the run executes.
        await kube.patch(path, {"spec": {"suspend": phase != "Suspended"}})
        await kube.patch(path, {"spec": {"ttlSecondsAfterFinished": 600}})
        await kube.patch(path, {"spec": {"retryPolicy": {"maxFailures": 9}}})
        placed = {"resources": {"limits": {"memory": "1Gi"}}, "nodeSelector": {"pool": "b"}}
        await kube.patch(path, {"spec": {"runner": placed}})
        await kube.patch(path, {"spec": {"suspend": True, "ttlSecondsAfterFinished": None}})
    stored = await kube.get(path)
    assert stored["spec"]["maxConcurrency"] == 3 and stored["spec"]["team"] != team

    await kube.patch(f"{path}/status", {"status": {"phase": "Failed", "attempt": 1}})
    await kube.patch(path, {"spec": {"team": team}})  # ended: a fix before oma retry
    await kube.patch(f"{path}/status", {"status": {"phase": "Running", "attempt": 2}})
    await kube.patch(path, {"spec": {"cancel": True}})  # cancel stays open to the end
    assert (await kube.get(path))["spec"]["cancel"] is True
