"""``open_store(url)``: one string names any store (run specs, CLI flags, env variables).

=====================================  =========================================
``memory://``                          ``InMemoryStore()``
``file:///abs/state.json``             ``FileStore("/abs/state.json")``
``file:relative/state.json``           ``FileStore("relative/state.json")``
``redis://`` / ``rediss://``           ``RedisStore(url, namespace=...)``
``postgresql://`` / ``postgres://``    ``PostgresStore(url, table=..., schema=...)``
=====================================  =========================================

Redis and Postgres are imported only when asked for, so a memory or file store never loads
their drivers. ``redact=True`` wraps the store in a ``RedactingStore``.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from oma.errors import StoreConfigError
from oma.store.base import MemoryStore
from oma.store.file import FileStore
from oma.store.memory import InMemoryStore
from oma.store.redacting import RedactingStore
from oma.store.remote import redact_url

SCHEMES = ("memory", "file", "redis", "rediss", "postgresql", "postgres")


def open_store(
    url: str,
    *,
    namespace: str = "oma",
    table: str = "oma_store",
    schema: str | None = None,
    redact: bool = False,
) -> MemoryStore:
    """The store ``url`` names. Raises ``ValueError`` (password masked) for an unknown scheme."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    store: MemoryStore
    if scheme == "memory":
        store = InMemoryStore()
    elif scheme == "file":
        store = FileStore(_file_path(url))
    elif scheme in ("redis", "rediss"):
        from oma.store.redis import RedisStore

        store = RedisStore(url, namespace=namespace)
    elif scheme in ("postgresql", "postgres"):
        from oma.store.postgres import PostgresStore

        store = PostgresStore(url, table=table, schema=schema)
    else:
        raise StoreConfigError(
            f"unsupported store URL {redact_url(url)!r}: expected one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return RedactingStore(store) if redact else store


def _file_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise StoreConfigError(f"file store URL {url!r} names a host; use file:///absolute/path")
    path = unquote(parts.path)
    if not path:
        raise StoreConfigError(f"file store URL {url!r} has no path")
    return path
