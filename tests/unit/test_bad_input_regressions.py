"""Regressions found by the fuzz kit (tests/fuzz): each was an untyped crash or a silent change."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from oma import jsonutil
from oma.approval import (
    DurableApprovalError,
    DurableApprovalLedger,
    approval_key,
    canonical_json,
    create_approval_request,
)
from oma.checkpoint import decode_snapshot, parse_snapshot
from oma.errors import CheckpointValidationError, StoreCorruptError, StoreError
from oma.llm.adapter import LLMResponseError
from oma.llm.anthropic_adapter import parse_message
from oma.llm.openai_adapter import parse_completion
from oma.spec import RunSpecError, load_run_spec
from oma.store import FileStore, InMemoryStore
from oma.store.base import MemoryEntry
from oma.store.file_format import decode_state_file, encode_state_file
from tests.unit.snapshot_fixtures import v4_tool_calls

KEY = "__oma_checkpoint__/r/latest"
ROW = '{"version":1,"entries":[{"key":"k","value":"%s","createdAt":"%s"}]}'


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


# -- FileStore state file -----------------------------------------------------------------


def test_state_file_with_an_escaped_lone_surrogate_loads() -> None:
    """The reference writes lone surrogates as escapes; such a file is not corrupt."""
    data = (ROW % ("\\ud800", "2026-01-01T00:00:00.000Z")).encode()
    assert decode_state_file("f", data)["k"].value == "\ud800"


async def test_file_store_writes_lone_surrogates_and_big_integers(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "s.json")
    await store.set("k", "a\ud800b", {"n": 2**70})
    entry = await FileStore(tmp_path / "s.json").get("k")
    assert entry is not None and entry.value == "a\ud800b" and entry.metadata == {"n": 2**70}


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00.000+01:00", "9999-12-31T23:59:59-01:00"])
def test_created_at_without_a_utc_form_is_corrupt_not_an_overflow(stamp: str) -> None:
    with pytest.raises(StoreCorruptError, match="unparsable createdAt"):
        decode_state_file("f", (ROW % ("v", stamp)).encode())


def test_state_file_nested_past_the_parser_limit_is_corrupt() -> None:
    data = b'{"version":1,"entries":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(StoreCorruptError):
        decode_state_file("f", data)


def test_unencodable_metadata_is_a_store_error() -> None:
    entry = MemoryEntry(
        key="k", value="v", metadata={"d": _deep(5000)}, created_at=datetime.now(UTC)
    )
    with pytest.raises(StoreError):
        encode_state_file({"k": entry})


# -- model output ---------------------------------------------------------------------------


def test_anthropic_block_with_a_non_string_type_is_a_response_error() -> None:
    with pytest.raises(LLMResponseError, match="unsupported block type"):
        parse_message(b'{"content":[{"type":["text"]}]}', "m")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_openai_arguments_with_non_finite_numbers_are_refused(constant: str) -> None:
    """json.loads accepts them; a checkpoint would silently store null instead."""
    call = {"id": "c1", "function": {"name": "t", "arguments": f'{{"x": {constant}}}'}}
    body = {"choices": [{"message": {"tool_calls": [call]}}]}
    with pytest.raises(LLMResponseError, match="not valid JSON"):
        parse_completion(json.dumps(body).encode(), "m")


@pytest.mark.parametrize("parse", [parse_message, parse_completion])
def test_response_nested_past_the_parser_limit_is_a_response_error(parse: Any) -> None:
    with pytest.raises(LLMResponseError, match="nested too deeply"):
        parse(b"[" * 100_000 + b"]" * 100_000, "m")


def test_tool_input_too_deep_to_checkpoint_is_a_response_error() -> None:
    block = {"type": "tool_use", "id": "t1", "name": "t", "input": _deep(300)}
    with pytest.raises(LLMResponseError, match="nested 300 levels"):
        parse_message(json.dumps({"content": [block]}).encode(), "m")


def test_tool_input_with_a_lone_surrogate_key_reaches_the_conversation_intact() -> None:
    call = {"id": "c1", "function": {"name": "t", "arguments": '{"a": {"\\ud800": null}}'}}
    body = {"choices": [{"message": {"tool_calls": [call]}}]}
    response = parse_completion(json.dumps(body).encode(), "m")
    assert response.message.to_wire()["content"][0]["input"] == {"a": {"\ud800": None}}


# -- snapshots and approvals ----------------------------------------------------------------


def test_snapshot_with_lone_surrogate_keys_saves_and_loads_unchanged() -> None:
    doc = v4_tool_calls()
    block = {"type": "text", "text": "t", "x": {"\ud800": {"\udfff": 1}}}
    doc["inFlightTasks"][0]["conversationMessages"].append({"role": "user", "content": [block]})
    doc["queue"]["tasks"][0]["metadata"] = {"\ud800": 1}
    snapshot = parse_snapshot(doc, KEY)
    again = decode_snapshot(snapshot.to_json(), KEY)
    assert again == snapshot
    assert again.queue.tasks[0].metadata == {"\ud800": 1}


def test_snapshot_too_deep_to_save_is_refused_on_load() -> None:
    doc = v4_tool_calls()
    doc["queue"]["tasks"][0]["metadata"] = _deep(300)
    with pytest.raises(CheckpointValidationError, match="nested") as caught:
        decode_snapshot(jsonutil.dumps(doc), KEY)
    assert caught.value.rules == {"2.6.1"}


def _content(raw_input: Any) -> dict[str, Any]:
    return {
        "kind": "tool_call",
        "toolName": "t",
        "rawInput": raw_input,
        "input": {},
        "agentName": "a",
        "taskId": "t1",
        "toolCallId": "c1",
        "consequential": False,
    }


def test_approval_content_too_deep_to_hash_is_a_validation_error() -> None:
    with pytest.raises(DurableApprovalError) as caught:
        create_approval_request(
            run_id="r", scope="tool_call", boundary="b", content=_content(_deep(2000))
        )
    assert caught.value.code == "APPROVAL_VALIDATION_ERROR"
    with pytest.raises(DurableApprovalError):
        canonical_json(_deep(2000))


async def test_approval_with_a_lone_surrogate_key_is_stored_and_read_back() -> None:
    request = create_approval_request(
        run_id="r", scope="tool_call", boundary="b", content=_content({"\ud800": {"\udfff": 1}})
    )
    ledger = DurableApprovalLedger(InMemoryStore())
    await ledger.ensure_request(request)
    row = await ledger.get(request.id)
    assert row is not None and row.request == request


async def test_ledger_row_nested_past_the_parser_limit_is_an_integrity_error() -> None:
    store = InMemoryStore()
    await store.set(approval_key("apr_x"), "[" * 100_000 + "]" * 100_000)
    with pytest.raises(DurableApprovalError) as caught:
        await DurableApprovalLedger(store).get("apr_x")
    assert caught.value.code == "APPROVAL_INTEGRITY_ERROR"


# -- run specs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"agents: \xff\xfe", b"[" * 5000 + b"]" * 5000, b"maxConcurrency: " + b"9" * 5000],
    ids=["not-utf8", "deep", "huge-int"],
)
def test_hostile_run_spec_text_is_a_run_spec_error(data: bytes) -> None:
    with pytest.raises(RunSpecError):
        load_run_spec(data, "spec.yaml")


def test_run_spec_text_loads() -> None:
    text = "agents: [{name: w, model: {provider: scripted, script: [{text: hi}]}}]\n"
    spec = load_run_spec(text + "tasks: [{title: T, description: d}]\n", "spec.yaml")
    assert spec.agents[0].name == "w"


def test_spec_error_for_a_field_name_with_control_characters_is_one_line() -> None:
    """Found by tests/fuzz/test_run_spec_fuzz.py: an unknown key holding a newline broke the
    one-line error the CLI prints."""
    text = json.dumps({"runId": "r", "agents": [{"name": "w", "bad\nkey\t": None}]})
    with pytest.raises(RunSpecError) as refused:
        load_run_spec(text, "spec.json")
    message = str(refused.value)
    assert "\n" not in message and "\t" not in message
    assert "bad\\nkey\\t" in message  # the key is still named, escaped
