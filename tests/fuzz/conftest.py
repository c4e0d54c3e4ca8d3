"""Hypothesis profile of the fuzz suite and the per-target case counts in the summary.

``OMA_FUZZ_PROFILE`` picks the profile (``ci`` by default); ``OMA_FUZZ_EXAMPLES`` sets the
number of examples of every property (see ``tally.examples``), e.g. 5000 for a long local run.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from tests.fuzz import tally

# No deadline: CI machines are slow and noisy; the per-test timeout (120 s) still bounds a hang.
# No example database: CI starts clean, and the repo stays free of .hypothesis files.
settings.register_profile(
    "ci",
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Local bug hunting: remembers failing examples between runs.
settings.register_profile(
    "dev",
    parent=settings.get_profile("ci"),
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
)
settings.load_profile(os.environ.get("OMA_FUZZ_PROFILE", "ci"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not tally.COUNTS:
        return
    terminalreporter.section("fuzz cases run")
    for line in tally.summary_lines():
        terminalreporter.write_line(line)
