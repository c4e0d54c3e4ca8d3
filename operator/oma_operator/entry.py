"""The ``oma-operator`` command: the operator (kopf, kr8s, the store drivers) is imported once the
command runs, so that without ``oma[operator]`` it says so in one line (exit 2)."""

from __future__ import annotations

import sys

from oma.errors import MissingExtraError
from oma.extras import needs_extra


def main() -> None:
    try:
        with needs_extra("oma-operator"):
            from oma_operator.main import main as operate
    except MissingExtraError as exc:
        print(f"oma-operator: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    operate()
