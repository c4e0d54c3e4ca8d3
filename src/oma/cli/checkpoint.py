"""``oma checkpoint``: list, show, export, delete and prune the checkpoints in a store, and
list the past boundaries a run's journal keeps (``history``; ``show``/``export --at SEQ``).

The store is ``--store URL``, else ``$OMA_STORE_URL``, else the file ``oma run`` uses by default
(``.oma/<run-id>.json``) when it exists.

Exit codes: 0 done; 1 no checkpoint for that run (or not the boundary ``--at`` asks for); 2 bad
input (no store, bad URL, unreachable store, an ``export -o`` file that cannot be written,
``delete`` or ``prune`` without ``--yes`` when not interactive, a bad ``--older-than``); 3 the
stored checkpoint or attempt log is unreadable (the message says what is wrong; ``export``
still writes the raw value).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.markup import escape

from oma import jsonutil
from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.history import Boundary, History, load_history
from oma.checkpoint.journal import load_journal
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshot
from oma.checkpoint.stored import older_than as saved_before
from oma.checkpoint.stored import (
    parse_age,
    remove_checkpoint,
    saved_checkpoints,
    still_in_use,
)
from oma.checkpoint.summary import CheckpointSummary, summarize
from oma.checkpoint.validation import parse_snapshot
from oma.cli.checkpoint_text import render
from oma.cli.store import (
    EXIT_BAD_INPUT,
    Format,
    JsonOption,
    OutputOption,
    StoreOption,
    TenantOption,
    errors,
    output_format,
    print_document,
    with_store,
)
from oma.errors import CheckpointError, CheckpointHistoryError, OmaError
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from oma.visible import visible

T = TypeVar("T")
EXIT_NOT_FOUND, EXIT_UNREADABLE = 1, 3
app = typer.Typer(help="List, show, export and delete run checkpoints.", no_args_is_help=True)
RunIdOption = Annotated[str, typer.Option("--run-id", help="The run whose checkpoint to use.")]
AtOption = Annotated[
    int | None,
    typer.Option(
        "--at",
        min=1,
        help="A past boundary (its seq in `oma checkpoint history`) instead of the latest.",
    ),
]


class CheckpointNotFound(OmaError):
    code = "CHECKPOINT_NOT_FOUND"


def _on_store(
    url: str | None,
    run_id: str,
    action: Callable[[MemoryStore], Awaitable[T]],
    tenant: str | None = None,
    read_only: bool = True,
) -> T:
    default_file = Path(".oma") / f"{run_id}.json"
    fallback = f"file:{default_file}" if default_file.is_file() else None
    return with_store(
        url,
        action,
        fallback_url=fallback,
        tenant=tenant,
        read_only=read_only,
        exit_codes=[
            (CheckpointNotFound, EXIT_NOT_FOUND),
            (CheckpointHistoryError, EXIT_NOT_FOUND),
            (CheckpointError, EXIT_UNREADABLE),
        ],
    )


@app.command("list")
def list_runs(
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    output: OutputOption = Format.table,
) -> None:
    """The runs that have a checkpoint in the store."""
    fmt = output_format(as_json, output)
    found = with_store(store, saved_checkpoints, tenant=tenant, read_only=True)
    listed = [{"runId": c.run_id, "key": c.key, "savedAt": c.saved_at} for c in found.checkpoints]
    if fmt != "table":
        print_document(listed, fmt)
        return
    if found.tenants:
        errors.print(f"tenants with keys of their own (see them with --tenant): {found.tenants}")
    if not listed:
        typer.echo("no checkpoints")
    for run in found.checkpoints:
        line = f"{run.run_id or '(default key)'}  saved {run.saved_at}  {run.key}"
        typer.echo(visible(line))


@app.command()
def show(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    at: AtOption = None,
    output: OutputOption = Format.table,
) -> None:
    """What the checkpoint holds: attempts, tasks, in-flight tool calls, approvals."""

    async def load(s: MemoryStore) -> CheckpointSummary:
        key = checkpoint_key(run_id)
        snapshot: CheckpointSnapshot | None
        if at is not None:
            snapshot = parse_snapshot((await _history(s, run_id)).rebuild(at), key)
        else:
            snapshot = await Checkpoint(s, run_id=run_id).load_latest()
        if snapshot is None:
            raise CheckpointNotFound(f'no checkpoint for run "{run_id}" (key {key})')
        return summarize(snapshot, key, await load_attempt_log(s, key))

    summary = _on_store(store, run_id, load, tenant)
    fmt = output_format(as_json, output)
    if fmt != "table":
        # Every field, null included: scripts should not have to guess what is absent. A
        # checkpoint's content came from a store: nothing in it may drive the terminal.
        print_document(summary.model_dump(mode="json", by_alias=True), fmt)
        return
    for line in render(summary):
        typer.echo(visible(line))


@app.command()
def export(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default stdout).")
    ] = None,
    at: AtOption = None,
) -> None:
    """The stored snapshot exactly as stored (JSON), valid or not: for backups and bug reports.
    A checkpoint kept as a journal is exported as the snapshot it holds (deltas applied);
    ``--at SEQ``: the snapshot saved at that past boundary, as it was saved."""

    async def raw(s: MemoryStore) -> str:
        key = checkpoint_key(run_id)
        if at is not None:
            return jsonutil.dumps((await _history(s, run_id)).rebuild(at))
        found = await load_journal(s, key) if supports_journal(s) else None
        if found is not None:
            return jsonutil.dumps(found[0])
        entry = await s.get(key)
        if entry is None:
            raise CheckpointNotFound(f'no checkpoint for run "{run_id}"')
        return entry.value

    value = _on_store(store, run_id, raw, tenant)
    if output is None:
        sys.stdout.write(value + "\n")
        return
    try:
        output.write_text(value, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        errors.print(
            f"[red]error:[/] cannot write {escape(str(output))}: {escape(reason)}; pass -o a file "
            "in an existing, writable directory (or omit -o for stdout)"
        )
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    errors.print(f"wrote {len(value)} characters to {escape(str(output))}")


@app.command()
def history(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    output: OutputOption = Format.table,
) -> None:
    """The past boundaries the run's journal keeps, oldest first: seq, when, attempt, the task
    and what happened. `show --at SEQ` and `export --at SEQ` give the snapshot of one."""

    async def load(s: MemoryStore) -> History:
        return await _history(s, run_id)

    found = _on_store(store, run_id, load, tenant)
    boundaries = found.boundaries()
    fmt = output_format(as_json, output)
    if fmt != "table":
        listed = [_boundary_json(b) for b in boundaries]
        document = {"runId": run_id, "firstRecord": found.entry.start, "boundaries": listed}
        print_document(document, fmt)
        return
    if found.entry.start > 0:
        typer.echo(f"(records before {found.entry.start} were dropped by the history's retention)")
    if not found.chained:
        typer.echo("(kept without history: only the boundaries since its last base, no times)")
    typer.echo("seq     saved at (UTC)            attempt  kind   bytes     task / what")
    for b in boundaries:
        when = _when(b.at) if b.at is not None else "-"
        attempt = str(b.attempt) if b.attempt is not None else "-"
        task = f"{b.task}: " if b.task else ""
        typer.echo(
            f"{b.seq:<7} {when:<25} {attempt:<8} {b.kind:<6} {b.bytes:<9} "
            + visible(f"{task}{b.what}")
        )


async def _history(s: MemoryStore, run_id: str) -> History:
    key = checkpoint_key(run_id)
    found = await load_history(s, key)
    if found is None:
        raise CheckpointNotFound(f'no checkpoint for run "{run_id}" (key {key})')
    return found


def _when(at: int) -> str:
    return datetime.fromtimestamp(at / 1000, UTC).isoformat(timespec="milliseconds")[:23] + "Z"


def _boundary_json(b: Boundary) -> dict[str, object]:
    return {
        "seq": b.seq,
        "savedAt": _when(b.at) if b.at is not None else None,
        "attempt": b.attempt,
        "kind": b.kind,
        "task": b.task,
        "what": b.what,
        "records": list(b.numbers),
        "bytes": b.bytes,
    }


@app.command()
def delete(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the run's checkpoint and attempt log: a later run with this id starts fresh.

    Approval rows stay: they are the record of who decided what.
    """
    key = checkpoint_key(run_id)
    if not yes:
        if not sys.stdin.isatty():
            errors.print(
                "[red]error:[/] refusing to delete without --yes (stdin is not a terminal)"
            )
            raise typer.Exit(EXIT_BAD_INPUT)
        typer.confirm(f"delete the checkpoint of run {run_id!r} ({key})?", abort=True)

    async def remove(s: MemoryStore) -> None:
        if not await remove_checkpoint(s, key):
            raise CheckpointNotFound(f'no checkpoint for run "{run_id}" (key {key})')

    _on_store(store, run_id, remove, tenant, read_only=False)
    typer.echo(f"deleted the checkpoint of run {run_id} ({key}) and its attempt log")


@app.command()
def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than", help="Delete checkpoints last saved longer ago: 90s, 30m, 12h, 7d, 2w."
        ),
    ],
    store: StoreOption = None,
    tenant: TenantOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only say what would be deleted.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Delete also the old checkpoints of runs that may still go on."
        ),
    ] = False,
    as_json: JsonOption = False,
    output: OutputOption = Format.table,
) -> None:
    """Delete every checkpoint (and its attempt log) last saved longer ago than --older-than.

    Kept unless --force: a checkpoint whose latest attempt has no recorded end (it may still be
    running) or that waits for approval decisions; always kept: one without a recorded save
    time. Approval rows stay: they are the record of who decided what.
    """
    try:
        age = parse_age(older_than)
    except ValueError as exc:
        errors.print(f"[red]error:[/] --older-than {escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from exc
    if not yes and not dry_run and not sys.stdin.isatty():
        errors.print("[red]error:[/] refusing to prune without --yes (stdin is not a terminal)")
        raise typer.Exit(EXIT_BAD_INPUT)
    cutoff = datetime.now(UTC) - age
    found = with_store(store, saved_checkpoints, tenant=tenant, read_only=True)
    old, unknown = saved_before(found.checkpoints, cutoff)

    async def in_use(s: MemoryStore) -> dict[str, str]:
        reasons = {c.key: await still_in_use(s, c) for c in old}
        return {key: why for key, why in reasons.items() if why is not None}

    busy = {} if force or not old else with_store(store, in_use, tenant=tenant, read_only=True)
    stale = [c for c in old if c.key not in busy]
    if stale and not yes and not dry_run:
        typer.confirm(
            f"delete {len(stale)} checkpoints last saved before {cutoff:%Y-%m-%d %H:%M}?",
            abort=True,
        )

    async def remove(s: MemoryStore) -> list[str]:
        return [c.key for c in stale if await remove_checkpoint(s, c.key)]

    removed = [] if dry_run or not stale else with_store(store, remove, tenant=tenant)
    fmt = output_format(as_json, output)
    if fmt != "table":
        document = {
            "deleted" if not dry_run else "wouldDelete": [
                {"runId": c.run_id, "key": c.key, "savedAt": c.saved_at}
                for c in stale
                if dry_run or c.key in removed
            ],
            "keptWithoutSaveTime": [c.key for c in unknown],
            "keptInUse": [{"key": key, "reason": why} for key, why in busy.items()],
        }
        print_document(document, fmt)
        return
    verb = "would delete" if dry_run else "deleted"
    for c in stale:
        if dry_run or c.key in removed:
            typer.echo(f"{verb} {c.run_id or '(default key)'}  saved {c.saved_at}  {c.key}")
    for c in unknown:
        typer.echo(f"kept {c.key}: no save time recorded")
    for key, why in busy.items():
        typer.echo(f"kept {key}: {why} (--force deletes it)")
    count = len(stale) if dry_run else len(removed)
    typer.echo(
        f"{verb} {count} checkpoints last saved before {cutoff.isoformat(timespec='seconds')}"
    )
