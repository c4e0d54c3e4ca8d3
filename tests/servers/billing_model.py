"""A model server that bills: it speaks Anthropic's Messages API on a free loopback port,
answers turn N of a fixed script (N: the assistant turns in the conversation it is sent, as
the scripted adapter does, so a resumed run carries on), and counts the tokens of every call
it answered under the call's ``X-Oma-Call-Key`` header, as a provider bills them.

Input tokens are the request body's bytes / 4 (rounded up), output tokens a fixed count per
turn: not a tokenizer, but what this server charges, which is what a budget is checked
against. It runs in a thread of the test process (the runs under test are child processes).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from oma.llm.types import CALL_KEY_HEADER


@dataclass(frozen=True)
class Bill:
    call_key: str
    input_tokens: int
    output_tokens: int

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class BillingModelServer:
    def __init__(self, tool_turns: int, output_tokens: int = 20) -> None:
        self.tool_turns = tool_turns
        self.output_tokens = output_tokens
        self._lock = threading.Lock()
        self._bills: list[Bill] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> BillingModelServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def bills(self, run_id: str | None = None) -> list[Bill]:
        """Every call answered (of one run: its keys start with ``<run id>:``)."""
        with self._lock:
            found = list(self._bills)
        return [b for b in found if run_id is None or b.call_key.startswith(f"{run_id}:")]

    def answer(self, body: dict[str, Any], size: int, call_key: str) -> dict[str, Any]:
        turn = sum(m.get("role") == "assistant" for m in body.get("messages") or [])
        if turn < self.tool_turns:
            content: list[dict[str, Any]] = [
                {"type": "tool_use", "id": f"t{turn}", "name": "echo",
                 "input": {"text": f"step {turn}"}}
            ]  # fmt: skip
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "all steps done"}], "end_turn"
        bill = Bill(call_key, math.ceil(size / 4), self.output_tokens)
        with self._lock:
            self._bills.append(bill)
        return {
            "id": f"msg_{turn}",
            "type": "message",
            "role": "assistant",
            "model": "claude-billing-1",
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": bill.input_tokens, "output_tokens": bill.output_tokens},
        }


def _handler(server: BillingModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            key = self.headers.get(CALL_KEY_HEADER) or ""
            reply = json.dumps(server.answer(json.loads(raw), len(raw), key)).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
            except OSError:
                self.close_connection = True  # the run was killed while it waited

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
