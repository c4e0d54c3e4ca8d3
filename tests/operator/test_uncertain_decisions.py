"""An uncertain tool call on Kubernetes: what its ApprovalDecision says, and which ledger word
each resource decision becomes (the API server's rules are in tests/cluster)."""

from __future__ import annotations

import pytest

from oma.approval.requests import create_approval_request
from oma_operator.approvals.rules.resources import decision_manifest, summary
from oma_operator.approvals.sync import decision_word
from oma_operator.resources.bodies import TeamRunBody

CONTENT = {
    "kind": "uncertain_tool_call",
    "toolName": "tally",
    "rawInput": {"label": "pay"},
    "input": {"label": "pay"},
    "agentName": "clerk",
    "taskId": "t-1",
    "toolCallId": "c1",
    "consequential": True,
    "startedAt": "2026-12-01T10:00:00.000Z",
    "startedAttempt": 1,
}


@pytest.mark.parametrize(
    ("scope", "spec", "word"),
    [
        ("uncertain_tool_call", {"decision": "Approved"}, "retry"),
        ("uncertain_tool_call", {"decision": "Approved", "resolution": "Retry"}, "retry"),
        ("uncertain_tool_call", {"decision": "Rejected"}, "failed"),
        ("uncertain_tool_call", {"decision": "Rejected", "resolution": "Failed"}, "failed"),
        ("uncertain_tool_call", {"decision": "Rejected", "resolution": "Done"}, "done"),
        ("tool_call", {"decision": "Approved"}, "approve"),
        ("tool_call", {"decision": "Rejected"}, "reject"),
        ("plan", {"decision": "Rejected"}, "reject"),
    ],
)
def test_decision_word(scope: str, spec: dict[str, str], word: str) -> None:
    assert decision_word(scope, spec) == word


def test_the_resource_of_an_uncertain_call_says_what_to_check_and_how_to_settle_it() -> None:
    request = create_approval_request(
        run_id="r", scope="uncertain_tool_call", boundary="t-1:c1", content=CONTENT
    )
    text = summary(request)
    assert text.startswith("Uncertain tool call tally by agent clerk in task t-1 (call c1)")
    assert "may or may not have happened" in text and "attempt 1" in text
    assert "resolution Done" in text and text.endswith(f"Content hash: {request.request_hash}")
    teamrun: TeamRunBody = {"metadata": {"name": "pay", "namespace": "ns", "uid": "u-1"}}
    spec = decision_manifest(teamrun, request)["spec"]
    assert spec["scope"] == "uncertain_tool_call" and spec["decision"] == "Pending"
    assert "resolution" not in spec  # the reviewer sets it
