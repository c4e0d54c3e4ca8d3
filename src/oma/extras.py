"""Optional dependencies: ``pip install oma`` is the engine with its file and in-memory stores
and the scripted model; each driver, SDK and the operator come with an extra. A module that
needs one is imported inside ``needs_extra``, so a missing package is one line naming the extra
to install (``MissingExtraError``), not a traceback from deep inside an import."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from oma.errors import MissingExtraError

# Top-level package -> the extra that installs it (pyproject.toml [project.optional-dependencies]).
EXTRA_OF = {
    "redis": "redis",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "anthropic": "anthropic",
    "openai": "openai",
    "kopf": "operator",
    "kr8s": "operator",
    "httpx": "operator",
    "prometheus_client": "operator",
    "opentelemetry": "otel",
}


@contextmanager
def needs_extra(what: str) -> Iterator[None]:
    """Imports inside it that miss a package an extra provides raise ``MissingExtraError``
    naming the extra (``what`` says what needed it: "the Redis store")."""
    try:
        yield
    except ImportError as exc:
        extra = EXTRA_OF.get((exc.name or "").split(".")[0])
        if extra is None or isinstance(exc, MissingExtraError):
            raise
        raise MissingExtraError.naming(extra, what, exc) from exc
