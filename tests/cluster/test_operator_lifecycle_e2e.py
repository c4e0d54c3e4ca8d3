"""Attempts that end without a word from their pod, and what the operator reports meanwhile.

A pod that never starts ends its attempt after ``startTimeoutSeconds``. A pod on a lost node
(heartbeats stop, the process keeps running) ends its attempt ``nodeLossGraceSeconds`` after the
node controller marks it not ready; the next attempt runs on another node and the old runner,
still running, is fenced at its next save. A pod deleted before its outcome was recorded (its
finalizer removed by hand) counts as lost; a live pod that lost its finalizer gets it back, and
one that ended without it is recorded by the next operator to see it. A pod the API server
refuses is retried, not lost.
Kubernetes Events tell each attempt's start, end and resume; the status carries the last
checkpoint time read from the store.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma.timeutil import parse_iso
from oma_operator.runs.rules.pods import FINALIZER
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import event_counts, evict, get_or_none, wait_for, wait_phase
from tests.cluster.nodes import ExtraNode, add_node, partition, remove_node
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
from tests.cluster.operators import operating

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
POOL_LABEL = "oma.dev/test-pool"


@pytest.mark.timeout(180)
async def test_events_and_last_checkpoint_time_through_an_eviction(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "v1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "v2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("ev", script, effects))

    async def first_recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    await evict(kube, namespace, "ev-a1")
    status = await finished(kube, namespace, "ev", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    saved = parse_iso(status["lastCheckpointAt"])
    ended = parse_iso(status["attempts"][-1]["endedAt"])
    assert saved is not None and ended is not None
    assert timedelta(0) <= ended - saved < timedelta(seconds=30)  # the final save, read at the end
    assert "nextAttemptAfter" not in status  # no attempt is waiting to start
    assert _condition({"status": status}, "Ready")["status"] == "True"  # kubectl wait's
    began, done = parse_iso(status["startTime"]), parse_iso(status["completionTime"])
    assert began is not None and done is not None and began <= ended <= done
    (output,) = status["output"]["tasks"]  # the run's one task, its result in the status
    assert output["result"] and "oma checkpoint show" in status["output"]["more"], output
    body = await kube.get(f"{TEAMRUNS.format(ns=namespace)}/ev")
    # No operator finalizer: deleting a TeamRun (or its namespace) never waits for the operator.
    assert body["metadata"].get("finalizers") in (None, [])

    # Events by default ("notable"): what the status does not tell, the disruption and the
    # resumed attempt; not the routine ones (an attempt started, one succeeded).
    async def all_posted() -> dict[str, int] | None:
        counts = await event_counts(kube, namespace, "ev")
        return counts if "Resumed" in counts else None

    counts = await wait_for(all_posted, 30, "the operator's events")
    assert (counts.get("AttemptDisruption"), counts.get("Resumed")) == (1, 1), counts
    assert not {"Queued", "AttemptStarted", "AttemptSucceeded"} & set(counts), counts


@pytest.mark.timeout(120)
async def test_a_pod_that_never_starts_ends_its_attempt_after_the_start_timeout(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    body = teamrun("stuck", [{"text": "never asked"}])
    body["spec"]["runner"]["nodeSelector"] = {POOL_LABEL: "no-such-pool"}
    body["spec"]["retryPolicy"] |= {"startTimeoutSeconds": 10, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "stuck", 90)
    assert status["phase"] == "Failed", (status, await operator_log(operator))
    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"]) == ("crash", "StartTimeout")
    assert attempt["message"].startswith("the runner did not start within 10s: ")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailuresExhausted" and "StartTimeout" in failed["message"]

    async def pod_gone() -> bool:
        return await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/stuck-a1") is None

    await wait_for(pod_gone, 30, "the pod that never started to be deleted")


@pytest.mark.timeout(120)
async def test_a_missing_secret_is_named_in_the_status_after_the_start_timeout(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    """The outcome is recorded (with the kubelet's reason) before the pod is deleted, so the
    deleted pod's own end cannot replace it with an empty "crash Error"."""
    body = teamrun("nokey", [{"text": "never asked"}])
    body["spec"]["team"]["agents"][0]["model"]["apiKeySecretRef"] = {
        "name": "no-such-secret",
        "key": "key",
    }
    body["spec"]["retryPolicy"] |= {"startTimeoutSeconds": 10, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "nokey", 90)
    assert status["phase"] == "Failed", (status, await operator_log(operator))
    (attempt,) = status["attempts"]
    assert (attempt["outcome"], attempt["reason"]) == ("crash", "StartTimeout"), attempt
    assert "CreateContainerConfigError" in attempt["message"]
    # Named by the operator: the kubelet's own message names it only on a quiet node.
    assert "(Secret no-such-secret does not exist)" in attempt["message"], attempt
    ready = _condition({"status": status}, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "FailuresExhausted"), ready
    assert status["completionTime"] and "startTime" in status


@pytest.mark.timeout(180)
async def test_a_pod_that_cannot_start_is_named_while_its_attempt_waits(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    """A missing Secret and an image the node lacks: the TeamRun shows ``PodStuck`` with the
    cause, and a Warning Event names it, long before the start timeout; the seconds it took
    are printed (tests assert no times)."""
    nokey = teamrun("nokey", [{"text": "never asked"}])
    nokey["spec"]["team"]["agents"][0]["model"]["apiKeySecretRef"] = {
        "name": "no-such-secret",
        "key": "key",
    }
    noimage = teamrun("noimage", [{"text": "never asked"}])
    noimage["spec"]["runner"]["image"] = "localhost/oma:no-such-tag"
    for body in (nokey, noimage):
        body["spec"]["retryPolicy"] |= {"startTimeoutSeconds": 900, "maxFailures": 0}
    started = time.monotonic()
    for body in (nokey, noimage):
        await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def stuck(name: str) -> dict[str, Any] | None:
        status = await status_of(kube, namespace, name)
        found = [c for c in status.get("conditions") or [] if c["type"] == "PodStuck"]
        return found[0] if found and found[0]["status"] == "True" else None

    try:
        secret = await wait_for(lambda: stuck("nokey"), 90, "nokey's PodStuck condition")
    except AssertionError:
        pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/nokey-a1")
        shown = (pod or {}).get("status"), await status_of(kube, namespace, "nokey")
        raise AssertionError((shown, await operator_log(operator))) from None
    print(f"\nmissing Secret named on the TeamRun after {time.monotonic() - started:.1f}s")
    image = await wait_for(lambda: stuck("noimage"), 90, "noimage's PodStuck condition")
    print(f"missing image named on the TeamRun after {time.monotonic() - started:.1f}s")
    assert secret["reason"] == "CreateContainerConfigError", secret
    assert "Secret no-such-secret does not exist" in secret["message"], secret
    assert image["reason"] in ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff"), image
    assert "no-such-tag" in image["message"], image
    assert (await status_of(kube, namespace, "nokey"))["phase"] not in ("Failed", "Succeeded")

    async def warned(name: str, reason: str) -> list[dict[str, Any]] | None:
        listed = await kube.get(
            f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}"
        )
        found = [e for e in listed["items"] if e["reason"] == reason]
        return found or None

    secret_reason = secret["reason"]
    (event,) = await wait_for(lambda: warned("nokey", secret_reason), 30, "nokey's Event")
    assert event["type"] == "Warning" and "no-such-secret" in event["message"], event
    found = await wait_for(lambda: warned("noimage", image["reason"]), 30, "noimage's Event")
    assert found[0]["type"] == "Warning" and "no-such-tag" in found[0]["message"], found

    # The Secret put there, the pod starts: the condition says so, and the run goes on.
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "no-such-secret"}}
    secret["stringData"] = {"key": "not used by the scripted model"}
    await kube.create(f"/api/v1/namespaces/{namespace}/secrets", secret)

    async def cleared() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "nokey")
        found = [c for c in status.get("conditions") or [] if c["type"] == "PodStuck"]
        return found[0] if found and found[0]["status"] == "False" else None

    after = await wait_for(cleared, 120, "nokey's PodStuck to clear once the Secret exists")
    assert after["reason"] in ("Started", "AttemptEnded"), after
    done = await finished(kube, namespace, "nokey", 120)
    assert done["phase"] == "Succeeded", (done, await operator_log(operator))
    (event,) = await wait_for(lambda: warned("nokey", secret_reason), 5, "one Warning")


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in body["status"]["conditions"] if c["type"] == kind)
    return found


@pytest.mark.timeout(300)
async def test_node_loss_starts_the_next_attempt_elsewhere_and_fences_the_old_runner(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    pool = uuid.uuid4().hex[:8]
    lost = await add_node(cluster, f"lost-{pool}", {POOL_LABEL: pool})
    spare: ExtraNode | None = None
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "n1", "name": "ledger_append", "input": {"entry": "first"}}]},
        # long enough for the node controller (20 s), the grace (3 s) and a new runner's claim
        {"tool_calls": [{"id": "n2", "name": "wait", "input": {"seconds": 45}}]},
        {"tool_calls": [{"id": "n3", "name": "ledger_append", "input": {"entry": "second"}}]},
        {"text": "done"},
    ]
    body = teamrun("loss", script, effects)
    body["spec"]["runner"]["nodeSelector"] = {POOL_LABEL: pool}
    body["spec"]["retryPolicy"]["nodeLossGraceSeconds"] = 3
    try:
        await kube.create(TEAMRUNS.format(ns=namespace), body)

        async def first_recorded() -> bool:
            return await effects.ledger() == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        await partition(cluster, lost)  # the runner keeps running, the node goes silent
        spare = await add_node(cluster, f"spare-{pool}", {POOL_LABEL: pool})
        status = await finished(kube, namespace, "loss", 200)
        assert status["phase"] == "Succeeded", (status, await operator_log(operator))
        assert status["attempt"] == 2
        first = status["attempts"][0]
        assert (first["outcome"], first["reason"]) == ("disruption", "NodeLost")
        assert f"node lost-{pool} stopped reporting" in first["message"]
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/loss-a2")
        assert pod["spec"]["nodeName"] == f"spare-{pool}"
        # The grace runs from when the node controller marked the old pod not ready (which it
        # does once it marks the node not ready); attempt 2's pod came no earlier than that.
        node = await kube.get(f"/api/v1/nodes/lost-{pool}")
        node_ready = _condition(node, "Ready")
        assert node_ready["status"] == "Unknown"  # the node controller's verdict
        node_lost = parse_iso(node_ready["lastTransitionTime"])
        old = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/loss-a1")
        assert old is not None  # deleted, but its node is away: it stays, terminating
        old_ready = _condition(old, "Ready")
        assert old_ready["status"] == "False"
        not_ready = parse_iso(old_ready["lastTransitionTime"])
        created = parse_iso(pod["metadata"]["creationTimestamp"])
        assert node_lost is not None and not_ready is not None and created is not None
        assert not_ready >= node_lost
        # All three have whole seconds, so this holds exactly when the grace was waited out.
        assert created >= not_ready + timedelta(seconds=3), (node_lost, not_ready, created)
        assert await effects.ledger() == ["first", "second"]

        async def old_runner_ended() -> str | None:
            return await lost.runner_status(kube, namespace, "loss-a1")

        # The old runner finishes its wait, tries to commit, and finds attempt 2 owns the run.
        ended = await wait_for(old_runner_ended, 60, "the old runner to stop")
        assert ended in ("fenced", "exit 12")  # EXIT_FENCED, as each kind of node tells it
    finally:
        for extra in (lost, spare):
            if extra is not None:
                await remove_node(cluster, extra)


@pytest.mark.timeout(240)
async def test_deleting_a_running_teamrun_removes_its_pod(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": 30}}]},
        {"text": "never reached"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("gone", script))
    pod_path = f"/api/v1/namespaces/{namespace}/pods/gone-a1"

    async def running() -> bool:
        pod = await get_or_none(kube, pod_path)
        return pod is not None and pod["status"].get("phase") == "Running"

    await wait_for(running, 60, "the runner pod to run")
    await kube.delete(f"{TEAMRUNS.format(ns=namespace)}/gone")

    async def all_gone() -> bool:
        teamrun_left = await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/gone")
        return teamrun_left is None and await get_or_none(kube, pod_path) is None

    # The garbage collector deletes the owned pod (once it watches the new CRD's resources:
    # up to about a minute here), the runner drains or is killed after its grace period
    # (20 s), and the operator lets go of the pod.
    await wait_for(all_gone, 150, "the TeamRun and its pod to be gone", 1.0)


@pytest.mark.timeout(180)
async def test_a_pod_deleted_before_its_outcome_is_recorded_starts_the_next_attempt(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    """Someone removes the tracking finalizer and force-deletes the running pod: the operator
    never sees it end, only go. The run must not stay Running with no pod."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "l1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {"tool_calls": [{"id": "l2", "name": "wait", "input": {"seconds": 6}}]},
        {"tool_calls": [{"id": "l3", "name": "ledger_append", "input": {"entry": "second"}}]},
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("lost", script, effects))

    async def first_recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    path = f"/api/v1/namespaces/{namespace}/pods/lost-a1"
    await kube.patch(path, {"metadata": {"finalizers": None}})
    await kube.delete(path, {"gracePeriodSeconds": 0})
    status = await finished(kube, namespace, "lost", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 2 and status["disruptions"] == 1
    first, second = status["attempts"]
    # PodLost when it vanished unseen; PodDeleted when its end while being deleted was seen.
    assert (first["attempt"], first["outcome"]) == (1, "disruption")
    assert first["reason"] in ("PodLost", "PodDeleted"), first
    if first["reason"] == "PodLost":  # a PodDeleted end carries the pod's own (often empty) one
        assert "finalizer had been removed" in first["message"], first
    assert second["outcome"] == "succeeded"
    assert await effects.ledger() == ["first", "second"]


async def _finalizers(kube: KubeClient, path: str) -> list[str]:
    pod = await get_or_none(kube, path)
    return list(((pod or {}).get("metadata") or {}).get("finalizers") or [])


@pytest.mark.timeout(180)
async def test_a_tracking_finalizer_removed_by_hand_is_put_back_while_the_pod_runs(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    """Without its finalizer, a pod that ends could be deleted (by hand, by pod GC) before the
    operator reads how it ended; so the operator adds it back, and the run ends as it would."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "f1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {"tool_calls": [{"id": "f2", "name": "wait", "input": {"seconds": 5}}]},
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("kept", script, effects))

    async def first_recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    path = f"/api/v1/namespaces/{namespace}/pods/kept-a1"
    await kube.patch(path, {"metadata": {"finalizers": None}})

    async def put_back() -> bool:
        return FINALIZER in await _finalizers(kube, path)

    await wait_for(put_back, 30, "the operator to put the tracking finalizer back")
    status = await finished(kube, namespace, "kept", 90)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert [a["outcome"] for a in status["attempts"]] == ["succeeded"]

    async def let_go() -> bool:  # the finalizer goes right after the outcome is in the status
        return await _finalizers(kube, path) == []

    await wait_for(let_go, 30, "the operator to remove the tracking finalizer")
    assert await effects.ledger() == ["first"]


@pytest.mark.timeout(240)
async def test_a_pod_that_ended_without_its_finalizer_while_the_operator_was_down_is_recorded(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """The finalizer is removed while no operator runs, and the pod then ends and stays. The
    next operator finds an ended pod without its finalizer, sees that no outcome was recorded
    for it, and records it, instead of leaving the run Running with a finished pod."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "d1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {"tool_calls": [{"id": "d2", "name": "wait", "input": {"seconds": 4}}]},
        {"text": "done"},
    ]
    log = tmp_path / "operator.log"
    path = f"/api/v1/namespaces/{namespace}/pods/down-a1"
    async with operating(cluster, kube, namespace, log) as operator:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("down", script, effects))

        async def first_recorded() -> bool:
            return await effects.ledger() == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        await operator.kill()
        await kube.patch(path, {"metadata": {"finalizers": None}})
        await wait_phase(kube, path, {"Succeeded"}, 60)
        assert (await status_of(kube, namespace, "down"))["phase"] == "Running"
        await operator.start()
        status = await finished(kube, namespace, "down", 90)
    assert status["phase"] == "Succeeded", (status, log.read_text()[-3000:])
    assert status["attempt"] == 1 and [a["outcome"] for a in status["attempts"]] == ["succeeded"]
    assert "ended with its finalizer removed, unrecorded" in log.read_text()
    assert await effects.ledger() == ["first"]


@pytest.mark.timeout(180)
async def test_a_refused_runner_pod_is_retried_until_the_cause_is_fixed(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    """The API server refuses the pod (422: requests above limits). The refusal is shown in a
    condition, not lost; once the TeamRun is fixed the same attempt starts and succeeds."""
    body = teamrun("refused", [{"text": "done"}])
    body["spec"]["runner"]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def refused() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "refused")
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        found = conditions.get("PodCreated")
        return found if found and found["status"] == "False" else None

    found = await wait_for(refused, 60, "the PodCreated=False condition")
    assert found["reason"] == "CreateFailed", found
    assert "Kubernetes API answered 422" in found["message"], found
    assert "must be less than or equal to cpu limit" in found["message"], found
    status = await status_of(kube, namespace, "refused")
    assert (status["phase"], status["attempt"], status.get("attempts")) == ("Running", 1, None)
    pod_path = f"/api/v1/namespaces/{namespace}/pods/refused-a1"
    assert await get_or_none(kube, pod_path) is None

    async def warned(times: int) -> bool:
        return (await event_counts(kube, namespace, "refused")).get("PodCreateFailed", 0) >= times

    await wait_for(lambda: warned(1), 30, "the PodCreateFailed event")
    # A window in which nothing may change, not an ordering: it ends once the operator has
    # tried again twice, and was refused each time. Its retry loop visits a run once a round,
    # so whatever the first retry wrote is written by the time the second one posts its Event.
    await wait_for(lambda: warned(3), 60, "two more tries to create the pod, refused")
    status = await status_of(kube, namespace, "refused")
    assert (status["phase"], status["attempt"], status.get("attempts")) == ("Running", 1, None)
    await kube.patch(
        f"{TEAMRUNS.format(ns=namespace)}/refused", {"spec": {"runner": {"resources": None}}}
    )
    status = await finished(kube, namespace, "refused", 90)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 1 and [a["outcome"] for a in status["attempts"]] == ["succeeded"]
    created = next(c for c in status["conditions"] if c["type"] == "PodCreated")
    assert (created["status"], created["reason"]) == ("True", "Created")
