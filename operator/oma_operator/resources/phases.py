"""A TeamRun's phases, as the operator reads them (pure)."""

from __future__ import annotations

# Nothing more happens to a run in these (but retention, and ``oma retry`` of a Failed one).
FINAL_PHASES = frozenset({"Succeeded", "Failed", "Rejected", "Cancelled"})
# Waiting for a person: no pod runs, no slot is held (spec.suspend, approval gates).
WAITING_PHASES = frozenset({"Suspended", "AwaitingApproval"})
