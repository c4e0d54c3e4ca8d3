"""A small OTLP/HTTP trace receiver on a free loopback port: what a collector's
``otlphttp`` receiver does for ``POST /v1/traces`` (protobuf ``ExportTraceServiceRequest``,
gzip or not), keeping every span it got. Started and stopped by the test (a thread)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]]
    status_code: int
    start_ns: int
    end_ns: int


@dataclass
class Receiver:
    url: str
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@contextmanager
def otlp_receiver(host: str = "127.0.0.1") -> Iterator[Receiver]:
    """``host``: loopback, or the devcluster sandbox's host address that real pods reach."""
    received = Receiver(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            with lock:
                received.requests += 1
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            received.spans.append(
                                ReceivedSpan(
                                    name=span.name,
                                    trace_id=span.trace_id.hex(),
                                    span_id=span.span_id.hex(),
                                    parent_span_id=span.parent_span_id.hex(),
                                    attributes=_attributes(span.attributes),
                                    links=[
                                        (
                                            link.trace_id.hex(),
                                            link.span_id.hex(),
                                            _attributes(link.attributes),
                                        )
                                        for link in span.links
                                    ],
                                    status_code=span.status.code,
                                    start_ns=span.start_time_unix_nano,
                                    end_ns=span.end_time_unix_nano,
                                )
                            )
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer((host, 0), Handler)
    received.url = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
