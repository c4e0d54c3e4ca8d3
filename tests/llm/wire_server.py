"""A real HTTP server on a free loopback port that plays a provider's wire format.

Tests queue replies per path and read back the requests the SDK really sent (headers, JSON body).
The SDKs use their own HTTP stack (httpx2), so only real sockets exercise them: no mocking layer.
The server runs in a thread so one instance serves every test of a module, whatever event loop
each test has.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSON = Any


@dataclass
class Reply:
    """One scripted answer. ``body`` is JSON data, or ``bytes`` sent as they are."""

    status: int = 200
    body: JSON | bytes = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering, to trip client timeouts


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: JSON


class WireServer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: dict[str, deque[Reply]] = {}
        self._received: list[Received] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self._received.clear()

    def expect(self, path: str, *replies: Reply) -> None:
        """Queue replies for ``path``, answered in order, one per request."""
        with self._lock:
            self._replies.setdefault(path, deque()).extend(replies)

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    @property
    def pending(self) -> int:
        """Replies queued but not yet asked for (a test that leaves some missed a request)."""
        with self._lock:
            return sum(len(q) for q in self._replies.values())

    def _answer(self, request: Received) -> Reply:
        with self._lock:
            self._received.append(request)
            queue = self._replies.get(request.path)
            if queue:
                return queue.popleft()
        # `x-should-retry: false` keeps the SDK from hammering a path the test did not script.
        return Reply(
            404,
            {"error": {"type": "not_found", "message": f"no reply queued for {request.path}"}},
            {"x-should-retry": "false"},
        )


def _handler_for(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 keep-alive, as the real APIs; an idle connection's thread ends after this.
        protocol_version = "HTTP/1.1"
        timeout = 10

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: JSON = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            path = self.path.split("?", 1)[0]
            reply = server._answer(Received("POST", path, headers, body))
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body)
            data = payload if isinstance(payload, bytes) else payload.encode()
            time.sleep(reply.delay)
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                # The client gave up (a timeout test): nobody is left to answer.
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass  # pytest output stays readable; assertions use `received` instead

    return Handler
