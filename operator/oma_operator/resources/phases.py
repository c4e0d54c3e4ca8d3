"""A TeamRun's phases and condition types, as the operator reads and writes them (pure)."""

from __future__ import annotations

from typing import Literal, get_args

Phase = Literal[
    "Queued",
    "Running",
    "AwaitingApproval",
    "Suspended",
    "Succeeded",
    "Failed",
    "Rejected",
    "Cancelled",
]
# The conditions the operator writes, one per type (mypy refuses a misspelt one).
ConditionType = Literal[
    "Progressing",
    "Ready",
    "Succeeded",
    "Failed",
    "AwaitingApproval",
    "Queued",
    "Suspended",
    "Cancelled",
    "PodCreated",
    "Reconciled",
    "CheckpointPolled",
    "PodStuck",
]
PHASES: tuple[Phase, ...] = get_args(Phase)
CONDITION_TYPES: tuple[ConditionType, ...] = get_args(ConditionType)

# Nothing more happens to a run in these (but retention, and ``oma retry`` of a Failed one).
FINAL_PHASES: frozenset[Phase] = frozenset({"Succeeded", "Failed", "Rejected", "Cancelled"})
# Waiting for a person: no pod runs, no slot is held (spec.suspend, approval gates).
WAITING_PHASES: frozenset[Phase] = frozenset({"Suspended", "AwaitingApproval"})
