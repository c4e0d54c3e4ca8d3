"""``oma checkpoint history``, ``show/export --at SEQ`` and ``oma verify --run-id`` on runs
that ``oma run`` kept in a real Redis and PostgreSQL, and what they say of a tampered store."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from oma.checkpoint import chain
from oma.checkpoint.attempts import attempts_key
from oma.checkpoint.keys import checkpoint_key, segments_journal_key
from oma.cli import app
from oma.store.redis import RedisStore
from tests.engine.cli_runs_kit import RUN, cli, ledger_keys, runner, spec_file
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name


def _ran_on_redis(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    turns: int = 6,
) -> tuple[RedisServer, str, str]:
    """``oma run`` of the kit's spec into a fresh Redis namespace: the server, the namespace,
    and the store URL the CLI takes."""
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = unique_name("h")
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    spec = spec_file(tmp_path, {"redis": {"url": server.url, "namespace": namespace}}, turns)
    assert cli("run", str(spec), "--run-id", RUN)[0] == 0
    return server, namespace, f"{server.url}?namespace={namespace}"


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_history_lists_every_boundary_and_each_exports_as_it_was_saved(
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    recorded: list[str],
) -> None:
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        namespace = unique_name("h")
        url = f"{server.url}?namespace={namespace}"
        store: dict[str, Any] = {"redis": {"url": server.url, "namespace": namespace}}
    else:
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        table = unique_name("h")
        url, store = f"{pg.dsn()}?table={table}", {"postgres": {"dsn": pg.dsn(), "table": table}}
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    assert cli("run", str(spec_file(tmp_path, store)), "--run-id", RUN)[0] == 0
    code, out = cli("checkpoint", "history", "--run-id", RUN, "--store", url)
    assert code == 0, out
    assert "run started" in out and "task completed" in out and "run finished" in out
    code, out = cli("checkpoint", "history", "--run-id", RUN, "--store", url, "--json")
    listed = json.loads(out)["boundaries"]
    assert [b["seq"] for b in listed] == list(range(1, len(recorded) + 1))
    assert {b["attempt"] for b in listed} == {1} and listed[0]["kind"] == "base"
    for boundary in listed:
        seq = str(boundary["seq"])
        code, out = cli("checkpoint", "export", "--run-id", RUN, "--store", url, "--at", seq)
        assert code == 0 and out == recorded[boundary["seq"] - 1] + "\n", seq
    code, out = cli("checkpoint", "show", "--run-id", RUN, "--store", url, "--at", "2")
    assert code == 0 and "in flight" in out  # boundary 2: the task under way
    code, out = cli("checkpoint", "show", "--run-id", RUN, "--store", url, "--at", "999")
    assert code == 1 and "boundary 999 is not kept" in out
    code, out = cli("verify", "--run-id", RUN, "--store", url)
    assert code == 0 and out.startswith("ok: ") and f"boundaries 1 to {len(recorded)}" in out, out


def test_verify_names_the_record_a_store_changed_and_history_shows_it_escaped(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, namespace, url = _ran_on_redis(request, tmp_path, monkeypatch)
    field = f"3:{checkpoint_key(RUN)}"
    records = f"{{{namespace}}}:jrecords"

    async def tamper() -> None:
        client = aioredis.Redis.from_url(server.url)
        try:
            raw = await client.hget(records, field)
            assert isinstance(raw, bytes)
            text = raw.decode()
            line, body = chain.split(text)
            assert line is not None
            # what a hostile writer might put where a reader looks: a terminal escape, bidi
            header = json.loads(line) | {"what": "ok \x1b[2J\u202egnp.exe"}
            await client.hset(records, field, json.dumps(header) + "\n" + body)
        finally:
            await client.aclose()

    asyncio.run(tamper())
    code, out = cli("verify", "--run-id", RUN, "--store", url)
    assert code == 1 and "1 failure(s)" in out, out
    named = r"record 3 \(boundary \d+\): its content is not what it was written with"
    assert re.search(named, out), out
    code, out = cli("checkpoint", "history", "--run-id", RUN, "--store", url)
    assert code == 0 and "\x1b" not in out and "\u202e" not in out
    assert "\\x1b[2J" in out and "\\u202e" in out, out

    # lineage read from the store is shown escaped too
    async def forge_lineage() -> None:
        store = RedisStore(server.url, namespace=namespace)
        try:
            key = attempts_key(checkpoint_key(RUN))
            entry = await store.get(key)
            assert entry is not None
            log = json.loads(entry.value)
            log["forks"] = [{"runId": "x\x1b]8;;evil\u202e", "seq": 2, "at": "now"}]
            await store.set(key, json.dumps(log))
        finally:
            await store.aclose()

    asyncio.run(forge_lineage())
    for extra in ([], ["--json"]):
        code, out = cli("checkpoint", "show", "--run-id", RUN, "--store", url, *extra)
        assert code == 0 and "\x1b" not in out and "\u202e" not in out, out


def test_a_run_kept_without_history_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    path = tmp_path / "store.json"
    assert (
        cli("run", str(spec_file(tmp_path, {"file": {"path": str(path)}})), "--run-id", RUN)[0] == 0
    )
    code, out = cli("checkpoint", "history", "--run-id", RUN, "--store", f"file://{path}")
    assert code == 1 and "a file store keeps the latest only" in out, out
    code, out = cli("checkpoint", "history", "--run-id", "nobody", "--store", f"file://{path}")
    assert code == 1 and 'no checkpoint for run "nobody"' in out
    code, out = cli("verify", "--run-id", RUN, "--store", f"file://{path}")
    assert code == 2 and "keeps the latest only" in out
    code, out = cli("verify")
    assert code == 2 and "give a journal file or --run-id" in out


def test_oma_fork_and_a_spec_fork_from_resume_from_a_past_boundary(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = unique_name("f")
    url = f"{server.url}?namespace={namespace}"
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("OMA_LEDGER_PATH", str(ledger))
    store = {"redis": {"url": server.url, "namespace": namespace}}
    spec = spec_file(tmp_path, store)
    assert cli("run", str(spec), "--run-id", RUN)[0] == 0
    parent_calls = ledger_keys(ledger)
    assert len(parent_calls) == 6 and all(k.startswith(f"{RUN}:") for k in parent_calls)
    code, out = cli("checkpoint", "history", "--run-id", RUN, "--store", url, "--json")
    listed = json.loads(out)["boundaries"]
    # the boundary where the third call has just been committed
    third = [b["seq"] for b in listed if b["what"] == "1 tool call committed"][2]
    result = runner.invoke(
        app, ["fork", RUN, "--at", str(third), "--run-id", "child", "--store", url]
    )
    assert result.exit_code == 0 and result.stdout.strip() == "child", result.output
    assert "Resume it: oma run SPEC --run-id child" in result.stderr
    assert cli("run", str(spec), "--run-id", "child")[0] == 0
    child_calls = [k for k in ledger_keys(ledger) if k not in parent_calls]
    assert [k.rsplit(":", 1)[1] for k in child_calls] == ["c3", "c4", "c5"]  # c0..c2 replayed
    assert all(k.startswith("child:") for k in child_calls)
    code, out = cli("checkpoint", "show", "--run-id", "child", "--store", url)
    assert code == 0 and f"forked    from {RUN} at boundary {third}" in out
    code, out = cli("checkpoint", "show", "--run-id", RUN, "--store", url)
    assert code == 0 and f"fork      child from boundary {third}" in out
    # the same through the run spec's forkFrom
    forked = json.loads(spec.read_text()) | {"forkFrom": {"runId": RUN, "seq": third}}
    spec.write_text(json.dumps(forked))
    assert cli("run", str(spec), "--run-id", "child2")[0] == 0
    assert [k.rsplit(":", 1)[1] for k in ledger_keys(ledger) if k.startswith("child2:")] == [
        "c3",
        "c4",
        "c5",
    ]
    before = ledger_keys(ledger)
    code, out = cli("run", str(spec), "--run-id", "child2")  # its own checkpoint: no new fork
    assert code == 0 and "already complete" in out and ledger_keys(ledger) == before


def test_oma_fork_refuses_bad_input_and_writes_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = unique_name("f")
    url = f"{server.url}?namespace={namespace}"
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    spec = spec_file(tmp_path, {"redis": {"url": server.url, "namespace": namespace}})
    assert cli("run", str(spec), "--run-id", RUN)[0] == 0
    patch = tmp_path / "patch.json"
    patch.write_text('{"op": "replace"}')
    code, out = cli(
        "fork", RUN, "--at", "2", "--run-id", "c", "--store", url, "--patch", str(patch)
    )
    assert code == 2 and "not a JSON Patch" in out
    patch.write_text('[{"op": "replace", "path": "/identity/runId", "value": "x"}]')
    code, out = cli(
        "fork", RUN, "--at", "2", "--run-id", "c", "--store", url, "--patch", str(patch)
    )
    assert code == 2 and "FORK_REFUSED" not in out and "touches '/identity/runId'" in out
    code, out = cli("fork", RUN, "--at", "999", "--run-id", "c", "--store", url)
    assert code == 1 and "boundary 999 is not kept" in out
    code, out = cli("fork", "ghost", "--at", "1", "--run-id", "c", "--store", url)
    assert code == 1 and 'no checkpoint for run "ghost"' in out
    code, out = cli("fork", "gh\x1b[2Jost", "--at", "1", "--run-id", "c", "--store", url)
    assert code == 1 and "\x1b" not in out and "gh\\x1b[2Jost" in out, out
    code, out = cli("fork", RUN, "--at", "2", "--run-id", RUN, "--store", url)
    assert code == 2 and "a run id of its own" in out
    assert cli("checkpoint", "show", "--run-id", "c", "--store", url)[0] == 1  # nothing written


def test_verify_names_a_segment_a_store_changed_and_nothing_reads_it(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, namespace, url = _ran_on_redis(request, tmp_path, monkeypatch, turns=40)
    side = segments_journal_key(checkpoint_key(RUN))

    async def tamper() -> None:
        store = RedisStore(server.url, namespace=namespace)
        client = aioredis.Redis.from_url(server.url)
        try:
            entry = await store.journal_get(side)
            assert entry is not None and len(entry.records) >= 2  # the run wrote segments
            text = entry.records[0]
            assert '"e1' in text
            await client.hset(f"{{{namespace}}}:jrecords", f"0:{side}", text.replace('"e1', '"e7'))
        finally:
            await client.aclose()
            await store.aclose()

    asyncio.run(tamper())
    code, out = cli("verify", "--run-id", RUN, "--store", url)
    assert code == 1 and "segment record 0: segment 0 changed since it was named" in out, out
    code, out = cli("verify", "--run-id", RUN, "--store", url, "--json")
    failures = json.loads(out)["failures"]
    assert failures == [
        {
            "record": 0,
            "seq": None,
            "problem": "segment 0 changed since it was named",
            "journal": "segments",
        }
    ]
    code, out = cli("checkpoint", "show", "--run-id", RUN, "--store", url)
    assert code != 0 and "segment 0 changed since it was named" in out, out
