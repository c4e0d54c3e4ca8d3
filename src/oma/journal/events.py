"""The run journal's event envelope and vocabulary (the reference's ``RunEvent``).

Every event carries ``seq`` (1-based, strictly increasing per run across attempts),
``timestampUnixMs``, ``runId``, ``attempt`` and ``type``; optionally ``taskId``, ``agentName``,
``traceId``, ``spanId`` and ``sourceEventSeqs`` (the earlier events it derives from). A reader
checks the envelope only, as the reference does, so events with newer optional fields still read.
"""

from __future__ import annotations

from typing import Any

EVENT_TYPES = frozenset(
    {
        "run/start",
        "run/end",
        "plan/set",
        "task/status",
        "turn/start",
        "turn/end",
        "user/message",
        "assistant/message",
        "llm/request",
        "tool/call",
        "tool/result",
        "context/replace",
        "memory/set",
        "approval/request",
        "approval/decision",
        "checkpoint/saved",
    }
)
# The largest number JavaScript holds exactly (Number.MAX_SAFE_INTEGER): a seq above it is no
# sequence number a reference reader could keep, nor one oma could number on from.
MAX_SEQ = 2**53 - 1
# The events whose blocks can reproduce what a request showed the model (``verify``).
MESSAGE_EVENTS = frozenset({"user/message", "assistant/message"})


def is_run_event(value: Any) -> bool:
    """Whether ``value`` has a run event's envelope: a known ``type``, an integer ``seq`` > 0
    (at most 2**53 - 1, the largest JavaScript holds exactly),
    a numeric ``timestampUnixMs``, a string ``runId`` and a numeric ``attempt`` (numbers as
    JavaScript reads them: ``2.0`` is the integer 2, ``true`` is no number)."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        return False
    seq: Any = value.get("seq")
    return (
        integral(seq)
        and 0 < seq <= MAX_SEQ
        and _number(value.get("timestampUnixMs"))
        and isinstance(value.get("runId"), str)
        and _number(value.get("attempt"))
    )


def integral(value: Any) -> bool:
    """``Number.isInteger``: an int, or a float with no fraction (never a bool)."""
    return type(value) is int or (type(value) is float and value.is_integer())


def _number(value: Any) -> bool:
    return type(value) in (int, float)
