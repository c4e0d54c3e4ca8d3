"""A TeamRun whose MCP server renames a tool between two attempts holds instead of failing: the
resumed attempt finds the tool it recorded gone and calls nothing (runner exit 15), the TeamRun
shows ``Progressing`` with reason ``ToolChanged`` naming the agent and the tool, attempts look
again with backoff using no failure budget, the renamed tool is never called, and once the tool
is back as it was the run goes on from its checkpoint and succeeds, each effect applied once.

The server is the SDK-built counter server as a child process of the test, on the address the
runner pods reach; between attempts it is stopped and started again on the same port with
``add`` renamed ``add_v2``, then as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.e2e_env import REAL_NODE, SANDBOX_HOST_IP, Endpoint, SideEffects
from tests.cluster.helpers import get_or_none, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    teamrun,
)
from tests.servers.mcp_counter import McpCounterServer

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster


@pytest.fixture
def counter(e2e_redis: Endpoint) -> Iterator[McpCounterServer]:
    host = SANDBOX_HOST_IP if REAL_NODE else "127.0.0.1"
    with McpCounterServer(e2e_redis.for_tests, host=host) as server:
        yield server


def _add(call_id: str, amount: int, delay: float) -> dict[str, Any]:
    add = {"counter": "n", "amount": amount}
    return {"tool_calls": [{"id": call_id, "name": "counter__add", "input": add}], "delay": delay}


async def _delete_now(kube: KubeClient, namespace: str, pod: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
    await kube.delete(path, {"gracePeriodSeconds": 0})


@pytest.mark.timeout(420)
async def test_a_tool_renamed_between_attempts_holds_the_run_until_it_is_back(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
    counter: McpCounterServer,
) -> None:
    # The first add is called at once; the model then thinks for a long while, during which
    # the runner is taken away; the second add comes only after the tool is back.
    body = teamrun("renamed", [_add("a-1", 1, 0), _add("a-2", 2, 20), {"text": "3"}], effects)
    agent = body["spec"]["team"]["agents"][0]
    agent["mcpServers"] = [{"name": "counter", "url": counter.url, "tools": ["add"]}]
    # No failure budget at all: a hold must not count as a failure.
    body["spec"]["retryPolicy"] = {"backoffSeconds": 1, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    pods = f"/api/v1/namespaces/{namespace}/pods"

    async def first_add_called() -> bool | None:
        # The tools were recorded before it (an add runs again by its key if not committed).
        running = await get_or_none(kube, f"{pods}/renamed-a1")
        ran = [c["key"].rsplit(":", 1)[1] for c in counter.calls()] == ["a-1"]
        return ran and running is not None and running["status"].get("phase") == "Running"

    await wait_for(first_add_called, 120, "the first add called")
    counter.stop()
    counter.start(MCP_COUNTER_RENAME="add=add_v2")
    await _delete_now(kube, namespace, "renamed-a1")

    async def held_twice() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "renamed")
        held = [a for a in status.get("attempts") or [] if a.get("outcome") == "tool_changed"]
        ended = status.get("phase") in ("Failed", "Succeeded")
        return status if len(held) >= 2 or ended else None

    held = await wait_for(held_twice, 180, "two attempts that found the tool renamed")
    said = [(a.get("outcome"), a.get("message")) for a in held.get("attempts", [])][-4:]
    assert held.get("phase") not in ("Failed", "Succeeded"), (held.get("message"), said)
    conditions = {c["type"]: c for c in held.get("conditions") or []}
    progressing = conditions["Progressing"]
    assert progressing["reason"] == "ToolChanged", progressing
    assert "agent 'clerk'" in progressing["message"], progressing
    assert "'counter__add' is gone" in progressing["message"], progressing
    assert held.get("toolChangedSince"), held
    assert int(held.get("failures") or 0) == 0
    assert all(c["tool"] == "add" for c in counter.calls())  # add_v2 never called
    events = await kube.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector="involvedObject.name=renamed"
    )
    assert "AttemptToolChanged" in {e.get("reason") for e in events.get("items", [])}

    counter.stop()
    counter.start()  # the tool is back as it was
    status = await finished(kube, namespace, "renamed", 180)
    said = [(a.get("outcome"), a.get("message")) for a in status.get("attempts", [])][-4:]
    assert status["phase"] == "Succeeded", said
    assert int(status.get("failures") or 0) == 0
    assert "toolChangedSince" not in status, status
    keys = sorted({c["key"].rsplit(":", 1)[1] for c in counter.calls()})
    assert keys == ["a-1", "a-2"], counter.calls()
    assert all(c["tool"] == "add" for c in counter.calls())
    assert counter.counter("n") == 3  # each add applied once by its key
