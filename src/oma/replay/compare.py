"""Where two snapshots differ: the first JSON path, in document order, with both values.

What legitimately differs between a run and its replay is left out, where the snapshot keeps
it: times (``createdAt`` and ``updatedAt`` of the run and its tasks, a tool call record's
``duration``, a start mark's ``at``), the attempt's identity (the top-level ``identity``, trace
and span ids, and a completed task's result's) and which attempt did a thing (a start mark's,
a budget reservation's or loss's ``attempt``: a replay is one attempt). The same names anywhere
else (in a tool's input, say) are compared like any other value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Keys whose values are the clock's or the attempt's, never the run's behaviour, by the key of
# the object that holds them ("" for the snapshot itself, "*" for any: a task's times).
VOLATILE = {
    "": frozenset({"createdAt", "identity"}),
    "tasks": frozenset({"createdAt", "updatedAt"}),  # the queue's tasks
    "agentResult": frozenset({"identity"}),  # a completed task's result: the attempt's ids
    "record": frozenset({"duration"}),
    "toolCalls": frozenset({"duration"}),  # an item of a task's toolCalls: a call record
    "started": frozenset({"at", "attempt"}),
    "reserved": frozenset({"attempt"}),  # the budget's reservations and losses
    "lost": frozenset({"attempt"}),
}
_MISSING = object()


def volatile(holder: str, key: object) -> bool:
    """Whether ``key`` of an object held under ``holder`` (its key, or the list's that holds
    it) is the clock's or the attempt's."""
    return key in VOLATILE.get(holder, ())


@dataclass(frozen=True)
class Divergence:
    """The first place a replayed boundary differs from the recorded one."""

    seq: int
    path: str  # a JSON Pointer (RFC 6901) into the snapshot
    recorded: Any
    replayed: Any


def first_difference(
    recorded: Any, replayed: Any, path: str = "", holder: str = ""
) -> tuple[str, Any, Any] | None:
    """The first path where the two documents differ (volatile keys aside), or ``None``.
    ``holder``: the key under which these values sit (what makes a key volatile)."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in [*recorded, *(k for k in replayed if k not in recorded)]:
            if volatile(holder, key):
                continue
            found = first_difference(
                recorded.get(key, _MISSING),
                replayed.get(key, _MISSING),
                f"{path}/{_escape(key)}",
                key,
            )
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for index in range(max(len(recorded), len(replayed))):
            found = first_difference(
                recorded[index] if index < len(recorded) else _MISSING,
                replayed[index] if index < len(replayed) else _MISSING,
                f"{path}/{index}",
                holder,  # a list's items are held as the list is
            )
            if found is not None:
                return found
        return None
    if recorded is replayed or (type(recorded) is type(replayed) and recorded == replayed):
        return None
    return path or "/", _shown(recorded), _shown(replayed)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _shown(value: Any) -> Any:
    return "(absent)" if value is _MISSING else value
