"""What the store-reading commands share: the ``--store`` option, opening and closing the store,
turning typed errors into one line and a documented exit code, and ``-o table|json|yaml``."""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from oma.errors import OmaError
from oma.store.base import MemoryStore, close_store
from oma.store.prefixed import PrefixedStore, tenant_prefix
from oma.store.urls import open_store
from oma.visible import visible, visible_json

T = TypeVar("T")
EXIT_BAD_INPUT = 2
STORE_ENV = "OMA_STORE_URL"
TENANT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help=f"Store URL (memory://, file://, redis://, postgresql://); default ${STORE_ENV}.",
    ),
]
TenantOption = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        help="Only this tenant's part of the store: for a TeamRun, its Kubernetes namespace.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output (-o json).")]


class Format(StrEnum):
    """What ``-o`` prints."""

    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[
    Format,
    typer.Option("--output", "-o", help="table (for a person, the default), json or yaml."),
]


def output_format(as_json: bool, output: Format | str) -> str:
    """The format asked for: ``--json`` is ``-o json``."""
    return "json" if as_json else Format(output).value


def print_document(document: Any, fmt: str) -> None:
    """``document`` as JSON or YAML on stdout. What a store held may hide characters that drive
    a terminal: JSON gets them as escapes (``visible_json``), YAML as its own (ASCII only)."""
    if fmt == "yaml":
        typer.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=False), nl=False)
        return
    typer.echo(visible_json(json.dumps(document, indent=2, ensure_ascii=False, default=str)))


# Errors go to stderr so that ``--json`` and ``export`` output on stdout stays parseable.
errors = Console(stderr=True, highlight=False, soft_wrap=True)

ExitCodes = Sequence[tuple[type[Exception], int]]


def with_store(
    url: str | None,
    action: Callable[[MemoryStore], Awaitable[T]],
    *,
    exit_codes: ExitCodes = (),
    fallback_url: str | None = None,
    tenant: str | None = None,
    read_only: bool = False,
) -> T:
    """Run ``action`` on the store; an error becomes one line and an exit code.

    ``exit_codes`` maps error types to codes (first match wins); any other ``OmaError`` is bad
    input (2). ``fallback_url`` is used when neither ``--store`` nor ``$OMA_STORE_URL`` is set.
    With ``tenant``, ``action`` sees that tenant's part of the store (what a TeamRun of that
    Kubernetes namespace sees). ``read_only``: the command only reads, so nothing is created
    or migrated on its behalf.
    """
    try:
        chosen = url or os.environ.get(STORE_ENV) or fallback_url
        return _run_on_store(chosen, action, tenant, read_only)
    except OmaError as exc:
        code = next((c for kind, c in exit_codes if isinstance(exc, kind)), EXIT_BAD_INPUT)
        label = getattr(exc, "code", None)
        prefix = f"{label}: " if label and code != EXIT_BAD_INPUT else ""
        # An error may quote what a store or a file held: nothing in it may drive the terminal.
        errors.print(f"[red]error:[/] {escape(visible(prefix + str(exc)))}")
        raise typer.Exit(code) from exc


def _run_on_store(
    url: str | None,
    action: Callable[[MemoryStore], Awaitable[T]],
    tenant: str | None,
    read_only: bool,
) -> T:
    if not url:
        raise OmaError(f"no store: pass --store URL or set {STORE_ENV}")
    if tenant is not None and not TENANT_NAME.fullmatch(tenant):
        raise OmaError(f"--tenant {tenant!r} is not a Kubernetes namespace name")
    try:
        store: MemoryStore = open_store(url, read_only=read_only)
    except ValueError as exc:
        raise OmaError(str(exc)) from exc
    if tenant is not None:
        store = PrefixedStore(store, tenant_prefix(tenant))

    async def run() -> T:
        try:
            return await action(store)
        finally:
            await close_store(store)

    return asyncio.run(run())
