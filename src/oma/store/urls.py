"""``open_store(url)``: one string names any store (run specs, CLI flags, env variables).

=====================================  =========================================
``memory://``                          ``InMemoryStore()``
``file:///abs/state.json``             ``FileStore("/abs/state.json")``
``file:relative/state.json``           ``FileStore("relative/state.json")``
``redis://`` / ``rediss://``           ``RedisStore(url, namespace=...)``
``postgresql://`` / ``postgres://``    ``PostgresStore(url, table=..., schema=...)``
=====================================  =========================================

The store's own options can ride in the URL's query, so one string (a ``--store`` flag, an
env variable) names them too: ``redis://host/0?namespace=team-a``,
``postgresql://host/db?schema=runs&table=oma_store``. They are taken out of the URL before the
driver sees it; the same option given twice (in the URL and as an argument, such as a run
spec's field) with two values is refused, and the defaults (namespace ``oma``, table
``oma_store``) apply only when neither gives one. Redis and Postgres are imported only when
asked for, so a memory or file store never loads their drivers. ``redact=True`` wraps the store
in a ``RedactingStore``.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

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
    namespace: str | None = None,
    table: str | None = None,
    schema: str | None = None,
    redact: bool = False,
    read_only: bool = False,
) -> MemoryStore:
    """The store ``url`` names. Raises ``StoreConfigError`` (password masked) for an unknown
    scheme or an option given twice. ``read_only``: for a caller that only reads, so nothing
    is created on its behalf (a PostgreSQL table is checked, never migrated)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    store: MemoryStore
    if scheme == "memory":
        store = InMemoryStore()
    elif scheme == "file":
        store = FileStore(_file_path(url))
    elif scheme in ("redis", "rediss"):
        from oma.store.redis import RedisStore

        url, options = _take_options(url, {"namespace": namespace})
        store = RedisStore(url, namespace=options["namespace"] or "oma")
    elif scheme in ("postgresql", "postgres"):
        from oma.store.postgres import PostgresStore

        url, options = _take_options(url, {"table": table, "schema": schema})
        store = PostgresStore(
            url,
            table=options["table"] or "oma_store",
            schema=options["schema"],
            migrate=not read_only,
        )
    else:
        raise StoreConfigError(
            f"unsupported store URL {redact_url(url)!r}: expected one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return RedactingStore(store) if redact else store


def _take_options(url: str, given: dict[str, str | None]) -> tuple[str, dict[str, str | None]]:
    """``url`` without the store options in its query, and the options (URL or argument).
    The query is what follows the first ``?`` after the credentials, which may hold any
    character; a URL without those options is returned unchanged."""
    at = url.rfind("@")
    mark = url.find("?", at + 1 if at >= 0 else 0)
    if mark < 0:
        return url, dict(given)
    head, query = url[:mark], url[mark + 1 :]
    fragment = ""
    if "#" in query:
        query, fragment = query.split("#", 1)
        fragment = "#" + fragment
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(name in given for name, _ in pairs):
        return url, dict(given)
    options = dict(given)
    kept: list[tuple[str, str]] = []
    for name, value in pairs:
        if name not in given:
            kept.append((name, value))
            continue
        if given[name] is not None and given[name] != value:
            raise StoreConfigError(
                f"store URL {redact_url(url)!r} sets {name}={value!r} but {name}="
                f"{given[name]!r} was also given (by a run spec's store field, or an argument "
                "of open_store); give it in one place, or the same value in both"
            )
        options[name] = value
    rest = f"?{urlencode(kept)}" if kept else ""
    return f"{head}{rest}{fragment}", options


def _file_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise StoreConfigError(f"file store URL {url!r} names a host; use file:///absolute/path")
    path = unquote(parts.path)
    if not path:
        raise StoreConfigError(f"file store URL {url!r} has no path")
    return path
