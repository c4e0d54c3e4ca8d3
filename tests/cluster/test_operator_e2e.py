"""The operator on a real API server: a TeamRun runs to completion, and survives an eviction.

The operator is the chart's Deployment from the built image on the local cluster's real node,
and a local process (``python -m oma_operator``) with the cluster's kubeconfig on the node agent
or an existing cluster (``tests/cluster/operators.py``). Runner pods run ``oma-runner``: real
containers of the built image on the real node, local processes on the node agent, the image
``OMA_E2E_RUNNER_IMAGE`` on an existing cluster. The store is a real Redis or PostgreSQL.
Side effects go to per-test Redis lists (``effects``), which the tests read the same way
wherever the pods ran (see ``tests/cluster/e2e_env.py``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma.journal import StoreRunJournal, verify_run
from oma.timeutil import parse_iso
from oma.tools import records
from oma.tools.records import RecordLocation
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, runner_image, teamrun_store
from tests.cluster.helpers import (
    evict,
    get_or_none,
    runner_pods,
    tables,
    wait_for,
)
from tests.cluster.operator_kit import (
    TEAMRUN_COLUMNS,
    TEAMRUN_WIDE,
    TEAMRUNS,
    crds_installed,
    finished,
    kubectl,
    operator,
    operator_log,
    redis_secret,
    status_of,
    store_secret,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, ProcessOperator, operating

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


async def assert_started_after_backoff(
    kube: KubeClient, namespace: str, pod_name: str, ended: dict[str, Any], backoff: int
) -> None:
    """``pod_name`` was created no sooner than ``backoff`` seconds after the attempt record
    ``ended`` says its attempt ended, and not much later either."""
    end = parse_iso(ended["endedAt"])
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
    created = parse_iso(pod["metadata"]["creationTimestamp"])
    assert end is not None and created is not None
    # creationTimestamp has whole seconds: compare with the due time cut to whole seconds too.
    assert created >= (end + timedelta(seconds=backoff)).replace(microsecond=0), (end, created)
    assert created - end < timedelta(seconds=backoff + 30), (end, created)  # and it did start


@pytest.mark.timeout(180)
async def test_an_operator_outside_the_cluster_with_an_exec_plugin_kubeconfig_runs_a_teamrun(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """The operator as a process on a laptop or CI machine with a managed cluster's kubeconfig:
    ``$KUBECONFIG`` naming two files (the current context in the second) and a user whose
    credentials an exec credential plugin prints."""
    settings = OperatorSettings(exec_credentials=True)
    log = tmp_path / "operator.log"
    async with operating(cluster, kube, namespace, log, settings) as operator:
        assert isinstance(operator, ProcessOperator) and operator.plugin_runs is not None
        script: list[dict[str, Any]] = [{"tool_calls": [_ledger("x1", "paid")]}, {"text": "done"}]
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("exec", script, effects))
        status = await finished(kube, namespace, "exec", 120)
        assert status["phase"] == "Succeeded", (status, await operator_log(log))
        assert int(operator.plugin_runs.read_text()) >= 2  # our client and kopf's each ran it
    assert await effects.ledger() == ["paid"]


def _ledger(call_id: str, entry: str) -> dict[str, Any]:
    return {"id": call_id, "name": "ledger_append", "input": {"entry": entry}}


@pytest.mark.timeout(180)
async def test_teamrun_succeeds(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "x1", "name": "ledger_append", "input": {"entry": "paid"}}]},
        {"text": "done"},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("pay", script, effects))
    status = await finished(kube, namespace, "pay", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 1 and status["taskSummary"] == "1/1"
    assert [a["outcome"] for a in status["attempts"]] == ["succeeded"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Succeeded"] == "True" and conditions["Progressing"] == "False"
    assert await effects.ledger() == ["paid"]
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/pay-a1")
    assert pod["spec"]["containers"][0]["command"] == ["oma-runner"]
    assert pod["spec"]["containers"][0]["image"] == runner_image()
    assert pod["spec"]["automountServiceAccountToken"] is False

    async def let_go() -> bool:  # the finalizer goes right after the outcome is in the status
        pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/pay-a1")
        return "oma.dev/outcome" not in (pod["metadata"].get("finalizers") or [])

    await wait_for(let_go, 30, "the operator to remove the tracking finalizer")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_eviction_mid_task_resumes_in_attempt_2(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    effects: SideEffects,
    store: str,
    request: pytest.FixtureRequest,
    redis_secret: str,
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "e1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "e2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "both recorded"},
    ]
    body = teamrun("evict", script, effects)
    body["spec"]["store"]["events"] = {"enabled": True}  # the run event journal, too
    if store == "postgres":
        postgres: Endpoint = request.getfixturevalue("e2e_postgres")
        dsn = base64.b64encode(postgres.for_pods.encode()).decode()
        await kube.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "pg"},
                "data": {"dsn": dsn},
            },
        )
        body["spec"]["store"] = {
            "postgres": {
                "dsnSecretRef": {"name": "pg", "key": "dsn"},
                "schema": f"e2e_{uuid.uuid4().hex[:6]}",
            },
            "events": {"enabled": True},
        }
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def first_recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry of attempt 1")
    await evict(kube, namespace, "evict-a1")
    status = await finished(kube, namespace, "evict", 180)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 2
    first, second = status["attempts"]
    assert (first["attempt"], first["outcome"]) == (1, "disruption")
    assert first["reason"] == "EvictionByEvictionAPI" and first["exitCode"] == 11
    assert second["outcome"] == "succeeded" and status["disruptions"] == 1
    assert await effects.ledger() == ["first", "second"]  # nothing re-run, nothing lost
    if store == "redis":  # the journal both attempts kept, numbered on across the eviction
        kept = teamrun_store(request.getfixturevalue("e2e_redis"), body, namespace)
        try:
            events = await StoreRunJournal(kept).read_from(0, run_id=body["spec"]["runId"])
        finally:
            await kept.aclose()
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs)) and {e["attempt"] for e in events} == {1, 2}
        starts = [e["mode"] for e in events if e["type"] == "run/start"]
        assert starts == ["runTasks", "restore"]
        results = [e["toolCallId"] for e in events if e["type"] == "tool/result"]
        assert results == ["e1", "e2"]  # each call's result once
        assert verify_run(events).ok


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"store": None}, "spec.store: Required value"),
        (
            {
                "store": {
                    "redis": {"urlSecretRef": {"name": "s", "key": "k"}},
                    "postgres": {"dsnSecretRef": {"name": "s", "key": "k"}},
                }
            },
            "store needs exactly one of redis or postgres",
        ),
        (
            {
                "store": {
                    "redis": {"urlSecretRef": {"name": "s", "key": "k"}},
                    "redact": True,
                    "events": {"enabled": True},
                }
            },
            "store.events needs the verbatim content",
        ),
        (
            {"team": {"agents": [{"name": "a", "model": {"provider": "gemini", "name": "x"}}]}},
            'Unsupported value: "gemini"',
        ),
        ({"mode": "team", "tasks": None}, "mode team needs a goal"),
        ({"retryPolicy": {"maxFailures": -1}}, "maxFailures"),
        ({"runner": {"labels": {"oma.dev/teamrun": "other"}}}, "are the operator's"),
        ({"runner": {"annotations": {"oma.dev/attempt": "9"}}}, "are the operator's"),
        ({"runner": {"scratch": {"sizeLimit": "lots"}}}, "spec.runner.scratch.sizeLimit"),
    ],
)
async def test_invalid_teamruns_are_refused_by_the_api_server(
    kube: KubeClient, namespace: str, crds_installed: None, change: dict[str, Any], message: str
) -> None:
    body = teamrun("bad", [{"text": "x"}])
    body["spec"] = {k: v for k, v in {**body["spec"], **change}.items() if v is not None}
    with pytest.raises(ApiError) as caught:
        await kube.create(TEAMRUNS.format(ns=namespace), body)
    assert caught.value.status == 422 and message in str(caught.value)


async def test_run_id_is_immutable(kube: KubeClient, namespace: str, crds_installed: None) -> None:
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("fixed", [{"text": "x"}]))
    with pytest.raises(ApiError) as caught:
        await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/fixed", {"spec": {"runId": "other"}})
    assert caught.value.status == 422 and "runId is immutable" in str(caught.value)


@pytest.mark.timeout(120)
async def test_bad_task_dependencies_end_failed_with_a_message(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    body = teamrun("cyclic", [{"text": "x"}])
    body["spec"]["tasks"] = [
        {"title": "a", "description": "a", "dependsOn": ["b"]},
        {"title": "b", "description": "b", "dependsOn": ["a"]},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "cyclic", 90)
    assert status["phase"] == "Failed" and status["attempt"] == 1
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "PermanentFailure"
    assert (
        "Invalid task dependencies" in failed["message"]
        and "cycle a -> b -> a" in (failed["message"])
    )


@pytest.mark.timeout(150)
async def test_a_crash_loop_exhausts_max_failures(
    kube: KubeClient, namespace: str, operator: Path
) -> None:
    closed = "redis://127.0.0.1:9/0"  # nothing listens: every attempt fails transiently
    await store_secret(kube, namespace, closed)
    body = teamrun("loop", [{"text": "x"}])
    body["spec"]["retryPolicy"] = {"maxFailures": 2, "backoffSeconds": 1}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "loop", 120)
    assert status["phase"] == "Failed" and status["attempt"] == 3
    assert [a["outcome"] for a in status["attempts"]] == ["crash"] * 3
    assert all(a["exitCode"] == 1 for a in status["attempts"])
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "FailuresExhausted" and "unreachable" in failed["message"]


@pytest.mark.timeout(180)
async def test_oom_kills_under_a_memory_limit_exhaust_their_own_budget(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, operator: Path, redis_secret: str
) -> None:
    """A runner whose memory limit is too small for it is OOM-killed by the kernel (the kubelet
    reports OOMKilled, exit 137): each is an oom outcome, counted against maxOomKills, not
    maxFailures, and the run ends Failed with OomKillsExhausted."""
    if not cluster.real_node:
        pytest.skip("the node agent enforces no memory limit: this needs a real kubelet")
    body = teamrun("oom", [{"text": "never reached"}])
    body["spec"]["runner"]["resources"] = {"limits": {"memory": "32Mi"}}
    body["spec"]["retryPolicy"] = {"maxOomKills": 1, "maxFailures": 5, "backoffSeconds": 1}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    status = await finished(kube, namespace, "oom", 150)
    assert status["phase"] == "Failed" and status["attempt"] == 2, status
    assert [(a["outcome"], a["reason"], a["exitCode"]) for a in status["attempts"]] == [
        ("oom", "OOMKilled", 137)
    ] * 2
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "OomKillsExhausted", failed
    assert status.get("failures", 0) == 0


@pytest.mark.timeout(180)
async def test_a_crash_is_retried_after_the_backoff_and_the_retry_succeeds(
    kube: KubeClient, namespace: str, operator: Path, e2e_redis: Endpoint, effects: SideEffects
) -> None:
    """Attempt 1 cannot reach its store (exit 1, a crash); the Secret is fixed meanwhile, and
    attempt 2, created no sooner than the backoff after attempt 1 ended, succeeds. Works on any
    cluster (the kill-mid-task variant below needs a tool package on the node agent's host)."""
    backoff = 5
    await _store_secret(kube, namespace, "store", "url", "redis://127.0.0.1:9/0")
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "r1", "name": "ledger_append", "input": {"entry": "once"}}]},
        {"text": "done"},
    ]
    body = teamrun("retry", script, effects)
    body["spec"]["retryPolicy"] = {"backoffSeconds": backoff, "maxFailures": 1}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def attempt_1_ended() -> dict[str, Any] | None:
        attempts = (await status_of(kube, namespace, "retry")).get("attempts") or []
        return attempts[0] if attempts else None

    first = await wait_for(attempt_1_ended, 90, "attempt 1 to crash")
    await kube.patch(
        f"/api/v1/namespaces/{namespace}/secrets/store",
        {"data": {"url": base64.b64encode(e2e_redis.for_pods.encode()).decode()}},
    )
    status = await finished(kube, namespace, "retry", 120)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert (first["outcome"], first["exitCode"]) == ("crash", 1)
    assert "unreachable" in first["message"]
    assert status["attempt"] == 2 and status["failures"] == 1
    await assert_started_after_backoff(kube, namespace, "retry-a2", first, backoff)
    assert await effects.ledger() == ["once"]


@pytest.mark.timeout(180)
async def test_finished_teamruns_are_deleted_after_their_time_to_live(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """The operator's default (3 s here) deletes a finished run that sets none, with its pod; a
    run's own ttlSecondsAfterFinished (an hour) wins over it; a failed run goes too."""
    script: list[dict[str, Any]] = [{"text": "done"}]
    kept = teamrun("kept", script, effects)
    kept["spec"]["ttlSecondsAfterFinished"] = 3600
    failing = teamrun("failing", script, effects)
    failing["spec"]["tasks"] = [  # a cycle: the runner fails it at once (PermanentFailure)
        {"title": "a", "description": "a", "dependsOn": ["b"]},
        {"title": "b", "description": "b", "dependsOn": ["a"]},
    ]
    settings = OperatorSettings(ttl_after_finished=3)
    async with operating(cluster, kube, namespace, tmp_path / "operator.log", settings):
        for body in (teamrun("brief", script, effects), kept, failing):
            await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert (await finished(kube, namespace, "kept", 120))["phase"] == "Succeeded"
        first = await finished(kube, namespace, "brief", 120)
        assert first["phase"] == "Succeeded"

        async def gone(name: str) -> bool:
            return await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/{name}") is None

        async def brief_gone() -> bool:
            return await gone("brief")

        await wait_for(brief_gone, 60, "the finished TeamRun to be deleted")
        deleted_at = datetime.now(UTC)
        (ended,) = [c for c in first["conditions"] if c["type"] == "Succeeded"]
        finished_at = parse_iso(ended["lastTransitionTime"])
        assert finished_at is not None and deleted_at - finished_at >= timedelta(seconds=3)

        async def failing_gone() -> bool:
            return await gone("failing")

        await wait_for(failing_gone, 60, "the failed TeamRun to be deleted")
        assert not await gone("kept")  # its own hour has not passed

        async def pod_gone() -> bool:
            pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/brief-a1")
            return pod is None

        await wait_for(pod_gone, 60, "the deleted run's pod to go with it")


@pytest.mark.timeout(180)
async def test_deleted_teamruns_take_their_store_records_when_asked(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """retention.deleteStoreRecords: a run deleted by its time to live loses its checkpoint and
    attempt log first; one deleted by hand (kubectl delete) loses them after. A TeamRun whose
    spec names its runId (it may be another run's) keeps them."""
    script: list[dict[str, Any]] = [{"text": "done"}]
    expiring = teamrun("expiring", script, effects)
    expiring["spec"]["ttlSecondsAfterFinished"] = 1
    by_hand = teamrun("byhand", script, effects)
    named = teamrun("named", script, effects)  # keeps the runId teamrun() gives it
    named["spec"]["ttlSecondsAfterFinished"] = 1
    for body in (expiring, by_hand):
        del body["spec"]["runId"]  # the default: <namespace>.<name>, this TeamRun's own
    settings = OperatorSettings(delete_store_records=True)
    stores = {body["metadata"]["name"]: body for body in (expiring, by_hand, named)}

    async def records(name: str) -> tuple[object, object]:
        body = stores[name]
        run_id = body["spec"].get("runId") or f"{namespace}.{name}"
        store = teamrun_store(e2e_redis, body, namespace)
        key = f"__oma_checkpoint__/{run_id}/latest"
        try:
            return await store.journal_version(key), await store.get(
                key.replace("latest", "attempts")
            )
        finally:
            await store.aclose()

    async def gone(name: str) -> bool:
        return await get_or_none(kube, f"{TEAMRUNS.format(ns=namespace)}/{name}") is None

    async with operating(cluster, kube, namespace, tmp_path / "operator.log", settings):
        for body in stores.values():
            await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert (await finished(kube, namespace, "byhand", 120))["phase"] == "Succeeded"
        version, log = await records("byhand")
        assert version is not None and log is not None  # a finished run keeps them meanwhile

        async def expired() -> bool:
            return await gone("expiring") and await records("expiring") == (None, None)

        await wait_for(expired, 90, "the expired TeamRun and its store records to be gone")

        async def named_gone() -> bool:
            return await gone("named")

        await wait_for(named_gone, 90, "the TeamRun with a runId of its spec to be deleted")
        version, log = await records("named")
        assert version is not None and log is not None  # its run id may be another run's
        await kube.delete(f"{TEAMRUNS.format(ns=namespace)}/byhand")

        async def cleaned() -> bool:
            return await records("byhand") == (None, None)

        await wait_for(cleaned, 60, "the deleted TeamRun's store records to be removed")


@pytest.mark.timeout(240)
async def test_oma_retry_resumes_a_failed_run_from_its_checkpoint(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """Task B fails (its agent has no script for it) after task A ran its tool call: the run
    ends Failed. With B's script added to the spec, `oma retry` starts attempt 2, which resumes
    from the checkpoint: A is not run again, B succeeds; the retry is recorded and the failure
    budget starts over. A run that has not failed is not retried."""
    body = teamrun("retried", [], effects)
    body["spec"]["team"]["agents"][0]["model"]["script"] = {
        "# Task: A": [
            {"tool_calls": [{"id": "a1", "name": "ledger_append", "input": {"entry": "a"}}]},
            {"text": "a done"},
        ]
    }
    body["spec"]["tasks"] = [
        {"title": "A", "description": "a", "assignee": "clerk"},
        {"title": "B", "description": "b", "assignee": "clerk", "dependsOn": ["A"]},
    ]
    path = f"{TEAMRUNS.format(ns=namespace)}/retried"
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    failed = await finished(kube, namespace, "retried", 120)
    assert failed["phase"] == "Failed" and failed["attempt"] == 1, failed
    assert await effects.ledger() == ["a"]

    def oma(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        command = [str(Path(sys.executable).with_name("oma")), *args, "-n", namespace]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    script = body["spec"]["team"]["agents"][0]["model"]["script"]
    await kube.patch(path, {"spec": {"team": {"agents": [
        {**body["spec"]["team"]["agents"][0], "model": {"provider": "scripted", "script": {
            **script, "# Task: B": [{"text": "b done"}]}}}
    ]}}})  # fmt: skip
    asked = await asyncio.to_thread(oma, "retry", "retried")
    assert asked.returncode == 0, asked.stderr
    assert "teamrun retried retried: attempt 1 failed (" in asked.stdout
    status = await finished(kube, namespace, "retried", 120)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2, status
    (record,) = status["retries"]
    assert record["attempt"] == 1 and record["reason"] and record["requested"]
    assert status["failures"] == 0
    assert await effects.ledger() == ["a"]  # task A and its tool call were not run again
    again = await asyncio.to_thread(oma, "retry", "retried")
    assert again.returncode == 1
    assert "is Succeeded: only a Failed run can be retried (it succeeded)" in again.stderr
    missing = await asyncio.to_thread(oma, "retry", "nosuch")
    assert missing.returncode == 1 and "teamrun nosuch not found" in missing.stderr


@pytest.mark.timeout(180)
async def test_a_snapshot_too_large_to_poll_is_not_read_and_the_run_says_so(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """Issue 41: the operator never reads a whole checkpoint to poll. A snapshot-layout run
    (no journal head) whose snapshot is over the poll's limit (2 KiB here, 8 MiB by default)
    shows CheckpointPolled=False while it runs, and its progress (and CheckpointPolled=True) once
    its attempt ends."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": 6}}]},
        {"text": "done"},
    ]
    body = teamrun("bigsnap", script, effects)
    body["spec"]["store"]["layout"] = "snapshot"
    body["spec"]["tasks"][0]["description"] = "Record. " + "x" * 4096  # a snapshot over 2 KiB
    log = tmp_path / "operator.log"
    settings = OperatorSettings(progress_seconds=1, env={"OMA_POLL_READ_LIMIT_BYTES": "2048"})
    async with operating(cluster, kube, namespace, log, settings):
        await kube.create(TEAMRUNS.format(ns=namespace), body)

        async def not_polled() -> dict[str, Any] | None:
            status = await status_of(kube, namespace, "bigsnap")
            found = {c["type"]: c for c in status.get("conditions") or []}
            polled = found.get("CheckpointPolled")
            return status if polled is not None and polled["status"] == "False" else None

        waiting = await wait_for(not_polled, 60, "CheckpointPolled=False while the run waits")
        assert waiting["phase"] == "Running", waiting
        polled = next(c for c in waiting["conditions"] if c["type"] == "CheckpointPolled")
        assert polled["reason"] == "CheckpointTooLarge", polled
        assert "over 2048 bytes" in polled["message"] and "journal-layout" in polled["message"]
        assert "taskSummary" not in waiting and "lastCheckpointAt" not in waiting, waiting
        status = await finished(kube, namespace, "bigsnap", 120)
    assert status["phase"] == "Succeeded", status
    assert status["taskSummary"] == "1/1" and status["lastCheckpointAt"], status
    polled = next(c for c in status["conditions"] if c["type"] == "CheckpointPolled")
    assert (polled["status"], polled["reason"]) == ("True", "AttemptEnded"), polled


@pytest.mark.timeout(180)
async def test_json_logs_name_the_object_of_each_line_and_leave_api_requests_out(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """``logging.format=json`` (OMA_LOG_FORMAT): the operator writes one JSON object per line,
    those about a TeamRun or a pod with it under ``object``; no line per API request at the
    default level; and the runner pods it creates are told to log JSON too."""
    log = tmp_path / "operator.log"
    script: list[dict[str, Any]] = [{"text": "done"}]
    async with operating(cluster, kube, namespace, log, OperatorSettings(log_format="json")):
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("jsonlog", script, effects))
        status = await finished(kube, namespace, "jsonlog", 120)
    assert status["phase"] == "Succeeded", status
    lines = [line for line in (await asyncio.to_thread(log.read_text)).splitlines() if line]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == len(lines), [line for line in lines if not line.startswith("{")][:5]
    about = {
        (r["object"].get("kind"), r["object"].get("name"))
        for r in records
        if isinstance(r.get("object"), dict) and r["object"].get("namespace") == namespace
    }
    assert ("TeamRun", "jsonlog") in about and ("Pod", "jsonlog-a1") in about, about
    assert not [r for r in records if "HTTP Request" in str(r.get("message"))]
    pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/jsonlog-a1")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["OMA_LOG_FORMAT"]["value"] == "json"
    assert env["OMA_RUN_TEAMRUN"]["value"] == "jsonlog"


@pytest.mark.timeout(240)
async def test_an_operator_restarted_during_a_backoff_waits_out_the_rest_then_starts_once(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    e2e_redis: Endpoint,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """Attempt 1 crashes (its store is unreachable); the operator dies during the backoff and a
    new one finds the run with its next attempt not started: it waits out what is left of the
    backoff, then starts attempt 2 once. The TeamRun carries no copy of its spec written by the
    operator (kopf's ``last-handled-configuration``: a patch per TeamRun, not made)."""
    backoff = 20
    await _store_secret(kube, namespace, "store", "url", "redis://127.0.0.1:9/0")
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "b1", "name": "ledger_append", "input": {"entry": "once"}}]},
        {"text": "done"},
    ]
    body = teamrun("backoff", script, effects)
    body["spec"]["retryPolicy"] = {"backoffSeconds": backoff, "maxFailures": 1}
    async with operating(cluster, kube, namespace, tmp_path / "operator.log") as operator:
        await kube.create(TEAMRUNS.format(ns=namespace), body)

        async def attempt_1_ended() -> dict[str, Any] | None:
            attempts = (await status_of(kube, namespace, "backoff")).get("attempts") or []
            return attempts[0] if attempts else None

        first = await wait_for(attempt_1_ended, 90, "attempt 1 to crash")
        await operator.kill()
        await kube.patch(
            f"/api/v1/namespaces/{namespace}/secrets/store",
            {"data": {"url": base64.b64encode(e2e_redis.for_pods.encode()).decode()}},
        )
        assert await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/backoff-a2") is None
        await operator.start()
        status = await finished(kube, namespace, "backoff", 150)
    assert status["phase"] == "Succeeded", status
    assert (first["outcome"], status["attempt"]) == ("crash", 2)
    await assert_started_after_backoff(kube, namespace, "backoff-a2", first, backoff)
    names = {p["metadata"]["name"] for p in await runner_pods(kube, namespace)}
    assert "backoff-a3" not in names
    assert await effects.ledger() == ["once"]
    stored = await kube.get(f"{TEAMRUNS.format(ns=namespace)}/backoff")
    annotations = stored["metadata"].get("annotations") or {}
    assert not [key for key in annotations if key.startswith("kopf.zalando.org/")], annotations


@pytest.mark.timeout(240)
async def test_kubelet_eviction_resumes_from_the_last_checkpoint(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "k1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "k2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "done"},
    ]
    if cluster.real_node:
        script[1]["delay"] = 45  # the kubelet looks at disk usage every 10 s or so
    body = teamrun("kubelet", script, effects)
    if cluster.real_node:  # the real kubelet evicts a pod over its local-storage limit
        body["spec"]["runner"]["resources"] = {"limits": {"ephemeral-storage": "10Mi"}}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def first_recorded() -> bool:
        return await effects.ledger() == ["first"]

    await wait_for(first_recorded, 90, "the first ledger entry")
    await cluster.kubelet_evict(kube, namespace, "kubelet-a1")
    status = await finished(kube, namespace, "kubelet", 180)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2
    assert (status["attempts"][0]["outcome"], status["attempts"][0]["reason"]) == (
        "disruption",
        "Evicted",
    )
    assert await effects.ledger() == ["first", "second"]


@pytest.mark.timeout(240)
async def test_operator_restart_mid_run_loses_no_outcome(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "o1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "o2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 3,
        },
        {"text": "done"},
    ]
    log = tmp_path / "operator.log"
    async with operating(cluster, kube, namespace, log) as operator:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("restart", script, effects))

        async def first_recorded() -> bool:
            return await effects.ledger() == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        await operator.kill()  # the operator dies; the eviction below happens while it is away
        await evict(kube, namespace, "restart-a1")

        async def a1_ended() -> bool:
            pod = await get_or_none(kube, f"/api/v1/namespaces/{namespace}/pods/restart-a1")
            return pod is not None and pod["status"].get("phase") == "Failed"

        await wait_for(a1_ended, 60, "attempt 1 to end while the operator is down")
        await operator.start()
        status = await finished(kube, namespace, "restart", 180)
    assert status["phase"] == "Succeeded" and status["attempt"] == 2
    assert [a["attempt"] for a in status["attempts"]] == [1, 2]  # recorded once each
    names = {p["metadata"]["name"] for p in await runner_pods(kube, namespace)}
    assert "restart-a2" in names and "restart-a3" not in names  # no duplicate attempt
    assert await effects.ledger() == ["first", "second"]


DECISION_COLUMNS = ["NAME", "TEAMRUN", "SCOPE", "DECISION", "REVIEWER", "EXPIRES", "AGE"]
DECISION_WIDE = [*DECISION_COLUMNS, "REQUESTED", "VERIFIED", "REQUEST"]  # kubectl get -o wide
AGE = re.compile(r"\d+[smhd]\S*")  # kubectl's ages: 5s, 2m3s, 4h, 3d


def test_the_expected_columns_are_the_shipped_crds_columns() -> None:
    """What the e2e below expects of ``kubectl get`` (and ``-o wide``, which adds the columns
    of priority 1) is what crds/ defines (NAME comes first)."""
    for crd, expected, wide in (
        ("teamruns.oma.dev.yaml", TEAMRUN_COLUMNS, TEAMRUN_WIDE),
        ("approvaldecisions.oma.dev.yaml", DECISION_COLUMNS, DECISION_WIDE),
    ):
        body = yaml.safe_load((REPO / "crds" / crd).read_text())
        (version,) = body["spec"]["versions"]
        columns = version["additionalPrinterColumns"]
        assert ["NAME", *[c["name"].upper() for c in columns if not c.get("priority")]] == expected
        assert ["NAME", *[c["name"].upper() for c in columns]] == wide


@pytest.mark.timeout(240)
async def test_kubectl_get_shows_phase_attempt_tasks_approvals_and_checkpoint(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "p1", "name": "ledger_append", "input": {"entry": "paid"}}]},
        {"text": "paid"},
    ]
    body = teamrun("shown", script, effects)
    body["spec"]["approvals"] = {"tools": ["ledger_append"]}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def pending_decision() -> str | None:
        listed = await kube.get(
            f"/apis/oma.dev/v1alpha1/namespaces/{namespace}/approvaldecisions",
            labelSelector="oma.dev/teamrun=shown",
        )
        items = listed.get("items") or []
        return str(items[0]["metadata"]["name"]) if items else None

    decision = await wait_for(pending_decision, 90, "the ApprovalDecision")

    async def awaiting() -> bool:
        return (await status_of(kube, namespace, "shown")).get("phase") == "AwaitingApproval"

    await wait_for(awaiting, 30, "the run to await approval")
    (suspended,) = tables(await kubectl(cluster, namespace, "get", "teamruns"))
    assert suspended[0] == TEAMRUN_COLUMNS
    assert suspended[1][:5] == ["shown", "AwaitingApproval", "1", "0/1", "1"], suspended
    (pending,) = tables(await kubectl(cluster, namespace, "get", "ad"))
    assert pending[0] == DECISION_COLUMNS and len(pending) == 2
    assert pending[1][:6] == [decision, "shown", "tool_call", "Pending", "", ""], pending
    assert AGE.fullmatch(pending[1][6]), pending  # no approvals.expireAfterSeconds: no Expires

    user = await kubectl(
        cluster, namespace, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
    )
    patch = json.dumps({"spec": {"decision": "Approved", "reviewer": user}})
    await kubectl(cluster, namespace, "patch", "ad", decision, "--type=merge", "-p", patch)
    status = await finished(kube, namespace, "shown", 150)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))

    listings = {
        name: tables(await kubectl(cluster, namespace, "get", name))
        for name in ("teamruns", "omatr", "oma")
    }
    for name in ("teamruns", "omatr"):
        (listed,) = listings[name]
        assert listed[0] == TEAMRUN_COLUMNS and len(listed) == 2, (name, listed)
        row = listed[1]
        assert row[:5] == ["shown", "Succeeded", "2", "1/1", "0"], (name, row)
        assert row[5] == "", (name, row)  # no spec.budget: no spend
        assert AGE.fullmatch(row[6]) and AGE.fullmatch(row[7]), (name, row)  # checkpoint, run
    # The category lists both kinds, each in its own table with its own columns.
    by_kind = {table[1][0].split("/")[0]: table for table in listings["oma"]}
    assert sorted(by_kind) == ["approvaldecision.oma.dev", "teamrun.oma.dev"], listings["oma"]
    runs, decisions = by_kind["teamrun.oma.dev"], by_kind["approvaldecision.oma.dev"]
    assert runs[0] == TEAMRUN_COLUMNS and len(runs) == 2
    assert runs[1][:5] == ["teamrun.oma.dev/shown", "Succeeded", "2", "1/1", "0"], runs
    (wide,) = tables(await kubectl(cluster, namespace, "get", "teamruns", "-o", "wide"))
    assert wide[0] == TEAMRUN_WIDE and len(wide) == 2, wide
    status = await status_of(kube, namespace, "shown")
    assert wide[1][8:11] == [status["runId"], "0", "0"], wide  # run id, disruptions, failures
    assert AGE.fullmatch(runs[1][6]) and AGE.fullmatch(runs[1][7]), runs
    assert decisions[0] == DECISION_COLUMNS and len(decisions) == 2
    assert decisions[1][:5] == [
        f"approvaldecision.oma.dev/{decision}",
        "shown",
        "tool_call",
        "Approved",
        user,
    ], decisions
    assert await effects.ledger() == ["paid"]


async def _store_secret(kube: KubeClient, namespace: str, name: str, key: str, value: str) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {key: base64.b64encode(value.encode()).decode()},
        },
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize("example", ["teamrun.yaml", "teamrun-postgres.yaml"])
async def test_the_shipped_examples_succeed(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    example: str,
    request: pytest.FixtureRequest,
) -> None:
    """``kubectl apply -f examples/...`` as shipped: only the Secret it names is ours (pointing
    at the test's Redis or PostgreSQL); the image is the operator's default. The Redis example
    keeps its ledger in that Redis (``oma:ledger``), where it is read back."""
    path = REPO / "examples" / "kubernetes" / example
    body = yaml.safe_load(path.read_text())
    store = body["spec"]["store"]
    assert "image" not in (body["spec"].get("runner") or {})  # nothing to substitute there
    if "redis" in store:
        server: Endpoint = request.getfixturevalue("e2e_redis")
        ref = store["redis"]["urlSecretRef"]
    else:
        server = request.getfixturevalue("e2e_postgres")
        ref = store["postgres"]["dsnSecretRef"]
    await _store_secret(kube, namespace, ref["name"], ref["key"], server.for_pods)
    ledger = RecordLocation(url=server.for_tests, key="oma:ledger")
    if "redis" in store:
        await _clear_ledger(ledger)
    try:
        await kubectl(cluster, namespace, "apply", "-f", str(path))
        name = body["metadata"]["name"]
        status = await finished(kube, namespace, name, 150)
        assert status["phase"] == "Succeeded", (status, await operator_log(operator))
        assert status["runId"] == body["spec"]["runId"]
        assert status["attempt"] == 1 and status["taskSummary"] == "2/2"
        assert [a["outcome"] for a in status["attempts"]] == ["succeeded"]
        if "redis" in store:
            entries = [record["entry"] for record in await records.read(ledger)]
            assert entries == ["fact: checkpoints are snapshots", "draft written"]
    finally:
        if "redis" in store:
            await _clear_ledger(ledger)
        if "postgres" in store:
            await _drop_schema(server.for_tests, store["postgres"]["schema"])


async def _clear_ledger(ledger: RecordLocation) -> None:
    """The example's ledger list has the tools' default name: start and leave it empty."""
    import redis.asyncio as aioredis

    assert ledger.url is not None
    async with aioredis.Redis.from_url(ledger.url) as client:
        await client.delete(ledger.key, f"{ledger.key}:keys")


async def _drop_schema(dsn: str, schema: str) -> None:
    """The example's schema is named like the test server's user (``oma``), and PostgreSQL's
    default search_path starts with ``"$user"``: left behind, it would become where every later
    store without a schema resolves its unqualified table, in other tests."""
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


async def attempt_log(
    redis: Endpoint, body: dict[str, Any], namespace: str
) -> list[dict[str, Any]]:
    """The run's attempt log, read from its store (what each attempt found done when it began)."""
    from oma.checkpoint.attempts import load_attempt_log
    from oma.checkpoint.keys import checkpoint_key

    store = teamrun_store(redis, body, namespace)
    try:
        log = await load_attempt_log(store, checkpoint_key(body["spec"]["runId"]))
    finally:
        await store.aclose()
    assert log is not None
    return [record.model_dump() for record in log.attempts]


@pytest.mark.timeout(240)
async def test_eviction_in_task_2_reruns_neither_task_1_nor_committed_calls(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """``tally`` adds a line on every run (no idempotency key), so a line appearing twice would
    show a re-executed call: task 1's call, or task 2's call committed before the eviction."""
    body = teamrun("two", [], effects)
    body["spec"]["team"]["agents"] = [
        {
            "name": "first",
            "tools": ["tally"],
            "model": {
                "provider": "scripted",
                "script": [
                    {"tool_calls": [{"id": "t1", "name": "tally", "input": {"item": "one"}}]},
                    {"text": "one counted"},
                ],
            },
        },
        {
            "name": "second",
            "tools": ["tally"],
            "model": {
                "provider": "scripted",
                "script": [
                    {"tool_calls": [{"id": "t2a", "name": "tally", "input": {"item": "two-a"}}]},
                    {
                        "tool_calls": [{"id": "t2b", "name": "tally", "input": {"item": "two-b"}}],
                        "delay": 4,
                    },
                    {"text": "two counted"},
                ],
            },
        },
    ]
    body["spec"]["tasks"] = [
        {"title": "One", "description": "Count one.", "assignee": "first"},
        {"title": "Two", "description": "Count two.", "assignee": "second", "dependsOn": ["One"]},
    ]
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def task_2_committed_once() -> bool:
        return [line["item"] for line in await effects.tally()] == ["one", "two-a"]

    await wait_for(task_2_committed_once, 90, "task 1 done and task 2's first call")
    await evict(kube, namespace, "two-a1")
    status = await finished(kube, namespace, "two", 180)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 2 and status["taskSummary"] == "2/2"
    first, second = status["attempts"]
    assert (first["attempt"], first["outcome"], first["reason"]) == (
        1,
        "disruption",
        "EvictionByEvictionAPI",
    )
    assert first["exitCode"] == 11 and (second["attempt"], second["outcome"]) == (2, "succeeded")
    lines = await effects.tally()
    assert [line["item"] for line in lines] == ["one", "two-a", "two-b"]  # each call ran once
    assert len({line["call"] for line in lines}) == 3
    # What the store says each attempt found: attempt 2 began with task 1 completed (not to be
    # run again) and task 2 in flight (continued from its conversation, first call included).
    log = await attempt_log(e2e_redis, body, namespace)
    assert [r["attempt"] for r in log] == [1, 2]
    assert (log[0]["completed_tasks"], log[0]["total_tasks"]) == (0, 2)
    assert (log[1]["completed_tasks"], log[1]["total_tasks"], log[1]["in_flight_tasks"]) == (
        1,
        2,
        1,
    )
    assert log[1]["host"] == "two-a2" and log[0]["host"] == "two-a1"


@pytest.mark.timeout(180)
async def test_a_single_crash_is_retried_after_the_backoff_and_resumes(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """The runner's container is killed (SIGKILL from outside, exit 137) mid-task: a crash,
    retried after the backoff, resuming after the committed call."""
    backoff = 5
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "b1", "name": "ledger_append", "input": {"entry": "before"}}]},
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": 10}}]},
        {"tool_calls": [{"id": "b2", "name": "ledger_append", "input": {"entry": "after"}}]},
        {"text": "done"},
    ]
    body = teamrun("crash", script, effects)
    body["spec"]["retryPolicy"] = {"backoffSeconds": backoff, "maxFailures": 1}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def before() -> bool:
        return await effects.ledger() == ["before"]

    await wait_for(before, 90, "attempt 1's first entry")
    await cluster.kill_container(kube, namespace, "crash-a1")
    status = await finished(kube, namespace, "crash", 150)
    assert status["phase"] == "Succeeded", (status, await operator_log(operator))
    assert status["attempt"] == 2 and status["failures"] == 1 and status["disruptions"] == 0
    first, second = status["attempts"]
    assert (first["attempt"], first["outcome"], first["exitCode"]) == (1, "crash", 137)
    assert second["outcome"] == "succeeded"
    assert await effects.ledger() == ["before", "after"]
    await assert_started_after_backoff(kube, namespace, "crash-a2", first, backoff)
