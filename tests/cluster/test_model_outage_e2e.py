"""A model provider answering 529 for a minute in the middle of a TeamRun (a server speaking
Anthropic's Messages API, reached by the runner pods through the real SDK): the run shows
``ModelUnavailable`` with the provider's message, waits the outage out with attempts that use
no failure budget, and succeeds; the tool call committed before the outage is not run again."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from tests.cluster.e2e_env import REAL_NODE, SANDBOX_HOST_IP, Endpoint, SideEffects
from tests.cluster.helpers import wait_for
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    status_of,
    store_secret,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster

OUTAGE_SECONDS = 60.0
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


class OutageServer:
    """The Messages API: a tool call first; then 529 for ``OUTAGE_SECONDS``; then text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.overloaded = 0
        self.outage_ends: float | None = None
        host = SANDBOX_HOST_IP if REAL_NODE else "127.0.0.1"
        self.httpd = ThreadingHTTPServer((host, 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def answer(self) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls += 1
            if self.calls == 1:
                use: dict[str, Any] = {"type": "tool_use", "id": "toolu_1", "name": "ledger_append"}
                use["input"] = {"entry": "charge", "amount": 7}
                return 200, _message([use], "tool_use")
            if self.outage_ends is None:
                self.outage_ends = time.monotonic() + OUTAGE_SECONDS
            if time.monotonic() < self.outage_ends:
                self.overloaded += 1
                return 529, OVERLOADED
            return 200, _message([{"type": "text", "text": "charged once"}], "end_turn")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                status, body = server.answer()
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("retry-after-ms", "50")  # the SDK's own retries: quick
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


@pytest.fixture
def provider() -> Iterator[OutageServer]:
    server = OutageServer()
    server.thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()


@pytest.mark.timeout(420)
async def test_a_minute_of_529_parks_the_run_and_it_succeeds_with_no_failure_budget_used(
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
    provider: OutageServer,
) -> None:
    await store_secret(kube, namespace, "sk-ant-local-test-0000", name="model")
    body = teamrun("outage", [], effects)
    agent = body["spec"]["team"]["agents"][0]
    agent["model"] = {
        "provider": "anthropic",
        "name": "claude-test-1",
        "baseURL": provider.url,
        "maxRetries": 1,
        "apiKeySecretRef": {"name": "model", "key": "url"},
    }
    # No failure budget at all: a crash would fail the run; an outage must not count as one.
    body["spec"]["retryPolicy"] = {"backoffSeconds": 2, "maxFailures": 0}
    await kube.create(TEAMRUNS.format(ns=namespace), body)

    async def unavailable() -> dict[str, Any] | None:
        status = await status_of(kube, namespace, "outage")
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        progressing = conditions.get("Progressing") or {}
        return status if progressing.get("reason") == "ModelUnavailable" else None

    seen = await wait_for(unavailable, 180, "the run to show ModelUnavailable")
    assert "HTTP 529" in seen["message"] and "Overloaded" in seen["message"]
    assert seen.get("modelOutageSince") and seen["phase"] == "Running"
    final = await finished(kube, namespace, "outage", 300)
    assert final["phase"] == "Succeeded", final
    outcomes = [a["outcome"] for a in final["attempts"]]
    assert outcomes[-1] == "succeeded" and set(outcomes[:-1]) == {"outage"}, outcomes
    assert final.get("failures", 0) == 0 and "modelOutageSince" not in final
    assert final["taskSummary"] == "1/1"
    assert await effects.ledger() == ["charge"]  # committed before the outage: once
    assert provider.overloaded >= 2
