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

``open_secret_store(url, where, ...)`` is for a URL read from a secret (a Kubernetes Secret, the
env variable a Secret fills): it opens only the schemes its caller allows (a TeamRun's store is
``redis(s)://`` or ``postgres(ql)://``, never ``file://`` or ``memory://``), and its errors say
where the URL came from and what is wrong with it, but show nothing of it, not even a part (the
value may be a bare password), nor chain to an error that would.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from oma.errors import StoreConfigError
from oma.extras import needs_extra
from oma.store.base import MemoryStore
from oma.store.file import FileStore
from oma.store.memory import InMemoryStore
from oma.store.names import POSTGRES_IDENTIFIER, REDIS_NAMESPACE
from oma.store.redacting import RedactingStore
from oma.store.remote import encode_password, redact_url

SCHEMES = ("memory", "file", "redis", "rediss", "postgresql", "postgres")
REDIS_SCHEMES = ("redis", "rediss")
POSTGRES_SCHEMES = ("postgresql", "postgres")
# What a TeamRun's store may be: a server both the operator and the runner pod reach.
TEAMRUN_SCHEMES = (*REDIS_SCHEMES, *POSTGRES_SCHEMES)

_SCHEME_NAME = re.compile(r"[a-z][a-z0-9+.-]*")
# The store options a URL's query may hold, by scheme, with what each must look like.
_OPTIONS = {
    "redis": {"namespace": (REDIS_NAMESPACE, "Redis key namespace (non-empty, no braces)")},
    "postgresql": {
        name: (POSTGRES_IDENTIFIER, "PostgreSQL name (1-48 letters, digits or '_', no digit first)")
        for name in ("table", "schema")
    },
}


def open_store(
    url: str,
    *,
    namespace: str | None = None,
    table: str | None = None,
    schema: str | None = None,
    redact: bool = False,
    read_only: bool = False,
    schemes: Sequence[str] = SCHEMES,
) -> MemoryStore:
    """The store ``url`` names. Raises ``StoreConfigError`` (password masked) for a scheme not
    among ``schemes`` or an option given twice. ``read_only``: for a caller that only reads,
    so nothing is created on its behalf (a PostgreSQL table is checked, never migrated)."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in schemes:
        scheme = ""  # refused below
    store: MemoryStore
    if scheme == "memory":
        store = InMemoryStore()
    elif scheme == "file":
        store = FileStore(_file_path(url))
    elif scheme in ("redis", "rediss"):
        with needs_extra("the Redis store"):
            from oma.store.redis import RedisStore

        url, options = _take_options(url, {"namespace": namespace})
        store = RedisStore(url, namespace=options["namespace"] or "oma")
    elif scheme in ("postgresql", "postgres"):
        with needs_extra("the PostgreSQL store"):
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
            + ", ".join(f"{s}://" for s in schemes)
        )
    return RedactingStore(store) if redact else store


def open_secret_store(
    url: str,
    where: str,
    *,
    schemes: Sequence[str],
    user: str,
    namespace: str | None = None,
    table: str | None = None,
    schema: str | None = None,
    redact: bool = False,
    read_only: bool = False,
) -> MemoryStore:
    """``open_store`` for a URL read from a secret: ``where`` names the secret (``Secret
    ns/name key url``, ``$OMA_STORE_URL``), ``user`` what uses the store (``a TeamRun's redis
    store``). Only ``schemes`` are opened. A ``StoreConfigError`` says where the URL came from
    and what is wrong with it in words that quote nothing of it, and chains to nothing
    (whatever the driver raised may quote the value). Surrounding whitespace (the newline
    ``echo`` leaves in a Secret) is not part of the URL."""
    url = url.strip()
    given = {"namespace": namespace, "table": table, "schema": schema}
    problem = url_problem(url, schemes, user, given)
    if problem is None:
        try:
            return open_store(url, redact=redact, read_only=read_only, schemes=schemes, **given)
        except Exception as exc:  # any driver's message may quote the URL: not shown
            problem = (
                f"cannot be opened: {type(exc).__name__} (its message is not shown, as it may "
                "quote the URL; check the URL's query parameters)"
            )
    raise StoreConfigError(f"the store URL in {where} {problem}")  # outside except: no chain


def url_problem(
    url: str, schemes: Sequence[str], user: str, given: dict[str, str | None]
) -> str | None:
    """What is wrong with a store URL read from a secret, in words that quote nothing of it
    (schemes oma knows are named; anything else of the URL is not); None: nothing found.
    ``given``: the store options given beside the URL (``namespace``, ``table``, ``schema``),
    which the URL's query may repeat but not contradict."""
    allowed = _listed([f"{s}://" for s in schemes])
    if not url:
        return f"is empty: give a {allowed} URL"
    scheme, found, _ = url.partition("://")
    scheme = scheme.lower()
    if not found or not _SCHEME_NAME.fullmatch(scheme):
        return (
            f"is not a URL (no scheme://): give a {allowed} URL (is it a password or a host "
            "where the whole URL belongs?)"
        )
    if scheme not in schemes:
        if scheme in SCHEMES:
            return f"has scheme {scheme!r}, which {user} may not use; use {allowed}"
        return f"is not a {allowed} URL"
    if not _ports_are_numbers(url):
        return "has a port that is not a number from 0 to 65535"
    kind = "redis" if scheme in REDIS_SCHEMES else "postgresql"
    options = _OPTIONS.get(kind, {})
    for name, value in _query_options(url, options):
        pattern, what = options[name]
        if not re.fullmatch(pattern, value):
            return f"has a ?{name}= that is not a {what}"
        if given.get(name) is not None and given[name] != value:
            return (
                f"sets ?{name}= to another {name} than the one given beside it (the store's "
                f"{name} field): give it in one place, or the same value in both"
            )
    return None


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _hosts(url: str) -> str:
    """The host part of a URL with credentials found as the stores find them (by position)."""
    netloc = urlsplit(encode_password(url)).netloc
    return netloc.rpartition("@")[2]


def _ports_are_numbers(url: str) -> bool:
    """Whether every port of the URL's hosts (``h1:5432,h2:5433`` for libpq) is a number."""
    for host in _hosts(url).split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" not in port:
            continue
        digits = port.rpartition(":")[2]
        if digits and not (digits.isascii() and digits.isdigit() and int(digits) <= 65535):
            return False
    return True


def _query_options(url: str, options: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """The store options (among ``options``) in the URL's query, found as ``_take_options``
    finds them."""
    at = url.rfind("@")
    mark = url.find("?", at + 1 if at >= 0 else 0)
    if mark < 0:
        return []
    query = url[mark + 1 :].split("#", 1)[0]
    return [(n, v) for n, v in parse_qsl(query, keep_blank_values=True) if n in options]


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
