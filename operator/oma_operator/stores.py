"""The stores TeamRuns checkpoint into, opened once per store and shared by all the operator's
reads (approval rows, progress), with the Secret that locates them re-read once a minute.

Opening a store per read cost a Secret GET and a new connection each time: a busy operator
spent a seventh of its CPU on it (bench/operator_scale.py). A rotated Secret is picked up
within ``settings.secret_ttl_seconds`` (``OMA_SECRET_TTL_SECONDS``, default 60); the store it
pointed to before stays open until shutdown.

The Secret's value is a secret whatever it holds (a key may hold a bare password instead of a
URL): it is opened only as a ``redis(s)://`` URL for a redis store and a ``postgres(ql)://`` one
for a postgres store (never ``file://`` or ``memory://``: the runner pod could not share them),
a problem with it is a ``StoreConfigError`` that names the Secret and key but shows nothing of
the value (``oma.store.urls.open_secret_store``), and every value read is remembered by
``masking``, which masks it in the operator's conditions, Events and logs.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from oma.errors import StoreConfigError
from oma.store.base import MemoryStore, close_store
from oma.store.prefixed import PrefixedStore, tenant_prefix
from oma.store.redis import RedisStore
from oma.store.urls import POSTGRES_SCHEMES, REDIS_SCHEMES, open_secret_store
from oma_operator import masking, runtime
from oma_operator.k8s.client import Kube
from oma_operator.resources.models import TeamRunSpec

NAMESPACES_KEPT = 1024  # Redis key namespaces whose store objects are kept


class StoreCache:
    def __init__(self, secret_ttl: float | None = None) -> None:
        self._given_ttl = secret_ttl  # None: the operator's settings.secret_ttl_seconds
        self._secrets: dict[tuple[str, str, str], tuple[float, str]] = {}
        self._stores: dict[tuple[str, ...], MemoryStore] = {}  # the ones that own a client
        self._namespaces: OrderedDict[tuple[str, str], RedisStore] = OrderedDict()
        self._lock = asyncio.Lock()

    async def store_of(self, kube: Kube, namespace: str, spec: TeamRunSpec) -> MemoryStore:
        """The namespace's part of a TeamRun's (shared) store, as its runner sees it; callers
        must not close it. ``StoreConfigError`` (naming the Secret, showing none of its value)
        for a value that is not a URL of the store's kind."""
        if spec.store.redis is not None:
            redis = spec.store.redis
            ref = redis.url_secret_ref
            url = await self._secret(kube, namespace, ref.name, ref.key)
            where = _where(namespace, ref.name, ref.key)
            async with self._lock:
                store = self._redis_store(url, redis.namespace, where)
        else:
            assert spec.store.postgres is not None  # the CRD requires exactly one store
            pg = spec.store.postgres
            ref = pg.dsn_secret_ref
            dsn = await self._secret(kube, namespace, ref.name, ref.key)
            key = ("postgres", dsn, pg.table, pg.schema_name or "")
            async with self._lock:
                store = self._stores.get(key) or open_secret_store(
                    dsn,
                    _where(namespace, ref.name, ref.key),
                    schemes=POSTGRES_SCHEMES,
                    user="a TeamRun's postgres store",
                    table=pg.table,
                    schema=pg.schema_name,
                )
                self._stores[key] = store
        return PrefixedStore(store, tenant_prefix(namespace))

    def _redis_store(self, url: str, namespace: str, where: str = "the URL") -> MemoryStore:
        """One client (connection pool) per server URL, shared by every key namespace on it:
        TeamRuns that each keep their checkpoints under a namespace of their own do not each
        hold a pool. Stores of the namespaces seen last are kept (they hold no connection).
        ``where``: the Secret the URL came from, for errors."""
        server = self._stores.get(("redis", url))
        if not isinstance(server, RedisStore):
            server = open_secret_store(
                url,
                where,
                schemes=REDIS_SCHEMES,
                user="a TeamRun's redis store",
                namespace=namespace,
            )
            assert isinstance(server, RedisStore)
            self._stores[("redis", url)] = server
        store = self._namespaces.pop((url, namespace), None) or server.in_namespace(namespace)
        self._namespaces[(url, namespace)] = store  # now the most recent
        while len(self._namespaces) > NAMESPACES_KEPT:
            self._namespaces.popitem(last=False)
        return store

    def forget_secrets(self, namespace: str) -> None:
        """Read the namespace's store Secrets again at their next use (one may have been
        fixed since it was read: a store that could not be opened is tried afresh)."""
        for cached in [k for k in self._secrets if k[0] == namespace]:
            del self._secrets[cached]

    async def close(self) -> None:
        self._namespaces.clear()
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await close_store(store)

    async def _secret(self, kube: Kube, namespace: str, name: str, key: str) -> str:
        cached = self._secrets.get((namespace, name, key))
        now = time.monotonic()
        ttl = self._given_ttl or runtime.settings().secret_ttl_seconds
        if cached is not None and now - cached[0] < ttl:
            return cached[1]
        try:
            value = await kube.secret_value(namespace, name, key)
        except UnicodeDecodeError:  # its message quotes a byte of the value
            raise StoreConfigError(
                f"the value in {_where(namespace, name, key)} is not UTF-8 text"
            ) from None
        masking.remember(value)
        self._secrets[(namespace, name, key)] = (now, value)
        return value


def _where(namespace: str, name: str, key: str) -> str:
    return f"Secret {namespace}/{name} key {key}"


STORES = StoreCache()
