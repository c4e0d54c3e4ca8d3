"""``oma approvals``: list, show and decide durable approval requests in a store.

Exit codes: 0 done; 1 the ledger refused (not found, stale hash, already decided, tampered
row: the error code is printed); 2 bad input (no store, bad URL, short hash).

An ``uncertain_tool_call`` request (a non-idempotent call that may or may not have happened) is
settled with ``resolve ID retry|done|failed``: ``retry`` runs it again (as ``approve`` does),
``done`` records it as having happened without running it (``--result`` says what it did, for
the model), ``failed`` records it as not done (as ``reject`` does).

Deciding requires ``--hash`` with (a prefix of at least 12 characters of) the request hash that
``show`` prints: a reviewer confirms exactly the content they looked at, and a request whose
content changed since then is refused as stale.

What is printed shows control, bidi and invisible characters escaped (``oma.visible``, with a
legend line when ``show`` escaped any), ``--json`` as JSON escapes, and the content's numbers as
its canonical JSON (what the hash binds) holds them; the store keeps every character.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from oma.approval.canonical import readable_json
from oma.approval.errors import DurableApprovalError
from oma.approval.ledger import ApprovalRecord, DurableApprovalLedger
from oma.approval.models import ApprovalDecisionRecord, Resolution
from oma.cli.store import (
    EXIT_BAD_INPUT,
    Format,
    JsonOption,
    OutputOption,
    StoreOption,
    TenantOption,
    output_format,
    print_document,
    with_store,
)
from oma.store.base import MemoryStore
from oma.visible import LEGEND, hides_in, visible, visible_json

T = TypeVar("T")

MIN_HASH_PREFIX = 12
EXIT_APPROVAL_ERROR = 1
app = typer.Typer(help="List, show and decide durable approval requests.", no_args_is_help=True)
console = Console(highlight=False, soft_wrap=True)
RunOption = Annotated[str | None, typer.Option("--run-id", help="Only this run's requests.")]


def _with_store(
    url: str | None,
    action: Callable[[MemoryStore], Awaitable[T]],
    tenant: str | None,
    *,
    read_only: bool = True,
) -> T:
    exit_codes = [(DurableApprovalError, EXIT_APPROVAL_ERROR)]
    return with_store(url, action, exit_codes=exit_codes, tenant=tenant, read_only=read_only)


def _state(record: ApprovalRecord) -> str:
    return _decided(record.decision) if record.decision else "pending"


def _decided(decision: ApprovalDecisionRecord) -> str:
    """``approved``, ``rejected``, or for an uncertain tool call e.g. ``rejected (done)``."""
    resolution = decision.resolution
    return decision.decision + (f" ({resolution})" if resolution else "")


@app.command("list")
def list_requests(
    store: StoreOption = None,
    tenant: TenantOption = None,
    run_id: RunOption = None,
    as_json: JsonOption = False,
    output: OutputOption = Format.table,
) -> None:
    """Every approval request in the store (or of one run), decided or not."""
    records = _with_store(store, lambda s: DurableApprovalLedger(s).records(run_id), tenant)
    fmt = output_format(as_json, output)
    if fmt != "table":
        print_document([r.to_wire() for r in records], fmt)
        return
    if not records:
        console.print("no approval requests")
        return
    # Plain columns, never truncated: ids and hashes are meant to be copied.
    rows = [("REQUEST", "RUN", "SCOPE", "STATE", "REVIEWER", "BOUNDARY")] + [
        (
            r.request.id,
            visible(r.request.run_id),
            r.request.scope,
            _state(r),
            visible(r.decision.reviewer.id) if r.decision else "-",
            visible(r.request.boundary),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        typer.echo("  ".join([*cells, row[-1]]))


@app.command()
def show(
    request_id: str,
    store: StoreOption = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    output: OutputOption = Format.table,
) -> None:
    """The exact content a decision binds to, and its hash."""
    record = _with_store(store, lambda s: _one(s, request_id), tenant)
    fmt = output_format(as_json, output)
    if fmt != "table":
        print_document(record.to_wire(), fmt)
        return
    request = record.request
    lines = [
        f"request   {request.id}",
        f"run       {request.run_id}",
        f"scope     {request.scope}",
        f"boundary  {request.boundary}",
        f"requested {request.requested_at}",
    ]
    if request.reason:
        lines.append(f"reason    {request.reason}")
    lines.append(f"hash      {request.request_hash}")
    for line in lines:
        typer.echo(visible(line))
    typer.echo("content:")
    typer.echo(visible_json(readable_json(request.content, indent=2)))
    if record.decision is not None:
        d = record.decision
        typer.echo(visible(f"decision  {_state(record)} by {d.reviewer.id} at {d.decided_at}"))
        if d.reason is not None:
            typer.echo(visible(f"because   {d.reason}"))
        if d.result is not None:
            typer.echo(visible(f"result    {d.result}"))
    if hides_in(record.to_wire()):
        typer.echo(LEGEND)
    if record.decision is not None:
        return
    if request.scope == "uncertain_tool_call":
        typer.echo(
            f"settle with: oma approvals resolve {request.id} retry|done|failed --reviewer NAME "
            f"--hash {request.request_hash[:MIN_HASH_PREFIX]} [--result TEXT]"
        )
    else:
        typer.echo(
            f"decide with: oma approvals approve {request.id} --reviewer NAME "
            f"--hash {request.request_hash[:MIN_HASH_PREFIX]}"
        )


async def _one(store: MemoryStore, request_id: str) -> ApprovalRecord:
    record = await DurableApprovalLedger(store).get(request_id)
    if record is None:
        raise DurableApprovalError("APPROVAL_NOT_FOUND", f"No approval request {request_id}.")
    return record


ReviewerOption = Annotated[str, typer.Option("--reviewer", help="Who decides (recorded).")]
HashOption = Annotated[
    str,
    typer.Option(
        "--hash", help="The request hash you reviewed (at least its first 12 characters)."
    ),
]
NameOption = Annotated[str | None, typer.Option("--display-name", help="Reviewer's name.")]
ReasonOption = Annotated[
    str | None,
    typer.Option("--reason", help="Why you decide (kept with the decision, at most 4096 chars)."),
]


def _decide(
    word: str,
    request_id: str,
    reviewer: str,
    seen_hash: str,
    display_name: str | None,
    store: str | None,
    tenant: str | None,
    reason: str | None,
    result: str | None = None,
) -> None:
    if len(seen_hash) < MIN_HASH_PREFIX:
        console.print(
            f"[red]error:[/] --hash needs at least {MIN_HASH_PREFIX} characters of "
            "the request hash (oma approvals show prints it)"
        )
        raise typer.Exit(EXIT_BAD_INPUT)

    async def decide(s: MemoryStore) -> Any:
        ledger = DurableApprovalLedger(s)
        record = await _one(s, request_id)
        if not record.request.request_hash.startswith(seen_hash.lower()):
            raise DurableApprovalError(
                "APPROVAL_STALE_DECISION",
                f"{request_id} has hash {record.request.request_hash}, not {seen_hash}: the "
                "content is not what you reviewed. Run `oma approvals show` again.",
            )
        who: dict[str, str] = {"id": reviewer}
        if display_name:
            who["displayName"] = display_name
        return await ledger.decide(
            request_id=request_id,
            request_hash=record.request.request_hash,
            decision=word,
            reviewer=who,
            result=result,
            reason=reason,
        )

    decision = _with_store(store, decide, tenant, read_only=False)
    typer.echo(
        visible(
            f"{_decided(decision)} {request_id} as {decision.reviewer.id} "
            f"(hash {decision.request_hash})"
        )
    )


@app.command()
def approve(
    request_id: str,
    reviewer: ReviewerOption,
    hash_: HashOption,
    display_name: NameOption = None,
    reason: ReasonOption = None,
    store: StoreOption = None,
    tenant: TenantOption = None,
) -> None:
    """Approve exactly the content with this hash; the first decision wins."""
    _decide("approve", request_id, reviewer, hash_, display_name, store, tenant, reason)


@app.command()
def reject(
    request_id: str,
    reviewer: ReviewerOption,
    hash_: HashOption,
    display_name: NameOption = None,
    reason: ReasonOption = None,
    store: StoreOption = None,
    tenant: TenantOption = None,
) -> None:
    """Reject the request; a rejected tool call becomes a denied result, other gates end the run."""
    _decide("reject", request_id, reviewer, hash_, display_name, store, tenant, reason)


@app.command()
def resolve(
    request_id: str,
    outcome: Annotated[
        Resolution,
        typer.Argument(help="retry: run it again; done: it happened; failed: it did not."),
    ],
    reviewer: ReviewerOption,
    hash_: HashOption,
    result: Annotated[
        str | None,
        typer.Option("--result", help="With done: what the call did (the model is told this)."),
    ] = None,
    display_name: NameOption = None,
    reason: ReasonOption = None,
    store: StoreOption = None,
    tenant: TenantOption = None,
) -> None:
    """Settle an uncertain tool call (it may or may not have happened before a crash)."""
    _decide(outcome, request_id, reviewer, hash_, display_name, store, tenant, reason, result)
