"""The operator's store cache against a real Redis: TeamRuns that each keep their checkpoints
under a Redis key namespace of their own share one client (one connection pool) per server,
instead of each holding a pool for the operator's lifetime."""

from __future__ import annotations

import pytest

from oma.store.redis import RedisStore
from oma_operator import stores
from oma_operator.stores import StoreCache
from tests.servers.redis_server import RedisServer


async def test_key_namespaces_on_one_server_share_its_client_and_stay_apart(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stores, "NAMESPACES_KEPT", 3)
    cache = StoreCache()
    try:
        made = [cache._redis_store(redis_server.url, f"run-{i}") for i in range(5)]
        assert all(isinstance(s, RedisStore) for s in made)
        clients = {id(s._client) for s in made if isinstance(s, RedisStore)}
        assert len(clients) == 1  # one pool for the server
        assert len(cache._namespaces) == 3  # the three seen last are kept
        assert cache._redis_store(redis_server.url, "run-4") is made[4]
        await made[0].set("k", "zero")
        await made[1].set("k", "one")
        assert (await made[0].get("k")).value == "zero"  # type: ignore[union-attr]
        assert (await made[1].get("k")).value == "one"  # type: ignore[union-attr]
        # A namespace's store gone from the cache reads what it wrote, through a new object.
        again = cache._redis_store(redis_server.url, "run-0")
        assert again is not made[0] and (await again.get("k")).value == "zero"  # type: ignore[union-attr]
        derived = made[2]
        assert isinstance(derived, RedisStore)
        await derived.aclose()  # a derived store owns no client: the others keep working
        assert (await made[1].get("k")).value == "one"  # type: ignore[union-attr]
        await made[0].delete("k")
        await made[1].delete("k")
    finally:
        await cache.close()
