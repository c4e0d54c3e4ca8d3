"""The Python API reference: HTML for the public names of ``oma`` and the subpackages a user
imports from, built by pdoc from the docstrings (``hack/api-reference``).

Every warning fails the build (a name in ``__all__`` that does not resolve, an annotation that
cannot be read): the test command builds it (``tests/unit/test_api_reference.py``).
"""

from __future__ import annotations

import gc
import importlib
import sys
import warnings
from pathlib import Path

# oma and the subpackages a user imports from (tests/unit/test_public_api.py checks each).
MODULES = [
    "oma",
    "oma.agent",
    "oma.approval",
    "oma.budget",
    "oma.checkpoint",
    "oma.journal",
    "oma.llm",
    "oma.memory",
    "oma.orchestrator",
    "oma.replay",
    "oma.store",
    "oma.tasks",
    "oma.testing",
    "oma.tools",
]


def build(output: Path) -> list[str]:
    """Write the reference under ``output``; the warnings pdoc gave (none is the goal)."""
    import pdoc  # the dev extra's; imported here so this module loads without it

    for name in MODULES:  # lazy names (oma.store's backends) resolve like any other
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", []):
            getattr(module, public)
    # A process that ran other tests first (the test command's) may still hold their unclosed
    # sockets: collected during the build, they would warn here, though pdoc opened none.
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=output)
    return [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if not issubclass(w.category, ResourceWarning)
    ]


def main() -> int:
    output = Path(sys.argv[1] if len(sys.argv) > 1 else "build/api")
    problems = build(output)
    for problem in problems:
        print(f"api-reference: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"wrote {output}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
