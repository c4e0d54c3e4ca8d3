"""How many fuzz cases each target ran and how they ended (printed by ``conftest.py``).

Each test body records one outcome per generated case: ``typed`` (the code raised the typed
error the property demands) or ``valid`` (it returned a result the property then checked).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Literal

Outcome = Literal["typed", "valid"]

COUNTS: dict[str, Counter[Outcome]] = {}


def record(target: str, outcome: Outcome) -> None:
    COUNTS.setdefault(target, Counter())[outcome] += 1


def assert_code(error: Exception, allowed: set[str]) -> None:
    """A typed error with one of the allowed ``code``s (for "typed error or valid" properties,
    where ``pytest.raises`` cannot express the valid branch)."""
    code = getattr(error, "code", None)
    assert code in allowed, f"{type(error).__name__} with code {code!r}, expected {allowed}"


def examples(default: int) -> int:
    """``max_examples`` of a property: its CI default, or ``OMA_FUZZ_EXAMPLES`` to scale up."""
    override = os.environ.get("OMA_FUZZ_EXAMPLES", "").strip()
    return int(override) if override else default


def summary_lines() -> list[str]:
    rows = [
        (target, c["typed"] + c["valid"], c["typed"], c["valid"]) for target, c in COUNTS.items()
    ]
    rows.sort()
    rows.append(
        (
            "total",
            sum(row[1] for row in rows),
            sum(row[2] for row in rows),
            sum(row[3] for row in rows),
        )
    )
    header = ("target", "cases", "typed errors", "valid results")
    width = max(len(header[0]), *(len(row[0]) for row in rows))
    lines = [f"{header[0]:<{width}} | {header[1]:>6} | {header[2]:>12} | {header[3]:>13}"]
    lines.append(f"{'-' * width}-|-{'-' * 6}-|-{'-' * 12}-|-{'-' * 13}")
    lines += [f"{t:<{width}} | {n:>6} | {e:>12} | {v:>13}" for t, n, e, v in rows]
    return lines
