"""Traces from runner pods: a TeamRun evicted once sends a real OTLP/HTTP receiver (on the
address pods reach) two attempt spans, the second linked to the first by ``continued_from``,
with the TeamRun's run id, in one trace for the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import evict, wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    operator_log,
    redis_secret,
    teamrun,
)
from tests.servers.otlp_receiver import otlp_receiver
from tests.servers.process import listen_addresses

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster


@pytest.mark.timeout(240)
async def test_an_evicted_run_sends_two_linked_attempt_spans(
    kube: KubeClient, namespace: str, operator: Path, redis_secret: str, effects: SideEffects
) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "t1", "name": "ledger_append", "input": {"entry": "first"}}]},
        {
            "tool_calls": [{"id": "t2", "name": "ledger_append", "input": {"entry": "second"}}],
            "delay": 4,
        },
        {"text": "done"},
    ]
    with otlp_receiver(listen_addresses()[-1]) as receiver:
        body = teamrun("traced", script, effects)
        body["spec"]["runner"]["env"].append(
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": receiver.url}
        )
        await kube.create(TEAMRUNS.format(ns=namespace), body)

        async def first_recorded() -> bool:
            return await effects.ledger() == ["first"]

        await wait_for(first_recorded, 90, "the first ledger entry")
        await evict(kube, namespace, "traced-a1")
        status = await finished(kube, namespace, "traced", 150)
        assert status["phase"] == "Succeeded", (status, await operator_log(operator))

        async def both_attempts() -> list[Any] | None:
            found = [s for s in receiver.spans if s.name == "oma.attempt"]
            return found if len(found) == 2 else None

        spans = await wait_for(both_attempts, 30, "two attempt spans at the receiver")
    first, second = sorted(spans, key=lambda s: s.attributes["oma.attempt"])
    assert [s.attributes["oma.attempt"] for s in (first, second)] == [1, 2]
    assert {s.attributes["oma.run_id"] for s in spans} == {body["spec"]["runId"]}
    assert first.attributes["oma.status"] == "cancelled"  # drained on SIGTERM: resumable
    assert second.attributes["oma.status"] == "ok"
    # One trace for the run (the first attempt's own id); each attempt keeps its own id, as
    # the reference regenerates them, in oma.attempt.trace_id.
    assert {s.trace_id for s in receiver.spans} == {first.trace_id}
    assert first.attributes["oma.attempt.trace_id"] == first.trace_id
    assert second.attributes["oma.attempt.trace_id"] != first.trace_id
    assert second.links == [
        (first.trace_id, first.span_id, {"oma.link.relation": "continued_from"})
    ]
    assert await effects.ledger() == ["first", "second"]
    names = {s.name for s in receiver.spans if s.parent_span_id}
    assert "oma.task" in names and any(n.startswith("oma.model_call") for n in names)
