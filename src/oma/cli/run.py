"""``oma run FILE``: the local main job, with progress on the terminal."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from oma.budget.text import budget_line
from oma.errors import OmaError
from oma.local_run import LocalRun, RunFinishedError, run_spec
from oma.orchestrator.events import OrchestratorEvent
from oma.pod_contract import Exit
from oma.spec import RunSpec, StoreSpec, load_run_spec
from oma.store.remote import redact_url
from oma.tools.builtin import builtin_tools


def load_spec(path: Path) -> RunSpec:
    """Read a YAML or JSON run spec; every problem is a one-line ``OmaError``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OmaError(f"cannot read run spec {path}: {exc.strerror}") from exc
    return load_run_spec(data, str(path))


class Progress:
    def __init__(self, console: Console, events_file: IO[str] | None) -> None:
        self.console = console
        self.events_file = events_file

    def __call__(self, event: OrchestratorEvent) -> None:
        if self.events_file is not None:
            self.events_file.write(
                json.dumps(
                    {
                        "type": event.type,
                        "task": event.task,
                        "agent": event.agent,
                        "kind": event.data.get("kind"),
                        "toolCallId": event.data.get("toolCallId"),
                        "executed": event.data.get("executed"),
                    }
                )
                + "\n"
            )
            self.events_file.flush()
        task = event.data.get("task")
        title = getattr(task, "title", None) or event.task
        if event.type == "task_start":
            self.console.print(f"  [cyan]▶[/] {title} [dim]→ {event.agent}[/]")
        elif event.type == "task_complete":
            result = event.data["result"]
            usage = result.token_usage
            self.console.print(
                f"  [green]✓[/] {title} [dim]by {event.agent}[/] "
                f"[dim](tokens {usage.input_tokens}/{usage.output_tokens}, "
                f"{len(result.tool_calls)} tool calls)[/]"
            )
        elif event.type == "task_retry":
            self.console.print(f"  [yellow]↻[/] retrying {event.task}: {event.data.get('error')}")
        elif event.type == "error":
            self.console.print(
                f"  [red]![/] {event.data.get('kind') or 'error'}: {event.data.get('error')}"
            )
        elif event.type == "warning":
            kind, message = event.data.get("kind") or "warning", event.data.get("message")
            self.console.print(f"  [yellow]![/] {kind}: {message}")


def run_command(
    spec_path: Path,
    run_id: str | None,
    store: Path | None,
    events: Path | None,
    console: Console,
    expect_checkpoint: bool = False,
) -> int:
    spec = load_spec(spec_path)
    chosen_id = run_id or spec.run_id or spec_path.stem
    default_store = store or Path(".oma") / f"{chosen_id}.json"
    events_file = _open_events(events) if events else None

    def announce(resumed: bool) -> None:
        how = "resuming from its checkpoint" if resumed else "starting"
        where = escape(describe_store(spec.store, default_store))
        console.print(f"[bold]oma run[/] {chosen_id}: {how} (store {where})")

    drain = asyncio.Event()

    async def run() -> LocalRun:
        # SIGTERM (a service manager, a container stop) drains like an operator's eviction:
        # the run stops at its next durable boundary with everything saved, exit 11.
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, drain.set)
        try:
            return await run_spec(
                spec,
                run_id=chosen_id,
                tools=builtin_tools(),
                default_store_path=default_store,
                on_progress=Progress(console, events_file),
                on_start=announce,
                expect_checkpoint=expect_checkpoint,
                drain=drain,
                refuse_finished=True,
            )
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        outcome = asyncio.run(run())
    except RunFinishedError as exc:
        console.print(f"[bold]oma run[/] {chosen_id}: {escape(exc.detail)}")
        return 0
    finally:
        if events_file is not None:
            events_file.close()
    if drain.is_set() and outcome.exit_code == Exit.DRAINED:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            "stopped at a durable boundary after SIGTERM: the checkpoint holds everything so "
            "far; run the same command again to resume"
        )
    _summary(outcome, console)
    return outcome.exit_code


def describe_store(store: StoreSpec | None, default_path: Path) -> str:
    """Where the run keeps its state, as ``oma run`` announces it (passwords masked)."""
    if store is None:
        return str(default_path)
    if store.file is not None:
        return store.file.path
    if store.memory is not None:
        return "memory (nothing survives the process)"
    if store.redis is not None:
        redis = store.redis
        url = redact_url(redis.url) if redis.url else f"${redis.url_env}"
        named = redis.given_namespace()
        return f"redis {url} namespace {named or 'from its ?namespace=, else oma'}"
    assert store.postgres is not None
    pg = store.postgres
    dsn = redact_url(pg.dsn) if pg.dsn else f"${pg.dsn_env}"
    schema = f"{pg.schema_name}." if pg.schema_name else ""
    named = pg.given_table()
    table = f"{schema}{named}" if named else f"from its ?table=, else {schema}oma_store"
    return f"postgresql {dsn} table {table}"


def _open_events(path: Path) -> IO[str]:
    """The ``--events`` file, opened for appending before the run starts; a path that cannot be
    written is bad input (one line), not a traceback after the first event."""
    try:
        return path.open("a", encoding="utf-8")
    except OSError as exc:
        raise OmaError(
            f"cannot write events file {path}: {exc.strerror or exc}; "
            "pass --events a file in an existing, writable directory"
        ) from exc


def _summary(outcome: LocalRun, console: Console) -> None:
    result = outcome.result
    table = Table(title=f"run {result.identity.run_id} · attempt {result.identity.attempt}")
    for column in ("task", "agent", "status", "output"):
        table.add_column(column)
    for task in result.tasks:
        output = (task.result or "").replace("\n", " ")
        table.add_row(
            task.title,
            task.assignee or "-",
            task.status,
            output[:60] + ("…" if len(output) > 60 else ""),
        )
    console.print(table)
    usage = result.total_token_usage
    coordinator = result.agent_results.get("coordinator")
    if coordinator is not None:
        console.print(f"[bold]answer:[/] {coordinator.output}")
    console.print(
        f"status [bold]{result.status.code}[/]"
        f"{': ' + result.status.message if result.status.message else ''} · "
        f"tokens {usage.input_tokens}/{usage.output_tokens}"
    )
    if result.budget is not None:
        console.print(budget_line(result.budget))
