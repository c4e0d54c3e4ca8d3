"""When the store forgets, or another writer takes the run's checkpoint, the TeamRun ends with a
condition that says so, and nothing is paid twice; store settings and names a store or a pod
would refuse are refused by the API server, or end Failed with the store's message (real API
server, operator, runner pods)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from oma.checkpoint import Checkpoint
from oma.checkpoint.journal import load_journal
from oma.checkpoint.keys import checkpoint_key
from oma.store.journal import new_version
from tests.cluster.approval_kit import gated, pending_decision
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.helpers import event_counts, evict, runner_pods, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    operator_log,
    redis_secret,
    status_of,
    store_secret,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, operating

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
SECRET = "/api/v1/namespaces/{ns}/secrets/store"
REF = {"name": "store", "key": "url"}


def _pay(entry: str, call: str) -> dict[str, Any]:
    return {"id": call, "name": "ledger_append", "input": {"entry": entry, "amount": 1}}


async def _wait_ledger(effects: SideEffects, expected: list[str]) -> None:
    async def there() -> bool:
        return await effects.ledger() == expected

    await wait_for(there, 90, f"the ledger to read {expected}")


@pytest.mark.timeout(240)
async def test_a_store_that_forgot_between_attempts_ends_checkpoint_lost_and_pays_nothing_again(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """Attempt 1 pays and is evicted (its checkpoint flushed on the way out); the store then
    loses everything, as a Redis without persistence does on restart. Attempt 2 is told that a
    checkpoint was saved, finds none, and stops: no second payment, TeamRun Failed
    CheckpointLost with what to do."""
    # The wait ends within the grace period: the evicted runner drains, saves and reports
    # that it checkpointed (the operator cannot read the store itself while its Secret is gone).
    script: list[dict[str, Any]] = [
        {"tool_calls": [_pay("pay-bob", "p1")]},
        {"tool_calls": [{"id": "w1", "name": "wait", "input": {"seconds": 5}}]},
        {"text": "paid"},
    ]
    body = teamrun("forgot", script, effects)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    await _wait_ledger(effects, ["pay-bob"])
    # Attempt 2's pod waits for the store Secret (CreateContainerConfigError) until the store
    # has been emptied: the order of the story is fixed, not raced.
    secret = await kube.get(SECRET.format(ns=namespace))
    await kube.delete(SECRET.format(ns=namespace))
    await evict(kube, namespace, "forgot-a1")

    async def attempt_2_waits() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "forgot")
        return status if status.get("attempt") == 2 and status.get("attempts") else None

    status = await wait_for(attempt_2_waits, 90, "attempt 1 recorded and attempt 2 created")
    assert status["checkpointSaved"] is True, status
    assert status["attempts"][0]["outcome"] == "disruption"
    store = teamrun_store(e2e_redis, body, namespace)
    try:
        assert await Checkpoint(store, run_id=body["spec"]["runId"]).load_latest() is not None
        await store.inner.clear()  # the store forgets: checkpoint, attempt log, everything
    finally:
        await store.aclose()
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {k: secret[k] for k in ("apiVersion", "kind", "data")} | {"metadata": {"name": "store"}},
    )
    status = await finished(kube, namespace, "forgot", 120)
    assert status["phase"] == "Failed", (status, await operator_log(operator))
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "CheckpointLost", failed
    assert "is missing from the store" in failed["message"]
    assert "Restore the store from a backup" in failed["message"]
    assert [(a["attempt"], a["exitCode"]) for a in status["attempts"]] == [(1, 11), (2, 13)]
    assert await effects.ledger() == ["pay-bob"]  # attempt 2 paid nothing
    assert "AttemptPermanent" in await event_counts(kube, namespace, "forgot")


@pytest.mark.timeout(180)
async def test_fenced_without_a_successor_ends_superseded_within_bounded_time(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """Another writer (a second TeamRun or an ``oma run`` on the same store and run id)
    replaces the checkpoint mid-run (a new journal base): the attempt stops before its next
    tool, and since no newer attempt of this TeamRun exists, the TeamRun ends Failed
    (Superseded), never Running without a pod."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [_pay("first", "p1")]},
        {"tool_calls": [_pay("second", "p2")], "delay": 6},
        {"text": "paid"},
    ]
    body = teamrun("taken", script, effects)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    await _wait_ledger(effects, ["first"])
    key = checkpoint_key(body["spec"]["runId"])
    store = teamrun_store(e2e_redis, body, namespace)
    try:
        found = await load_journal(store, key)  # TeamRuns keep journals by default
        head = await store.journal_head(key)
        assert found is not None and head is not None
        other = found[0]
        other["createdAt"] = "2026-01-01T00:00:00.000Z"  # another writer's snapshot
        assert await store.journal_write(
            key,
            [json.dumps(other)],
            version=new_version(),
            expected=head.version,
            replace=True,
            metadata=head.metadata,
        )
    finally:
        await store.aclose()
    status = await finished(kube, namespace, "taken", 90)
    assert status["phase"] == "Failed", (status, await operator_log(operator))
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "Superseded", failed
    assert "no newer attempt of this TeamRun exists" in failed["message"]
    assert [(a["attempt"], a["exitCode"]) for a in status["attempts"]] == [(1, 12)]
    assert await effects.ledger() == ["first"]  # the second payment never ran


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"postgres": {"dsnSecretRef": {"name": "s", "key": "k"}, "table": "t" * 49}}, "table"),
        (
            {"postgres": {"dsnSecretRef": {"name": "s", "key": "k"}, "schema": "my-schema"}},
            "schema",
        ),
        ({"redis": {"urlSecretRef": {"name": "s", "key": "k"}, "namespace": "a{b}"}}, "namespace"),
    ],
)
async def test_store_settings_a_store_would_refuse_are_refused_by_the_api_server(
    kube: KubeClient, namespace: str, crds_installed: None, change: dict[str, Any], message: str
) -> None:
    body = teamrun("settings", [{"text": "x"}])
    body["spec"]["store"] = change
    with pytest.raises(ApiError) as caught:
        await kube.create(TEAMRUNS.format(ns=namespace), body)
    assert caught.value.status == 422 and message in str(caught.value), caught.value


async def test_a_name_too_long_for_its_pods_is_refused_and_one_at_the_limit_is_not(
    kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    with pytest.raises(ApiError) as caught:
        await kube.create(TEAMRUNS.format(ns=namespace), teamrun("n" * 53, [{"text": "x"}]))
    assert caught.value.status == 422 and "at most 52 characters" in str(caught.value)
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("n" * 52, [{"text": "x"}]))


@pytest.mark.timeout(120)
async def test_a_store_url_no_store_speaks_ends_failed_with_the_stores_message_and_deletes(
    kube: KubeClient, namespace: str, operator: Path, effects: SideEffects
) -> None:
    await kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "store"},
            "stringData": {"url": "http://user:hunter2@cache.example:6379/0"},
        },
    )
    await kube.create(TEAMRUNS.format(ns=namespace), teamrun("web", [{"text": "x"}], effects))
    status = await finished(kube, namespace, "web", 90)
    assert status["phase"] == "Failed" and status["attempt"] == 1, status
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    message = failed["message"]
    assert "STORE_CONFIG" in message and "is not a redis:// or rediss:// URL" in message, message
    assert "hunter2" not in json.dumps(status)
    await kube.delete(f"{TEAMRUNS.format(ns=namespace)}/web")

    async def gone() -> bool:
        teamruns = await kube.get(TEAMRUNS.format(ns=namespace))
        return not await runner_pods(kube, namespace) and not teamruns["items"]

    await wait_for(gone, 60, "the TeamRun and its pod to be deleted")


def _occurrences(text: str, value: str) -> list[int]:
    return [i for i in range(len(text)) if text.startswith(value, i)]


@pytest.mark.timeout(180)
async def test_a_store_secret_holding_a_password_or_a_file_url_shows_nothing_of_it(
    kube: KubeClient, namespace: str, operator: Path, effects: SideEffects
) -> None:
    """Attack 6 of issue 41: a urlSecretRef naming the key of a bare password put it verbatim in
    the status, three conditions, two Events and the operator log; a file:// URL was opened.
    Both now end Failed with what is wrong, and nothing of the value anywhere."""
    password = f"Tr0ub4dor-{uuid.uuid4().hex[:12]}"
    canary = f"/etc/oma-canary-{uuid.uuid4().hex[:12]}"
    values = {"store": password, "files": f"file://{canary}"}
    for name, url in values.items():
        await store_secret(kube, namespace, url, name)
        body = teamrun(name, [{"text": "x"}], effects)
        body["spec"]["store"]["redis"]["urlSecretRef"]["name"] = name
        await kube.create(TEAMRUNS.format(ns=namespace), body)
    problems = {"store": "is not a URL (no scheme://)", "files": "has scheme 'file'"}
    for name, problem in problems.items():
        status = await finished(kube, namespace, name, 90)
        assert status["phase"] == "Failed", status
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert problem in failed["message"], failed
    everything = json.dumps(
        [
            await kube.get(TEAMRUNS.format(ns=namespace)),
            await kube.get(f"/api/v1/namespaces/{namespace}/events"),
            await kube.get(f"/api/v1/namespaces/{namespace}/pods"),
        ]
    ) + await operator_log(operator)
    for value in (password, canary):
        found = [everything[max(0, i - 300) : i + 100] for i in _occurrences(everything, value)]
        assert not found, found


@pytest.mark.timeout(180)
async def test_an_error_in_the_operators_own_loops_is_a_condition_and_an_event(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """The approval poll cannot open the store (its Secret is gone): the TeamRun shows
    ``Reconciled=False`` with the API's message and a Warning ``OperatorError``, not only a log
    line; once the Secret is back, ``Reconciled`` turns True and the run goes on."""
    log = tmp_path / "operator.log"
    fast = OperatorSettings(env={"OMA_SECRET_TTL_SECONDS": "1"})
    async with operating(cluster, kube, namespace, log, fast):
        await kube.create(TEAMRUNS.format(ns=namespace), gated("held", effects, "paid"))
        decision = await pending_decision(kube, namespace, "held")
        secret = await kube.get(SECRET.format(ns=namespace))
        await kube.delete(SECRET.format(ns=namespace))

        async def reported() -> dict[str, Any] | None:
            status = await status_of(kube, namespace, "held")
            found = [c for c in status.get("conditions") or [] if c["type"] == "Reconciled"]
            return found[0] if found and found[0]["status"] == "False" else None

        reconciled = await wait_for(reported, 60, "Reconciled=False on the TeamRun")
        assert reconciled["reason"] == "OperatorError"
        assert "periodic work 'approvals'" in reconciled["message"]
        assert "store" in reconciled["message"] and "not found" in reconciled["message"]
        assert "OperatorError" in await event_counts(kube, namespace, "held")
        await kube.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {k: secret[k] for k in ("apiVersion", "kind", "data")}
            | {"metadata": {"name": "store"}},
        )

        async def recovered() -> bool:
            status = await status_of(kube, namespace, "held")
            found = [c for c in status.get("conditions") or [] if c["type"] == "Reconciled"]
            return bool(found) and found[0]["status"] == "True"

        await wait_for(recovered, 60, "Reconciled=True once the store opens again")
        assert (await status_of(kube, namespace, "held"))["phase"] == "AwaitingApproval"
        assert decision["status"]["verified"]  # the request itself was never in doubt
