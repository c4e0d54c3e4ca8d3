"""``oma fork RUN --at SEQ``: a new run that starts from another run's past boundary.

The new run's checkpoint is written in the same store (and tenant); resume it with ``oma run
SPEC --run-id NEW`` (or a TeamRun with ``spec.forkFrom``, which forks at its first attempt).

Exit codes: 0 forked (the new run id is printed); 1 no checkpoint for RUN, or not the boundary
``--at`` names; 2 bad input (no store, a patch file that is not a JSON Patch or may not be
applied, a snapshot the patch made invalid, a new run id that already has a checkpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from oma import jsonutil
from oma.checkpoint.fork import ForkResult, fork_run
from oma.cli.store import EXIT_BAD_INPUT, StoreOption, TenantOption, errors, with_store
from oma.errors import CheckpointHistoryError
from oma.store.base import MemoryStore

MAX_PATCH_BYTES = 1 << 20


def fork_command(
    run: Annotated[str, typer.Argument(help="The run to fork.")],
    at: Annotated[
        int,
        typer.Option("--at", min=1, help="Its boundary to start from (oma checkpoint history)."),
    ],
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="The new run's id (default: RUN-fork-SEQ-xxxxxx)."),
    ] = None,
    patch: Annotated[
        Path | None,
        typer.Option(
            "--patch", help="A JSON Patch (RFC 6902) file applied to that snapshot first."
        ),
    ] = None,
    store: StoreOption = None,
    tenant: TenantOption = None,
) -> None:
    """Start a new run from RUN's boundary SEQ: what was committed before it is replayed, never
    run again; approvals still open there are asked again; RUN itself is not written."""
    operations = _read_patch(patch) if patch is not None else None

    async def fork(s: MemoryStore) -> ForkResult:
        return await fork_run(s, run, at, child=run_id, patch=operations)

    done = with_store(store, fork, tenant=tenant, exit_codes=[(CheckpointHistoryError, 1)])
    typer.echo(done.child)
    asked = f"; {len(done.asked_again)} approval(s) will be asked again" if done.asked_again else ""
    errors.print(
        f"forked {escape(run)} at boundary {at} as {escape(done.child)}"
        + (" (patched)" if done.patched else "")
        + f"{asked}. Resume it: oma run SPEC --run-id {escape(done.child)}"
    )


def _read_patch(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        _bad(f"cannot read the patch file {path}: {exc.strerror or exc}")
    if len(data) > MAX_PATCH_BYTES:
        _bad(f"the patch file {path} is over {MAX_PATCH_BYTES} bytes")
    try:
        operations: Any = jsonutil.loads(data)
    except ValueError as exc:
        _bad(f"the patch file {path} is not JSON: {exc}")
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        _bad(f"the patch file {path} is not a JSON Patch: a JSON array of operation objects")
    return list(operations)


def _bad(message: str) -> Any:
    errors.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(EXIT_BAD_INPUT)
