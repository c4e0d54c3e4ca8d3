"""The store conformance suite, for any ``MemoryStore``: yours, run by your own pytest.

Subclass ``StoreConformance`` in a ``test_*.py`` file (the class named ``Test...``), say what
your store must declare, and tell the suite how to make one::

    import pytest
    from oma.store import StoreCapabilities
    from oma.testing import StoreConformance

    class TestMyStore(StoreConformance):
        expected_capabilities = StoreCapabilities(compare_and_set=True, expiry=True)

        @pytest.fixture(autouse=True)
        def _database(self, tmp_path):  # any pytest fixture; one state per test
            self.path = tmp_path / "db"

        async def make_store(self) -> MyStore:
            return MyStore(self.path)

pytest then collects every test of the suite on ``TestMyStore``. ``make_store`` is called at
least once per test; the first store of a test must start empty, and every store made in one
test must work on the same backing state (the suite uses a second one as a second process
would). Each store made is closed (``aclose()``, where it has one) when its test ends. The
tests are plain functions that run their ``async`` body with ``asyncio.run``: no asyncio plugin
or ``asyncio_mode`` is needed.

What it checks: the ``MemoryStore`` contract (round trips of values and metadata, copies in
and out, ``created_at`` kept by updates, ``list()`` in first-insertion order, delete and clear,
reserved keys as ordinary keys, concurrent writes, two stores over one state seeing each
other's writes); that the store declares exactly ``expected_capabilities`` and has exactly the
methods of what it declares, each working; and each optional capability it declares:
``compare_and_set`` (exact comparison, absent keys, one winner among concurrent swaps from one
store and from two, no lost increments), ``expiry`` and journals (``JournalConformance``).
A capability the store does not declare has its tests skipped, with the reason.

Requires pytest (``pip install pytest``; it is not a dependency of ``oma``). Only test code
imports this package: nothing else in ``oma`` imports it.
"""

from __future__ import annotations

import pytest

# Before the suite's modules are imported: pytest rewrites their asserts, as it does a test
# file's, so a failure shows the values compared (as langchain-tests does).
pytest.register_assert_rewrite(
    "oma.testing.harness", "oma.testing.journal_conformance", "oma.testing.store_conformance"
)

from oma.testing.harness import ConformanceHarness, StoreFactory  # noqa: E402
from oma.testing.journal_conformance import JournalConformance  # noqa: E402
from oma.testing.store_conformance import StoreConformance  # noqa: E402

__all__ = ["ConformanceHarness", "JournalConformance", "StoreConformance", "StoreFactory"]
