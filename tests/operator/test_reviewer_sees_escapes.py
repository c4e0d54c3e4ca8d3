"""What a reviewer reads of an ApprovalDecision (its summary, ``oma approve``'s lines, its
errors) shows control characters, bidi overrides and line separators escaped, and numbers as
the content holds them (issue 41, attacks 10 and 12). The exact content stays as it is hashed."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from oma.approval.canonical import canonical_json
from oma.approval.ledger import ApprovalRecord, DurableApprovalLedger
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma.store.memory import InMemoryStore
from oma.visible import LEGEND
from oma_operator.approvals.rules.decision_view import verified_content, view
from oma_operator.approvals.rules.resources import decision_manifest, summary
from oma_operator.cli import decisions as cli_decisions
from oma_operator.resources.bodies import DecisionBody, DecisionStatus, TeamRunBody

TEAMRUN: TeamRunBody = {"metadata": {"name": "pay", "namespace": "ns", "uid": "uid-pay"}}
# What conceals, retitles, reorders or breaks a line on a terminal, and how each must show.
HOSTILE = {
    "\x1b[8m": ("\\x1b[8m", "\\u001b[8m"),  # summary words, exact content JSON
    "\x1b]0;title\x07": ("\\x1b]0;title\\x07", "\\u001b]0;title\\u0007"),
    "\u2028": ("\\u2028", "\\u2028"),
    "\u202e": ("\\u202e", "\\u202e"),
    "\u200b": ("\\u200b", "\\u200b"),
    "\r": ("\\r", "\\r"),
}
RAW = ("\x1b", "\x07", "\u2028", "\u202e", "\u200b", "\r")
FAKE_HASH = "Content hash: " + "0" * 64


def _hostile(text: str) -> str:
    """``text`` with every hostile sequence, and a fake block behind them."""
    return f"{text}{''.join(HOSTILE)} hidden\x1b[0m\n{FAKE_HASH}\u2028{FAKE_HASH}"


def _tool_request(**input_: Any) -> ApprovalRequest:
    raw = {"amount": 7, **input_}
    return _tool_request_of(raw, raw)


def _tool_request_of(raw: dict[str, Any], parsed: dict[str, Any]) -> ApprovalRequest:
    return create_approval_request(
        run_id="r1",
        scope="tool_call",
        boundary="t-1:c1",
        content={
            "kind": "tool_call",
            "toolName": "wire",
            "rawInput": raw,
            "input": parsed,
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
        },
    )


def _dispatch_request(description: str) -> ApprovalRequest:
    task = {
        "id": "t-1",
        "title": "Pay\u202e rent",
        "description": description,
        "status": "pending",
        "assignee": "clerk",
        "createdAt": "2026-12-01T10:00:00.000Z",
        "updatedAt": "2026-12-01T10:00:00.000Z",
    }
    return create_approval_request(
        run_id="r1",
        scope="task_dispatch",
        boundary="t-1",
        content={"kind": "task_dispatch", "task": task},
        reason="review \u202eit\x1b[8m",
    )


def _resource(request: ApprovalRequest) -> DecisionBody:
    manifest = decision_manifest(TEAMRUN, request)
    manifest["metadata"] |= {"uid": "uid-ad", "generation": 1, "resourceVersion": "5"}
    manifest["status"] = {"verified": True, "decision": "Pending", "recorded": False}
    return manifest


def _lines(request: ApprovalRequest) -> list[str]:
    resource = _resource(request)
    return view(resource, verified_content(resource["spec"]))


def _assert_shown_escaped(lines: list[str], request: ApprovalRequest) -> None:
    for line in lines:
        assert not any(char in line for char in RAW), line
    text = "\n".join(lines)
    for words, as_json in HOSTILE.values():
        assert words in text or as_json in text, words
    assert lines[-1] == f"  Content hash: {request.request_hash}"  # last, and the real one
    assert [line for line in lines if line.strip().startswith("Content hash:")] == [lines[-1]]
    assert not any(line.strip().startswith(FAKE_HASH) for line in lines)
    assert f"  {LEGEND}" in lines


@pytest.mark.parametrize("where", ["description", "tool input"])
def test_the_summary_shows_hostile_characters_escaped_on_one_line(where: str) -> None:
    if where == "description":
        request = _dispatch_request(_hostile("Pay the rent."))
    else:
        request = _tool_request(memo=_hostile("rent"), **{"to\u202e": "ACME"})
    text = summary(request)
    assert not any(char in text for char in RAW)
    for words, as_json in HOSTILE.values():  # the input is JSON, and escapes as JSON does
        assert words in text or (where == "tool input" and as_json in text)
    lines = text.split("\n")
    assert lines[-1] == f"Content hash: {request.request_hash}"
    assert lines[-2] == LEGEND
    assert [line for line in lines if line.startswith("Content hash:")] == [lines[-1]]
    # Only the display changes: the resource's exact content is what the hash binds.
    spec = decision_manifest(TEAMRUN, request)["spec"]
    assert spec["content"] == canonical_json(request.content)
    assert verified_content(spec) == request.content


@pytest.mark.parametrize("where", ["description", "tool input"])
def test_oma_approve_lines_show_hostile_characters_escaped_and_the_hash_last(where: str) -> None:
    if where == "description":
        request = _dispatch_request(_hostile("Pay the rent."))
    else:
        request = _tool_request(memo=_hostile("rent"))
    _assert_shown_escaped(_lines(request), request)


def test_a_summary_written_by_someone_else_is_escaped_too() -> None:
    """A resource written by an older operator (or anyone able to write one) gets no say over
    the reviewer's terminal either."""
    request = _tool_request()
    resource = _resource(request)
    resource["spec"]["summary"] = _hostile("Tool call wire.")
    _assert_shown_escaped(view(resource, verified_content(resource["spec"])), request)


def test_clean_content_shows_no_legend() -> None:
    request = _tool_request(to="ACME Zürich")
    lines = _lines(request)
    assert f"  {LEGEND}" not in lines and LEGEND not in summary(request)
    assert '"to": "ACME Zürich"' in [line.strip() for line in lines]


def _stored(request: ApprovalRequest) -> ApprovalRequest:
    """The request as the operator reads it back from the store the runner wrote it to."""
    store = InMemoryStore()

    async def round_trip() -> ApprovalRecord | None:
        ledger = DurableApprovalLedger(store)
        await ledger.ensure_request(request)
        return await ledger.get(request.id)

    record = asyncio.run(round_trip())
    assert record is not None
    return record.request


def test_an_integer_input_shows_as_the_content_holds_it_and_no_raw_input_line() -> None:
    """A tool whose input model has ``amount: float`` validates the model's 1000000 into
    1000000.0; the hash binds 1000000 (JSON numbers have no such difference)."""
    request = _stored(_tool_request_of({"amount": 1000000}, {"amount": 1000000.0}))
    text = summary(request)
    assert 'Input: {"amount": 1000000}' in text
    assert "1000000.0" not in text and "raw input" not in text
    shown = "\n".join(_lines(request))
    assert '"amount": 1000000' in shown and "1000000.0" not in shown


def test_a_fraction_and_big_and_small_numbers_show_as_the_content_holds_them() -> None:
    request = _stored(
        _tool_request_of(
            {"a": 1.5, "b": 1e21, "c": 1e-7, "d": 2**64 + 1},
            {"a": 1.5, "b": 1e21, "c": 1e-7, "d": 2**64 + 1},
        )
    )
    text = summary(request)
    held = canonical_json(request.content["input"])
    assert held == '{"a":1.5,"b":1e+21,"c":1e-7,"d":18446744073709552000}'
    assert 'Input: {"a": 1.5, "b": 1e+21, "c": 1e-7, "d": 18446744073709552000}' in text
    shown = {line.strip().rstrip(",") for line in _lines(request)}
    for line in ('"a": 1.5', '"b": 1e+21', '"c": 1e-7', '"d": 18446744073709552000'):
        assert line in shown


def test_a_raw_input_that_differs_from_the_input_is_shown() -> None:
    changed = _tool_request_of({"amount": 1, "to": "x"}, {"amount": True, "to": "x"})
    assert 'Model\'s raw input: {"amount": 1, "to": "x"}' in summary(changed)
    defaulted = _tool_request_of({"amount": 7}, {"amount": 7, "memo": ""})
    assert 'Model\'s raw input: {"amount": 7}' in summary(defaulted)


class _FakeKube:
    """The three calls ``oma approve`` makes, on one resource (no cluster)."""

    namespace, server = "ns", "https://fake"

    def __init__(self, resource: DecisionBody, reviewer: str = "alice") -> None:
        self.resource, self.reviewer = copy.deepcopy(resource), reviewer
        self.patched: list[dict[str, Any]] = []

    async def self_subject_review(self) -> dict[str, Any]:
        return {"username": self.reviewer}

    async def get_decision(self, namespace: str, name: str) -> DecisionBody | None:
        return copy.deepcopy(self.resource) if name == self.resource["metadata"]["name"] else None

    async def patch_decision_spec(
        self, namespace: str, name: str, spec: dict[str, Any], version: str
    ) -> DecisionBody:
        self.patched.append(spec)
        self.resource["spec"] |= spec
        return copy.deepcopy(self.resource)

    async def aclose(self) -> None:
        pass


def _oma(monkeypatch: pytest.MonkeyPatch, kube: _FakeKube, *args: str) -> tuple[int, str, str]:
    async def connect(target: cli_decisions.Target) -> _FakeKube:
        return kube

    monkeypatch.setattr(cli_decisions, "connect", connect)
    monkeypatch.setattr(cli_decisions, "_require_credentials", lambda *_: None)
    app = typer.Typer()
    cli_decisions.register(app)
    # No operator here to record the decision: do not wait for it (tested below).
    more = ["--wait", "0"] if args and args[0] in ("approve", "reject", "resolve") else []
    result = CliRunner().invoke(app, [*args, *more])
    return result.exit_code, result.stdout, result.stderr


def test_oma_approve_prints_hostile_content_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _dispatch_request(_hostile("Pay the rent."))
    kube = _FakeKube(_resource(request), reviewer="alice\u202e\x1b[8m")
    name = kube.resource["metadata"]["name"]
    code, out, err = _oma(monkeypatch, kube, "approve", name)
    assert code == 0, err
    lines = out.splitlines()
    assert not any(char in out for char in RAW)
    assert lines[-1] == "approved by alice\\u202e\\x1b[8m"
    _assert_shown_escaped(lines[:-1], request)
    assert kube.patched == [{"decision": "Approved", "reviewer": "alice\u202e\x1b[8m"}]
    # Only the display changed: the resource's content is still exactly what the hash binds.
    assert kube.resource["spec"]["content"] == canonical_json(request.content)


def test_oma_approve_json_and_errors_are_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    request = _tool_request(memo=_hostile("rent"))
    kube = _FakeKube(_resource(request), reviewer="bob\u2028")
    name = kube.resource["metadata"]["name"]
    code, out, err = _oma(monkeypatch, kube, "approve", name, "--json")
    assert code == 0, err
    assert not any(char in out for char in RAW)
    assert json.loads(out)["reviewer"] == "bob\u2028"  # still the same JSON value
    kube.resource["spec"] |= {"decision": "Pending", "requestHash": "\x1b[8m\u202e" + "f" * 64}
    code, out, err = _oma(monkeypatch, kube, "reject", name)
    assert code == 1
    assert not any(char in err for char in RAW)
    assert "\\x1b[8m\\u202e" in err


class _RecordingKube(_FakeKube):
    """The API as it looks once the operator has looked at the decision: its status says
    ``status`` (what the operator wrote)."""

    def __init__(self, resource: DecisionBody, status: DecisionStatus) -> None:
        super().__init__(resource)
        self.after_patch = status

    async def patch_decision_spec(
        self, namespace: str, name: str, spec: dict[str, Any], version: str
    ) -> DecisionBody:
        decided = await super().patch_decision_spec(namespace, name, spec, version)
        self.resource["status"] = self.after_patch
        return decided


def _waiting(monkeypatch: pytest.MonkeyPatch, kube: _FakeKube) -> tuple[int, str, str]:
    async def connect(target: cli_decisions.Target) -> _FakeKube:
        return kube

    monkeypatch.setattr(cli_decisions, "connect", connect)
    monkeypatch.setattr(cli_decisions, "_require_credentials", lambda *_: None)
    app = typer.Typer()
    cli_decisions.register(app)
    name = kube.resource["metadata"]["name"]
    result = CliRunner().invoke(app, ["approve", name, "--yes", "--wait", "5"])
    return result.exit_code, result.stdout, result.stderr


def test_oma_approve_says_approved_only_once_the_operator_recorded_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack 4's end: a decision written on a resource the operator did not record (it was
    tampered with, or deleted) printed "approved", exit 0, and nothing happened."""
    resource = _resource(_tool_request())
    recorded: DecisionStatus = {
        "verified": True,
        "recorded": True,
        "decision": "Approved",
        "reviewer": "alice",
    }
    code, out, err = _waiting(monkeypatch, _RecordingKube(resource, recorded))
    assert code == 0 and out.endswith("approved by alice\n") and "not waited" not in err

    refused: DecisionStatus = {
        "verified": True,
        "recorded": False,
        "message": "not recorded: not a reviewer",
    }
    code, out, err = _waiting(monkeypatch, _RecordingKube(resource, refused))
    assert code == cli_decisions.EXIT_NOT_RECORDED and "approved by" not in out
    assert "written but not recorded: not recorded: not a reviewer" in err

    first: DecisionStatus = {
        "verified": True,
        "recorded": True,
        "decision": "Rejected",
        "reviewer": "bob",
    }
    code, out, err = _waiting(monkeypatch, _RecordingKube(resource, first))
    assert code == cli_decisions.EXIT_NOT_RECORDED and "approved by" not in out


def test_oma_approve_refuses_a_resource_being_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    resource = _resource(_tool_request())
    resource["metadata"]["deletionTimestamp"] = "2026-12-05T10:00:00Z"
    kube = _FakeKube(resource)
    code, out, err = _waiting(monkeypatch, kube)
    assert code == 1 and out == "" and "being deleted" in err and kube.patched == []
