"""TeamRuns that wait for an approval on a checkpoint of a chosen size, made by a runner on this
machine before the TeamRun exists: a scripted turn whose ``echo`` call carries the bulk, then a
gated ``ledger_append``. The TeamRun's own runner pod resumes the checkpoint (its script is
small: the turns it would replay are in the checkpoint) and suspends again at the gate."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from oma.pod_contract import Exit
from oma_operator.resources.models import TeamRunSpec, to_run_spec

GATED = {"id": "g1", "name": "ledger_append", "input": {"entry": "pay", "amount": 7}}


def bulky_script(text: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"id": "e1", "name": "echo", "input": {"text": text}}]},
        {"tool_calls": [GATED]},
        {"text": "done"},
    ]


def make_gated(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a one-agent TeamRun) turned into one that echoes, then waits at the gate."""
    agent = body["spec"]["team"]["agents"][0]
    agent["tools"] = ["echo", "ledger_append"]
    agent["model"] = {"provider": "scripted", "script": bulky_script("x")}
    body["spec"]["approvals"] = {"tools": ["ledger_append"]}
    return body


async def make_checkpoint(
    body: dict[str, Any], namespace: str, store_url: str, text_bytes: int, workdir: Path
) -> None:
    """The run's checkpoint in ``store_url`` (as this process reaches the store), suspended at
    the gate, with an echo of ``text_bytes`` characters in it."""
    spec = json.loads(json.dumps(body["spec"]))
    spec["team"]["agents"][0]["model"]["script"] = bulky_script("x" * text_bytes)
    run_spec = to_run_spec(TeamRunSpec.model_validate(spec), namespace)
    spec_file = workdir / f"{namespace}-{body['metadata']['name']}.json"
    spec_file.write_text(json.dumps(run_spec))
    env = {
        **os.environ,
        "OMA_RUN_SPEC_FILE": str(spec_file),
        "OMA_RUN_ID": body["spec"]["runId"],
        "OMA_ATTEMPT": "1",
        "OMA_STORE_URL": store_url,
        "OMA_TERMINATION_LOG": str(spec_file.with_suffix(".report")),
    }
    runner = str(Path(sys.executable).with_name("oma-runner"))
    done = await asyncio.to_thread(
        subprocess.run, [runner], env=env, capture_output=True, text=True, check=False
    )
    spec_file.unlink()
    report = spec_file.with_suffix(".report")
    said = json.loads(report.read_text()).get("status") if report.exists() else None
    if done.returncode != Exit.OK or said != "suspended":
        raise AssertionError(
            f"making {namespace}/{body['metadata']['name']}'s checkpoint: exit "
            f"{done.returncode}, status {said}\n{done.stderr[-2000:]}"
        )


async def stored_bytes(store_url: str, body: dict[str, Any]) -> int:
    """What Redis holds for the run (``MEMORY USAGE`` of every key of its store namespace)."""
    key_namespace = body["spec"]["store"]["redis"]["namespace"]
    client = aioredis.Redis.from_url(store_url)
    try:
        total = 0
        async for key in client.scan_iter(match=f"*{key_namespace}*", count=1000):
            total += int(await client.memory_usage(key, samples=0) or 0)
        return total
    finally:
        await client.aclose()
