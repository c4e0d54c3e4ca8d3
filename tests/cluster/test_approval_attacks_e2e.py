"""Approvals on Kubernetes, attacked as a hostile user would, with the shipped admission policies:
a forged ApprovalDecision, a resource bound to another run's request, a decision prepared for the
reviewer, a tool input too long for the summary, a store-side decision while pods are refused.
Each ends with the payment not made and the request pending (or the write refused), and the
legitimate reviewer's decision still works, with kubectl and with oma approve. Reviewers named by
group, and separation of duties from the TeamRun's creator, are enforced by the API server."""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from tests.cluster.approval_kit import (
    ADMISSION,
    DECISIONS,
    KUBECTL_PATCH,
    REVIEWER_VERBS,
    admission_policies,
    approve_argv,
    approve_in_store,
    as_user,
    creator_recorded,
    forged_pod,
    gated,
    grant,
    grant_reviewers,
    kubectl_as,
    ledger_row,
    pending_decision,
    polled,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects
from tests.cluster.helpers import event_counts, oma, run_tool, runner_pods, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
)
from tests.cluster.operators import OperatorSettings, operating

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster


async def _grant_writers(kube: KubeClient, namespace: str, *users: str) -> None:
    """Users who may create and edit ApprovalDecisions (but hold no 'publish' verb)."""
    rules = [
        {
            "apiGroups": ["oma.dev"],
            "resources": ["approvaldecisions"],
            "verbs": [*REVIEWER_VERBS, "create", "delete"],
        }
    ]
    await grant(kube, namespace, "writers", rules, users)


def _path(namespace: str, name: str) -> str:
    return f"{DECISIONS.format(ns=namespace)}/{name}"


async def _still_waiting(
    kube: KubeClient, namespace: str, teamrun: str, decision: dict[str, Any], effects: SideEffects
) -> None:
    """After a few approval polls: nothing paid, the run still waiting, the request pending.
    (A window in which nothing may happen, not an ordering: its end is the operator's third
    look at the request since what it must not act on, whatever it did then is done.)"""
    await polled(kube, namespace, decision, 3)
    status = await status_of(kube, namespace, teamrun)
    assert status["phase"] == "AwaitingApproval" and status["attempt"] == 1, status
    assert await effects.ledger() == []
    real = await kube.get(_path(namespace, decision["metadata"]["name"]))
    assert (real["spec"]["decision"], real["status"]["decision"]) == ("Pending", "Pending")


@pytest.mark.timeout(300)
async def test_forged_approval_decisions_decide_nothing(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    await _grant_writers(kube, namespace, "mallory")
    await kube.create(TEAMRUNS.format(ns=namespace), gated("pay-x", effects, "ok", "charge-x"))
    await kube.create(TEAMRUNS.format(ns=namespace), gated("pay-y", effects, "ok", "charge-y"))
    real_x = await pending_decision(kube, namespace, "pay-x")
    real_y = await pending_decision(kube, namespace, "pay-y")

    # 1. A user who may create ApprovalDecisions, but is not the operator, forges a decided one
    #    labelled and owned like the real one, in a reviewer's name; or a Pending one to squat.
    forged = copy.deepcopy(real_x)
    forged["metadata"] = {
        "name": "pay-x-forged",
        "labels": real_x["metadata"]["labels"],
        "ownerReferences": real_x["metadata"]["ownerReferences"],
    }
    forged.pop("status")
    forged["spec"] |= {"decision": "Approved", "reviewer": "alice"}
    async with as_user(cluster, "mallory") as mallory:
        for spec in (forged["spec"], {**real_x["spec"], "decision": "Pending"}):
            with pytest.raises(ApiError) as refused:
                await mallory.create(DECISIONS.format(ns=namespace), {**forged, "spec": spec})
            assert refused.value.status == 403, refused.value
            assert "only the oma operator creates ApprovalDecisions" in str(refused.value)

    # 2. Without the policy's protection (the admin holds every verb), a resource labelled for
    #    TeamRun X but carrying Y's request id and hash, decided by its author: ignored by the
    #    operator, which says so in its status and in an Event.
    stray = copy.deepcopy(forged)
    stray["spec"] = {**real_y["spec"], "decision": "Pending"}
    await kube.create(DECISIONS.format(ns=namespace), stray)
    await kube.patch(
        _path(namespace, "pay-x-forged"), {"spec": {"decision": "Approved", "reviewer": "admin"}}
    )

    async def ignored() -> dict[str, Any] | None:
        status = (await kube.get(_path(namespace, "pay-x-forged"))).get("status") or {}
        return status if status.get("verified") is False else None

    status = await wait_for(ignored, 30, "the operator to mark the forged resource")
    assert "ignored" in status["message"] and "decides nothing" in status["message"]
    assert "ApprovalDecisionIgnored" in await event_counts(kube, namespace, "pay-x")
    await _still_waiting(kube, namespace, "pay-x", real_x, effects)
    await _still_waiting(kube, namespace, "pay-y", real_y, effects)

    # The reviewer's own decisions still work: kubectl patch for X, oma approve for Y.
    await run_tool(*approve_argv(cluster, "alice", namespace, real_x["metadata"]["name"]))
    done = await oma(
        cluster.mint_kubeconfig("alice"), "approve", real_y["metadata"]["name"], "-n", namespace
    )
    assert done.returncode == 0, done.stderr
    for name in ("pay-x", "pay-y"):
        assert (await finished(kube, namespace, name, 150))["phase"] == "Succeeded"
    assert sorted(await effects.ledger()) == ["charge-x", "charge-y"]


@pytest.mark.timeout(300)
async def test_a_decision_whose_owner_and_finalizers_were_tampered_with_is_put_back(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 4: a reviewer of another run removed a pending decision's owner reference and
    added a finalizer. The operator deleted it (it stayed Terminating) and never published
    the request again, while the real reviewer's oma approve said "approved". Now the
    operator puts its own resource back, and the real reviewer's decision counts."""
    await grant_reviewers(kube, namespace, "alice", "mallory")
    await kube.create(TEAMRUNS.format(ns=namespace), gated("pay-t", effects, "ok", "charge-t"))
    decision = await pending_decision(kube, namespace, "pay-t")
    path = _path(namespace, decision["metadata"]["name"])
    tampering = {"metadata": {"ownerReferences": None, "finalizers": ["example.com/keep"]}}
    async with as_user(cluster, "mallory") as mallory:
        tampered = await mallory.patch(path, tampering)
    assert not tampered["metadata"].get("ownerReferences"), tampered["metadata"]

    async def put_back() -> dict[str, Any] | None:
        found = await kube.get(path)
        meta = found["metadata"]
        owners = [o["uid"] for o in meta.get("ownerReferences") or [] if o.get("controller")]
        return found if owners and not meta.get("finalizers") else None

    repaired = await wait_for(put_back, 60, "the operator to put the decision back")
    assert repaired["metadata"]["uid"] == decision["metadata"]["uid"]  # the same, not replaced
    assert not repaired["metadata"].get("deletionTimestamp")
    assert "ApprovalDecisionRepaired" in await event_counts(kube, namespace, "pay-t")
    assert await effects.ledger() == []
    done = await oma(
        cluster.mint_kubeconfig("alice"), "approve", path.rsplit("/", 1)[1], "-n", namespace
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("approved by alice\n")
    assert (await finished(kube, namespace, "pay-t", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == ["charge-t"]


@pytest.mark.timeout(300)
async def test_a_decision_cannot_be_prepared_for_the_reviewer(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """3. Someone who may edit the resource sets reason, resolution or result while it is
    Pending, hoping the reviewer's later decision carries them: refused by the API server."""
    await grant_reviewers(kube, namespace, "alice")
    await _grant_writers(kube, namespace, "mallory")
    body = gated("prep", effects, "charged")
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await pending_decision(kube, namespace, "prep")
    path = _path(namespace, decision["metadata"]["name"])
    async with as_user(cluster, "mallory") as mallory:
        for prepared in (
            {"reason": "approved by the board"},
            {"reviewer": "alice"},
            {"resolution": "Done", "result": "paid already"},
        ):
            with pytest.raises(ApiError) as refused:
                await mallory.patch(path, {"spec": prepared})
            assert refused.value.status == 422, refused.value
            assert "set together with the decision" in str(refused.value), refused.value
    await _still_waiting(kube, namespace, "prep", decision, effects)

    done = await oma(
        cluster.mint_kubeconfig("alice"),
        "approve",
        decision["metadata"]["name"],
        "-n",
        namespace,
        "--reason",
        "my own words",
    )
    assert done.returncode == 0, done.stderr
    assert (await finished(kube, namespace, "prep", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == ["charge"]
    row = await ledger_row(e2e_redis, body, namespace, decision["spec"]["requestId"])
    assert (row.decision.reviewer.id, row.decision.reason) == ("alice", "my own words")


@pytest.mark.timeout(300)
async def test_a_tool_input_too_long_for_the_summary_is_shown_whole_before_approving(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """4. The destination of a transfer sits past the summary's 16 KiB: the summary says it is
    cut and where the rest is, keeps the hash, and oma approve prints the whole content."""
    await grant_reviewers(kube, namespace, "alice")
    entry = "wire 7 EUR; memo " + "x" * 20_000 + " to ACME-EVIL-IBAN"
    await kube.create(TEAMRUNS.format(ns=namespace), gated("wire", effects, "sent", entry))
    decision = await pending_decision(kube, namespace, "wire")
    spec = decision["spec"]
    assert "ACME-EVIL-IBAN" not in spec["summary"]
    assert "SUMMARY CUT after" in spec["summary"] and "oma approve prints it" in spec["summary"]
    assert spec["summary"].endswith(f"Content hash: {spec['requestHash']}")
    assert "ACME-EVIL-IBAN" in spec["content"]
    done = await oma(
        cluster.mint_kubeconfig("alice"), "approve", decision["metadata"]["name"], "-n", namespace
    )
    assert done.returncode == 0, done.stderr
    assert "Exact content (checked against the hash):" in done.stdout
    assert f'"entry": "{entry}"' in done.stdout  # every character, the tail included
    assert done.stdout.endswith("approved by alice\n")
    assert (await finished(kube, namespace, "wire", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == [entry]


@pytest.mark.timeout(300)
async def test_a_store_decision_while_pods_are_refused_resumes_once_they_are_allowed(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    """5. The decision arrives through the operator's poll (outside any kopf handler) while a
    quota refuses pods: the refusal is a PodCreated=False condition and a Warning Event, the
    creation is retried, and once pods are allowed the run resumes and succeeds."""
    body = gated("quota", effects, "charged")
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await pending_decision(kube, namespace, "quota")
    quota_path = f"/api/v1/namespaces/{namespace}/resourcequotas"
    await kube.create(
        quota_path,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-pods"},
            "spec": {"hard": {"pods": "0"}},
        },
    )
    await approve_in_store(e2e_redis, body, namespace, decision)

    async def refused() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "quota")
        found = {c["type"]: c for c in status.get("conditions") or []}.get("PodCreated")
        return found if found and found["status"] == "False" else None

    condition = await wait_for(refused, 60, "the PodCreated=False condition")
    assert "quota" in condition["message"], condition
    status = await status_of(kube, namespace, "quota")
    assert (status["phase"], status["attempt"]) == ("Running", 2)

    async def warned() -> bool:
        return "PodCreateFailed" in await event_counts(kube, namespace, "quota")

    await wait_for(warned, 30, "the PodCreateFailed event")
    await kube.delete(f"{quota_path}/no-pods")
    final = await finished(kube, namespace, "quota", 150)
    assert final["phase"] == "Succeeded" and final["attempt"] == 2, final
    assert await effects.ledger() == ["charge"]
    counts = await event_counts(kube, namespace, "quota")
    assert counts.get("Resumed") == 1 and "AttemptStarted" not in counts, counts
    assert counts.get("PodCreated") == 1, counts  # the refusals answered


@pytest.mark.timeout(300)
async def test_reviewers_named_by_group_refuse_members_of_other_groups(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, groups=("treasury", "sales"))
    reviewers = {"reviewers": {"tools": {"ledger_append": {"groups": ["treasury"]}}}}
    await kube.create(
        TEAMRUNS.format(ns=namespace), gated("grp", effects, "charged", approvals=reviewers)
    )
    decision = await pending_decision(kube, namespace, "grp")
    assert decision["spec"]["reviewers"] == {"groups": ["treasury"]}
    name = decision["metadata"]["name"]
    refused = await asyncio.to_thread(
        subprocess.run,
        [
            *kubectl_as(cluster, "bob", ("sales",)),
            "-n",
            namespace,
            *KUBECTL_PATCH,
            json.dumps({"spec": {"decision": "Approved", "reviewer": "bob"}}),
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "you are not a reviewer of this request" in refused.stderr
    await _still_waiting(kube, namespace, "grp", decision, effects)
    done = await oma(
        cluster.mint_kubeconfig("carol", ("treasury",)), "approve", name, "-n", namespace
    )
    assert done.returncode == 0, done.stderr
    assert "Reviewers: group treasury" in done.stdout
    assert (await finished(kube, namespace, "grp", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == ["charge"]


@pytest.mark.timeout(300)
async def test_with_separation_of_duties_the_creator_cannot_approve(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "alice", "bob")
    authors = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["create", "patch"]},
        # The reference policy: she hands the run its store Secret, so she must read it.
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["store"], "verbs": ["get"]},
    ]
    await grant(kube, namespace, "authors", authors, ("alice",))
    approvals = {
        "reviewers": {"default": {"users": ["alice", "bob"]}},
        "separationOfDuties": True,
    }
    body = gated("sod", effects, "charged", approvals=approvals)
    body["metadata"]["annotations"] = {"oma.dev/created-by": "bob"}  # overwritten by the API
    async with as_user(cluster, "alice") as alice:
        created = await alice.create(TEAMRUNS.format(ns=namespace), body)
        assert created["metadata"]["annotations"]["oma.dev/created-by"] == "alice"
        path = f"{TEAMRUNS.format(ns=namespace)}/sod"
        for change, why in (
            ({"metadata": {"annotations": {"oma.dev/created-by": "bob"}}}, "cannot be changed"),
            ({"spec": {"approvals": {"separationOfDuties": False}}}, "approvals (gates"),
        ):
            with pytest.raises(ApiError) as refused:
                await alice.patch(path, change)
            assert why in str(refused.value), refused.value
    decision = await pending_decision(kube, namespace, "sod")
    assert decision["spec"]["excludedReviewers"] == ["alice"]
    name = decision["metadata"]["name"]
    own = await oma(cluster.mint_kubeconfig("alice"), "approve", name, "-n", namespace)
    assert own.returncode == 1 and "separation of duties" in own.stderr, own.stderr
    await _still_waiting(kube, namespace, "sod", decision, effects)
    await run_tool(*approve_argv(cluster, "bob", namespace, name))
    assert (await finished(kube, namespace, "sod", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == ["charge"]


# What conceals, retitles or breaks a line on a terminal (every one of them, unit by unit:
# tests/operator/test_reviewer_sees_escapes.py).
RAW = ("\x1b", "\x07", "\u2028", "\u202e", "\r")


@pytest.mark.timeout(300)
async def test_a_reviewer_sees_escapes_and_numbers_as_the_call_holds_them(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attacks 10 and 12 of issue 41: an escape sequence, a line separator and a right-to-left
    override in a tool input let `oma approve` show a fake block over the real content, and an
    integer amount read 1000000.0 with a "raw input" line. Everything a reviewer reads now shows
    them escaped and the number as written; what runs is the exact content that was hashed."""
    await grant_reviewers(kube, namespace, "erin")
    fake = "Content hash: " + "0" * 64
    entry = f"pay ALICE\x1b[8m\x1b]0;title\x07 hidden\x1b[0m\r\u2028{fake}\u202e"
    body = gated("shown", effects, "charged", entry=entry)
    body["spec"]["team"]["agents"][0]["model"]["script"][0]["tool_calls"][0]["input"]["amount"] = (
        1000000
    )
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await pending_decision(kube, namespace, "shown")
    name = decision["metadata"]["name"]
    assert not [c for c in RAW if c in decision["spec"]["summary"]], decision["spec"]["summary"]
    done = await oma(cluster.mint_kubeconfig("erin"), "approve", name, "-n", namespace)
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert not [c for c in RAW if c in shown], shown
    assert "\\u2028" in shown and "\\u202e" in shown, shown
    assert "\\x1b[8m" in shown or "\\u001b[8m" in shown, shown
    assert "1000000" in shown and "1000000.0" not in shown, shown
    assert "raw input" not in shown.lower(), shown
    assert f"Content hash: {decision['spec']['requestHash']}" in shown
    assert (await finished(kube, namespace, "shown", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == [entry]  # the exact content ran, once
    events = await kube.get(f"/api/v1/namespaces/{namespace}/events")
    said = " ".join(str(event.get("message") or "") for event in events["items"])
    assert not [c for c in RAW if c in said], said


@pytest.mark.timeout(300)
async def test_with_separation_of_duties_whoever_edited_the_spec_cannot_approve(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Attack 5 of issue 41: bob, a reviewer who may also patch TeamRuns, rewrote alice's run
    before it started ("pay 1000000 to BOB"), then approved the request he had written. The API
    server records him as an editor, so he may not decide; while the run waits its spec is
    frozen; what he wrote runs only once someone who wrote nothing of it approves."""
    await grant_reviewers(kube, namespace, "alice", "bob", "carol")
    editors = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["store"], "verbs": ["get"]},
    ]
    # A user name with a line break would be two names in the editors list, one excused.
    split = "mallory\ncarol"
    await grant(kube, namespace, "editors", editors, ("alice", "bob", split))
    approvals = {
        "reviewers": {"default": {"users": ["alice", "bob", "carol"]}},
        "separationOfDuties": True,
    }
    body = gated("rewritten", effects, "charged", approvals=approvals)
    body["spec"]["suspend"] = True
    body["metadata"]["annotations"] = {"oma.dev/edited-by": "carol"}  # nobody edited it yet
    path = f"{TEAMRUNS.format(ns=namespace)}/rewritten"
    async with as_user(cluster, "alice") as alice:
        with pytest.raises(ApiError) as forged:
            await alice.create(TEAMRUNS.format(ns=namespace), body)
        assert "oma.dev/edited-by" in str(forged.value), forged.value
        del body["metadata"]["annotations"]
        await alice.create(TEAMRUNS.format(ns=namespace), body)
    team = copy.deepcopy(body["spec"]["team"])
    call = team["agents"][0]["model"]["script"][0]["tool_calls"][0]
    call["input"] = {"entry": "pay BOB", "amount": 1000000}
    async with as_user(cluster, "bob") as bob:
        edited = await bob.patch(path, {"spec": {"team": team}})
        assert edited["metadata"]["annotations"]["oma.dev/edited-by"] == "bob"
        for change in (
            {"metadata": {"annotations": {"oma.dev/edited-by": None}}},
            {"metadata": {"annotations": {"oma.dev/edited-by": "carol"}}},
        ):
            with pytest.raises(ApiError) as erased:
                await bob.patch(path, change)
            assert "oma.dev/edited-by" in str(erased.value), erased.value
    async with as_user(cluster, split) as mallory:
        with pytest.raises(ApiError) as broken:
            await mallory.patch(path, {"spec": {"maxConcurrency": 2}})
        assert "line break" in str(broken.value), broken.value
    async with as_user(cluster, "alice") as alice:
        held = await alice.patch(path, {"spec": {"suspend": False}})  # a hold, not an edit
        assert held["metadata"]["annotations"]["oma.dev/edited-by"] == "bob"

    decision = await pending_decision(kube, namespace, "rewritten")
    assert decision["spec"]["excludedReviewers"] == ["alice", "bob"]
    assert json.loads(decision["spec"]["content"])["input"] == {
        "entry": "pay BOB",
        "amount": 1000000,
    }
    name = decision["metadata"]["name"]
    own = await oma(cluster.mint_kubeconfig("bob"), "approve", name, "-n", namespace)
    assert own.returncode == 1 and "separation of duties" in own.stderr, own.stderr
    async with as_user(cluster, "bob") as bob:
        with pytest.raises(ApiError) as refused:
            await bob.patch(
                _path(namespace, name), {"spec": {"decision": "Approved", "reviewer": "bob"}}
            )
        assert "separation of duties" in str(refused.value), refused.value
        call["input"] = {"entry": "pay BOB", "amount": 1}
        with pytest.raises(ApiError) as frozen:
            await bob.patch(path, {"spec": {"team": team}})
        assert frozen.value.status == 422, frozen.value
        assert "is frozen while an attempt runs or waits" in str(frozen.value), frozen.value
    await _still_waiting(kube, namespace, "rewritten", decision, effects)

    await run_tool(*approve_argv(cluster, "carol", namespace, name))
    assert (await finished(kube, namespace, "rewritten", 150))["phase"] == "Succeeded"
    assert await effects.ledger() == ["pay BOB"]


@pytest.mark.timeout(300)
async def test_an_approval_holds_only_for_the_spec_it_was_given_under(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Issue 41, found in review: bob, who may patch TeamRuns, made a waiting run fail once
    carol had approved its payment (a node selector no node has and no failure tolerated: the
    placement and retry fields stay open while a run waits), pointed the Failed run's ledger at
    his own list, and retried it, for the payment carol approved to run under his spec. The
    operator refuses that retry and says why; the run stays Failed and nothing is paid. With
    the spec put back, the retry goes ahead and the payment is made, once."""
    await grant_reviewers(kube, namespace, "carol")
    patchers = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["store"], "verbs": ["get"]},
    ]
    await grant(kube, namespace, "patchers", patchers, ("bob",))
    body = gated("retargeted", effects, "charged")
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    path = f"{TEAMRUNS.format(ns=namespace)}/retargeted"
    decision = await pending_decision(kube, namespace, "retargeted")
    nowhere = {"runner": {"nodeSelector": {"oma.dev/test-pool": "nowhere"}}}
    fragile = {"retryPolicy": {"startTimeoutSeconds": 10, "maxFailures": 0}}
    async with as_user(cluster, "bob") as bob:
        await bob.patch(path, {"spec": {**nowhere, **fragile}})
    await run_tool(*approve_argv(cluster, "carol", namespace, decision["metadata"]["name"]))
    failed = await finished(kube, namespace, "retargeted", 120)
    assert (failed["phase"], failed["attempt"]) == ("Failed", 2), failed
    assert failed["workDigest"].startswith("sha256:"), failed
    assert await effects.ledger() == []

    env = copy.deepcopy(body["spec"]["runner"]["env"])
    own = next(e for e in env if e["name"] == "OMA_LEDGER_KEY")
    own["value"] = f"{effects.prefix}:bob"
    async with as_user(cluster, "bob") as bob:
        edited = await bob.patch(path, {"spec": {"runner": {"env": env}}})
        assert edited["metadata"]["annotations"]["oma.dev/edited-by"] == "bob"
    bobs = cluster.mint_kubeconfig("bob")
    refused = await oma(bobs, "retry", "retargeted", "-n", namespace)
    assert refused.returncode == 3, (refused.stdout, refused.stderr)
    assert "refused by the operator" in refused.stderr, refused.stderr
    assert "an approval holds only for the spec it was given under" in refused.stderr
    assert "(approved by carol)" in refused.stderr and "edited by bob" in refused.stderr
    status = await status_of(kube, namespace, "retargeted")
    assert (status["phase"], status["attempt"]) == ("Failed", 2), status
    (record,) = status["retries"]
    assert record["reason"] == "SpecChangedSinceApproval" and record["refusedAt"], record
    assert status["message"].startswith("retry refused: its spec (edited by bob) changed")
    counts = await event_counts(kube, namespace, "retargeted")
    assert counts.get("RetryRefused") == 1 and "Retried" not in counts, counts
    pods = [p["metadata"]["name"] for p in await runner_pods(kube, namespace)]
    assert "retargeted-a3" not in pods, pods  # no attempt started
    assert await effects.ledger() == []

    async with as_user(cluster, "bob") as bob:  # put back as carol approved it (placement too)
        restored = {"runner": {"env": body["spec"]["runner"]["env"], "nodeSelector": None}}
        await bob.patch(path, {"spec": restored})
    retried = await oma(bobs, "retry", "retargeted", "-n", namespace)
    assert retried.returncode == 0, retried.stderr
    assert "teamrun retargeted retried: attempt 2 failed (" in retried.stdout
    done = await finished(kube, namespace, "retargeted", 150)
    assert (done["phase"], done["attempt"]) == ("Succeeded", 3), done
    assert [r.get("refusedAt") is None for r in done["retries"]] == [False, True]
    assert await effects.ledger() == ["charge"]


@pytest.mark.timeout(180)
async def test_separation_of_duties_without_a_recorded_creator_fails_before_any_pod(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Where the creator policy is missing, nobody knows who created the TeamRun: a run asking
    for separation of duties ends Failed (CreatorUnknown) instead of running unprotected."""
    if cluster.local is None:
        pytest.skip("takes the creator policy away for a moment: only on the local cluster")
    binding = f"{ADMISSION}/mutatingadmissionpolicybindings/oma-teamrun-creator"
    saved = await kube.get(binding)
    await kube.delete(binding)
    try:

        async def unloaded() -> bool:
            return not await creator_recorded(kube)

        await wait_for(unloaded, 60, "the API server to unload the creator policy")
        approvals = {"separationOfDuties": True}
        body = gated("nobody", effects, "charged", approvals=approvals)
        created = await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert "oma.dev/created-by" not in (created["metadata"].get("annotations") or {})
        # Created held: refused at once too, not when let go (maybe while the operator is down).
        held = gated("nobody-held", effects, "charged", approvals=approvals)
        held["spec"]["suspend"] = True
        await kube.create(TEAMRUNS.format(ns=namespace), held)
    finally:
        meta = saved["metadata"]
        saved["metadata"] = {"name": meta["name"], "annotations": meta.get("annotations") or {}}
        await kube.create(f"{ADMISSION}/mutatingadmissionpolicybindings", saved)
        await wait_for(lambda: creator_recorded(kube), 60, "the creator policy to be back")
    final = await finished(kube, namespace, "nobody", 60)
    failed = next(c for c in final["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "CreatorUnknown" and "oma.dev/created-by" in failed["message"]
    assert "attempt" not in final or not final.get("attempts"), final
    assert await runner_pods(kube, namespace) == [] and await effects.ledger() == []
    assert "CreatorUnknown" in await event_counts(kube, namespace, "nobody")
    held_final = await finished(kube, namespace, "nobody-held", 60)
    held_failed = next(c for c in held_final["conditions"] if c["type"] == "Failed")
    assert held_failed["reason"] == "CreatorUnknown"


@pytest.mark.timeout(180)
async def test_an_operator_told_the_creator_policy_is_absent_believes_no_creator(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """Without the policy a TeamRun's author writes oma.dev/created-by herself, naming anyone
    but herself; so an operator installed without it (approvals.creatorPolicy=false) believes
    no annotation, even a true one, and separation of duties refuses to run."""
    settings = OperatorSettings(creator_policy="false")
    async with operating(cluster, kube, namespace, tmp_path / "operator.log", settings):
        body = gated("unsure", effects, "charged", approvals={"separationOfDuties": True})
        created = await kube.create(TEAMRUNS.format(ns=namespace), body)
        assert created["metadata"]["annotations"]["oma.dev/created-by"]  # recorded, not believed
        final = await finished(kube, namespace, "unsure", 60)
    failed = next(c for c in final["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "CreatorUnknown"
    assert "without the creator policy" in failed["message"]
    assert await runner_pods(kube, namespace) == [] and await effects.ledger() == []


@pytest.mark.timeout(180)
async def test_only_the_operator_makes_runner_pods(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """The operator takes a runner pod's end as its TeamRun attempt's end: a user who may create
    pods could otherwise end (or pass) someone else's run with a pod of her own making. The
    operator's own pods still run (the gated run below starts and suspends)."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "patch", "get"]}]
    await grant(kube, namespace, "pod-makers", rules, ("mallory",))
    await kube.create(TEAMRUNS.format(ns=namespace), gated("victim", effects, "ok"))
    await pending_decision(kube, namespace, "victim")  # the operator's pod ran and suspended
    async with as_user(cluster, "mallory") as mallory:
        with pytest.raises(ApiError) as refusal:
            await mallory.create(pods, forged_pod("victim"))
        assert refusal.value.status == 403, refusal.value
        assert "only the oma operator creates runner pods" in str(refusal.value)
        # An ordinary pod is hers to make; labelling it as a runner pod afterwards is not.
        await mallory.create(f"{pods}?dryRun=All", forged_pod("other", labels=False))
        plain = forged_pod("plain", labels=False)
        await mallory.create(pods, plain)
        labels = {"oma.dev/teamrun": "victim", "oma.dev/attempt": "2"}
        with pytest.raises(ApiError) as relabel:
            await mallory.patch(f"{pods}/plain-a1", {"metadata": {"labels": labels}})
        assert relabel.value.status == 403, relabel.value
        assert "only the oma operator creates runner pods" in str(relabel.value)
        # The operator's own runner pod: what it runs, its labels and the annotations the
        # operator trusts are not hers to change; other metadata (as the garbage collector
        # and tools change it) is.
        (runner,) = await runner_pods(kube, namespace)
        path = f"{pods}/{runner['metadata']['name']}"
        image = runner["spec"]["containers"][0]["image"] + "-hers"
        for change in (
            {"spec": {"containers": [{"name": "runner", "image": image}]}},
            {"spec": {"activeDeadlineSeconds": 1}},
            {"metadata": {"labels": {"oma.dev/teamrun": None}}},
            {"metadata": {"annotations": {"oma.dev/start-timeout-seconds": "1"}}},
        ):
            with pytest.raises(ApiError) as changed:
                await mallory.patch(path, change, kind="strategic")
            assert changed.value.status == 403, (change, changed.value)
            assert "only the oma operator" in str(changed.value), change
        await mallory.patch(path, {"metadata": {"annotations": {"example.com/seen": "yes"}}})
    status = await status_of(kube, namespace, "victim")
    assert status["phase"] == "AwaitingApproval", status


@pytest.mark.timeout(240)
async def test_a_pod_squatting_an_attempts_name_holds_the_run_until_it_is_gone(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """A pod that takes the name of a run's next attempt first (anyone who may create pods can,
    without the operator's labels) is not taken for the runner, whose end would then never
    come: the attempt waits with PodCreated=False saying why, and starts once it is gone."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await kube.create(pods, forged_pod("squatted", labels=False))  # squatted-a1
    await kube.create(TEAMRUNS.format(ns=namespace), gated("squatted", effects, "ok"))

    async def held() -> dict[str, Any] | None:
        conditions = (await status_of(kube, namespace, "squatted")).get("conditions") or []
        created = next((c for c in conditions if c["type"] == "PodCreated"), None)
        if created is None or created["status"] != "False":
            return None
        return created if "did not make" in created["message"] else None

    await wait_for(held, 60, "the attempt to wait on the squatted pod name")
    await kube.delete(f"{pods}/squatted-a1?gracePeriodSeconds=0")
    decision = await pending_decision(kube, namespace, "squatted")  # the real runner ran
    assert decision is not None and decision["spec"]["scope"] == "tool_call"
    assert "PodCreateFailed" in await event_counts(kube, namespace, "squatted")


@pytest.mark.timeout(300)
async def test_a_request_whose_resource_name_was_taken_still_expires(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    """Someone who may write ApprovalDecisions (here the admin, past the policy) takes the
    name of a request's resource with a decided one of their own. The operator ignores it (it
    decides nothing), and before this fix the request then never expired: the run waited for
    ever. Expiry is the request's: it ends rejected by ``expired`` all the same."""
    body = gated("taken", effects, "charge cancelled", approvals={"expireAfterSeconds": 10})
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    real = await pending_decision(kube, namespace, "taken")
    name = real["metadata"]["name"]
    squat = copy.deepcopy(real)
    squat["metadata"] = {"name": name, "labels": real["metadata"]["labels"]}
    squat.pop("status")
    squat["spec"] |= {"decision": "Pending", "summary": "mine now"}
    decided = {"spec": {"decision": "Approved", "reviewer": "admin"}}
    for _ in range(20):  # the operator republishes the request within seconds: win the name
        await kube.delete_if_present(_path(namespace, name))
        try:  # created Pending (the policy's rule), decided by its author at once
            await kube.create(DECISIONS.format(ns=namespace), squat)
            await kube.patch(_path(namespace, name), decided)
            break
        except ApiError as exc:
            if exc.status not in (404, 409):  # only "the operator got there first" is retried
                raise
    else:
        pytest.fail("the squatting resource never got the name")

    async def ignored() -> dict[str, Any] | None:
        status = (await kube.get(_path(namespace, name))).get("status") or {}
        return status if status.get("verified") is False else None

    await wait_for(ignored, 30, "the operator to ignore the squatting resource")
    final = await finished(kube, namespace, "taken", 150)
    assert final["phase"] == "Succeeded" and await effects.ledger() == []  # denied, never paid
    row = await ledger_row(e2e_redis, body, namespace, real["spec"]["requestId"])
    assert row is not None and row.decision is not None
    assert (row.decision.decision, row.decision.reviewer.id) == ("rejected", "expired")
