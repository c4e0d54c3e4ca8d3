"""``store.events`` in a run spec: ``oma run`` keeps the run's event journal in a real Redis,
or a JSON-lines file beside a file store; ``oma verify --run-id`` (and ``oma verify FILE``)
check it, name a tampered event, and show hostile content escaped; deleting the checkpoint
deletes the journal kept with it, and listings do not take it for a checkpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from oma.journal import events_key, read_jsonl_journal, verify_run
from oma.spec import RunSpec
from oma.store.redis import RedisStore
from tests.engine.cli_runs_kit import RUN, cli, spec_file
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name


def _events_on(store: dict[str, Any]) -> dict[str, Any]:
    return {**store, "events": {"enabled": True}}


def test_a_file_store_run_keeps_its_journal_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    state = tmp_path / "state.json"
    spec = spec_file(tmp_path, _events_on({"file": {"path": str(state)}}), turns=2)
    assert cli("run", str(spec), "--run-id", "a/b c")[0] == 0
    journal = tmp_path / "state.json.events" / "a%2Fb%20c.jsonl"  # the run id, encoded
    events = read_jsonl_journal(journal)
    assert [e["type"] for e in events][:2] == ["run/start", "plan/set"]
    assert events[-1]["type"] == "run/end" and events[-1]["status"] == {"code": "ok"}
    assert verify_run(events).ok
    code, out = cli("verify", str(journal))
    assert code == 0 and out.startswith("ok: "), out
    saved = json.loads(json.loads(state.read_text())["entries"][0]["value"])
    assert saved["version"] == 5 and saved["journalRef"]["path"] == str(journal)
    assert saved["journalWatermarkSeq"] < events[-1]["seq"]


def test_without_store_events_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    state = tmp_path / "state.json"
    assert (
        cli("run", str(spec_file(tmp_path, {"file": {"path": str(state)}})), "--run-id", RUN)[0]
        == 0
    )
    assert not (tmp_path / "state.json.events").exists()
    saved = json.loads(json.loads(state.read_text())["entries"][0]["value"])
    assert saved["version"] == 4


def test_a_redacting_store_cannot_keep_events() -> None:
    with pytest.raises(ValueError, match=r"store\.events needs the verbatim content"):
        RunSpec.model_validate(
            {
                "agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}],
                "tasks": [{"title": "T", "description": "t"}],
                "store": {"memory": {}, "redact": True, "events": {"enabled": True}},
            }
        )


def test_a_redis_run_s_journal_is_verified_and_a_tampered_event_is_named(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    namespace = unique_name("ev")
    url = f"{redis_server.url}?namespace={namespace}"
    store = _events_on({"redis": {"url": redis_server.url, "namespace": namespace}})
    assert cli("run", str(spec_file(tmp_path, store, turns=3)), "--run-id", RUN)[0] == 0
    code, out = cli("verify", "--run-id", RUN, "--store", url)
    assert code == 0 and "events: ok: " in out, out
    code, out = cli("checkpoint", "list", "--store", url)
    assert code == 0 and len(out.splitlines()) == 1 and "events" not in out, out  # not listed

    # Tamper: the assistant's first reply is changed after the fact (an escape sequence in it).
    asyncio.run(_tamper(redis_server, namespace))
    code, out = cli("verify", "--run-id", RUN, "--store", url)
    assert code == 1, out
    assert "MISSING_CONTEXT_REPLACE (not-reproducible)" in out, out
    assert "\x1b" not in out
    code, out = cli("verify", "--run-id", RUN, "--store", url, "--json")
    failures = json.loads(out)["events"]["failures"]
    assert failures and all(f["reason"] == "not-reproducible" for f in failures)

    code, out = cli("checkpoint", "delete", "--run-id", RUN, "--store", url, "--yes")
    assert code == 0, out
    assert asyncio.run(_journal(redis_server, namespace)) is None


async def _journal(server: RedisServer, namespace: str) -> list[str] | None:
    kept = RedisStore(server.url, namespace=namespace)
    try:
        entry = await kept.journal_get(events_key(RUN))
        return None if entry is None else entry.records
    finally:
        await kept.aclose()


async def _tamper(server: RedisServer, namespace: str) -> None:
    records = await _journal(server, namespace)
    assert records is not None
    events = [json.loads(r) for r in records]
    first = next(i for i, e in enumerate(events) if e["type"] == "assistant/message")
    events[first]["message"]["content"][0]["input"] = {"entry": "\x1b[2Jforged"}
    raw = aioredis.Redis.from_url(server.url)
    try:  # records are fields "<number>:<key>" of the namespace's jrecords hash
        where, field = f"{{{namespace}}}:jrecords", f"{first}:{events_key(RUN)}"
        assert await raw.hget(where, field) == records[first].encode()
        await raw.hset(where, field, json.dumps(events[first]))
    finally:
        await raw.aclose()
