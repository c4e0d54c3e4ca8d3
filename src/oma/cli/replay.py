"""``oma replay RUN --spec FILE``: run a spec again against a recorded run's history, offline.

Every model call is answered from the recorded turns and every tool from its committed result:
no provider, tool or MCP server is reached, and the recorded run's store is only read. The
report names the first boundary and JSON path where the replay differs, or says it reproduces.

Exit codes: 0 reproduces; 1 diverges (where, and both values, printed); 2 bad input (no store,
no such run, a spec that cannot be read, a mode or history a replay cannot use).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from oma.cli.store import (
    Format,
    OutputOption,
    StoreOption,
    TenantOption,
    output_format,
    print_document,
    with_store,
)
from oma.replay import ReplayReport, replay_run
from oma.spec import load_run_spec
from oma.store.base import MemoryStore
from oma.visible import visible


def replay_command(
    run: Annotated[str, typer.Argument(help="The recorded run.")],
    spec: Annotated[
        Path,
        typer.Option("--spec", help="The run spec to replay (the current one, edited or not)."),
    ],
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON (-o json).")] = False,
    output: OutputOption = Format.table,
) -> None:
    """Run SPEC again, answered from RUN's recorded turns and tool results, and compare every
    boundary with the recorded one."""

    try:
        data = spec.read_bytes()
    except OSError as exc:
        typer.echo(f"error: cannot read run spec {visible(str(spec))}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None

    async def replay(s: MemoryStore) -> ReplayReport:
        return await replay_run(load_run_spec(data, str(spec)), s, run)

    report = with_store(store, replay, tenant=tenant, read_only=True)
    found = report.divergence
    fmt = output_format(as_json, output)
    if fmt != "table":
        document = {
            "runId": report.run_id,
            "reproduces": report.reproduces,
            "boundaries": report.boundaries,
            "replayed": report.replayed,
            "seconds": round(report.seconds, 3),
            "outcome": report.outcome,
            "divergence": None
            if found is None
            else {
                "seq": found.seq,
                "path": found.path,
                "recorded": found.recorded,
                "replayed": found.replayed,
            },
        }
        print_document(document, fmt)
    elif found is None:
        typer.echo(
            f"reproduces: {report.boundaries} boundaries of {run} compared, none differs "
            f"(times and attempts aside), in {report.seconds:.2f} s"
        )
    else:
        typer.echo(visible(f"diverges at boundary {found.seq}, {found.path}"))
        typer.echo(visible(f"  recorded: {_short(found.recorded)}"))
        typer.echo(visible(f"  replayed: {_short(found.replayed)}"))
        typer.echo(visible(f"  the replayed run ended {report.outcome}"))
    raise typer.Exit(0 if found is None else 1)


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 400 else text[:400] + "…"
