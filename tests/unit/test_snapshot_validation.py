"""Each load-time rule of reference §2.6: one snapshot that passes and ones that fail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from oma.checkpoint import parse_snapshot
from oma.errors import CheckpointValidationError
from tests.unit import snapshot_fixtures as fx

Snapshot = dict[str, Any]
Mutation = Callable[[Snapshot], Any]


def _set(path: str, value: Any) -> Mutation:
    def mutate(snapshot: Snapshot) -> None:
        *parents, last = path.split(".")
        target: Any = snapshot
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is _DELETE:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()


def _lineage_of(first: list[Any]) -> Mutation:
    """The first in-flight task's lineage: ``first`` for its first messages, unknown after."""

    def mutate(snapshot: Snapshot) -> None:
        task = snapshot["inFlightTasks"][0]
        rest = len(task["conversationMessages"]) - len(first)
        task["conversationLineage"] = first + [[None]] * rest

    return mutate


_PENDING = "inFlightTasks.0.pendingToolCalls"


def _duplicate_in_flight(snapshot: Snapshot) -> None:
    snapshot["inFlightTasks"].append(dict(snapshot["inFlightTasks"][0]))


def _duplicate_pending_approval(snapshot: Snapshot) -> None:
    snapshot["pendingApprovals"].append(snapshot["pendingApprovals"][0])


def _duplicate_decision(snapshot: Snapshot) -> None:
    snapshot["approvalDecisions"].append(snapshot["approvalDecisions"][0])


def _unlist_pending_approval(snapshot: Snapshot) -> None:
    snapshot["pendingApprovals"] = []


def _in_flight_decision_not_listed(snapshot: Snapshot) -> None:
    decision = snapshot["approvalDecisions"][0]
    suspended = fx.v4_suspended()
    snapshot["inFlightTasks"] = suspended["inFlightTasks"]
    snapshot["queue"] = suspended["queue"]
    snapshot["pendingApprovals"] = suspended["pendingApprovals"]
    snapshot["inFlightTasks"][0]["pendingToolCalls"][0]["approvalDecision"] = decision
    snapshot["approvalDecisions"] = []


FAILING: list[tuple[str, str, Callable[[], Snapshot], Mutation]] = [
    # 2.6.1 root shape
    ("version-6", "2.6.1", fx.v4_tool_calls, _set("version", 6)),
    ("v5-without-watermark", "2.6.1", fx.v4_tool_calls, _set("version", 5)),
    ("v5-negative-watermark", "2.6.1", fx.v5, _set("journalWatermarkSeq", -1)),
    ("v5-ref-without-kind", "2.6.1", fx.v5, _set("journalRef", {"path": "/x"})),
    ("v5-lineage-short", "2.6.3", fx.v5, _set("inFlightTasks.0.conversationLineage", [])),
    ("v5-journal-seq-negative", "2.6.3", fx.v5, _set("inFlightTasks.0.journalSeq", -1)),
    ("v5-lineage-zero-seq", "2.6.3", fx.v5, _lineage_of([[[0]]])),
    ("v5-ref-null", "2.6.1", fx.v5, _set("journalRef", None)),
    ("v5-ref-path-null", "2.6.1", fx.v5, _set("journalRef", {"kind": "x", "path": None})),
    ("v5-journal-seq-null", "2.6.3", fx.v5, _set("inFlightTasks.0.journalSeq", None)),
    ("v5-lineage-null", "2.6.3", fx.v5, _set("inFlightTasks.0.conversationLineage", None)),
    ("version-string", "2.6.1", fx.v4_tool_calls, _set("version", "4")),
    ("version-bool", "2.6.1", fx.v1, _set("version", True)),
    ("mode-unknown", "2.6.1", fx.v4_tool_calls, _set("mode", "runEverything")),
    ("createdAt-number", "2.6.1", fx.v2, _set("createdAt", 1234)),
    ("completedTaskResults-missing", "2.6.1", fx.v3, _set("completedTaskResults", _DELETE)),
    ("completedTaskResults-object", "2.6.1", fx.v1, _set("completedTaskResults", {})),
    ("metadata-bad-key", "2.6.1", fx.v1, _set("metadata", {"Bad Key": "x"})),
    ("metadata-reserved-prefix", "2.6.1", fx.v4_tool_calls, _set("metadata", {"oma.x": 1})),
    ("metadata-object-value", "2.6.1", fx.v2, _set("metadata", {"team": {"a": 1}})),
    # 2.6.2 identity
    ("identity-missing", "2.6.2", fx.v2, _set("identity", _DELETE)),
    ("identity-attempt-0", "2.6.2", fx.v3, _set("identity.attempt", 0)),
    ("identity-attempt-string", "2.6.2", fx.v4_tool_calls, _set("identity.attempt", "1")),
    ("identity-attempt-float", "2.6.2", fx.v2, _set("identity.attempt", 1.5)),
    ("identity-runId-number", "2.6.2", fx.v4_tool_calls, _set("identity.runId", 7)),
    ("identity-trace-missing", "2.6.2", fx.v2, _set("identity.lastTraceId", _DELETE)),
    # 2.6.3 in-flight tasks
    ("inFlight-missing-v3", "2.6.3", fx.v3, _set("inFlightTasks", _DELETE)),
    ("inFlight-duplicate-task", "2.6.3", fx.v4_tool_calls, _duplicate_in_flight),
    ("inFlight-bad-phase", "2.6.3", fx.v4_tool_calls, _set("inFlightTasks.0.phase", "thinking")),
    ("inFlight-empty-taskId", "2.6.3", fx.v3, _set("inFlightTasks.0.taskId", "")),
    ("inFlight-empty-assignee", "2.6.3", fx.v3, _set("inFlightTasks.0.assignee", "")),
    ("inFlight-executing-without-calls", "2.6.3", fx.v4_tool_calls, _set(_PENDING, [])),
    (
        "inFlight-calls-while-awaiting",
        "2.6.3",
        fx.v4_tool_calls,
        _set("inFlightTasks.0.phase", "awaiting_model"),
    ),
    (
        "inFlight-result-text-when-completed",
        "2.6.3",
        fx.v4_completed_in_flight,
        _set("inFlightTasks.0.pendingToolResultText", "loop warning"),
    ),
    (
        "inFlight-completed-without-output",
        "2.6.3",
        fx.v4_completed_in_flight,
        _set("inFlightTasks.0.finalOutput", _DELETE),
    ),
    (
        "inFlight-output-while-executing",
        "2.6.3",
        fx.v4_tool_calls,
        _set("inFlightTasks.0.finalOutput", "early"),
    ),
    (
        "inFlight-negative-usage",
        "2.6.3",
        fx.v3,
        _set("inFlightTasks.0.tokenUsage.input_tokens", -1),
    ),
    ("inFlight-negative-turns", "2.6.3", fx.v3, _set("inFlightTasks.0.turns", -1)),
    ("inFlight-messages-not-array", "2.6.3", fx.v3, _set("inFlightTasks.0.messages", "hi")),
    ("inFlight-message-not-object", "2.6.3", fx.v3, _set("inFlightTasks.0.messages", ["hi"])),
    (
        "inFlight-conversation-message-not-object",
        "2.6.3",
        fx.v3,
        _set("inFlightTasks.0.conversationMessages", [{"role": "user", "content": []}, None]),
    ),
    (
        "inFlight-conversation-not-array",
        "2.6.3",
        fx.v3,
        _set("inFlightTasks.0.conversationMessages", {"0": {"role": "user"}}),
    ),
    (
        "inFlight-record-output-not-string",
        "2.6.3",
        fx.v4_tool_calls,
        _set(
            "inFlightTasks.0.toolCalls",
            [{"toolName": "t", "input": {}, "output": 1, "duration": 1}],
        ),
    ),
    ("inFlight-loop-flag-not-bool", "2.6.3", fx.v3, _set("inFlightTasks.0.loopWarned", "yes")),
    # 2.6.4 pending tool calls
    ("call-type", "2.6.4", fx.v4_tool_calls, _set(f"{_PENDING}.0.call.type", "text")),
    ("call-empty-id", "2.6.4", fx.v4_tool_calls, _set(f"{_PENDING}.1.call.id", "")),
    ("call-empty-name", "2.6.4", fx.v3, _set(f"{_PENDING}.1.call.name", "")),
    ("call-input-array", "2.6.4", fx.v4_tool_calls, _set(f"{_PENDING}.1.call.input", [1])),
    (
        "commit-tool-use-id-mismatch",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.result.tool_use_id", "tu-b-q"),
    ),
    (
        "commit-record-name-mismatch",
        "2.6.4",
        fx.v3,
        _set(f"{_PENDING}.0.commit.record.toolName", "other_tool"),
    ),
    (
        "commit-result-type",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.result.type", "text"),
    ),
    (
        "commit-content-number",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.result.content", 42),
    ),
    (
        "commit-is-error-string",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.result.is_error", "false"),
    ),
    (
        "commit-negative-duration",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.record.duration", -3),
    ),
    (
        "commit-record-input-array",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.record.input", []),
    ),
    (
        "commit-bad-delegation-usage",
        "2.6.4",
        fx.v4_tool_calls,
        _set(f"{_PENDING}.0.commit.delegationUsage", {"input_tokens": -1, "output_tokens": 0}),
    ),
    (
        "decision-without-request",
        "2.6.4",
        fx.v4_tool_calls,
        lambda s: s["inFlightTasks"][0]["pendingToolCalls"][1].update(
            approvalDecision=fx.v4_decided()["approvalDecisions"][0]
        ),
    ),
    (
        "commit-with-approval-request",
        "2.6.4",
        fx.v4_suspended,
        lambda s: s["inFlightTasks"][0]["pendingToolCalls"][0].update(
            commit=fx.v4_tool_calls()["inFlightTasks"][0]["pendingToolCalls"][0]["commit"]
        ),
    ),
    (
        "request-names-other-call",
        "2.6.4",
        fx.v4_suspended,
        _set(f"{_PENDING}.0.call.id", "tool-call-2"),
    ),
    (
        "request-tampered-in-flight",
        "2.6.4",
        fx.v4_suspended,
        _set(f"{_PENDING}.0.approvalRequest.content.input.amount", 700),
    ),
    # 2.6.5 approvals
    ("pendingApprovals-missing", "2.6.5", fx.v4_tool_calls, _set("pendingApprovals", _DELETE)),
    ("approvalDecisions-missing", "2.6.5", fx.v4_tool_calls, _set("approvalDecisions", _DELETE)),
    (
        "request-hash-tampered",
        "2.6.5",
        fx.v4_suspended,
        _set("pendingApprovals.0.content.input.amount", 700),
    ),
    ("request-id-malformed", "2.6.5", fx.v4_suspended, _set("pendingApprovals.0.id", "apr_x")),
    ("request-foreign-run", "2.6.5", fx.v4_suspended, _set("identity.runId", "other-run")),
    ("request-duplicate", "2.6.5", fx.v4_suspended, _duplicate_pending_approval),
    ("in-flight-request-not-listed", "2.6.5", fx.v4_suspended, _unlist_pending_approval),
    ("decision-bad-word", "2.6.5", fx.v4_decided, _set("approvalDecisions.0.decision", "maybe")),
    (
        "decision-blank-reviewer",
        "2.6.5",
        fx.v4_decided,
        _set("approvalDecisions.0.reviewer.id", "  "),
    ),
    ("decision-bad-date", "2.6.5", fx.v4_decided, _set("approvalDecisions.0.decidedAt", "later")),
    ("decision-foreign-run", "2.6.5", fx.v4_decided, _set("approvalDecisions.0.runId", "other")),
    ("decision-duplicate", "2.6.5", fx.v4_decided, _duplicate_decision),
    ("in-flight-decision-not-listed", "2.6.5", fx.v4_decided, _in_flight_decision_not_listed),
    # 2.6.6 queue
    ("queue-missing", "2.6.6", fx.v1, _set("queue", _DELETE)),
    ("queue-version-3", "2.6.6", fx.v4_tool_calls, _set("queue.version", 3)),
    ("queue-tasks-missing", "2.6.6", fx.v2, _set("queue.tasks", _DELETE)),
    ("queue-task-bad-status", "2.6.6", fx.v2, _set("queue.tasks.0.status", "done")),
    (
        "queue-duplicate-task-ids",
        "2.6.6",
        fx.v4_tool_calls,
        lambda s: s["queue"]["tasks"].append(s["queue"]["tasks"][0]),
    ),
    ("queue-v2-without-planRevision", "2.6.6", fx.v2_queue_v2, _set("queue.planRevision", _DELETE)),
    ("queue-v2-revision-count-mismatch", "2.6.6", fx.v2_queue_v2, _set("queue.planRevision", 2)),
    (
        "queue-v2-revision-unknown-task",
        "2.6.6",
        fx.v2_queue_v2,
        _set("queue.planRevisions.0.triggerTaskId", "no-such-task"),
    ),
]


@pytest.mark.parametrize(
    ("rule", "base", "mutate"), [case[1:] for case in FAILING], ids=[case[0] for case in FAILING]
)
def test_invalid_snapshot_is_rejected_naming_the_rule(
    rule: str, base: Callable[[], Snapshot], mutate: Mutation
) -> None:
    snapshot = base()
    parse_snapshot(snapshot, "__oma_checkpoint__/r/latest")  # the unmutated base is valid
    mutate(snapshot)
    with pytest.raises(CheckpointValidationError) as caught:
        parse_snapshot(snapshot, "__oma_checkpoint__/r/latest")
    assert rule in caught.value.rules, (caught.value.rules, str(caught.value))
    assert str(caught.value).startswith(
        'Checkpoint: stored value at "__oma_checkpoint__/r/latest" is not a checkpoint snapshot: '
    )


def test_root_must_be_an_object() -> None:
    with pytest.raises(CheckpointValidationError) as caught:
        parse_snapshot(["not", "an", "object"], "k")
    assert caught.value.rules == {"2.6.1"}


def _rich_commit(snapshot: Snapshot) -> None:
    snapshot["inFlightTasks"][0]["pendingToolCalls"][0]["commit"]["result"]["content"] = [
        {"type": "text", "text": "rendered"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
    ]


PASSING: list[tuple[str, str, Callable[[], Snapshot], Mutation | None]] = [
    ("v1-with-runId", "2.6.1", fx.v1, None),
    (
        "v1-with-valid-metadata",
        "2.6.1",
        fx.v1,
        _set("metadata", {"team": "pay", "n": 2, "tags": ["a", "b"], "ok": True}),
    ),
    ("v2-identity", "2.6.2", fx.v2, None),
    ("v2-non-hex-trace-ids", "2.6.2", fx.v2, _set("identity.lastTraceId", "trace-1")),
    ("v3-in-flight", "2.6.3", fx.v3, None),
    ("v4-completed-in-flight", "2.6.3", fx.v4_completed_in_flight, None),
    ("v4-parallel-calls-one-committed", "2.6.4", fx.v4_tool_calls, None),
    ("v4-rich-tool-result-content", "2.6.4", fx.v4_tool_calls, _rich_commit),
    ("v4-suspended-on-tool", "2.6.5", fx.v4_suspended, None),
    ("v4-decided", "2.6.5", fx.v4_decided, None),
    ("v5-journaled", "2.6.1", fx.v5, None),
    ("v5-lineage-with-gaps", "2.6.3", fx.v5, _lineage_of([[None], [[3, 4], None]])),
    ("queue-v2-plan-revisions", "2.6.6", fx.v2_queue_v2, None),
]


@pytest.mark.parametrize(
    ("rule", "base", "mutate"), [case[1:] for case in PASSING], ids=[case[0] for case in PASSING]
)
def test_valid_snapshot_passes(
    rule: str, base: Callable[[], Snapshot], mutate: Mutation | None
) -> None:
    snapshot = base()
    if mutate is not None:
        mutate(snapshot)
    parsed = parse_snapshot(snapshot, "k")
    assert parsed.version == snapshot["version"]


def test_every_rule_has_a_passing_and_a_failing_case() -> None:
    rules = {f"2.6.{n}" for n in range(1, 7)}
    assert {case[1] for case in FAILING} == rules
    assert {case[1] for case in PASSING} == rules
