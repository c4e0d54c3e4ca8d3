"""The one table of decision words (``oma.approval.words``): the ledger, the CLI, the operator's
resources and the CRD's rule all read it, so a word means the same everywhere."""

from __future__ import annotations

import pytest

from oma.approval.words import (
    SETTLING_WORDS,
    WORDS,
    resolutions_by_decision,
    resource_fields,
    word_of,
)
from oma_operator.resources.crdgen import approvaldecision_crd


@pytest.mark.parametrize("word", SETTLING_WORDS)
def test_a_settling_word_round_trips_through_a_resource(word: str) -> None:
    decision, resolution = resource_fields(word)  # type: ignore[arg-type]
    assert word_of("uncertain_tool_call", decision, resolution) == word


@pytest.mark.parametrize(
    ("decision", "resolution", "word"),
    [
        ("Approved", None, "retry"),
        ("Rejected", None, "failed"),  # Rejected without a resolution records failed
        ("Rejected", "Done", "done"),
    ],
)
def test_an_uncertain_call_resource_without_or_with_a_resolution(
    decision: str, resolution: str | None, word: str
) -> None:
    assert word_of("uncertain_tool_call", decision, resolution) == word


def test_other_scopes_take_approve_or_reject_and_mean_the_same_verdicts() -> None:
    assert word_of("tool_call", "Approved", None) == "approve"
    assert word_of("plan", "Rejected", "Done") == "reject"
    assert WORDS["approve"].verdict == WORDS["retry"].verdict == "approved"
    assert {WORDS[w].verdict for w in ("reject", "done", "failed")} == {"rejected"}
    assert SETTLING_WORDS == ("retry", "done", "failed")


def test_the_crd_rule_is_written_from_the_table() -> None:
    assert resolutions_by_decision() == {"Approved": ["Retry"], "Rejected": ["Done", "Failed"]}
    version = approvaldecision_crd()["spec"]["versions"][0]
    rules = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    (rule,) = [r for r in rules if "self.resolution in" in r["rule"]]
    assert "(self.decision == 'Approved' && self.resolution in ['Retry'])" in rule["rule"]
    assert "(self.decision == 'Rejected' && self.resolution in ['Done', 'Failed'])" in rule["rule"]
