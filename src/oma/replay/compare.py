"""Where two snapshots differ: the first JSON path, in document order, with both values.

What legitimately differs between a run and its replay is left out: times (``createdAt``,
``updatedAt``, a tool call's ``duration``, a start mark's ``at``), the attempt's identity (trace
and span ids) and which attempt did a thing (a replay is one attempt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Keys whose values are the clock's or the attempt's, never the run's behaviour.
VOLATILE = frozenset({"createdAt", "updatedAt", "duration", "identity", "at", "attempt"})
_MISSING = object()


@dataclass(frozen=True)
class Divergence:
    """The first place a replayed boundary differs from the recorded one."""

    seq: int
    path: str  # a JSON Pointer (RFC 6901) into the snapshot
    recorded: Any
    replayed: Any


def first_difference(recorded: Any, replayed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first path where the two documents differ (volatile keys aside), or ``None``."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in [*recorded, *(k for k in replayed if k not in recorded)]:
            if key in VOLATILE:
                continue
            found = first_difference(
                recorded.get(key, _MISSING), replayed.get(key, _MISSING), f"{path}/{_escape(key)}"
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
