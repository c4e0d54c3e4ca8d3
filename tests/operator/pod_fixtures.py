"""Runner pods in the states the operator classifies, and a TeamRun to make runner pods for
(shared by the pure operator tests)."""

from __future__ import annotations

from typing import Any

from oma_operator.resources.bodies import ObjectMeta, PodBody, PodStatus, TeamRunBody


def runner_pod_in(
    phase: str,
    *,
    exit_code: int | None = None,
    reason: str | None = None,
    pod_reason: str | None = None,
    disruption: str | None = None,
    deleting: bool = False,
    message: str = "msg",
) -> PodBody:
    status: PodStatus = {"phase": phase}
    if exit_code is not None:
        status["containerStatuses"] = [
            {
                "name": "runner",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason or "Error",
                        "message": message,
                    }
                },
            }
        ]
    if pod_reason:
        status["reason"], status["message"] = pod_reason, "The node was low on memory."
    if disruption:
        status["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": disruption}
        ]
    meta: ObjectMeta = {"name": "r-a1"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


# A TeamRun as the operator's handlers get it (BODY), and its spec (SPEC).
SPEC: dict[str, Any] = {
    "runId": "pay-1",
    "team": {
        "agents": [
            {
                "name": "clerk",
                "model": {
                    "provider": "anthropic",
                    "name": "claude-sonnet-4-5",
                    "apiKeySecretRef": {"name": "llm", "key": "anthropic"},
                },
            }
        ]
    },
    "tasks": [{"title": "Pay", "description": "Pay."}],
    "store": {"postgres": {"dsnSecretRef": {"name": "pg", "key": "dsn"}, "schema": "runs"}},
    "runner": {"terminationGracePeriodSeconds": 45, "env": [{"name": "X", "value": "1"}]},
}
BODY: TeamRunBody = {"metadata": {"name": "pay", "namespace": "team-a", "uid": "u-1"}, "spec": SPEC}
