"""Concurrency limits on a real API server: runs over the limit wait as ``Queued`` (visible in
``kubectl get``), start first in first out as slots free, and a restarted operator keeps the
limit (it counts the running ones before it starts another).

Each run writes ``<name>:start`` and, a turn and an 8 s wait later, ``<name>:end`` to one shared
ledger: with a limit of 1 the ledger can only hold whole pairs, one run after another.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import event_counts, runner_pods, tables, wait_for
from tests.cluster.operator_kit import (
    TEAMRUN_WIDE,
    TEAMRUNS,
    crds_installed,
    finished,
    kubectl,
    operator_log,
    redis_secret,
    status_of,
    teamrun,
)
from tests.cluster.operators import OperatorSettings, operating

__all__ = ["crds_installed", "redis_secret"]
pytestmark = pytest.mark.cluster
NAMES = ("first", "second", "third")


def paired_run(name: str, effects: SideEffects) -> dict[str, Any]:
    def ledger(call: str, entry: str) -> dict[str, Any]:
        return {"id": call, "name": "ledger_append", "input": {"entry": entry}}

    script: list[dict[str, Any]] = [
        {"tool_calls": [ledger("s", f"{name}:start")]},
        {"tool_calls": [{"id": "w", "name": "wait", "input": {"seconds": 8}}]},
        {"tool_calls": [ledger("e", f"{name}:end")]},
        {"text": "done"},
    ]
    return teamrun(name, script, effects)


async def _next_second(kube: KubeClient, namespace: str, stamp: str) -> None:
    """Wait until the API server's clock has left the whole second of ``stamp`` (a
    creationTimestamp): what it creates from now on has a later one. Its clock is read from
    the creationTimestamp of a dry-run create, which the server sets as for a real one."""

    async def later() -> bool:
        probe = {"metadata": {"name": "clock"}}
        made = await kube.create(f"/api/v1/namespaces/{namespace}/configmaps?dryRun=All", probe)
        created = datetime.fromisoformat(made["metadata"]["creationTimestamp"])
        return created > datetime.fromisoformat(stamp)

    await wait_for(later, 10, f"the API server's clock to pass {stamp}", interval=0.05)


@pytest.mark.timeout(300)
async def test_a_namespace_limit_queues_runs_and_survives_an_operator_restart(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    crds_installed: None,
    redis_secret: str,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    log = tmp_path / "operator.log"
    settings = OperatorSettings(per_namespace=1, events="all")
    async with operating(cluster, kube, namespace, log, settings) as operator:
        for name in NAMES:  # in different seconds: creation times have whole seconds
            made = await kube.create(TEAMRUNS.format(ns=namespace), paired_run(name, effects))
            await _next_second(kube, namespace, made["metadata"]["creationTimestamp"])

        async def two_waiting() -> dict[str, dict[str, Any]] | None:
            seen = {name: await status_of(kube, namespace, name) for name in NAMES}
            phases = sorted(str(s.get("phase")) for s in seen.values())
            return seen if phases == ["Queued", "Queued", "Running"] else None

        seen = await wait_for(two_waiting, 90, "one run Running and two Queued")
        waiting = [name for name in NAMES if seen[name]["phase"] == "Queued"]
        for name in waiting:
            status = seen[name]
            assert status["message"] == (
                f"waiting for a slot: namespace {namespace} has 1 TeamRuns running, its limit is 1"
            )
            assert "attempt" not in status and status["queuedAt"]
            queued = {c["type"]: c for c in status["conditions"]}["Queued"]
            assert (queued["status"], queued["reason"]) == ("True", "ConcurrencyLimit")
        [header, *rows] = tables(await kubectl(cluster, namespace, "get", "omatr", "-o", "wide"))[0]
        assert header == TEAMRUN_WIDE
        shown = {row[0]: row for row in rows}
        for name in waiting:
            assert shown[name][1] == "Queued" and shown[name][-1].startswith("waiting for a slot")

        # The operator dies while one run runs and two wait; the next one must count the
        # running run (and what it started meanwhile) before it starts another.
        await operator.kill()
        await operator.start()
        finals = {name: await finished(kube, namespace, name, 180) for name in NAMES}
        # events "all": the routine Events too, at most once per run (the restart repeated
        # none). The kill may have cut off one the first operator was about to post; the two
        # queued runs started under the second, so theirs are all there.
        for name in NAMES:

            async def told(name: str = name) -> dict[str, int] | None:
                counts = await event_counts(kube, namespace, name)
                return counts if "AttemptSucceeded" in counts else None

            counts = await wait_for(told, 30, f"{name}'s AttemptSucceeded event")
            routine = {r: counts.get(r, 0) for r in ("Queued", "AttemptStarted")}
            assert counts["AttemptSucceeded"] == 1 and max(routine.values()) <= 1, (name, counts)
            if name in waiting:
                assert routine["AttemptStarted"] == 1, (name, counts)
    for name, status in finals.items():
        assert status["phase"] == "Succeeded", (name, status, await operator_log(log))
        assert status["attempt"] == 1 and len(status["attempts"]) == 1
    for name in waiting:
        queued = {c["type"]: c for c in finals[name]["conditions"]}["Queued"]
        assert (queued["status"], queued["reason"]) == ("False", "Admitted")
        assert "queuedAt" not in finals[name]
    ledger = await effects.ledger()
    order = [entry.split(":")[0] for entry in ledger[::2]]
    assert sorted(order) == sorted(NAMES)
    assert ledger == [f"{n}:{part}" for n in order for part in ("start", "end")], ledger
    # First in, first out: the two queued runs started in the order they were created.
    assert order[1:] == [name for name in NAMES if name in waiting], order
    pods = sorted(p["metadata"]["name"] for p in await runner_pods(kube, namespace))
    assert pods == sorted(f"{name}-a1" for name in NAMES)  # one attempt each, nothing doubled
