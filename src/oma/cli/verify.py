"""``oma verify JOURNAL``: check a run journal offline, as the reference's ``verifyRun()`` does.

Exit codes: 0 no failure (gaps the readable window cannot settle are listed, and do not fail);
1 failures (each printed with its code, reason and event); 2 the file is not a journal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from oma.journal import JournalReadError, JournalShapeError, read_jsonl_journal, verify_run
from oma.visible import visible


def verify_command(
    journal: Annotated[
        Path, typer.Argument(help="A run journal: JSON lines, one event each (JsonlRunJournal).")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="The result as JSON.")] = False,
) -> None:
    """Check a run journal: sequence order, links between events, and whether every block a
    model request showed is reproduced by the events it names."""
    try:
        result = verify_run(read_jsonl_journal(journal))
    except (JournalReadError, JournalShapeError) as exc:
        typer.echo(visible(f"error: {exc.code}: {exc}"), err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(result.to_wire(), indent=2))
    else:
        stats = (
            f"{result.events} events, {result.requests} requests, {result.blocks_checked} blocks"
        )
        verdict = "ok" if result.ok else f"{len(result.failures)} failure(s)"
        typer.echo(f"{verdict}: {stats} checked")
        for failure in result.failures:
            typer.echo(visible(f"  {failure.code} ({failure.reason}): {failure.detail}"))
        for gap in result.inconclusive:
            typer.echo(visible(f"  inconclusive: {gap.detail}"))
    raise typer.Exit(0 if result.ok else 1)
