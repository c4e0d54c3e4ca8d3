"""``oma approvals`` shows a reviewer control, bidi and invisible characters escaped, and
numbers as the content holds them (issue 41, attacks 10 and 12); the store keeps them as they
are hashed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from oma.approval.canonical import canonical_json
from oma.approval.ledger import DurableApprovalLedger
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from oma.cli import app
from oma.store import FileStore
from oma.visible import LEGEND

HOSTILE = "rent\x1b[8m\x1b]0;title\x07\u2028\u202e\u200b\r hidden\nrequest   apr_fake"
RAW = ("\x1b", "\x07", "\u2028", "\u202e", "\u200b", "\r")


def _request() -> ApprovalRequest:
    return create_approval_request(
        run_id="r1\u202e",
        scope="tool_call",
        boundary="t-1:c1\x1b[8m",
        reason=f"review {HOSTILE}",
        content={
            "kind": "tool_call",
            "toolName": "wire",
            "rawInput": {"amount": 1000000, "memo": HOSTILE},
            "input": {"amount": 1000000.0, "memo": HOSTILE},  # a float-typed input model
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
        },
    )


def _stored(tmp_path: Path, request: ApprovalRequest) -> str:
    asyncio.run(DurableApprovalLedger(FileStore(tmp_path / "s.json")).ensure_request(request))
    return f"file://{tmp_path}/s.json"


def _oma(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["approvals", *args])
    return result.exit_code, result.output


def _stored_request(tmp_path: Path, request_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        record = await DurableApprovalLedger(FileStore(tmp_path / "s.json")).get(request_id)
        assert record is not None
        return record.to_wire()

    return asyncio.run(read())


def test_show_and_list_print_hostile_content_escaped(tmp_path: Path) -> None:
    request = _request()
    url = _stored(tmp_path, request)
    code, out = _oma("show", request.id, "--store", url)
    assert code == 0, out
    assert not any(char in out for char in RAW)
    assert "\\u202e" in out and "\\u2028" in out and "\\u200b" in out
    assert "\\x1b[8m" in out or "\\u001b[8m" in out
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("request ")] == [f"request   {request.id}"]
    assert LEGEND in lines
    assert '"amount": 1000000' in out and "1000000.0" not in out
    code, out = _oma("list", "--store", url)
    assert code == 0 and not any(char in out for char in RAW) and "r1\\u202e" in out
    # Only the display changes: the store holds the content as it is hashed.
    stored = _stored_request(tmp_path, request.id)["request"]
    assert canonical_json(stored["content"]) == canonical_json(request.content)
    assert stored["runId"] == "r1\u202e"


def test_json_output_is_escaped_and_parses_to_the_same_values(tmp_path: Path) -> None:
    request = _request()
    url = _stored(tmp_path, request)
    for args in (("show", request.id), ("list",)):
        code, out = _oma(*args, "--store", url, "--json")
        assert code == 0, out
        assert not any(char in out for char in RAW)
        shown = json.loads(out)
        record = shown if isinstance(shown, dict) else shown[0]
        assert record["request"]["content"]["input"]["memo"] == HOSTILE


def test_a_decision_by_a_hostile_name_is_printed_escaped(tmp_path: Path) -> None:
    request = _request()
    url = _stored(tmp_path, request)
    reviewer = "alice\u202e\x1b[8m"
    hash_ = request.request_hash
    code, out = _oma("approve", request.id, "--store", url, "--reviewer", reviewer, "--hash", hash_)
    assert code == 0, out
    assert not any(char in out for char in RAW) and "alice\\u202e\\x1b[8m" in out
    code, out = _oma("show", request.id, "--store", url)
    assert not any(char in out for char in RAW) and "by alice\\u202e\\x1b[8m" in out


def test_yaml_output_is_escaped_and_parses_to_the_same_values(tmp_path: Path) -> None:
    import yaml

    request = _request()
    store = _stored(tmp_path, request)
    for args in (["show", request.id], ["list"]):
        code, out = _oma(*args, "--store", store, "-o", "yaml")
        assert code == 0, out
        assert not any(char in out for char in RAW), out
        as_json = json.loads(_oma(*args, "--store", store, "-o", "json")[1])
        assert yaml.safe_load(out) == as_json  # the same document, only escaped
    code, out = _oma("list", "--store", store, "-o", "xml")
    assert code == 2 and "xml" in out
