"""docs/metrics.md lists exactly the series the operator and the runners export.

The documented side is parsed from the page's two tables (name, type, label names and values);
the exported side is read from prometheus_client: the families that ``OperatorMetrics`` and
``RunnerMetrics`` register in a registry of their own, and the operator's module-level
``METRICS`` in the default registry it serves. A series documented but not exported, exported
but not documented, or with another type, label or label value fails here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

from oma.budget.state import BudgetReport
from oma.orchestrator.events import OrchestratorEvent
from oma_operator.election.elector import LeaderGauge
from oma_operator.runs import metrics as operator_metrics
from oma_runner import metrics as runner_metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
SECTIONS = {"operator": "## The operator", "runners": "## The runners"}
# The samples each family type exposes in the text format, by suffix of the family's name
# (``_created`` is the creation time prometheus_client adds to counters and histograms).
SAMPLE_SUFFIXES = {
    "counter": {"_total", "_created"},
    "gauge": {""},
    "histogram": {"_bucket", "_count", "_sum", "_created"},
}


UNKNOWN: tuple[tuple[str, frozenset[str]], ...] = (("?", frozenset()),)


@dataclass(frozen=True)
class Series:
    name: str  # as documented and queried: counters with ``_total``, histograms without suffix
    type: str
    labels: tuple[tuple[str, frozenset[str]], ...]  # (label, its values), sorted by label


def documented(text: str, heading: str) -> dict[str, Series]:
    """The rows of the ``| Series | Type | Labels | Meaning |`` table under ``heading``."""
    section = text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    found: dict[str, Series] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        name = re.fullmatch(r"`([a-z_:][a-z0-9_:]*)`", cells[0])
        assert name is not None, f"not a series name: {cells[0]!r}"
        labels = []
        for part in filter(None, (p.strip() for p in cells[2].split(";"))):
            label, _, values = part.partition(":")
            labels.append((label.strip().strip("`"), frozenset(re.findall(r"`([^`]+)`", values))))
        assert name[1] not in found, f"{name[1]} documented twice"
        found[name[1]] = Series(name[1], cells[1], tuple(sorted(labels)))
    return found


def exported(families: list[Metric]) -> dict[str, Series]:
    """The series of ``families`` under their documented names, with the label values their
    samples carry (every labelled series is initialised for each value it can take)."""
    found: dict[str, Series] = {}
    for family in families:
        if not family.samples:  # a series per tenant, none yet: labels unknown, name and type
            name = family.name + ("_total" if family.type == "counter" else "")
            found[name] = Series(name, family.type, UNKNOWN)
            continue
        suffixes = {sample.name.removeprefix(family.name) for sample in family.samples}
        assert suffixes == SAMPLE_SUFFIXES[family.type], (family.name, suffixes)
        values: dict[str, set[str]] = {}
        for sample in family.samples:
            for label, value in sample.labels.items():
                if label != "le":
                    values.setdefault(label, set()).add(value)
        name = family.name + ("_total" if family.type == "counter" else "")
        labels = tuple(sorted((label, frozenset(v)) for label, v in values.items()))
        found[name] = Series(name, family.type, labels)
    return found


def differences(doc: dict[str, Series], code: dict[str, Series]) -> list[str]:
    """A label documented without values (e.g. a model's name) takes any value."""
    code = {name: _free_as_documented(series, doc.get(name)) for name, series in code.items()}
    problems = [f"documented but not exported: {name}" for name in sorted(doc.keys() - code)]
    problems += [f"exported but not documented: {name}" for name in sorted(code.keys() - doc)]
    problems += [
        f"{name}: documented {doc[name]}, exported {code[name]}"
        for name in sorted(doc.keys() & code.keys())
        if doc[name] != code[name]
    ]
    return problems


def _free_as_documented(series: Series, documented: Series | None) -> Series:
    if documented is None:
        return series
    if series.labels == UNKNOWN:
        return documented
    free = {label for label, values in documented.labels if not values}
    labels = tuple((label, frozenset() if label in free else v) for label, v in series.labels)
    return Series(series.name, series.type, labels)


def _operator_families() -> list[Metric]:
    """With a TeamRun that has a budget of every kind: the budget series have samples only
    once a namespace's run was seen."""
    registry = CollectorRegistry()
    metrics = operator_metrics.OperatorMetrics(registry)
    budget = {
        "limits": {"tokens": 100, "modelCalls": 5, "toolCalls": 9},
        "spent": {"inputTokens": 30, "outputTokens": 5, "modelCalls": 2, "toolCalls": 1},
    }
    body: Any = {"metadata": {"uid": "u1", "namespace": "team-a"}, "status": {"budget": budget}}
    metrics.teamrun_seen(body, "ADDED")
    LeaderGauge(registry)  # leader election's series, on the same endpoint
    return list(registry.collect())


def _runner_families() -> list[Metric]:
    """With one model call that worked and one that failed: the model series have samples
    only once a provider and model were seen."""
    registry = CollectorRegistry()
    metrics = runner_metrics.RunnerMetrics(registry)
    for error in (None, "LLMError"):
        data = {"provider": "scripted", "model": "m", "seconds": 0.1, "inputTokens": 3,
                "outputTokens": 1, "error": error}  # fmt: skip
        metrics.on_progress(OrchestratorEvent("model_call", "w", "t", data))
    report = BudgetReport.model_validate(
        {"limits": {"tokens": 100, "modelCalls": 5, "toolCalls": 9}, "spent": {"modelCalls": 2}}
    )
    metrics.on_progress(OrchestratorEvent("budget", data={"report": report}))
    return list(registry.collect())


@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text()


def test_operator_series_are_the_documented_ones(doc_text: str) -> None:
    doc = documented(doc_text, SECTIONS["operator"])
    assert len(doc) >= 8  # the parser found the table
    assert differences(doc, exported(_operator_families())) == []


def test_runner_series_are_the_documented_ones(doc_text: str) -> None:
    doc = documented(doc_text, SECTIONS["runners"])
    assert len(doc) >= 3
    assert differences(doc, exported(_runner_families())) == []


def test_the_operator_serves_the_same_series_from_the_default_registry(doc_text: str) -> None:
    """``METRICS`` (what the handlers update) is in the registry ``serve()`` exposes by default,
    and no other ``oma_*`` family is (the rest are the library's process and platform ones)."""
    served = [family for family in REGISTRY.collect() if family.name.startswith("oma_")]
    doc = documented(doc_text, SECTIONS["operator"])
    assert differences(doc, exported(served)) == []
    assert operator_metrics.METRICS.teamruns is not None


def test_a_renamed_or_missing_series_is_reported() -> None:
    """The comparison catches each kind of drift (so the tests above can fail)."""
    text = (
        "## The operator\n\n| Series | Type | Labels | Meaning |\n|---|---|---|---|\n"
        "| `oma_teamruns` | gauge | `phase`: `Pending`, `Running` | x |\n"
        "| `oma_gone_total` | counter | | y |\n"
        "| `oma_reported_checkpoint_saves_total` | histogram | | z |\n"
    )
    doc = documented(text, "## The operator")
    code = exported(_operator_families())
    problems = differences(doc, code)
    assert "documented but not exported: oma_gone_total" in problems
    assert "exported but not documented: oma_attempts_total" in problems
    assert any(p.startswith("oma_teamruns: documented") for p in problems)  # label values
    assert any(p.startswith("oma_reported_checkpoint_saves_total: documented") for p in problems)
