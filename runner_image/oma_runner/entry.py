"""The ``oma-runner`` command: the runner (its metrics, the store drivers) is imported once the
command runs, so that without ``oma[operator]`` it says so in one line (exit 2)."""

from __future__ import annotations

import sys

from oma.errors import MissingExtraError
from oma.extras import needs_extra


def main() -> None:
    try:
        with needs_extra("oma-runner"):
            from oma_runner.main import main as run
    except MissingExtraError as exc:
        print(f"oma-runner: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    run()
