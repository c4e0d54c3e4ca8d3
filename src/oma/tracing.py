"""OpenTelemetry traces of a run's attempts (the optional extra ``oma[otel]``).

Off unless the standard variables ask for it: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, ``OTEL_TRACES_EXPORTER`` unset or ``otlp``,
``OTEL_SDK_DISABLED`` not ``true``. The exporter (OTLP over HTTP/protobuf) reads the rest of the
``OTEL_*`` variables itself (headers, timeout, ``OTEL_SERVICE_NAME``, resource attributes).

A run is one trace. The engine's trace ids are new per attempt (``RunIdentity``, as in the
reference: the snapshot stores the last attempt's as ``lastTraceId``), so the exported trace id
is the run's: its first attempt's own, which the attempt log keeps (``run_trace_id``). Each
attempt is a root span whose span id is the attempt's root span id (``lastRootSpanId``), with its
own trace id as ``oma.attempt.trace_id``, linked to the previous attempt's root span with
``oma.link.relation = continued_from``. Below it: a span per task, per model call (provider,
model and tokens as attributes) and per tool call (its id, and whether it was executed or
replayed from a commit). Spans are built from the run's progress events and exported when the
attempt ends, also when it ends by an error; an attempt killed outright exports nothing.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oma.agent.result import RunIdentity
from oma.orchestrator.events import OrchestratorEvent

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Span, TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator

log = logging.getLogger(__name__)
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def tracing_requested(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() not in ("otlp", ""):
        return False
    return any(env.get(name, "").strip() for name in ENDPOINTS)


def run_tracer(env: Mapping[str, str] = os.environ) -> RunTracer | None:
    """A tracer for one attempt when traces are asked for and the extra is installed (else
    None, with a warning when they are asked for without it)."""
    if not tracing_requested(env):
        return None
    try:
        import opentelemetry.sdk.trace  # noqa: F401
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: F401
            OTLPSpanExporter,
        )
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_*ENDPOINT is set but OpenTelemetry is not installed: no traces "
            "(pip install 'oma[otel]')"
        )
        return None
    return RunTracer()


class RunTracer:
    """The spans of one attempt: ``attempt_started`` once (``OpenMultiAgent(on_attempt=...)``),
    ``see`` for each progress event, ``finish`` once at the end."""

    def __init__(self) -> None:
        self._provider: TracerProvider | None = None
        self._attempt: Span | None = None
        self._tasks: dict[str, Span] = {}
        self._run_trace: int | None = None
        self._lineage: dict[str, str | int] = {}

    def continue_run_trace(
        self, trace_id: str | None, forked_from: tuple[str, int] | None = None
    ) -> None:
        """Export into the run's trace (from the attempt log), not a new one; before
        ``attempt_started``. An id that is not 32 hex digits, or zero, is ignored.
        ``forked_from``: the run and boundary a forked run started from, put on each of its
        attempt spans."""
        ids = _ids(trace_id or "", "1" * 16)
        self._run_trace = ids[0] if ids is not None else None
        if forked_from is not None:
            self._lineage = {
                "oma.forked_from.run_id": forked_from[0],
                "oma.forked_from.seq": forked_from[1],
            }

    def attempt_started(self, identity: RunIdentity) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import Link, SpanContext, TraceFlags

        trace = self._run_trace or int(identity.trace_id, 16)
        provider = TracerProvider(
            resource=Resource.create({"service.name": "oma"}),
            id_generator=_attempt_ids(trace, int(identity.root_span_id, 16)),
        )
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._provider = provider
        links = []
        for link in identity.links or []:
            ids = _ids(link.trace_id, link.span_id)  # read from a checkpoint: may be anything
            if ids is None:
                continue
            # The previous attempt exported into the run's trace, unless it could not (no
            # attempt log to read, or an oma from before one trace per run): then into its own.
            # Which, this attempt cannot know; it links to both when they differ.
            for trace in dict.fromkeys([self._run_trace or ids[0], ids[0]]):
                context = SpanContext(
                    trace, ids[1], is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
                )
                links.append(Link(context, {"oma.link.relation": link.relation}))
        self._attempt = provider.get_tracer("oma").start_span(  # type: ignore[assignment]
            "oma.attempt",
            links=links,
            attributes={
                "oma.run_id": identity.run_id,
                "oma.attempt": identity.attempt,
                "oma.attempt.trace_id": identity.trace_id,
                **self._lineage,
            },
        )

    def see(self, event: OrchestratorEvent) -> None:
        if self._attempt is None:
            return
        data = event.data
        if event.type == "task_start" and event.task:
            task = data.get("task")
            title = str(getattr(task, "title", "") or "")
            self._tasks[event.task] = self._child(
                "oma.task",
                self._attempt,
                {"oma.task.id": event.task, "oma.task.title": title, "oma.agent": event.agent},
            )
        elif event.type in ("task_complete", "task_skipped", "error") and event.task:
            span = self._tasks.pop(event.task, None)
            if span is not None:
                if event.type == "error":
                    _failed(span, str(data.get("error")))
                span.end()
        elif event.type == "model_call":
            self._timed(
                f"oma.model_call {data.get('model') or data.get('provider')}",
                event,
                float(data.get("seconds") or 0.0),
                {
                    "gen_ai.system": data.get("provider"),
                    "gen_ai.request.model": data.get("model"),
                    "gen_ai.usage.input_tokens": data.get("inputTokens"),
                    "gen_ai.usage.output_tokens": data.get("outputTokens"),
                },
                data.get("error"),
            )
        elif event.type == "tool_call":
            executed = bool(data.get("executed"))
            self._timed(
                f"oma.tool_call {data.get('tool')}",
                event,
                float(data.get("seconds") or 0.0),
                {
                    "oma.tool_call.id": data.get("toolCallId"),
                    "oma.tool.name": data.get("tool"),
                    "oma.tool_call.executed": executed,
                    "oma.tool_call.replayed": not executed,
                },
                None,
            )

    def finish(self, status: str, message: str | None = None) -> None:
        """End the attempt's span (and any task still open) and export everything."""
        if self._attempt is None or self._provider is None:
            return
        for span in self._tasks.values():
            span.set_attribute("oma.task.ended", "with the attempt")
            span.end()
        self._tasks.clear()
        self._attempt.set_attribute("oma.status", status)
        if status not in ("ok", "suspended", "cancelled"):
            _failed(self._attempt, message or status)
        self._attempt.end()
        self._provider.shutdown()  # flushes: the exporter sends before the process may exit
        self._attempt = None

    def _child(self, name: str, parent: Span, attributes: dict[str, Any]) -> Span:
        from opentelemetry.trace import set_span_in_context

        assert self._provider is not None
        tracer = self._provider.get_tracer("oma")
        clean = {k: v for k, v in attributes.items() if v is not None}
        started = tracer.start_span(name, context=set_span_in_context(parent), attributes=clean)
        return started  # type: ignore[return-value]

    def _timed(
        self,
        name: str,
        event: OrchestratorEvent,
        seconds: float,
        attributes: dict[str, Any],
        error: Any,
    ) -> None:
        """A span that ended now and lasted ``seconds`` (events come when a call ends)."""
        from opentelemetry.trace import set_span_in_context

        assert self._provider is not None and self._attempt is not None
        parent = self._tasks.get(event.task or "", self._attempt)
        now = time.time_ns()
        clean = {k: v for k, v in attributes.items() if v is not None}
        span = self._provider.get_tracer("oma").start_span(
            name,
            context=set_span_in_context(parent),
            attributes=clean,
            start_time=now - int(seconds * 1e9),
        )
        if error:
            _failed(span, str(error))  # type: ignore[arg-type]
        span.end(end_time=now)


def _ids(trace_id: str, span_id: str) -> tuple[int, int] | None:
    """A link's ids as OpenTelemetry takes them; None unless 32 and 16 hex digits, not zero."""
    try:
        trace, span = int(trace_id, 16), int(span_id, 16)
    except ValueError:
        return None
    if len(trace_id) != 32 or len(span_id) != 16 or not trace or not span:
        return None
    return trace, span


def _failed(span: Span, message: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, message[:1024]))


def _attempt_ids(trace: int, root_span: int) -> IdGenerator:
    """Ids for one attempt's provider: the run's trace id for every span, the attempt's root
    span id for the first span made (the attempt's), random ones after."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    class AttemptIds(IdGenerator):
        def __init__(self) -> None:
            self._trace = trace
            self._root: int | None = root_span

        def generate_trace_id(self) -> int:
            return self._trace

        def generate_span_id(self) -> int:
            root, self._root = self._root, None
            return root if root is not None else random.getrandbits(64) or 1

        def is_trace_id_random(self) -> bool:
            return True

    return AttemptIds()
