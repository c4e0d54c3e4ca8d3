"""``close_store`` closes what is a ``ClosableStore`` (an ``aclose()``) and leaves the rest."""

from __future__ import annotations

from oma.store import ClosableStore, InMemoryStore, PrefixedStore
from oma.store.base import close_store


class _Pool(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_a_closable_store_is_closed_once_and_through_its_wrapper() -> None:
    pool = _Pool()
    assert isinstance(pool, ClosableStore)
    await close_store(pool)
    wrapped = PrefixedStore(pool, "t/")
    assert isinstance(wrapped, ClosableStore)
    await close_store(wrapped)
    assert pool.closed == 2


async def test_a_store_without_aclose_holds_nothing_to_close() -> None:
    plain = InMemoryStore()
    assert not isinstance(plain, ClosableStore)
    await close_store(plain)  # nothing to do, nothing raised
    await close_store(object())
