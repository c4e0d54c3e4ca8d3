"""The ``oma-runner`` command: the runner (its metrics, the store drivers) is imported once the
command runs, so that without ``oma[operator]`` it says so in one line (exit 2)."""

from __future__ import annotations

from collections.abc import Callable

from oma.extras import run_needing_extra


def _load() -> Callable[[], None]:
    from oma_runner.main import main

    return main


def main() -> None:
    run_needing_extra("oma-runner", "operator", _load)
