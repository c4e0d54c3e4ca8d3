"""The words a decision is given in, and what each one records: one table for the ledger, the
CLI, the operator's ApprovalDecision resources and the CRD's validation rules.

``approve`` and ``reject`` decide any request. An ``uncertain_tool_call`` request (a call that may
have run before a crash) is settled by ``retry`` (run it again), ``done`` (record it as done
without running it) or ``failed`` (record it as not done); ``approve`` means retry and
``reject`` means failed there. A resource spells the same as ``decision: Approved|Rejected``
with ``resolution: Retry|Done|Failed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from oma.approval.models import Resolution

DecisionWord = Literal["approve", "reject", "retry", "done", "failed"]
Verdict = Literal["approved", "rejected"]
ResourceDecision = Literal["Approved", "Rejected"]


@dataclass(frozen=True)
class Word:
    verdict: Verdict  # what the ledger records as the decision
    resolution: Resolution  # what it records on an uncertain_tool_call request
    settles_only: bool  # only for uncertain_tool_call requests


WORDS: dict[DecisionWord, Word] = {
    "approve": Word("approved", "retry", settles_only=False),
    "reject": Word("rejected", "failed", settles_only=False),
    "retry": Word("approved", "retry", settles_only=True),
    "done": Word("rejected", "done", settles_only=True),
    "failed": Word("rejected", "failed", settles_only=True),
}
SETTLING_WORDS: tuple[DecisionWord, ...] = tuple(w for w, s in WORDS.items() if s.settles_only)

# A resource's spelling of the ledger's values (and back).
RESOURCE_SPELLING: dict[str, str] = {
    "approved": "Approved",
    "rejected": "Rejected",
    "retry": "Retry",
    "done": "Done",
    "failed": "Failed",
}


def resource_fields(word: DecisionWord) -> tuple[ResourceDecision, str]:
    """``decision`` and ``resolution`` of an ApprovalDecision for a settling word."""
    entry = WORDS[word]
    decision: ResourceDecision = "Approved" if entry.verdict == "approved" else "Rejected"
    return decision, RESOURCE_SPELLING[entry.resolution]


def word_of(scope: str, decision: str, resolution: str | None) -> DecisionWord:
    """The word a resource's ``decision`` (and, settling an uncertain call, ``resolution``)
    means: Approved retries; Rejected records failed unless the resolution says Done."""
    approved = decision == "Approved"
    if scope != "uncertain_tool_call":
        return "approve" if approved else "reject"
    if approved:
        return "retry"
    return "done" if resolution == "Done" else "failed"


def resolutions_by_decision() -> dict[ResourceDecision, list[str]]:
    """Which resolutions go with which decision (the CRD's rule is written from this)."""
    found: dict[ResourceDecision, list[str]] = {}
    for word in SETTLING_WORDS:
        decision, resolution = resource_fields(word)
        found.setdefault(decision, []).append(resolution)
    return found
