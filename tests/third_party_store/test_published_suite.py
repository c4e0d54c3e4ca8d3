"""The published suite can fail, and is published without leaking into ``oma``.

Deliberately broken stores (``DictStore`` of ``test_dict_store.py``, copied as a third party's
module, with one fault each) run through ``oma.testing`` in a child pytest, in a directory
of its own with no plugins at all; exactly the tests their faults break must fail, the rest
pass or skip as for ``DictStore``. And nothing in ``oma`` but ``oma.testing`` imports it or
pytest, so ``import oma`` never needs pytest.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

BROKEN = '''
import asyncio

from oma.store import StoreCapabilities
from oma.testing import StoreConformance
from third_party import DictState, DictStore

DECLARED = StoreCapabilities(compare_and_set=True, expiry=True)


class SortedListStore(DictStore):
    """list() in key order, not first-insertion order."""

    async def list(self):
        return sorted(await super().list(), key=lambda entry: entry.key)


class RacyCasStore(DictStore):
    """Declares compare_and_set but reads, awaits, then writes: not atomic."""

    async def compare_and_set(self, key, expected, value, metadata=None):
        current = self.state.entries.get(key)
        await asyncio.sleep(0)
        if (current.value if current is not None else None) != expected:
            return False
        self._put(key, value, metadata, None)
        return True


class UnderdeclaredStore(DictStore):
    """Has compare_and_set but does not declare it: the suite expected it to."""

    capabilities = StoreCapabilities(expiry=True)


class TestSortedList(StoreConformance):
    expected_capabilities = DECLARED

    def setup_method(self):
        self.state = DictState()

    async def make_store(self):
        return SortedListStore(self.state)


class TestRacyCas(StoreConformance):
    expected_capabilities = DECLARED

    def setup_method(self):
        self.state = DictState()

    async def make_store(self):
        return RacyCasStore(self.state)


class TestUnderdeclared(StoreConformance):
    expected_capabilities = DECLARED

    def setup_method(self):
        self.state = DictState()

    async def make_store(self):
        return UnderdeclaredStore(self.state)
'''

CAS_TESTS = {
    "test_cas_creates_absent_key_only_once",
    "test_cas_mismatch_returns_false_and_changes_nothing",
    "test_cas_match_swaps_and_keeps_created_at",
    "test_cas_compares_exact_strings",
    "test_concurrent_cas_on_absent_key_has_exactly_one_winner",
    "test_concurrent_cas_increments_lose_no_update",
    "test_concurrent_cas_from_two_stores_has_exactly_one_winner",
    "test_cas_clears_expiry_and_keeps_position",
    "test_cas_after_delete_sees_the_key_absent",
    "test_cas_with_large_expected_value",
}
JOURNAL_TESTS = {
    "test_absent_journal_reads_none_and_is_no_entry",
    "test_appends_keep_order_and_replace_drops_them",
    "test_a_stale_or_absent_expectation_changes_nothing",
    "test_force_replaces_whatever_is_there",
    "test_delete_and_clear_remove_journals_with_entries",
    "test_racing_appends_from_one_version_have_one_winner",
    "test_racing_appends_from_two_stores_have_one_winner",
    "test_many_records_round_trip",
    "test_the_head_is_the_journal_without_its_records",
    "test_a_rebase_keeps_the_history_and_reads_from_the_new_base",
    "test_a_rebase_drops_what_retention_lets_go_and_numbers_do_not_shift",
    "test_a_rebase_that_loses_the_comparison_changes_nothing",
}


def _outcomes(report: Path) -> dict[str, dict[str, str]]:
    """class -> test -> passed | failure | error | skipped, from a JUnit XML report."""
    found: dict[str, dict[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        cls = case.get("classname", "").rsplit(".", 1)[-1]
        found.setdefault(cls, {})[case.get("name", "")] = tags[0] if tags else "passed"
    return found


def test_broken_stores_fail_exactly_the_tests_of_their_faults(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the child's rootdir: none of ours
    (tmp_path / "third_party.py").write_text((HERE / "test_dict_store.py").read_text())
    (tmp_path / "test_broken.py").write_text(textwrap.dedent(BROKEN))
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no asyncio plugin needed
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=r.xml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert child.returncode == 1, child.stdout[-3000:] + child.stderr[-3000:]  # tests failed
    outcomes = _outcomes(tmp_path / "r.xml")
    assert sorted(outcomes) == ["TestRacyCas", "TestSortedList", "TestUnderdeclared"]

    def having(cls: str, outcome: str) -> set[str]:
        return {name for name, seen in outcomes[cls].items() if seen == outcome}

    assert having("TestSortedList", "failure") == {
        "test_list_is_in_insertion_order",
        "test_reserved_keys_are_ordinary_keys_to_a_store",
        "test_delete_then_set_moves_key_to_the_end",
    }
    assert having("TestRacyCas", "failure") == {
        "test_concurrent_cas_on_absent_key_has_exactly_one_winner",
        "test_concurrent_cas_increments_lose_no_update",
        "test_concurrent_cas_from_two_stores_has_exactly_one_winner",
    }
    # What a store does not declare is not tested (its compare_and_set tests are skipped), and
    # the declaration test fails: it was expected to declare compare_and_set.
    assert having("TestUnderdeclared", "failure") == {
        "test_the_declared_capabilities_are_what_the_store_does"
    }
    assert having("TestUnderdeclared", "skipped") == JOURNAL_TESTS | CAS_TESTS
    for cls in ("TestSortedList", "TestRacyCas"):
        assert having(cls, "skipped") == JOURNAL_TESTS, cls
        assert not having(cls, "error"), cls  # the harness itself never errs
    # The suite's assertions are rewritten in a third party's pytest too: failures explain.
    assert "At index 0 diff: '0' != 'zeta'" in child.stdout, child.stdout


def _imports(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def test_nothing_in_oma_but_oma_testing_imports_it_or_pytest() -> None:
    package = SRC / "oma"
    offenders = [
        f"{path.relative_to(SRC)}: {name}"
        for path in sorted(package.rglob("*.py"))
        if (package / "testing") not in path.parents
        for name in sorted(_imports(path.read_text(encoding="utf-8")))
        if name.split(".")[0] in ("pytest", "_pytest") or name.startswith("oma.testing")
    ]
    assert not offenders, offenders


def test_importing_all_of_oma_but_oma_testing_loads_no_pytest() -> None:
    script = textwrap.dedent(
        """
        import importlib, pkgutil, sys

        def load(name):  # not pkgutil.walk_packages: it imports every package, oma.testing too
            package = importlib.import_module(name)
            for module in pkgutil.iter_modules(package.__path__, f"{name}."):
                if module.name == "oma.testing" or module.name.endswith("__main__"):
                    continue
                if module.ispkg:
                    load(module.name)
                else:
                    importlib.import_module(module.name)

        load("oma")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pytest", "_pytest"))
        assert not loaded and "oma.testing" not in sys.modules, loaded
        """
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-3000:]
