"""Tests import what they share from helper modules, never from another ``test_*.py`` file.

A test module imported by another one is a hidden dependency between suites (moving or
deleting a test breaks an unrelated one), and any test function it brings along by name would
be collected twice. Shared helpers, constants and fixtures live in modules not named ``test_*``
(``helpers.py``, ``*_kit.py``, ``*_fixtures.py``, ``conftest.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(source: str) -> list[tuple[int, str]]:
    """(line, what) for each import in ``source`` that names a ``test_*`` module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            where = "." * node.level + (node.module or "")
            if node.module is not None and _is_test_module(node.module):
                found.append((node.lineno, where))
            else:  # from tests.cluster import test_operator_e2e; from . import test_x
                found += [
                    (node.lineno, f"{where}.{a.name}" if node.module else f"{where}{a.name}")
                    for a in node.names
                    if a.name.startswith("test_")
                ]
    return sorted(found)


def test_the_finder_sees_every_form_of_import() -> None:
    source = "\n".join(
        [
            "import tests.cluster.test_operator_e2e",
            "import tests.cluster.helpers, tests.unit.test_cli as cli",
            "from tests.cluster.test_operator_e2e import teamrun",
            "from tests.cluster import test_operator_e2e",
            "from .test_openai_adapter import call",
            "from . import test_openai_adapter",
            "from ..engine.test_approval_ledger import (\n    NoCasStore,\n)",
            "def f() -> None:\n    from tests.runner.test_runner_process import _env",
            "import tests.cluster.helpers",
            "from tests.engine.helpers import ToolLog",
            "from tests.cluster.operator_kit import teamrun",
            "from . import helpers",
            "import pytest_asyncio",
        ]
    )
    assert imports_of_test_modules(source) == [
        (1, "tests.cluster.test_operator_e2e"),
        (2, "tests.unit.test_cli"),
        (3, "tests.cluster.test_operator_e2e"),
        (4, "tests.cluster.test_operator_e2e"),
        (5, ".test_openai_adapter"),
        (6, ".test_openai_adapter"),
        (7, "..engine.test_approval_ledger"),
        (11, "tests.runner.test_runner_process"),
    ]


def test_no_test_file_imports_another_test_module() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100  # the whole suite was searched
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: imports {module}"
        for path in files
        for line, module in imports_of_test_modules(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "move what these share into a helper module:\n" + "\n".join(offenders)
