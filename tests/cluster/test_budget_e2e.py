"""Budgets on Kubernetes: a TeamRun that would pass its spec.budget waits on an ApprovalDecision
of scope budget, decided by the budget's own reviewers; approved, it goes on with the raised
limit, and its status shows the spend; unanswered, the raise expires rejected whatever onExpiry
says; spec.budget cannot be changed to get around it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from devcluster.kube import ApiError
from tests.cluster.approval_kit import (
    DECISIONS,
    admission_policies,
    as_user,
    grant_reviewers,
    pending_decision,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    teamrun,
)

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster


def _two_payments(name: str, effects: SideEffects, approvals: dict[str, Any]) -> dict[str, Any]:
    """Two ledger_append calls in two turns, under a budget of one tool call."""
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "p1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {"tool_calls": [{"id": "p2", "name": "ledger_append", "input": {"entry": "second"}}]},
        {"text": "both recorded"},
    ]
    body = teamrun(name, script, effects)
    body["spec"]["budget"] = {"toolCalls": 1}
    body["spec"]["approvals"] = approvals
    return body


@pytest.mark.timeout(240)
async def test_a_raise_approved_by_the_budgets_reviewer_lets_the_run_finish(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "fin", "alice")
    approvals = {"reviewers": {"default": {"users": ["alice"]}, "budget": {"users": ["fin"]}}}
    body = _two_payments("spend", effects, approvals)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    decision = await pending_decision(kube, namespace, "spend")
    spec = decision["spec"]
    assert spec["scope"] == "budget" and spec["reviewers"]["users"] == ["fin"]
    assert "Raise the run's toolCalls budget from 1 to 2?" in spec["summary"]
    assert await effects.ledger() == ["first"]  # the second call waits for the raise
    status = await status_of(kube, namespace, "spend")
    assert status["phase"] == "AwaitingApproval"
    assert status["budgetSummary"] == "1/1 tool calls"
    assert status["budget"]["spent"]["toolCalls"] == 1

    run = f"{TEAMRUNS.format(ns=namespace)}/spend"
    with pytest.raises(ApiError) as frozen:  # the author cannot raise it himself
        await kube.patch(run, {"spec": {"budget": {"toolCalls": 100}}})
    assert frozen.value.status == 422 and "budget is immutable" in str(frozen.value)

    path = f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}"
    async with as_user(cluster, "alice") as alice:
        with pytest.raises(ApiError) as not_hers:
            await alice.patch(path, {"spec": {"decision": "Approved", "reviewer": "alice"}})
        assert not_hers.value.status in (403, 422)
    async with as_user(cluster, "fin") as fin:
        await fin.patch(path, {"spec": {"decision": "Approved", "reviewer": "fin"}})
    final = await finished(kube, namespace, "spend", 150)
    assert final["phase"] == "Succeeded", final
    assert await effects.ledger() == ["first", "second"]  # each once
    assert final["budget"]["limits"] == {"toolCalls": 2}
    assert final["budget"]["spent"]["toolCalls"] == 2 and final["budgetSummary"] == "2/2 tool calls"


@pytest.mark.timeout(240)
async def test_an_unanswered_raise_expires_rejected_even_with_on_expiry_approve(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    approvals = {"expireAfterSeconds": 5, "onExpiry": "Approve"}
    await kube.create(TEAMRUNS.format(ns=namespace), _two_payments("lapse", effects, approvals))
    decision = await pending_decision(kube, namespace, "lapse")

    async def rejected() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "lapse")
        return status if status.get("phase") in ("Rejected", "Succeeded", "Failed") else None

    final = await wait_for(rejected, 150, "the run to end")
    assert final["phase"] == "Rejected", final
    assert await effects.ledger() == ["first"]
    path = f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}"
    status = (await kube.get(path))["status"]
    assert (status["decision"], status["reviewer"]) == ("Rejected", "expired")
