"""OpenTelemetry traces of a run's attempts, received by a real OTLP/HTTP receiver on loopback
(protobuf, as a collector gets them; tests/servers/otlp_receiver.py): an attempt killed inside
a tool call and the attempt that resumes it, linked by ``continued_from``, with the replayed
tool calls marked and the model calls' tokens as attributes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.checkpoint import Checkpoint, CheckpointSnapshotV4
from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.keys import checkpoint_key
from oma.local_run import run_spec
from oma.spec import ForkFromSpec, StoreSpec
from oma.store import FileStore
from oma.tracing import tracing_requested
from tests.engine.crashing import SimulatedCrash
from tests.engine.helpers import die_in_e3_once_e1_e2_committed, effect_spec, effect_tool
from tests.servers.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name

SCRIPT: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"id": f"e{n}", "name": "effect", "input": {"label": f"n{n}"}} for n in (1, 2, 3)
        ]
    },
    {"text": "paid"},
]


def _by_name(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _attempt_of(spans: list[ReceivedSpan], span: ReceivedSpan) -> ReceivedSpan:
    """The attempt span above ``span`` (all attempts share the run's trace)."""
    by_id = {s.span_id: s for s in spans}
    while span.parent_span_id:
        span = by_id[span.parent_span_id]
    return span


async def test_two_attempts_are_linked_and_replayed_calls_are_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, ran = tmp_path / "store.json", list[str]()

    die_in_the_third = die_in_e3_once_e1_e2_committed(store)

    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "oma-test")
        with pytest.raises(SimulatedCrash):
            await run_spec(
                effect_spec(SCRIPT),
                run_id="traced",
                tools={"effect": effect_tool(ran, die_in_the_third)},
                default_store_path=store,
            )
        second = await run_spec(
            effect_spec(SCRIPT),
            run_id="traced",
            tools={"effect": effect_tool(ran)},
            default_store_path=store,
        )
    assert second.result.success and sorted(ran[3:]) == ["e3"]
    spans = receiver.spans
    first, resumed = sorted(
        _by_name(spans, "oma.attempt"), key=lambda s: s.attributes["oma.attempt"]
    )
    assert (first.attributes["oma.run_id"], resumed.attributes["oma.run_id"]) == ("traced",) * 2
    assert first.status_code == 2 and resumed.status_code != 2  # the killed one failed
    assert resumed.attributes["oma.status"] == "ok"
    # One trace for the run: the first attempt's own trace id, which the attempt log keeps;
    # each attempt's span id and own trace id are what its checkpoint stores.
    snapshot = await Checkpoint(FileStore(store), run_id="traced").load_latest()
    assert isinstance(snapshot, CheckpointSnapshotV4)
    log = await load_attempt_log(FileStore(store), checkpoint_key("traced"))
    assert log is not None and log.trace_id == log.attempts[0].trace_id
    assert {s.trace_id for s in spans} == {first.trace_id} == {log.trace_id}
    assert first.attributes["oma.attempt.trace_id"] == first.trace_id
    assert resumed.span_id == snapshot.identity.last_root_span_id
    assert resumed.attributes["oma.attempt.trace_id"] == snapshot.identity.last_trace_id
    assert second.result.identity.trace_id == snapshot.identity.last_trace_id != first.trace_id
    assert first.parent_span_id == resumed.parent_span_id == ""  # each attempt a root span
    assert resumed.links == [
        (first.trace_id, first.span_id, {"oma.link.relation": "continued_from"})
    ]

    def of(attempt: ReceivedSpan, prefix: str) -> list[ReceivedSpan]:
        return [s for s in _by_name(spans, prefix) if _attempt_of(spans, s) is attempt]

    tools = {s.attributes["oma.tool_call.id"]: s for s in of(resumed, "oma.tool_call")}
    assert {k: s.attributes["oma.tool_call.replayed"] for k, s in tools.items()} == {
        "e1": True,
        "e2": True,
        "e3": False,
    }
    assert [s.attributes["oma.tool_call.id"] for s in of(first, "oma.tool_call")].count("e3") == 0
    (task,) = of(resumed, "oma.task")
    assert task.parent_span_id == resumed.span_id
    assert all(s.parent_span_id == task.span_id for s in tools.values())
    models = of(first, "oma.model_call") + of(resumed, "oma.model_call")
    assert len(models) == 2  # attempt 1 asked for the calls; attempt 2 for the answer
    for model in models:
        assert model.attributes["gen_ai.system"] == "scripted"
        assert model.attributes["gen_ai.usage.input_tokens"] >= 0
        assert model.attributes["gen_ai.usage.output_tokens"] >= 0
        assert model.start_ns <= model.end_ns


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "   "}, False),
    ],
)
def test_traces_are_off_unless_the_otel_variables_ask(env: dict[str, str], wanted: bool) -> None:
    assert tracing_requested(env) is wanted


async def test_no_endpoint_no_spans_and_the_run_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otlp_receiver() as receiver:
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
        done = await run_spec(
            effect_spec(SCRIPT),
            run_id="quiet",
            tools={"effect": effect_tool([])},
            default_store_path=tmp_path / "s.json",
        )
    assert done.result.success and receiver.requests == 0


def test_a_checkpoint_s_malformed_link_is_left_out_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A link read from a checkpoint another writer made (or a hand edit) with ids that are not
    hex: the attempt is traced without it, and the run is not failed by telemetry."""
    from oma.agent.result import IdentityLink, RunIdentity
    from oma.tracing import run_tracer

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracer = run_tracer()
    assert tracer is not None
    links = [
        IdentityLink(trace_id="", span_id="x"),
        IdentityLink(trace_id="0" * 32, span_id="1" * 16),
    ]
    tracer.continue_run_trace("not-a-trace-id")  # a hand-edited attempt log: ignored too
    tracer.attempt_started(
        RunIdentity(run_id="r", attempt=2, trace_id="a" * 32, root_span_id="b" * 16, links=links)
    )
    span = tracer._attempt
    assert span is not None and list(span.links) == []
    assert (span.context.trace_id, span.context.span_id) == (int("a" * 32, 16), int("b" * 16, 16))
    tracer._provider.shutdown() if tracer._provider is not None else None  # nothing to export


def test_an_attempt_whose_predecessor_may_have_had_a_trace_of_its_own_links_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The previous attempt exported into the run's trace, or (no attempt log to read, an oma
    from before one trace per run) into its own: both links, the same span."""
    from oma.agent.result import IdentityLink, RunIdentity
    from oma.tracing import run_tracer

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracer = run_tracer()
    assert tracer is not None
    run, own, span = "1" * 32, "2" * 32, "3" * 16
    tracer.continue_run_trace(run)
    tracer.attempt_started(
        RunIdentity(
            run_id="r",
            attempt=3,
            trace_id="4" * 32,
            root_span_id="5" * 16,
            links=[IdentityLink(trace_id=own, span_id=span, relation="continued_from")],
        )
    )
    attempt = tracer._attempt
    assert attempt is not None and attempt.context.trace_id == int(run, 16)
    assert [(link.context.trace_id, link.context.span_id) for link in attempt.links] == [
        (int(run, 16), int(span, 16)),
        (int(own, 16), int(span, 16)),
    ]
    tracer._provider.shutdown() if tracer._provider is not None else None


async def test_a_forked_run_s_attempts_say_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    redis: RedisServer = request.getfixturevalue("redis_server")
    store = {"redis": {"url": redis.url, "namespace": unique_name("trace")}}
    spec = effect_spec(SCRIPT).model_copy(update={"store": StoreSpec.model_validate(store)})
    ran: list[str] = []
    unused = tmp_path / "unused.json"  # the spec names its store
    parent = await run_spec(
        spec, run_id="parent", tools={"effect": effect_tool(ran)}, default_store_path=unused
    )
    assert parent.result.success and len(ran) == 3
    forked = spec.model_copy(
        update={"fork_from": ForkFromSpec.model_validate({"runId": "parent", "seq": 2})}
    )
    with otlp_receiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        child = await run_spec(
            forked, run_id="child", tools={"effect": effect_tool(ran)}, default_store_path=unused
        )
    assert child.result.success and child.resumed
    (attempt,) = _by_name(receiver.spans, "oma.attempt")
    assert attempt.attributes["oma.run_id"] == "child"
    assert attempt.attributes["oma.forked_from.run_id"] == "parent"
    assert attempt.attributes["oma.forked_from.seq"] == 2
    assert [link[2] for link in attempt.links] == [{"oma.link.relation": "continued_from"}]
