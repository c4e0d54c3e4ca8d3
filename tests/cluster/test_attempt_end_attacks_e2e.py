"""Who decides how an attempt ended, attacked as a hostile user would, with the shipped admission
policies on the real API server: a forged pod status, a deleted runner pod, a Job's pod dressed
as a runner pod, a pod left over from an earlier TeamRun of the same name, a pod labelled with an
empty TeamRun name. Each ends with the run doing its real work exactly once (the ledger), and its
phase as that work says (issue 41: attacks 1, 2, 3, 9, 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from tests.cluster.approval_kit import admission_policies, as_user, gated, grant, pending_decision
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import event_counts, evict, get_or_none, pod, runner_pods, wait_for
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

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
OUTCOME_FINALIZER = "oma.dev/outcome"


def _paying(name: str, effects: SideEffects, pause: float = 10.0) -> dict[str, Any]:
    """A run that waits ``pause`` seconds (long enough to be attacked while it runs), then
    makes its one payment: the ledger shows whether, and how often, the real work ran."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": pause}}]},
        {"tool_calls": [{"id": "p1", "name": "ledger_append", "input": {"entry": "pay"}}]},
        {"text": "paid"},
    ]
    return teamrun(name, script, effects)


async def _running_pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        for found in await runner_pods(kube, namespace):
            labels = found["metadata"]["labels"]
            phase = (found.get("status") or {}).get("phase")
            if labels.get("oma.dev/teamrun") == name and phase == "Running":
                return found
        return None

    return await wait_for(running, 120, f"the runner pod of {name} to run")


def _succeeded(runner: dict[str, Any]) -> dict[str, Any]:
    """A status patch saying the runner pod ended with exit 0, as a kubelet would write it."""
    container = {
        "name": "runner",
        "ready": False,
        "restartCount": 0,
        "image": runner["spec"]["containers"][0]["image"],
        "imageID": "",
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": "{}"}},
    }
    return {"status": {"phase": "Succeeded", "containerStatuses": [container]}}


async def _refused(request: Any, because: str) -> None:
    with pytest.raises(ApiError) as refusal:
        await request
    assert refusal.value.status == 403, refusal.value
    assert because in str(refusal.value), refusal.value


@pytest.mark.timeout(300)
async def test_nobody_but_the_node_writes_a_runner_pods_end_or_deletes_it_while_it_runs(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attacks 1 and 9: mallory may patch pods, their status and delete pods, but not a runner
    pod's status (a "terminated: exitCode 0" would pass the run unpaid) nor delete a live one
    (22 deletes used up a run's disruption budget). An eviction stays hers: a drain is a
    disruption, and the next attempt resumes and pays once."""
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    await grant(kube, namespace, "pod-admins", rules, ("mallory",))
    # The eviction must find the runner at work: a window of 10 s closed first once, on a
    # loaded machine (the run Succeeded with no disruption), so mallory's client is made
    # before the run starts and the runner waits the longest a wait may.
    async with as_user(cluster, "mallory") as mallory:
        await kube.create(TEAMRUNS.format(ns=namespace), _paying("victim", effects, pause=60))
        runner = await _running_pod(kube, namespace, "victim")
        path = f"/api/v1/namespaces/{namespace}/pods/{runner['metadata']['name']}"
        await _refused(mallory.patch(f"{path}/status", _succeeded(runner)), "only the node")
        await _refused(mallory.delete(path), "only the oma operator deletes a running runner")
        await evict(mallory, namespace, runner["metadata"]["name"])
    status = await finished(kube, namespace, "victim", 180)
    assert (status["phase"], status["taskSummary"]) == ("Succeeded", "1/1"), status
    assert status["disruptions"] == 1, status  # the eviction, and nothing else
    assert await effects.ledger() == ["pay"]


@pytest.mark.timeout(300)
async def test_a_success_the_store_does_not_show_is_not_the_runs_end(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 1 by someone the policy lets through (here the cluster's admin): a runner pod's
    status rewritten to "succeeded" before the payment ran. The store shows the task not
    done, so the operator takes it for a disruption and says so; the next attempt resumes and
    pays, once."""
    await kube.create(TEAMRUNS.format(ns=namespace), _paying("forged", effects, pause=20.0))
    runner = await _running_pod(kube, namespace, "forged")
    path = f"/api/v1/namespaces/{namespace}/pods/{runner['metadata']['name']}"
    await kube.patch(f"{path}/status", _succeeded(runner))
    status = await finished(kube, namespace, "forged", 240)
    assert (status["phase"], status["taskSummary"]) == ("Succeeded", "1/1"), status
    first = status["attempts"][0]
    assert (first["outcome"], first["reason"]) == ("disruption", "SuccessNotConfirmed"), status
    assert await effects.ledger() == ["pay"]
    events = await kube.get(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=forged"
    )
    warned = [e for e in events["items"] if "SuccessNotConfirmed" in (e.get("message") or "")]
    assert warned and all(e["type"] == "Warning" for e in warned), events["items"]


@pytest.mark.timeout(300)
async def test_a_pod_of_someone_elses_making_ends_no_attempt(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 2: a Job whose pod template carries the runner labels and the outcome finalizer.
    The job controller (its own service account, as on a real cluster) is refused the pod.
    And where such a pod exists anyway (made here by the admin, whom the policy lets through)
    and ends "succeeded" while the real runner runs, its end is ignored with a Warning."""
    await kube.create(TEAMRUNS.format(ns=namespace), _paying("victim", effects, pause=15.0))
    await _running_pod(kube, namespace, "victim")
    labels = {"oma.dev/teamrun": "victim", "oma.dev/attempt": "1"}
    template = pod("unused", "exit 0")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "dressed"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "finalizers": [OUTCOME_FINALIZER]},
                "spec": template["spec"],
            },
        },
    }
    await kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)

    async def refused_to_the_job() -> bool:
        events = await kube.get(
            f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name=dressed"
        )
        return any(
            "only the oma operator creates runner pods" in (e.get("message") or "")
            for e in events["items"]
        )

    await wait_for(refused_to_the_job, 60, "the job controller to be refused the pod")
    made_by_job = [
        p
        for p in await runner_pods(kube, namespace)
        if any(r.get("kind") == "Job" for r in p["metadata"].get("ownerReferences") or [])
    ]
    assert made_by_job == []

    forged = pod("dressed-by-hand", "exit 0", metadata={"labels": labels})
    forged["metadata"]["finalizers"] = [OUTCOME_FINALIZER]
    await kube.create(f"/api/v1/namespaces/{namespace}/pods", forged)
    forged_path = f"/api/v1/namespaces/{namespace}/pods/dressed-by-hand"

    async def let_go() -> bool:
        found = await get_or_none(kube, forged_path) or {"metadata": {}}
        phase = (found.get("status") or {}).get("phase")
        return phase == "Succeeded" and OUTCOME_FINALIZER not in (
            found["metadata"].get("finalizers") or []
        )

    await wait_for(let_go, 90, "the operator to let go of the dressed pod")
    assert (await status_of(kube, namespace, "victim")).get("phase") == "Running"
    assert "ForeignPodIgnored" in await event_counts(kube, namespace, "victim")
    status = await finished(kube, namespace, "victim", 180)
    assert (status["phase"], status["taskSummary"], len(status["attempts"])) == (
        "Succeeded",
        "1/1",
        1,
    ), status
    assert await effects.ledger() == ["pay"]


@pytest.mark.timeout(360)
async def test_an_orphaned_pod_does_not_end_a_new_teamrun_of_the_same_name(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 3: ``kubectl delete teamrun X --cascade=orphan`` while its pod runs, then X again
    with another spec (a gated payment). The old pod's success was recorded as the new run's
    attempt 1 (Succeeded, its payment never requested). Now it ends nothing; the new run waits
    for the name (PodCreated=False), and once the ended pod is deleted (by anyone: its end
    changes nothing) the new run asks for its payment."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]
    await grant(kube, namespace, "pod-cleaners", rules, ("mallory",))
    teamruns = TEAMRUNS.format(ns=namespace)
    await kube.create(teamruns, _paying("x", effects, pause=8.0))
    old = await _running_pod(kube, namespace, "x")
    await kube.delete(f"{teamruns}/x", {"propagationPolicy": "Orphan"})
    await wait_for(lambda: _absent(kube, f"{teamruns}/x"), 60, "the first TeamRun x to be deleted")
    await kube.create(teamruns, gated("x", effects, "ok", "charge-new"))
    old_path = f"/api/v1/namespaces/{namespace}/pods/{old['metadata']['name']}"

    async def old_pod_let_go() -> bool:
        found = await get_or_none(kube, old_path)
        assert found is not None, "the orphaned pod went away before it ended"
        phase = (found.get("status") or {}).get("phase")
        return phase in ("Succeeded", "Failed") and OUTCOME_FINALIZER not in (
            found["metadata"].get("finalizers") or []
        )

    await wait_for(old_pod_let_go, 120, "the orphaned pod to end and be let go of")
    status = await status_of(kube, namespace, "x")
    assert status.get("phase") == "Running" and not status.get("attempts"), status
    assert "ForeignPodIgnored" in await event_counts(kube, namespace, "x")
    async with as_user(cluster, "mallory") as mallory:
        await mallory.delete(old_path)  # ended: hers to delete
    decision = await pending_decision(kube, namespace, "x")
    assert "charge-new" in decision["spec"]["content"]
    status = await status_of(kube, namespace, "x")
    assert status["phase"] == "AwaitingApproval", status
    assert await effects.ledger() == ["pay"]  # the first run's payment, once; none of the new


async def _absent(kube: KubeClient, path: str) -> bool:
    return await get_or_none(kube, path) is None


@pytest.mark.timeout(180)
async def test_a_pod_labelled_with_an_empty_teamrun_name_is_a_runner_pod_to_the_policy(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 11: ``oma.dev/teamrun: ""`` slipped past the policy (an empty value counted as
    no label), and the operator listed every TeamRun for it and logged an error. The policy
    now refuses it to users without the start verb; one made anyway (the admin) is no run's
    pod to the operator, which reads nothing for it."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get"]}]
    await grant(kube, namespace, "pod-makers", rules, ("mallory",))
    empty = pod("empty-label", "exit 0", metadata={"labels": {"oma.dev/teamrun": ""}})
    async with as_user(cluster, "mallory") as mallory:
        await _refused(mallory.create(pods, empty), "only the oma operator creates runner pods")
    await kube.create(pods, empty)

    async def ended() -> bool:
        found = await get_or_none(kube, f"{pods}/empty-label")
        return ((found or {}).get("status") or {}).get("phase") in ("Succeeded", "Failed")

    await wait_for(ended, 90, "the empty-labelled pod to end")
    # The operator's first run after the pod: it started and ran to its end (the watch is one
    # stream, so the pod's events were handled before the run's).
    await kube.create(TEAMRUNS.format(ns=namespace), _paying("after", effects, pause=0.1))
    assert (await finished(kube, namespace, "after", 120))["phase"] == "Succeeded"
    log = await operator_log(operator)
    about_it = [line for line in log.splitlines() if "empty-label" in line]
    assert all("succeeded" in line and "[INFO" in line for line in about_it), about_it
    assert "Traceback" not in log and "ERROR" not in log, log
