"""``oma approvals`` against store URLs: list, show the exact content and hash, decide."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from oma.approval import ApprovalRequest, Suspend
from oma.cli import app
from oma.orchestrator import CheckpointOptions, OpenMultiAgent
from oma.store import FileStore, RedisStore
from tests.engine.approval_fixtures import CHARGE_HASH, CHARGE_REQUEST, Recorder, charge_team
from tests.servers.redis_server import RedisServer

runner = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["approvals", *args])
    return result.exit_code, result.output


async def _suspended_file_store(tmp_path: Path) -> str:
    recorder = Recorder()
    team, _ = charge_team(recorder)
    plan = {
        "version": 1,
        "tasks": [
            {
                "id": "dd06e1fd-9ffc-41f8-bcc3-0056cb907812",
                "title": "Charge",
                "description": "Charge the card.",
                "assignee": "operator",
            }
        ],
    }
    store = FileStore(tmp_path / "s.json")
    await OpenMultiAgent(on_tool_call=recorder.gate(Suspend("Finance review"))).run_from_plan(
        team, plan, checkpoint=CheckpointOptions(store=store, run_id="conf-c")
    )
    return f"file://{tmp_path}/s.json"


# The CLI runs its own event loop, so these tests are synchronous and drive the engine through
# asyncio.run around the CLI calls.
def test_list_show_approve_and_refusals(tmp_path: Path) -> None:
    url = asyncio.run(_suspended_file_store(tmp_path))
    code, out = _invoke("list", "--store", url, "--run-id", "conf-c")
    assert code == 0 and CHARGE_REQUEST in out and "pending" in out
    code, out = _invoke("list", "--store", url, "--run-id", "other-run", "--json")
    assert code == 0 and json.loads(out) == []
    code, out = _invoke("show", CHARGE_REQUEST, "--store", url)
    assert code == 0 and CHARGE_HASH in out and '"amount": 7' in out and "Finance review" in out
    code, out = _invoke(
        "approve", CHARGE_REQUEST, "--store", url, "--reviewer", "alice", "--hash", "0123456789ab"
    )
    assert code == 1 and "APPROVAL_STALE_DECISION" in out and "not what you reviewed" in out
    code, out = _invoke(
        "approve", CHARGE_REQUEST, "--store", url, "--reviewer", "alice", "--hash", "990bd"
    )
    assert code == 2 and "at least 12 characters" in out
    code, out = _invoke(
        "approve",
        CHARGE_REQUEST,
        "--store",
        url,
        "--reviewer",
        "alice",
        "--display-name",
        "Alice",
        "--hash",
        CHARGE_HASH[:16],
    )
    assert code == 0 and f"approved {CHARGE_REQUEST} as alice" in out
    code, out = _invoke(
        "reject", CHARGE_REQUEST, "--store", url, "--reviewer", "bob", "--hash", CHARGE_HASH
    )
    assert code == 1 and "APPROVAL_CONFLICT" in out
    code, out = _invoke("show", CHARGE_REQUEST, "--store", url, "--json")
    assert json.loads(out)["decision"]["reviewer"] == {"id": "alice", "displayName": "Alice"}
    recorder = Recorder()
    resumed = asyncio.run(
        OpenMultiAgent().restore(
            charge_team(recorder)[0],
            checkpoint=CheckpointOptions(store=FileStore(tmp_path / "s.json"), run_id="conf-c"),
        )
    )
    assert resumed.success and recorder.tool_calls == [("tool-call-1", {"amount": 7})]


def test_missing_store_and_unknown_request(tmp_path: Path) -> None:
    code, out = _invoke("list")
    assert code == 2 and "pass --store URL or set OMA_STORE_URL" in out
    code, out = _invoke("show", "apr_" + "0" * 32, "--store", f"file://{tmp_path}/none.json")
    assert code == 1 and "APPROVAL_NOT_FOUND" in out
    code, out = _invoke("list", "--store", "ftp://nowhere")
    assert code == 2 and "unsupported store URL" in out


def test_approve_against_redis(redis_server: RedisServer) -> None:
    recorder = Recorder()
    team, _ = charge_team(recorder)

    async def suspend() -> ApprovalRequest:
        store = RedisStore(redis_server.url)
        result = await OpenMultiAgent(on_tool_call=recorder.gate(Suspend())).run_tasks(
            team,
            [{"title": "Charge", "description": "c", "assignee": "operator"}],
            checkpoint=CheckpointOptions(store=store, run_id="cli-redis"),
        )
        await store.aclose()
        (request,) = result.pending_approvals
        return request

    async def resume() -> bool:
        store = RedisStore(redis_server.url)
        resumed = await OpenMultiAgent().restore(
            charge_team(recorder)[0], checkpoint=CheckpointOptions(store=store, run_id="cli-redis")
        )
        await store.aclose()
        return resumed.success

    request = asyncio.run(suspend())
    code, out = _invoke(
        "approve",
        request.id,
        "--store",
        redis_server.url,
        "--reviewer",
        "ops",
        "--hash",
        request.request_hash,
    )
    assert code == 0, out
    assert asyncio.run(resume()) and len(recorder.tool_calls) == 1
