"""Optional dependencies: ``pip install oma`` is the engine with its file and in-memory stores
and the scripted model; each driver, SDK and the operator come with an extra. A module that
needs one is imported inside ``needs_extra``, so a missing package is one line naming the extra
to install (``MissingExtraError``), not a traceback from deep inside an import."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
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
    "mcp": "mcp",
    "mcp_types": "mcp",
    "httpx2": "mcp",
    "starlette": "console",
    "jinja2": "console",
    "sse_starlette": "console",
    "uvicorn": "console",
    "multipart": "console",
    "python_multipart": "console",
}


@contextmanager
def needs_extra(what: str, extra: str | None = None) -> Iterator[None]:
    """Imports inside it that miss a package an extra provides raise ``MissingExtraError``
    naming the extra (``what`` says what needed it: "the Redis store"; ``extra``, when given, is
    the one to name whichever package is missing: a command that needs all of ``oma[operator]``
    should not name ``oma[redis]``)."""
    try:
        yield
    except ImportError as exc:
        known = EXTRA_OF.get((exc.name or "").split(".")[0])
        if known is None or isinstance(exc, MissingExtraError):
            raise
        raise MissingExtraError.naming(extra or known, what, exc) from exc


def run_needing_extra(program: str, extra: str, load: Callable[[], Callable[[], None]]) -> None:
    """A console script's entry point: ``load()`` imports the program's main (inside
    ``needs_extra``) and it runs; a missing extra is one line on stderr and exit 2."""
    try:
        with needs_extra(program, extra):
            main = load()
    except MissingExtraError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    main()
