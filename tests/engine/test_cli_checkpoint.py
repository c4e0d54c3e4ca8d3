"""``oma checkpoint list|show|export|delete`` on stores written by the TypeScript implementation
and by ``oma run``, over file, Redis and Postgres URLs."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma.cli import app
from oma.cli.run import load_spec
from oma.local_run import run_spec
from oma.store import FileStore
from oma.store.urls import open_store
from oma.tools.builtin import builtin_tools
from tests.conformance_data import require_conformance_dir
from tests.servers.postgres_server import PostgresServer
from tests.servers.redis_server import RedisServer

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["checkpoint", *args])
    return result.exit_code, result.output


def _ts_store(name: str, tmp_path: Path) -> str:
    target = tmp_path / name
    shutil.copy(require_conformance_dir() / name, target)
    return f"file://{target}"


def test_show_a_crash_between_two_tool_calls(tmp_path: Path) -> None:
    url = _ts_store("b-crash-moment.store.json", tmp_path)
    code, out = _cli("show", "--run-id", "conf-b", "--store", url)
    assert code == 0, out
    assert "run       conf-b  (attempt 1, snapshot v4, runTasks" in out
    assert "1 of 2 tool calls committed" in out
    assert "tu-b-p  commit_effect  committed (replayed on resume, never run again)" in out
    assert "tu-b-q  commit_effect  not committed: runs again on resume" in out
    assert "no attempt log" in out  # written by the TypeScript implementation

    code, out = _cli("show", "--run-id", "conf-b", "--store", url, "--json")
    summary = json.loads(out)
    (task,) = summary["inFlight"]
    assert [(c["id"], c["state"]) for c in task["toolCalls"]] == [
        ("tu-b-p", "committed"),
        ("tu-b-q", "not_committed"),
    ]
    assert summary["attempt"] == 1 and summary["attempts"] is None
    assert summary["taskCounts"] == {"completed": 1, "in_progress": 1}


def test_show_a_tool_call_awaiting_approval(tmp_path: Path) -> None:
    url = _ts_store("c1-suspended.store.json", tmp_path)
    code, out = _cli("show", "--run-id", "conf-c", "--store", url, "--json")
    summary = json.loads(out)
    call = summary["inFlight"][0]["toolCalls"][0]
    assert code == 0 and call["state"] == "awaiting_approval" and call["tool"] == "charge_card"
    (approval,) = summary["approvals"]
    assert approval["state"] == "pending" and approval["requestId"] == call["approvalRequestId"]
    code, out = _cli("show", "--run-id", "conf-c", "--store", url)
    assert f"{approval['requestId']}  tool_call  pending" in out


def test_list_and_export_give_the_exact_stored_value(tmp_path: Path) -> None:
    url = _ts_store("a-after-run.store.json", tmp_path)
    code, out = _cli("list", "--store", url, "--json")
    assert code == 0 and [run["runId"] for run in json.loads(out)] == ["conf-a"]
    stored = next(
        entry["value"]
        for entry in json.loads(Path(url.removeprefix("file://")).read_text())["entries"]
        if entry["key"] == "__oma_checkpoint__/conf-a/latest"
    )
    code, out = _cli("export", "--run-id", "conf-a", "--store", url)
    assert code == 0 and out == stored + "\n"
    target = tmp_path / "backup.json"
    code, _ = _cli("export", "--run-id", "conf-a", "--store", url, "-o", str(target))
    assert code == 0 and target.read_text() == stored


def test_delete_asks_for_yes_then_removes_snapshot_and_attempt_log(tmp_path: Path) -> None:
    url = _ts_store("a-after-run.store.json", tmp_path)
    code, out = _cli("delete", "--run-id", "conf-a", "--store", url)
    assert code == 2 and "without --yes" in out  # CliRunner's stdin is not a terminal
    code, out = _cli("delete", "--run-id", "conf-a", "--store", url, "--yes")
    assert code == 0 and "deleted the checkpoint of run conf-a" in out
    keys = [e.key for e in asyncio.run(open_store(url).list())]
    assert not [key for key in keys if key.startswith("__oma_checkpoint__/")]
    assert _cli("show", "--run-id", "conf-a", "--store", url)[0] == 1
    code, out = _cli("delete", "--run-id", "conf-a", "--store", url, "--yes")
    assert code == 1 and 'no checkpoint for run "conf-a"' in out


def test_errors_are_one_line_with_documented_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OMA_STORE_URL", raising=False)
    code, out = _cli("show", "--run-id", "nothing")
    assert code == 2 and "no store: pass --store URL or set OMA_STORE_URL" in out
    code, out = _cli("show", "--run-id", "x", "--store", "ftp://host/x")
    assert code == 2 and "unsupported store URL" in out
    code, out = _cli(
        "show", "--run-id", "missing", "--store", _ts_store("a-after-run.store.json", tmp_path)
    )
    assert code == 1 and 'no checkpoint for run "missing"' in out

    store = FileStore(tmp_path / "bad.json")
    asyncio.run(store.set("__oma_checkpoint__/bad/latest", '{"version": 9}'))
    url = f"file://{tmp_path}/bad.json"
    code, out = _cli("show", "--run-id", "bad", "--store", url)
    assert code == 3 and "CHECKPOINT_INVALID" in out and len(out.strip().splitlines()) == 1
    code, out = _cli("export", "--run-id", "bad", "--store", url)
    assert code == 0 and out == '{"version": 9}\n'  # unreadable snapshots can still be exported


@pytest.mark.parametrize(
    ("target", "reason"),
    [("missing/backup.json", "No such file or directory"), (".", "Is a directory")],
)
def test_export_to_an_unwritable_file_is_one_line_and_exit_2(
    tmp_path: Path, target: str, reason: str
) -> None:
    url = _ts_store("a-after-run.store.json", tmp_path)
    output = tmp_path / target
    result = runner.invoke(
        app, ["checkpoint", "export", "--run-id", "conf-a", "--store", url, "-o", str(output)]
    )
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not an uncaught OSError
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: cannot write {output}: {reason}; pass -o a file")
    assert "Traceback" not in result.output


@pytest.mark.timeout(30)
def test_an_unreachable_store_is_one_line_and_exit_2() -> None:
    # A bound socket that does not listen: connecting is refused, and the port stays ours.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        # The URL's socket_connect_timeout bounds each of the three tries even if the address
        # swallowed packets instead of refusing them.
        url = f"redis://:s3cret-pw@127.0.0.1:{port}/0?socket_connect_timeout=1"
        code, out = _cli("show", "--run-id", "x", "--store", url)
    assert code == 2, out
    (line,) = out.splitlines()
    assert line.startswith(f"error: Redis at redis://:***@127.0.0.1:{port}/0")
    assert "is unreachable" in line and "Check that the server runs" in line
    assert "s3cret-pw" not in out and "Traceback" not in out


def test_attempt_history_of_oma_run_in_its_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OMA_STORE_URL", raising=False)
    spec = REPO / "examples" / "demo.yaml"
    assert runner.invoke(app, ["run", str(spec), "--run-id", "hist"]).exit_code == 0
    # `oma run` does not run a finished run again; a restore (as a runner pod's) is attempt 2.
    again = run_spec(
        load_spec(spec),
        run_id="hist",
        tools=builtin_tools(),
        default_store_path=Path(".oma") / "hist.json",
    )
    assert asyncio.run(again).result.success
    code, out = _cli("show", "--run-id", "hist")  # finds .oma/hist.json by itself
    assert code == 0, out
    assert "(attempt 2, snapshot v4" in out
    assert "#1  " in out and ": first attempt" in out
    # every call the run keeps a result of (before, the finished tasks' calls were not counted)
    assert "resumed with 3/3 tasks done, 0 in flight, 5 committed tool calls" in out
    attempts = json.loads(_cli("show", "--run-id", "hist", "--json")[1])["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[1]["completedTasks"] == 3 and attempts[1]["host"]


def _copy_into(url: str, source: Path) -> None:
    entries = json.loads(source.read_text())["entries"]

    async def copy() -> None:
        store: Any = open_store(url)
        try:
            for entry in entries:
                await store.set(entry["key"], entry["value"], entry.get("metadata"))
        finally:
            await store.aclose()

    asyncio.run(copy())


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_show_and_delete_on_server_stores(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url
    else:
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        url = pg.dsn()
    _copy_into(url, require_conformance_dir() / "b-crash-moment.store.json")
    code, out = _cli("show", "--run-id", "conf-b", "--store", url)
    assert code == 0 and "tu-b-q  commit_effect  not committed" in out
    assert server_secret_absent(out, url)
    assert _cli("delete", "--run-id", "conf-b", "--store", url, "--yes")[0] == 0
    assert _cli("show", "--run-id", "conf-b", "--store", url)[0] == 1


def server_secret_absent(out: str, url: str) -> bool:
    password = url.split("://", 1)[1].split("@", 1)[0].split(":")[-1]
    return password not in out


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_list_show_export_delete_find_a_run_kept_as_a_journal(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        url, store = server.url, {"redis": {"url": server.url}}
    else:
        pg: PostgresServer = request.getfixturevalue("postgres_server")
        url, store = pg.dsn(), {"postgres": {"dsn": pg.dsn()}}
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    script = [
        {"tool_calls": [{"id": f"c{n}", "name": "ledger_append", "input": {"entry": f"e{n}"}}]}
        for n in range(3)
    ]
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "agents": [
                    {
                        "name": "clerk",
                        "tools": ["ledger_append"],
                        "model": {"provider": "scripted", "script": [*script, {"text": "ok"}]},
                    }
                ],
                "tasks": [{"title": "T", "description": "t", "assignee": "clerk"}],
                "store": store,  # layout: journal, the default
            }
        )
    )
    assert runner.invoke(app, ["run", str(spec), "--run-id", "jr"]).exit_code == 0
    code, out = _cli("list", "--store", url)
    assert code == 0 and "jr  saved" in out and "__oma_checkpoint__/jr/latest" in out
    code, out = _cli("show", "--run-id", "jr", "--store", url)
    assert code == 0 and "jr" in out
    code, out = _cli("export", "--run-id", "jr", "--store", url)
    exported = json.loads(out)
    assert code == 0 and exported["version"] == 4 and exported["identity"]["runId"] == "jr"
    assert _cli("delete", "--run-id", "jr", "--store", url, "--yes")[0] == 0
    assert _cli("show", "--run-id", "jr", "--store", url)[0] == 1
    assert "jr  saved" not in _cli("list", "--store", url)[1]


def _with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url.split('@')[-1] else '?'}{query}"


def test_store_options_in_the_url_and_readers_that_never_migrate(
    postgres_server: PostgresServer,
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMA_LEDGER_PATH", str(tmp_path / "ledger.jsonl"))
    monkeypatch.chdir(tmp_path)
    schema = f"runs_{tmp_path.name[-8:].replace('-', '_')}"
    stores = {
        "postgres": (
            {"postgres": {"dsn": postgres_server.dsn(), "schema": schema}},
            f"schema={schema}",
        ),
        "redis": ({"redis": {"url": redis_server.url, "namespace": "team-q"}}, "namespace=team-q"),
    }
    # A reader pointed at a schema nothing was ever stored in creates nothing there.
    fresh = _with_query(postgres_server.dsn(), f"schema={schema}")
    code, out = _cli("show", "--run-id", "q", "--store", fresh)
    assert code == 2 and "only reads (it never creates or migrates tables)" in out
    assert _schema_exists(postgres_server, schema) is False
    for name, (store, query) in stores.items():
        spec = tmp_path / f"{name}.json"
        script = [{"text": "ok"}]
        agent = {"name": "a", "model": {"provider": "scripted", "script": script}}
        spec.write_text(
            json.dumps(
                {"agents": [agent], "tasks": [{"title": "T", "description": "t"}], "store": store}
            )
        )
        ran = runner.invoke(app, ["run", str(spec), "--run-id", "q"])
        assert ran.exit_code == 0, ran.output
        assert f"(store {name if name == 'redis' else 'postgresql'} " in ran.output
        assert "(store .oma/" not in ran.output
        url = postgres_server.dsn() if name == "postgres" else redis_server.url
        code, out = _cli("show", "--run-id", "q", "--store", _with_query(url, query))
        assert code == 0 and "run       q" in out, out
        if name == "redis":  # the default namespace: not there
            code, out = _cli("show", "--run-id", "q", "--store", url)
            assert code == 1 and "no checkpoint" in out


def _schema_exists(server: PostgresServer, schema: str) -> bool:
    import psycopg

    with psycopg.connect(server.dsn()) as conn:
        row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    return row is not None
