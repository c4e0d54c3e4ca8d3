"""RedactingStore: redacts values on the way in, offers expiry only if its inner store does,
and never offers compare_and_set."""

from __future__ import annotations

import re

from oma.store import (
    ExpiringRedactingStore,
    InMemoryStore,
    RedactingStore,
    RedisStore,
    open_store,
    supports_compare_and_set,
    supports_expiry,
)
from tests.plain_store import PlainStore
from tests.servers.redis_server import RedisServer
from tests.stores.conftest import unique_name

# PlainStore (tests.plain_store): the required surface only, no expiry, no CAS.


def test_never_offers_compare_and_set() -> None:
    store = RedactingStore(InMemoryStore())
    assert supports_compare_and_set(InMemoryStore())
    assert not supports_compare_and_set(store)
    assert not hasattr(store, "compare_and_set")


def test_offers_expiry_only_when_the_inner_store_does() -> None:
    expiring = RedactingStore(InMemoryStore())
    plain = RedactingStore(PlainStore())
    assert supports_expiry(expiring) and isinstance(expiring, ExpiringRedactingStore)
    assert not supports_expiry(plain) and not hasattr(plain, "set_with_expiry")
    assert isinstance(plain, RedactingStore) and isinstance(expiring, RedactingStore)


async def test_set_redacts_values_and_passes_keys_and_metadata() -> None:
    inner = InMemoryStore()
    store = RedactingStore(inner)
    await store.set("password=key", "password=hunter2", {"password": "meta stays"})
    entry = await inner.get("password=key")
    assert entry is not None and entry.value == "password=[redacted]"
    assert entry.metadata == {"password": "meta stays"}
    assert await store.get("password=key") == entry
    assert await store.list() == [entry]


async def test_set_with_expiry_redacts_too() -> None:
    inner = InMemoryStore()
    store = RedactingStore(inner)
    assert supports_expiry(store)
    await store.set_with_expiry("k", '{"apiKey": "abc", "n": 1}', 5, {"m": 1})
    entry = await inner.get("k")
    assert entry is not None
    assert (entry.value, entry.expires_at_turn) == ('{"apiKey":"[redacted]","n":1}', 5)


async def test_custom_patterns_apply_to_every_write() -> None:
    inner = InMemoryStore()
    store = RedactingStore(inner, patterns=[re.compile(r"EMP-\d+"), r"acct#\w+"])
    await store.set("k", "EMP-1 EMP-22 acct#x")
    await store.set("j", '{"note": "EMP-3"}')
    assert [e.value for e in await inner.list()] == [
        "[redacted] [redacted] [redacted]",
        '{"note":"[redacted]"}',
    ]


async def test_delete_and_clear_pass_through() -> None:
    inner = InMemoryStore()
    store = RedactingStore(inner)
    await inner.set("a", "1")
    await inner.set("b", "2")
    await store.delete("a")
    assert [e.key for e in await inner.list()] == ["b"]
    await store.clear()
    assert await inner.list() == []


async def test_over_redis_through_open_store(redis_server: RedisServer) -> None:
    store = open_store(redis_server.url, namespace=unique_name("redact"), redact=True)
    assert isinstance(store, ExpiringRedactingStore)
    assert not supports_compare_and_set(store)
    await store.set("k", "Authorization: Bearer abcdefghij")
    entry = await store.get("k")
    assert entry is not None and entry.value == "Authorization: [redacted]"
    assert isinstance(store.inner, RedisStore)
    await store.aclose()


class _ClosableStore(InMemoryStore):
    closed = False

    async def aclose(self) -> None:
        self.closed = True


async def test_aclose_closes_the_wrapped_store() -> None:
    inner = _ClosableStore()
    await RedactingStore(inner).aclose()
    assert inner.closed
    await RedactingStore(InMemoryStore()).aclose()  # a store without connections: nothing to do
