"""How a replay compares two boundaries: types are kept apart, only the clock's and the
attempt's fields are left out, and only where the snapshot keeps them."""

from __future__ import annotations

from oma.replay.compare import first_difference
from oma.replay.run import _Group


def _group(*bodies: str) -> _Group:
    return _Group(1, "saved", tuple(bodies))


def test_one_one_point_oh_and_true_are_three_values() -> None:
    values = ["1", "1.0", "true"]
    normalized = {_group(f'[["s",["x"],{v}]]').normalized() for v in values}
    assert len(normalized) == 3
    assert first_difference({"x": 1}, {"x": True}) == ("/x", 1, True)
    assert first_difference({"x": 1}, {"x": 1.0}) == ("/x", 1, 1.0)


def test_the_clock_and_the_attempt_are_left_out_where_the_snapshot_keeps_them() -> None:
    recorded = {
        "createdAt": "2026-01-01T00:00:00.000Z",
        "identity": {"runId": "r", "attempt": 2, "lastTraceId": "a"},
        "queue": {"tasks": [{"id": "t", "updatedAt": "2026-01-01T00:00:00.000Z"}]},
        "inFlightTasks": [
            {
                "toolCalls": [{"toolName": "x", "duration": 5}],
                "pendingToolCalls": [
                    {"started": {"at": "2026-01-01T00:00:00.000Z", "attempt": 2}},
                    {"commit": {"record": {"duration": 9}}},
                ],
            }
        ],
    }
    replayed = {
        "createdAt": "2027-01-01T00:00:00.000Z",
        "identity": {"runId": "r", "attempt": 1, "lastTraceId": "b"},
        "queue": {"tasks": [{"id": "t", "updatedAt": "2027-01-01T00:00:00.000Z"}]},
        "inFlightTasks": [
            {
                "toolCalls": [{"toolName": "x", "duration": 1}],
                "pendingToolCalls": [
                    {"started": {"at": "2027-01-01T00:00:00.000Z", "attempt": 1}},
                    {"commit": {"record": {"duration": 0}}},
                ],
            }
        ],
    }
    assert first_difference(recorded, replayed) is None


def test_the_same_names_elsewhere_are_compared() -> None:
    recorded = {"inFlightTasks": [{"pendingToolCalls": [{"call": {"input": {"duration": 5}}}]}]}
    replayed = {"inFlightTasks": [{"pendingToolCalls": [{"call": {"input": {"duration": 6}}}]}]}
    assert first_difference(recorded, replayed) == (
        "/inFlightTasks/0/pendingToolCalls/0/call/input/duration",
        5,
        6,
    )
    path = '["inFlightTasks",0,"pendingToolCalls",0,"call","input","attempt"]'
    one, two = (_group(f'[["s",{path},{n}]]').normalized() for n in (1, 2))
    assert one != two
    clock = '[["s",["createdAt"],"2026-01-01T00:00:00.000Z"],["s",["x"],1]]'
    assert _group(clock).normalized() == _group('[["s",["x"],1]]').normalized()
