"""A TeamRun's budget as the operator handles it: the raise request in words, its reviewers,
expiry that never raises a budget, and the spend in the status while the run runs (from the
store) and when an attempt ends (from the runner)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from oma import AgentConfig, CheckpointOptions, OpenMultiAgent, ScriptedAdapter, Team
from oma.approval.models import ApprovalRequest
from oma.budget import RunBudget
from oma.budget.account import Shortfall
from oma.checkpoint.keys import checkpoint_key
from oma.orchestrator.budget_guard import budget_request
from oma.store import FileStore, InMemoryStore
from oma_operator.approvals.rules.expiry import expiry_word
from oma_operator.approvals.rules.resources import summary
from oma_operator.approvals.rules.reviewers import reviewers_for
from oma_operator.resources.models import TeamRunApprovals, TeamRunSpec, to_run_spec
from oma_operator.runs.metrics import OperatorMetrics
from oma_operator.runs.rules.decisions import Decision, attempt_record
from oma_operator.runs.rules.outcomes import Outcome
from oma_operator.runs.rules.progress import read_progress
from oma_operator.runs.rules.status import after_attempt

USAGE = {"input_tokens": 50, "output_tokens": 10}


def _request(agent: str = "writer") -> ApprovalRequest:
    shortfall = Shortfall("tokens", 300, 120, 208, 600)
    return budget_request("r1", shortfall, "t-1", agent)


def test_a_budget_request_says_what_raise_it_asks_for_with_every_value_escaped() -> None:
    request = _request("wri\u202eter\x1b[31m")
    text = summary(request)
    assert "Raise the run's tokens budget from 300 to 600?" in text
    assert "120 are used or reserved" in text and "needs 208" in text
    assert "Reject to end the run" in text
    assert "\u202e" not in text and "\x1b" not in text  # shown escaped, with the legend
    assert text.endswith(f"Content hash: {request.request_hash}")


@pytest.mark.parametrize("on_expiry", ["Approve", "Reject"])
def test_an_expired_budget_request_is_always_rejected(on_expiry: str) -> None:
    policy = TeamRunApprovals.model_validate({"expireAfterSeconds": 5, "onExpiry": on_expiry})
    assert expiry_word(_request(), policy) == "reject"


def test_budget_raises_have_their_own_reviewers_else_the_default() -> None:
    approvals = TeamRunApprovals.model_validate(
        {"reviewers": {"default": {"users": ["ann"]}, "budget": {"users": ["finance"]}}}
    )
    chosen = reviewers_for(approvals, _request())
    assert chosen is not None and chosen.users == ["finance"]
    fallback = TeamRunApprovals.model_validate({"reviewers": {"default": {"users": ["ann"]}}})
    chosen = reviewers_for(fallback, _request())
    assert chosen is not None and chosen.users == ["ann"]


def _teamrun(budget: dict[str, int]) -> TeamRunSpec:
    return TeamRunSpec.model_validate(
        {
            "team": {"agents": [{"name": "w", "model": {"provider": "scripted", "script": []}}]},
            "tasks": [{"title": "A", "description": "a"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
            "budget": budget,
        }
    )


def test_the_budget_goes_to_the_runner_and_an_empty_one_is_refused() -> None:
    spec = _teamrun({"tokens": 5000, "toolCalls": 40})
    assert to_run_spec(spec, "ns")["budget"] == {"tokens": 5000, "toolCalls": 40}
    with pytest.raises(ValueError, match="at least one of tokens"):
        _teamrun({})
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        _teamrun({"tokens": 0})


def _team() -> Team:
    script = [
        {"tool_calls": [{"id": "c1", "name": "none", "input": {}}], "usage": USAGE},
        {"text": "done", "usage": USAGE},
    ]
    return Team(name="t", agents=[AgentConfig(name="w", adapter=ScriptedAdapter(script))])


@pytest.mark.parametrize("layout", ["journal", "snapshot"])
async def test_a_running_runs_spend_is_polled_from_its_store(layout: str, tmp_path: Path) -> None:
    store = InMemoryStore() if layout == "journal" else FileStore(str(tmp_path / "s.json"))
    engine = OpenMultiAgent(budget=RunBudget(tokens=50_000, tool_calls=10))
    options = CheckpointOptions(store=store, run_id="r1", journal=layout == "journal")
    result = await engine.run_tasks(
        _team(), [{"title": "A", "description": "a"}], checkpoint=options
    )
    assert result.status.code == "ok"
    if isinstance(store, InMemoryStore):
        head = await store.journal_head(checkpoint_key("r1"))
        assert head is not None and head.metadata is not None
        assert head.metadata["budget"]["spent"]["modelCalls"] == 2

    progress = await read_progress(store, "r1", budget=RunBudget(tokens=50_000, tool_calls=10))
    assert progress is not None
    assert progress["budgetSummary"] == "120/50000 tokens"
    budget = progress["budget"]
    assert budget["limits"] == {"tokens": 50_000, "toolCalls": 10}
    assert budget["spent"]["toolCalls"] == 1 and budget["spent"]["modelCalls"] == 2
    without = await read_progress(store, "r1")
    assert without is not None and "budget" not in without


def test_an_attempts_end_writes_the_runners_spend_into_the_status() -> None:
    report = {
        "status": "suspended",
        "tasks": {"total": 1, "completed": 0},
        "budget": {
            "limits": {"tokens": 300},
            "spent": {"inputTokens": 100, "outputTokens": 20, "lostTokens": 208},
            "reservedTokens": 0,
        },
    }
    outcome = Outcome("suspended", "AwaitingApproval", json.dumps(report), 10)
    record = attempt_record(1, outcome, "r-a1", "2026-12-06T10:00:00.000Z")
    decision = Decision("awaiting_approval", {}, "AwaitingApproval", "a raise is asked")
    status = after_attempt({}, decision, record, 1, None, outcome.report)
    assert status["budgetSummary"] == "328/300 tokens"
    assert status["budget"]["spent"]["lostTokens"] == 208


def _body(uid: str, namespace: str, tokens: int, limit: int) -> Any:
    budget = {"limits": {"tokens": limit}, "spent": {"inputTokens": tokens}}
    return {"metadata": {"uid": uid, "namespace": namespace}, "status": {"budget": budget}}


def test_budget_metrics_sum_each_namespaces_runs_and_forget_deleted_ones() -> None:
    registry = CollectorRegistry()
    metrics = OperatorMetrics(registry)

    def used(namespace: str) -> float | None:
        return registry.get_sample_value(
            "oma_budget_used", {"namespace": namespace, "kind": "tokens"}
        )

    metrics.teamrun_seen(_body("a", "team-a", 100, 1000), "ADDED")
    metrics.teamrun_seen(_body("b", "team-a", 50, 500), "ADDED")
    metrics.teamrun_seen(_body("c", "team-b", 7, 10), "ADDED")
    assert (used("team-a"), used("team-b")) == (150, 7)
    limit = {"namespace": "team-a", "kind": "tokens"}
    assert registry.get_sample_value("oma_budget_limit", limit) == 1500
    metrics.teamrun_seen(_body("a", "team-a", 400, 1000), "MODIFIED")
    assert used("team-a") == 450
    metrics.teamrun_seen(_body("a", "team-a", 400, 1000), "DELETED")
    metrics.teamrun_seen(_body("b", "team-a", 50, 500), "DELETED")
    assert used("team-a") == 0 and used("team-b") == 7
    forged: Any = {"metadata": {"uid": "d", "namespace": "team-c"}, "status": {"budget": "x"}}
    metrics.teamrun_seen(forged, "ADDED")
    assert used("team-c") is None  # a status that does not parse is not counted
    tools = {"namespace": "team-a", "kind": "toolCalls"}
    assert registry.get_sample_value("oma_budget_used", tools) is None  # never limited
