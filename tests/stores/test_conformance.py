"""Our stores run the published conformance suite (``oma.testing``) as a third party's would:
one subclass of ``StoreConformance``, over every backend in ``conftest.BACKENDS``, each
expected to declare what ``conftest.DECLARED`` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from oma.store import MemoryStore
from oma.testing import StoreConformance, StoreFactory
from tests.stores.conftest import BACKENDS, DECLARED


class TestConformance(StoreConformance):
    _make: StoreFactory

    @pytest.fixture(autouse=True)
    def _backend(self, backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self._make = BACKENDS[backend](request, tmp_path)
        self.expected_capabilities = DECLARED[backend]

    async def make_store(self) -> MemoryStore:
        return await self._make()
