"""The built-in side-effect tools' records, in a JSONL file and in a Redis list (real server)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from oma.tools import builtin_tools
from oma.tools.define import ToolContext
from oma.tools.records import RecordLocation, RecordLocationError, append, append_once, read
from tests.servers.redis_server import RedisServer


def _ctx(call: str, run: str = "r") -> ToolContext:
    return ToolContext(run_id=run, task_id="t", tool_call_id=call, agent_name="a")


@pytest.fixture(params=["file", "redis"])
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point both tools at a fresh file or a fresh Redis list; the name of the backend."""
    for name in ("LEDGER", "TALLY"):
        for suffix in ("URL", "KEY", "PATH"):
            monkeypatch.delenv(f"OMA_{name}_{suffix}", raising=False)
        if request.param == "redis":
            server: RedisServer = request.getfixturevalue("redis_server")
            monkeypatch.setenv(f"OMA_{name}_URL", server.url)
            monkeypatch.setenv(f"OMA_{name}_KEY", f"t:{uuid.uuid4().hex}:{name.lower()}")
        else:
            monkeypatch.setenv(f"OMA_{name}_PATH", str(tmp_path / f"{name.lower()}.jsonl"))
    return str(request.param)


async def test_ledger_append_records_each_call_once(where: str) -> None:
    tool = builtin_tools()["ledger_append"]
    first = await tool.run({"entry": "pay", "amount": 5}, _ctx("c1"))
    again = await tool.run({"entry": "pay", "amount": 5}, _ctx("c1"))
    other = await tool.run({"entry": "refund", "amount": 2}, _ctx("c2"))
    assert first == again and not first.is_error and not other.is_error
    location = RecordLocation.from_env("LEDGER", "unused")
    assert await read(location) == [
        {"key": "r:t:c1", "entry": "pay", "amount": 5},
        {"key": "r:t:c2", "entry": "refund", "amount": 2},
    ]


async def test_tally_adds_on_every_run(where: str) -> None:
    tool = builtin_tools()["tally"]
    for _ in range(2):
        assert not (await tool.run({"item": "coin"}, _ctx("c1"))).is_error
    records = await read(RecordLocation.from_env("TALLY", "unused"))
    assert records == [{"call": "r:t:c1", "item": "coin", "amount": 1}] * 2


async def test_concurrent_appends_under_one_key_add_one_record(where: str) -> None:
    location = RecordLocation.from_env("LEDGER", "unused")
    added = await asyncio.gather(
        *(append_once(location, "same", {"key": "same", "n": n}) for n in range(8))
    )
    assert sorted(added) == [False] * 7 + [True]
    assert len(await read(location)) == 1
    await append(location, {"key": "same", "n": 99})  # plain append ignores keys
    assert len(await read(location)) == 2


async def test_nothing_written_reads_as_empty(where: str) -> None:
    assert await read(RecordLocation.from_env("LEDGER", "unused")) == []


def test_url_wins_over_path_and_the_key_has_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", "/tmp/x.jsonl")
    monkeypatch.setenv("OMA_LEDGER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.delenv("OMA_LEDGER_KEY", raising=False)
    location = RecordLocation.from_env("LEDGER", "unused")
    assert (location.url, location.key, location.path) == (
        "redis://127.0.0.1:6379/0",
        "oma:ledger",
        None,
    )


def test_a_url_that_is_not_redis_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_TALLY_URL", "postgresql://db/x")
    with pytest.raises(RecordLocationError) as caught:
        RecordLocation.from_env("TALLY", "unused")
    assert str(caught.value) == (
        "OMA_TALLY_URL must be a redis://, rediss:// or unix:// URL, got 'postgresql': set it to "
        "a Redis URL, or unset it and use OMA_TALLY_PATH for a file"
    )


async def test_an_unreachable_redis_is_a_tool_error_naming_the_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_LEDGER_URL", "redis://127.0.0.1:9/0")  # nothing listens on port 9
    result = await builtin_tools()["ledger_append"].run({"entry": "pay"}, _ctx("c1"))
    assert result.is_error and result.data.startswith('Tool "ledger_append" failed: ')
    assert "connecting to 127.0.0.1:9" in result.data
