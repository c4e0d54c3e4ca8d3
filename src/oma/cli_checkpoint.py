"""``oma checkpoint``: list, show, export and delete the checkpoints in a store.

The store is ``--store URL``, else ``$OMA_STORE_URL``, else the file ``oma run`` uses by default
(``.oma/<run-id>.json``) when it exists.

Exit codes: 0 done; 1 no checkpoint for that run; 2 bad input (no store, bad URL, unreachable
store, an ``export -o`` file that cannot be written, ``delete`` without ``--yes`` when not
interactive); 3 the stored checkpoint or attempt log is unreadable (the message says what is
wrong; ``export`` still writes the raw value).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.markup import escape

from oma import jsonutil
from oma.checkpoint.attempts import AttemptRecord, attempts_key, load_attempt_log
from oma.checkpoint.journal import load_journal
from oma.checkpoint.keys import checkpoint_key, is_checkpoint_key
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.summary import CheckpointSummary, RunEndLine, summarize
from oma.cli_store import (
    EXIT_BAD_INPUT,
    JsonOption,
    StoreOption,
    TenantOption,
    errors,
    with_store,
)
from oma.errors import CheckpointError, OmaError
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from oma.store.reserved import CHECKPOINT_KEY_PREFIX, TENANT_KEY_PREFIX

T = TypeVar("T")
EXIT_NOT_FOUND, EXIT_UNREADABLE = 1, 3
app = typer.Typer(help="List, show, export and delete run checkpoints.", no_args_is_help=True)
RunIdOption = Annotated[str, typer.Option("--run-id", help="The run whose checkpoint to use.")]
_STATE_TEXT = {
    "committed": "committed (replayed on resume, never run again)",
    "not_committed": "not committed: runs again on resume (same tool_call_id)",
    "uncertain": "started, not committed: may or may not have happened (a reviewer decides)",
    "awaiting_approval": "awaiting approval",
    "approved_not_run": "approved, runs on resume",
    "recorded_done": "recorded as done by a reviewer (not run again; the model gets their record)",
    "rejected": "rejected (the model sees a denial)",
}


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
        exit_codes=[(CheckpointNotFound, EXIT_NOT_FOUND), (CheckpointError, EXIT_UNREADABLE)],
    )


@app.command("list")
def list_runs(
    store: StoreOption = None, tenant: TenantOption = None, as_json: JsonOption = False
) -> None:
    """The runs that have a checkpoint in the store."""

    tenants: set[str] = set()

    async def runs(s: MemoryStore) -> list[dict[str, object]]:
        found = []
        for entry in await s.list():
            if entry.key.startswith(CHECKPOINT_KEY_PREFIX) and entry.key.endswith("latest"):
                meta = entry.metadata or {}
                found.append(
                    {"runId": meta.get("runId"), "key": entry.key, "savedAt": meta.get("createdAt")}
                )
            elif entry.key.startswith(TENANT_KEY_PREFIX):
                tenants.add(entry.key.removeprefix(TENANT_KEY_PREFIX).split("/", 1)[0])
        if not supports_journal(s):
            return found
        for key in await s.journal_keys():
            journal = await s.journal_head(key) if is_checkpoint_key(key) else None
            if journal is not None:
                meta = journal.metadata or {}
                found.append(
                    {"runId": meta.get("runId"), "key": key, "savedAt": meta.get("createdAt")}
                )
            elif key.startswith(TENANT_KEY_PREFIX):
                tenants.add(key.removeprefix(TENANT_KEY_PREFIX).split("/", 1)[0])
        return found

    listed = with_store(store, runs, tenant=tenant, read_only=True)
    if tenants and not as_json:
        errors.print(f"tenants with keys of their own (see them with --tenant): {sorted(tenants)}")
    if as_json:
        typer.echo(json.dumps(listed, indent=2, ensure_ascii=False))
    elif not listed:
        typer.echo("no checkpoints")
    for run in [] if as_json else listed:
        typer.echo(f"{run['runId'] or '(default key)'}  saved {run['savedAt']}  {run['key']}")


@app.command()
def show(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """What the checkpoint holds: attempts, tasks, in-flight tool calls, approvals."""

    async def load(s: MemoryStore) -> CheckpointSummary:
        key = checkpoint_key(run_id)
        snapshot = await Checkpoint(s, run_id=run_id).load_latest()
        if snapshot is None:
            raise CheckpointNotFound(f'no checkpoint for run "{run_id}" (key {key})')
        return summarize(snapshot, key, await load_attempt_log(s, key))

    summary = _on_store(store, run_id, load, tenant)
    if as_json:
        # Every field, null included: scripts should not have to guess what is absent.
        document = summary.model_dump(mode="json", by_alias=True)
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    for line in render(summary):
        typer.echo(line)


@app.command()
def export(
    run_id: RunIdOption,
    store: StoreOption = None,
    tenant: TenantOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (default stdout).")
    ] = None,
) -> None:
    """The stored snapshot exactly as stored (JSON), valid or not: for backups and bug reports.
    A checkpoint kept as a journal is exported as the snapshot it holds (deltas applied)."""

    async def raw(s: MemoryStore) -> str:
        key = checkpoint_key(run_id)
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
        journal = await s.journal_version(key) if supports_journal(s) else None
        if journal is None and await s.get(key) is None and await s.get(attempts_key(key)) is None:
            raise CheckpointNotFound(f'no checkpoint for run "{run_id}" (key {key})')
        await s.delete(key)
        await s.delete(attempts_key(key))

    _on_store(store, run_id, remove, tenant, read_only=False)
    typer.echo(f"deleted the checkpoint of run {run_id} ({key}) and its attempt log")


def render(summary: CheckpointSummary) -> list[str]:
    """The plain-text report: ids and hashes are never truncated (they are meant to be copied)."""
    attempt = f"attempt {summary.attempt}" if summary.attempt is not None else "attempt 1"
    lines = [
        f"run       {summary.run_id or '(default key)'}  ({attempt}, snapshot v{summary.version},"
        f" {summary.mode}, saved {summary.saved_at})",
        f"key       {summary.key}",
    ]
    if summary.last_attempt is not None:
        lines.append(f"status    {_end_text(summary.last_attempt)}")
    if summary.goal:
        lines.append(f"goal      {summary.goal}")
    counts = ", ".join(f"{n} {status}" for status, n in summary.task_counts.items())
    lines.append(f"tasks     {len(summary.tasks)}: {counts or 'none'}")
    width = max((len(task.status) for task in summary.tasks), default=0)
    lines += [
        f"  {task.status.ljust(width)}  {task.id}  {task.title}"
        + (f"  ({task.assignee})" if task.assignee else "")
        for task in summary.tasks
    ]
    lines.append("attempts")
    if summary.attempts is None:
        lines.append("  (no attempt log: the run was not started by `oma run` or the runner)")
    lines += [f"  {_attempt_line(record)}" for record in summary.attempts or []]
    if summary.in_flight:
        lines.append("in flight")
    for task in summary.in_flight:
        lines.append(
            f"  task {task.task_id} ({task.assignee}, {task.phase}, turn {task.turns}): "
            f"{task.committed_tool_calls} of {len(task.tool_calls)} tool calls committed"
        )
        lines += [f"    {c.id}  {c.tool}  {_STATE_TEXT[c.state]}" for c in task.tool_calls]
        if task.earlier_tool_calls:
            lines.append(
                f"    earlier turns: {len(task.earlier_tool_calls)} tool calls done "
                f"({_tally(task.earlier_tool_calls)}): in the conversation, never run again"
            )
    if summary.approvals:
        lines.append("approvals")
    for approval in summary.approvals:
        by = f" by {approval.reviewer}" if approval.reviewer else ""
        lines.append(f"  {approval.request_id}  {approval.scope}  {approval.state}{by}")
    if summary.shared_memory_entries is not None:
        lines.append(f"memory    {summary.shared_memory_entries} shared-memory entries")
    return lines


def _attempt_line(record: AttemptRecord) -> str:
    done = f"{record.completed_tasks}/{record.total_tasks} tasks done"
    if record.attempt == 1:
        how = "first attempt"
    else:
        how = (
            f"resumed with {done}, {record.in_flight_tasks} in flight, "
            f"{record.committed_tool_calls} committed tool calls"
        )
    line = f"#{record.attempt}  {record.started_at}  on {record.host}: {how}"
    if record.outcome is None:
        return f"{line}; no end recorded"
    calls = (
        f" ({record.executed_tool_calls} tool calls executed, "
        f"{record.replayed_tool_calls} replayed)"
        if record.executed_tool_calls is not None
        else ""
    )
    return f"{line}; ended {record.ended_at}: {_outcome(record.outcome, record.message)}{calls}"


def _end_text(end: RunEndLine) -> str:
    if end.outcome is None:
        return (
            f"attempt {end.attempt} has no recorded end: it was killed outright, "
            "or it is still running"
        )
    return f"{_outcome(end.outcome, end.message)}  (attempt {end.attempt}, ended {end.ended_at})"


_OUTCOME_TEXT = {
    "ok": "succeeded",
    "cancelled": "drained (stopped at a durable boundary on a signal; resumable)",
    "fenced": "fenced (a newer attempt took the run over)",
}


def _outcome(outcome: str, message: str | None) -> str:
    text = _OUTCOME_TEXT.get(outcome, outcome)
    return f"{text}: {message}" if message else text


def _tally(tools: list[str]) -> str:
    """``note x8, search x4``: each tool once, in order of first use, with its count."""
    counts: dict[str, int] = {}
    for tool in tools:
        counts[tool] = counts.get(tool, 0) + 1
    return ", ".join(f"{tool} x{n}" for tool, n in counts.items())
