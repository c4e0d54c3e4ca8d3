"""A TeamRun's phases and condition types are one list each (``resources.phases``): mypy
refuses a condition the operator writes under any other name, and the docs name every one."""

from __future__ import annotations

from pathlib import Path

from oma_operator.resources.phases import (
    CONDITION_TYPES,
    FINAL_PHASES,
    PHASES,
    WAITING_PHASES,
)

OPERATOR_DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"


def test_the_final_and_waiting_phases_are_phases_and_apart() -> None:
    assert set(PHASES) >= FINAL_PHASES and set(PHASES) >= WAITING_PHASES
    assert not FINAL_PHASES & WAITING_PHASES


def test_the_operator_docs_name_every_phase_and_condition_type() -> None:
    text = OPERATOR_DOC.read_text(encoding="utf-8")
    missing = [name for name in (*PHASES, *CONDITION_TYPES) if f"`{name}" not in text]
    assert missing == []
