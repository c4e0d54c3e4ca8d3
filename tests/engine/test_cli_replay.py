"""``oma replay`` and ``oma.testing.replay.assert_replays`` on a run ``oma run`` recorded in
Redis: the same spec reproduces it, an edited one is named where it first differs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from oma.store.redis import RedisStore
from oma.testing.replay import assert_replays
from tests.engine.cli_runs_kit import RUN, cli, ledger_keys, spec_file
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name


def _recorded(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, Any], Path]:
    server: RedisServer = request.getfixturevalue("redis_server")
    namespace = unique_name("r")
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("OMA_LEDGER_PATH", str(ledger))
    store = {"redis": {"url": server.url, "namespace": namespace}}
    spec = spec_file(tmp_path, store, turns=8)
    assert cli("run", str(spec), "--run-id", RUN)[0] == 0
    return f"{server.url}?namespace={namespace}", store, spec


def test_oma_replay_reproduces_a_recorded_run_and_names_an_edit(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _, spec = _recorded(request, tmp_path, monkeypatch)
    ledger = tmp_path / "ledger.jsonl"
    before = ledger_keys(ledger)
    code, out = cli("replay", RUN, "--spec", str(spec), "--store", url)
    assert code == 0 and out.startswith("reproduces: ") and "none differs" in out, out
    assert ledger_keys(ledger) == before  # the ledger tool answered from its commits
    edited = json.loads(spec.read_text())
    edited["tasks"][0]["description"] = "t, twice"
    spec.write_text(json.dumps(edited))
    code, out = cli("replay", RUN, "--spec", str(spec), "--store", url)
    assert code == 1 and "diverges at boundary 1, /queue/tasks/0/description" in out, out
    assert '  recorded: "t"' in out and '  replayed: "t, twice"' in out
    code, out = cli("replay", RUN, "--spec", str(spec), "--store", url, "--json")
    report = json.loads(out)
    assert code == 1 and report["divergence"]["path"] == "/queue/tasks/0/description"
    code, out = cli("replay", "ghost", "--spec", str(spec), "--store", url)
    assert code == 2 and 'no checkpoint for run "ghost"' in out
    code, out = cli("replay", RUN, "--spec", str(tmp_path / "none.yaml"), "--store", url)
    assert code == 2 and "cannot read run spec" in out


def test_the_pytest_helper_passes_a_reproducing_run_and_fails_an_edited_one(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, store_spec, spec = _recorded(request, tmp_path, monkeypatch)  # `oma run` runs its loop

    async def check() -> None:
        redis = store_spec["redis"]
        store = RedisStore(redis["url"], namespace=redis["namespace"])
        try:
            report = await assert_replays(spec, store, RUN)
            assert report.reproduces and report.boundaries > 8, report
            edited = json.loads(spec.read_text())
            edited["tasks"][0]["title"] = "U"
            spec.write_text(json.dumps(edited))
            # a new title: a task the recording has no turns of, stopped at its first call
            with pytest.raises(AssertionError, match=r"boundary 1, .* no turn 1 of task 'U'"):
                await assert_replays(spec, store, RUN)
        finally:
            await store.aclose()

    asyncio.run(check())
