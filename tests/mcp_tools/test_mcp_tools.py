"""Tools from a real MCP server (``oma.tools.mcp.counter_server``, built with the SDK) in a run:
named for the model, called with the run's idempotency key, refused calls shown to the model,
an unreachable server a transient failure of the attempt, credentials from the environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oma.checkpoint import Checkpoint
from oma.local_run import LocalRun, run_spec
from oma.pod_contract import Exit, exit_for_error
from oma.spec import RunSpec
from oma.store import FileStore
from oma.tools import builtin_tools
from oma.tools.mcp import (
    McpToolChangedError,
    McpToolError,
    McpToolNotOfferedError,
    McpUnavailableError,
)
from tests.servers.mcp_counter import McpCounterServer
from tests.servers.process import free_port
from tests.servers.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def counter(redis_server: RedisServer) -> Iterator[McpCounterServer]:
    with McpCounterServer(redis_server.url) as server:
        yield server


def _spec(store: Path, script: list[Any], server: dict[str, Any], **extra: Any) -> RunSpec:
    return RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": "clerk",
                    "model": {"provider": "scripted", "script": script},
                    "mcpServers": [{"name": "counter", **server}],
                }
            ],
            "tasks": [{"title": "Count", "description": "Count the things."}],
            "store": {"file": {"path": str(store)}},
            **extra,
        }
    )


async def _run(spec: RunSpec, run_id: str, tmp_path: Path) -> LocalRun:
    return await run_spec(
        spec, run_id=run_id, tools=builtin_tools(), default_store_path=tmp_path / "default.json"
    )


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"id": i, "name": n, "input": a} for i, n, a in calls]}]


def _outputs(run: LocalRun) -> list[tuple[str, str]]:
    """(tool, output) of every call the run's tasks made, as the call records keep them."""
    return [
        (call.tool_name, call.output)
        for result in run.result.task_results.values()
        for call in result.tool_calls
    ]


async def test_an_agent_calls_the_servers_tools_with_the_runs_idempotency_key(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    script = [
        *_calls(("c-1", "counter__add", {"counter": "apples", "amount": 2})),
        *_calls(("c-2", "counter__lookup", {"counter": "apples"})),
        {"text": "two apples"},
    ]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url})
    run = await _run(spec, "r1", tmp_path)
    assert run.result.status.code == "ok", run.result.status
    assert counter.counter("apples") == 2
    calls = counter.calls()
    assert [call["tool"] for call in calls] == ["add", "lookup"]
    task_id = run.result.tasks[0].id
    assert [call["key"] for call in calls] == [f"r1:{task_id}:c-1", f"r1:{task_id}:c-2"]
    assert run.result.tasks[0].result == "two apples"


async def test_the_allow_list_limits_the_tools_the_model_sees(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    script = [*_calls(("c-1", "counter__pay", {"to": "bob", "amount": 1})), {"text": "done"}]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url, "tools": ["add", "lookup"]})
    run = await _run(spec, "r1", tmp_path)
    # The model asked for a tool it was not given: an error result, and nothing was paid.
    assert run.result.status.code == "ok"
    refused = 'Tool "counter__pay" is not available to agent "clerk".'
    assert _outputs(run) == [("counter__pay", refused)]
    assert counter.paid("bob") == 0 and counter.calls() == []


async def test_an_allow_listed_tool_the_server_lacks_fails_the_attempt_for_good(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    spec = _spec(tmp_path / "s.json", [{"text": "x"}], {"url": counter.url, "tools": ["nope"]})
    with pytest.raises(McpToolError, match=r"does not offer \['nope'\]") as caught:
        await _run(spec, "r1", tmp_path)
    assert not caught.value.transient
    assert isinstance(caught.value, McpToolNotOfferedError)
    assert caught.value.agent == "clerk" and caught.value.tools == ["counter__nope"]
    assert exit_for_error(caught.value) is Exit.PERMANENT  # a new run: fix the spec
    assert not (tmp_path / "s.json").exists() or await _no_checkpoint(tmp_path / "s.json", "r1")


async def _no_checkpoint(store: Path, run_id: str) -> bool:
    return await Checkpoint(FileStore(store), run_id=run_id).load_latest() is None


async def test_a_call_the_server_refuses_is_an_error_result_the_model_sees(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    script = [*_calls(("c-1", "counter__refuse", {"reason": "closed"})), {"text": "it refused"}]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url})
    run = await _run(spec, "r1", tmp_path)
    assert run.result.status.code == "ok"
    assert run.result.tasks[0].result == "it refused"
    assert _outputs(run) == [("counter__refuse", "Error executing tool refuse: refused: closed")]
    assert [call["tool"] for call in counter.calls()] == ["refuse"]


async def test_a_json_rpc_error_of_the_servers_own_is_a_refusal_not_a_lost_answer(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    """Code -32000 opens the range of server errors; the SDK also uses it for a connection it
    saw close. Only the latter leaves the outcome unknown (the attempt ends)."""
    script = [*_calls(("c-1", "counter__deny", {"reason": "over limit"})), {"text": "denied"}]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url})
    run = await _run(spec, "r1", tmp_path)
    assert run.result.status.code == "ok" and run.result.tasks[0].result == "denied"
    assert _outputs(run) == [("counter__deny", "MCP error -32000: denied: over limit")]
    assert [call["tool"] for call in counter.calls()] == ["deny"]


async def test_an_unreachable_server_is_a_transient_failure_before_anything_runs(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    spec = _spec(tmp_path / "s.json", [{"text": "x"}], {"url": url, "timeoutSeconds": 5})
    with pytest.raises(McpUnavailableError, match="could not be reached") as caught:
        await _run(spec, "r1", tmp_path)
    assert caught.value.transient and caught.value.code == "MCP_UNAVAILABLE"
    assert not (tmp_path / "s.json").exists() or await _no_checkpoint(tmp_path / "s.json", "r1")


async def test_headers_come_from_the_environment_and_refused_credentials_are_permanent(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with McpCounterServer(redis_server.url, env={"MCP_COUNTER_TOKEN": "s3cret"}) as server:
        script = [*_calls(("c-1", "counter__whoami", {})), {"text": "ok"}]
        headers = {"Authorization": "TEAM_TOKEN", "X-Team": "TEAM_NAME"}
        spec = _spec(tmp_path / "s.json", script, {"url": server.url, "headersFromEnv": headers})
        monkeypatch.setenv("TEAM_NAME", "blue")
        monkeypatch.setenv("TEAM_TOKEN", "Bearer wrong")
        with pytest.raises(McpUnavailableError) as caught:
            await _run(spec, "r1", tmp_path)
        assert not caught.value.transient, caught.value
        assert "wrong" not in str(caught.value)
        monkeypatch.setenv("TEAM_TOKEN", "Bearer s3cret")
        run = await _run(spec, "r2", tmp_path)
        assert run.result.status.code == "ok"
        assert _outputs(run) == [("counter__whoami", "blue")]


async def test_a_header_variable_that_is_not_set_is_named(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    server = {"url": counter.url, "headersFromEnv": {"Authorization": "OMA_TEST_UNSET_TOKEN"}}
    spec = _spec(tmp_path / "s.json", [{"text": "x"}], server)
    with pytest.raises(McpUnavailableError, match="OMA_TEST_UNSET_TOKEN, which is not set"):
        await _run(spec, "r1", tmp_path)


async def test_a_stdio_server_from_the_runner_image_serves_the_same_tools(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    import sys

    script = [*_calls(("c-1", "local__add", {"counter": "pears", "amount": 3})), {"text": "3"}]
    stdio = {
        "name": "local",
        "command": [sys.executable, "-m", "oma.tools.mcp.counter_server", "--stdio"],
        "env": counter.child_env,
    }
    spec = RunSpec.model_validate(
        {
            "agents": [
                {
                    "name": "clerk",
                    "model": {"provider": "scripted", "script": script},
                    "mcpServers": [stdio],
                }
            ],
            "tasks": [{"title": "Count", "description": "Count."}],
            "store": {"file": {"path": str(tmp_path / "s.json")}},
        }
    )
    run = await _run(spec, "r1", tmp_path)
    assert run.result.status.code == "ok", run.result.status
    assert counter.counter("pears") == 3


async def test_a_tool_renamed_between_attempts_holds_the_run_and_is_never_called(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    script = [
        *_calls(("c-1", "counter__add", {"counter": "figs", "amount": 1})),
        *_calls(("c-2", "counter__add", {"counter": "figs", "amount": 1})),
        {"text": "two figs"},
    ]
    spec = _spec(
        tmp_path / "s.json",
        script,
        {"url": counter.url},
        approvals={"tools": ["counter__add"]},
    )
    first = await _run(spec, "r1", tmp_path)
    assert first.result.status.code == "suspended"  # the first add waits for a reviewer
    assert counter.calls() == []
    counter.stop()
    counter.start(MCP_COUNTER_RENAME="add=add_v2")
    with pytest.raises(McpToolChangedError, match="'counter__add' is gone") as caught:
        await _run(spec, "r1", tmp_path)
    assert not caught.value.transient
    assert exit_for_error(caught.value) is Exit.TOOL_CHANGED  # a TeamRun holds (exit 15)
    assert counter.calls() == []
    counter.stop()
    counter.start()  # the tool is back as it was: the run goes on from its checkpoint
    again = await _run(spec, "r1", tmp_path)
    assert again.result.status.code == "suspended"  # still waiting for its reviewer
    assert counter.calls() == []


async def test_an_allow_listed_tool_renamed_between_attempts_holds_the_run_too(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    """With an allow-list, the renamed tool is one the spec names and the server no longer
    offers: for a run that recorded it, a tool gone from its server (the run holds, exit 15),
    not a spec to fix."""
    script = [*_calls(("c-1", "counter__add", {"counter": "kiwis", "amount": 1})), {"text": "1"}]
    server = {"url": counter.url, "tools": ["add"]}
    spec = _spec(tmp_path / "s.json", script, server, approvals={"tools": ["counter__add"]})
    assert (await _run(spec, "r1", tmp_path)).result.status.code == "suspended"
    counter.stop()
    counter.start(MCP_COUNTER_RENAME="add=add_v2")
    with pytest.raises(McpToolChangedError, match="'counter__add' is gone") as caught:
        await _run(spec, "r1", tmp_path)
    assert exit_for_error(caught.value) is Exit.TOOL_CHANGED
    assert isinstance(caught.value.__cause__, McpToolNotOfferedError)
    assert counter.calls() == []
    counter.stop()
    counter.start()
    assert (await _run(spec, "r1", tmp_path)).result.status.code == "suspended"
    assert counter.calls() == []


async def test_a_new_run_with_a_stale_tool_record_is_told_to_fix_its_spec(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    """A record left by an attempt that never saved a checkpoint does not make a new run hold:
    the run starts fresh, so a tool its spec names and the server lacks is a spec to fix."""
    from oma.store import FileStore
    from oma.tools.mcp.record import ToolRecord, record_key

    store = FileStore(tmp_path / "s.json")
    recorded = ToolRecord(agents={"clerk": {"counter__nope": "0" * 64}})
    await store.set(record_key("r1"), recorded.model_dump_json())
    spec = _spec(tmp_path / "s.json", [{"text": "x"}], {"url": counter.url, "tools": ["nope"]})
    with pytest.raises(McpToolNotOfferedError, match=r"does not offer \['nope'\]") as caught:
        await _run(spec, "r1", tmp_path)
    assert caught.value.__cause__ is None
    assert exit_for_error(caught.value) is Exit.PERMANENT


async def test_deleting_the_checkpoint_deletes_the_tool_record_and_a_fresh_run_records_anew(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    from oma.checkpoint.keys import checkpoint_key
    from oma.checkpoint.stored import remove_checkpoint
    from oma.tools.mcp.record import record_key

    spec = _spec(tmp_path / "s.json", [{"text": "done"}], {"url": counter.url, "tools": ["add"]})
    assert (await _run(spec, "r1", tmp_path)).result.success
    store = FileStore(tmp_path / "s.json")
    recorded = await store.get(record_key("r1"))
    assert recorded is not None and "counter__add" in recorded.value
    assert await remove_checkpoint(store, checkpoint_key("r1"))
    assert await store.get(record_key("r1")) is None


async def test_a_server_restarted_between_two_calls_serves_the_second_under_its_key(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    """A stateless (2026-07-28) server that restarts between calls loses nothing: the next
    call reaches the new process with its own key, and each takes effect once."""
    import asyncio

    script = [
        *_calls(("c-1", "counter__add", {"counter": "kiwis", "amount": 1})),
        {**_calls(("c-2", "counter__add", {"counter": "kiwis", "amount": 2}))[0], "delay": 4},
        {"text": "three kiwis"},
    ]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url})

    async def restart_after_the_first_call() -> None:
        # A condition in Redis, written by another process: polled, not awaited as an event.
        while [c["tool"] for c in counter.calls()] != ["add"]:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await asyncio.to_thread(counter.stop)
        await asyncio.to_thread(counter.start)

    restarting = asyncio.create_task(restart_after_the_first_call())
    run = await _run(spec, "r1", tmp_path)
    await restarting
    assert run.result.success and counter.counter("kiwis") == 3
    keys = [call["key"].rsplit(":", 1)[1] for call in counter.calls()]
    assert keys == ["c-1", "c-2"]


async def test_a_tampered_tool_record_stops_the_resumed_run_before_any_call(
    counter: McpCounterServer, tmp_path: Path
) -> None:
    from oma.errors import StoreCorruptError
    from oma.tools.mcp.record import record_key

    script = [*_calls(("c-1", "counter__add", {"counter": "plums", "amount": 1})), {"text": "1"}]
    spec = _spec(tmp_path / "s.json", script, {"url": counter.url}, approvals={"tools": ["*"]})
    assert (await _run(spec, "r1", tmp_path)).result.status.code == "suspended"
    await FileStore(tmp_path / "s.json").set(record_key("r1"), '{"agents": "not a map"}')
    with pytest.raises(StoreCorruptError, match="MCP tool record is unreadable"):
        await _run(spec, "r1", tmp_path)
    assert counter.calls() == []
