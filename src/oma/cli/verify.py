"""``oma verify``: check a run journal offline, as the reference's ``verifyRun()`` does, or
the history a stored checkpoint keeps (``--run-id``: its chain, every record readable).

Exit codes: 0 no failure (gaps the readable window cannot settle are listed, and do not fail;
for a stored run, records dropped by its retention); 1 failures (each printed with its code,
reason and event; for a stored run, each record named by its number and boundary, and its event
journal's failures, when the store keeps one); 2 the file
is not a journal, or bad input (no store, no such run, a run kept without history).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from oma.checkpoint.history import History, load_history
from oma.checkpoint.keys import checkpoint_key
from oma.cli.store import (
    Format,
    OutputOption,
    StoreOption,
    TenantOption,
    output_format,
    print_document,
    with_store,
)
from oma.errors import CheckpointError, StoreCorruptError
from oma.journal import (
    JournalReadError,
    JournalShapeError,
    VerifyRunResult,
    read_jsonl_journal,
    verify_run,
)
from oma.journal.store_sink import StoredJournalError, StoreRunJournal
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from oma.visible import visible


def verify_command(
    journal: Annotated[
        Path | None,
        typer.Argument(help="A run journal: JSON lines, one event each (JsonlRunJournal)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The result as JSON (-o json).")] = False,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Check this run's stored checkpoint history instead (and its event journal, "
            "when the store keeps one).",
        ),
    ] = None,
    store: StoreOption = None,
    tenant: TenantOption = None,
    output: OutputOption = Format.table,
) -> None:
    """Check a run journal: sequence order, links between events, and whether every block a
    model request showed is reproduced by the events it names. With --run-id: check the
    history the run's checkpoint keeps (every record chained to the one before, readable)."""
    if (journal is None) == (run_id is None):
        typer.echo("error: give a journal file or --run-id (one of them)", err=True)
        raise typer.Exit(2)
    fmt = output_format(as_json, output)
    if run_id is not None:
        _verify_stored(run_id, store, tenant, fmt)
    assert journal is not None
    try:
        result = verify_run(read_jsonl_journal(journal))
    except (JournalReadError, JournalShapeError) as exc:
        typer.echo(visible(f"error: {exc.code}: {exc}"), err=True)
        raise typer.Exit(2) from None
    if fmt != "table":
        print_document(result.to_wire(), fmt)
    else:
        _print_result(result)
    raise typer.Exit(0 if result.ok else 1)


def _print_result(result: VerifyRunResult, lead: str = "") -> None:
    stats = f"{result.events} events, {result.requests} requests, {result.blocks_checked} blocks"
    verdict = "ok" if result.ok else f"{len(result.failures)} failure(s)"
    typer.echo(f"{lead}{verdict}: {stats} checked")
    for failure in result.failures:
        typer.echo(visible(f"  {failure.code} ({failure.reason}): {failure.detail}"))
    for gap in result.inconclusive:
        typer.echo(visible(f"  inconclusive: {gap.detail}"))


def _verify_stored(run_id: str, store: str | None, tenant: str | None, fmt: str) -> None:
    async def load(s: MemoryStore) -> tuple[History, list[dict[str, Any]] | None]:
        key = checkpoint_key(run_id)
        found = await load_history(s, key)
        if found is None:
            raise CheckpointError(f'no checkpoint for run "{run_id}" (key {key})')
        # A kept journal holds at least its run/start: none read is no journal.
        events = await StoreRunJournal(s).read_from(0, run_id=run_id) if supports_journal(s) else []
        return found, events or None

    # A record the store cannot even hand back (lost, not UTF-8) is a failure of the history.
    failed = [(StoreCorruptError, 1), (StoredJournalError, 1)]
    history, events = with_store(store, load, tenant=tenant, read_only=True, exit_codes=failed)
    try:
        journal = verify_run(events) if events is not None else None
    except JournalShapeError as exc:
        typer.echo(visible(f"error: {exc.code}: {exc}"), err=True)
        raise typer.Exit(1) from None
    findings = history.verify()
    boundaries = history.boundaries()
    if fmt != "table":
        document = {
            "ok": not findings,
            "failures": [
                {"record": f.number, "seq": f.seq, "problem": f.problem}
                | ({"journal": "segments"} if f.segment else {})
                for f in findings
            ],
            "records": len(history.records),
            "boundaries": len(boundaries),
            "firstRecord": history.entry.start,
            "chained": history.chained,
        }
        if journal is not None:
            document["events"] = journal.to_wire()
        print_document(document, fmt)
    else:
        verdict = "ok" if not findings else f"{len(findings)} failure(s)"
        span = f"{boundaries[0].seq} to {boundaries[-1].seq}" if boundaries else "none"
        typer.echo(
            f"{verdict}: {len(history.records)} records, boundaries {span} checked"
            + (
                f" (records before {history.entry.start} dropped by retention)"
                if history.entry.start
                else ""
            )
        )
        if not history.chained:
            typer.echo("  inconclusive: the journal keeps no history (its records are not chained)")
        for finding in findings:
            where = (
                f"segment record {finding.number}"
                if finding.segment
                else f"record {finding.number} (boundary {finding.seq})"
            )
            typer.echo(visible(f"  {where}: {finding.problem}"))
        if journal is not None:
            _print_result(journal, "events: ")
    raise typer.Exit(0 if not findings and (journal is None or journal.ok) else 1)
