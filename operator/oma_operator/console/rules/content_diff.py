"""What changed between two requests' contents (a re-requested call, an uncertain call's retry,
a plan revision): a structural diff by path, for a reviewer to see before deciding again.

Objects are compared key by key; arrays index by index (an item inserted early shows as changes
from there on, which is what a reviewer must read anyway); values by JSON equality, so ``1`` and
``1.0`` differ, as the hash says they do. Without recursion: content may nest deeply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from oma_operator.console.rules.content_view import path_key, shown

ChangeKind = Literal["added", "removed", "changed"]


@dataclass(frozen=True)
class Change:
    """``path`` as ``content_view`` shows paths; ``before`` / ``after`` as shown (escaped),
    ``None`` where the value does not exist on that side."""

    path: str
    kind: ChangeKind
    before: str | None
    after: str | None


def content_diff(before: Any, after: Any) -> list[Change]:
    changes: list[Change] = []
    stack: list[tuple[str, Any, Any]] = [("", before, after)]
    while stack:
        path, old, new = stack.pop()
        if isinstance(old, dict) and isinstance(new, dict):
            keys = [*old, *(key for key in new if key not in old)]
            pending = []
            for key in keys:
                sub = f"{path}/{path_key(key)}"
                if key not in new:
                    changes.append(Change(sub, "removed", shown(old[key]), None))
                elif key not in old:
                    changes.append(Change(sub, "added", None, shown(new[key])))
                else:
                    pending.append((sub, old[key], new[key]))
            stack.extend(reversed(pending))
        elif isinstance(old, list) and isinstance(new, list):
            pending = [(f"{path}/{i}", old[i], new[i]) for i in range(min(len(old), len(new)))]
            changes.extend(
                Change(f"{path}/{i}", "removed", shown(old[i]), None)
                for i in range(len(new), len(old))
            )
            changes.extend(
                Change(f"{path}/{i}", "added", None, shown(new[i]))
                for i in range(len(old), len(new))
            )
            stack.extend(reversed(pending))
        elif not _same(old, new):
            changes.append(Change(path or "/", "changed", shown(old), shown(new)))
    return sorted(changes, key=lambda change: _order(change.path))


def _same(old: Any, new: Any) -> bool:
    """Equal as JSON values that are not both objects or both arrays (those are compared item
    by item above), types included: ``1`` is not ``1.0`` nor ``true``."""
    return type(old) is type(new) and bool(old == new)


def _order(path: str) -> list[tuple[int, int, str]]:
    """Changes by path: array items by index, object keys by name."""
    return [(0, int(s), "") if s.isascii() and s.isdigit() else (1, 0, s) for s in path.split("/")]
