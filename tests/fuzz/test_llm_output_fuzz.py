"""Model output: whatever a provider answers is a typed ``LLMResponseError`` or a response the
engine can use and checkpoint; bad tool input becomes an error result the model sees."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from oma import jsonutil
from oma.checkpoint import decode_snapshot, parse_snapshot
from oma.llm.adapter import LLMResponseError
from oma.llm.anthropic_adapter import parse_message
from oma.llm.openai_adapter import parse_completion
from oma.llm.output_json import MAX_TOOL_INPUT_DEPTH
from oma.llm.types import ChatResponse, ToolUseBlock
from oma.tools import ToolContext, define_tool
from tests.fuzz import seeds
from tests.fuzz.strategies import (
    any_json_scalars,
    edge_text,
    huge_text,
    json_objects,
    json_values,
    mutated,
)
from tests.fuzz.tally import examples, record

KEY = "__oma_checkpoint__/fuzz/latest"


def _openai_body(arguments: Any, content: Any = None) -> dict[str, Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": arguments},
    }
    message = {"role": "assistant", "content": content, "tool_calls": [call]}
    return {"choices": [{"message": message, "finish_reason": "tool_calls"}], "model": "m"}


def _anthropic_body(tool_input: Any, text: Any = "ok") -> dict[str, Any]:
    return {
        "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": tool_input},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 5},
        "model": "m",
    }


def _assert_checkpointable(response: ChatResponse) -> None:
    """The answer, put in a conversation, is written to a checkpoint and read back unchanged."""
    doc = seeds.snapshot(0)
    for offset in range(50):
        doc = seeds.snapshot(offset)
        if doc.get("version") == 4 and doc.get("inFlightTasks"):
            break
    messages = doc["inFlightTasks"][0]["conversationMessages"]
    messages.append(response.message.to_wire())
    snapshot = parse_snapshot(doc, KEY)
    again = decode_snapshot(snapshot.to_json(), KEY)
    assert again == snapshot
    assert again.to_wire()["inFlightTasks"][0]["conversationMessages"][-1] == messages[-1]


def _tool_inputs(response: ChatResponse) -> list[dict[str, Any]]:
    return [block.input for block in response.content if isinstance(block, ToolUseBlock)]


def _names_the_call(error: LLMResponseError) -> None:
    assert "call_1" in str(error), "the error must say which tool call was bad"


# Tool-call arguments as a model might send them: JSON text, truncated JSON, NaN, garbage.
@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    value = draw(json_objects(10) | json_values(6, scalars=any_json_scalars))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    kind = draw(st.sampled_from(["whole", "truncated", "nan", "garbage", "deep", "huge"]))
    if kind == "truncated":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if kind == "nan":
        return '{"x": ' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])) + "}"
    if kind == "garbage":
        return draw(edge_text)
    if kind == "deep":
        depth = draw(st.integers(MAX_TOOL_INPUT_DEPTH - 2, 3000))
        return '{"d":' + "[" * depth + "]" * depth + "}"  # json.dumps itself would overflow
    if kind == "huge":
        return json.dumps({"text": draw(huge_text)})
    return text


@settings(max_examples=examples(250))
@given(arguments=argument_texts())
def test_openai_tool_arguments_are_typed_error_or_usable(arguments: str) -> None:
    try:
        response = parse_completion(json.dumps(_openai_body(arguments)).encode(), "m")
    except LLMResponseError as error:
        _names_the_call(error)
        record("llm: openai tool arguments", "typed")
        return
    [tool_input] = _tool_inputs(response)
    assert tool_input == (json.loads(arguments) if arguments.strip() else {})
    _assert_checkpointable(response)
    record("llm: openai tool arguments", "valid")


@settings(max_examples=examples(150))
@given(tool_input=json_values(10, scalars=any_json_scalars), text=edge_text | huge_text)
def test_anthropic_tool_input_is_typed_error_or_usable(tool_input: Any, text: str) -> None:
    try:
        response = parse_message(json.dumps(_anthropic_body(tool_input, text)).encode(), "m")
    except LLMResponseError:
        record("llm: anthropic tool input", "typed")
        return
    assert _tool_inputs(response) == [tool_input]
    assert isinstance(tool_input, dict)
    if all(-(2**63) <= n < 2**64 for n in _ints(tool_input)):  # beyond: a known jsonutil bug
        _assert_checkpointable(response)
    record("llm: anthropic tool input", "valid")


def _ints(value: Any) -> list[int]:
    found: list[int] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            found.append(item)
    return found


@settings(max_examples=examples(200))
@given(which=st.sampled_from(["openai", "anthropic"]), change=st.data())
def test_mutated_response_bodies_are_typed_or_usable(which: str, change: st.DataObject) -> None:
    seed = _openai_body('{"q": "x"}', "hi") if which == "openai" else _anthropic_body({"q": "x"})
    body, _ = change.draw(mutated(seed))
    parse = parse_completion if which == "openai" else parse_message
    try:
        response = parse(jsonutil.dumps_bytes(body), "m")
    except LLMResponseError:
        record(f"llm: mutated {which} body", "typed")
        return
    assert response.content
    _assert_checkpointable(response)
    record(f"llm: mutated {which} body", "valid")


@settings(max_examples=examples(150))
@given(
    which=st.sampled_from(["openai", "anthropic"]),
    payload=st.binary(max_size=300)
    | edge_text.map(lambda t: t.encode("utf-8", "surrogatepass"))
    | st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),
)
def test_arbitrary_response_bytes_are_typed(which: str, payload: bytes) -> None:
    parse = parse_completion if which == "openai" else parse_message
    try:
        parse(payload, "m")
    except LLMResponseError:
        record(f"llm: raw {which} bytes", "typed")
        return
    raise AssertionError(f"{payload!r:.200} parsed as a model response")


class Lookup(BaseModel):
    query: str
    limit: int = 10


async def _lookup(args: Lookup, ctx: ToolContext) -> str:
    return f"{args.query}:{args.limit}"


LOOKUP = define_tool("lookup", "Look something up.", Lookup, _lookup)
CTX = ToolContext(run_id="r", task_id="t", tool_call_id="call_1", agent_name="a")


@settings(max_examples=examples(200))
@given(
    tool_input=json_objects(8)
    | st.fixed_dictionaries({"query": edge_text}, optional={"limit": json_values(2)})
)
def test_bad_tool_input_is_an_error_result_for_the_model(tool_input: dict[str, Any]) -> None:
    result = asyncio.run(LOOKUP.run(tool_input, CTX))
    try:
        expected = Lookup.model_validate(tool_input)
    except ValueError:
        assert result.is_error
        assert result.data.startswith('Invalid input for tool "lookup"')
        record("llm: tool input validation", "typed")
        return
    assert not result.is_error
    assert result.data == f"{expected.query}:{expected.limit}"
    record("llm: tool input validation", "valid")
