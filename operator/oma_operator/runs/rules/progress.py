"""A running TeamRun's progress as its store has it: tasks done/total and the last save time.

The runner has no Kubernetes credentials, so the operator reads the latest checkpoint (the same
summary ``oma checkpoint show`` prints) and mirrors two facts into the TeamRun's status. A
checkpoint kept as a journal carries both in its head (``journal_head``: a few hundred bytes),
so the poll does not read the snapshot. A snapshot-layout checkpoint has no head: the poll
reads it only while it is at most ``settings.poll_read_limit_bytes`` (8 MiB; asked of the
store without reading it, ``value_size``); a larger one is not polled, and the ``CheckpointPolled``
condition says so. Nothing bounds the reads at an attempt's end, which confirm a success.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from oma.budget.account import budget_report
from oma.budget.limits import RunBudget
from oma.budget.state import BudgetReport, BudgetState
from oma.budget.text import budget_column
from oma.checkpoint import Checkpoint
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.snapshot import CheckpointSnapshotV4
from oma.checkpoint.summary import summarize
from oma.errors import OmaError
from oma.store.base import MemoryStore, supports_value_size
from oma.store.journal import supports_journal
from oma.timeutil import parse_iso
from oma.visible import visible
from oma_operator import masking
from oma_operator.resources.bodies import Condition, TeamRunStatus
from oma_operator.runs.rules.status import POLLED, condition, merge_conditions


@dataclass(frozen=True)
class Polled:
    """What one progress poll found: the progress (empty when unknown), why the checkpoint was
    not read when it was too large, and whether the store answered at all."""

    progress: dict[str, Any] = field(default_factory=dict)
    too_large: str | None = None
    answered: bool = True


class CheckpointTooLargeToPoll(OmaError):
    """A snapshot-layout checkpoint over the poll's read limit: not read to poll progress."""

    code = "CHECKPOINT_TOO_LARGE_TO_POLL"


async def read_progress(
    store: MemoryStore,
    run_id: str,
    read_limit: int | None = None,
    budget: RunBudget | None = None,
) -> dict[str, Any] | None:
    """``taskSummary`` and ``lastCheckpointAt`` for the status (and with ``budget``, the spec's,
    ``budget`` and ``budgetSummary``), or None before the first save. ``read_limit``: a
    snapshot stored in more bytes is not read (``CheckpointTooLargeToPoll``)."""
    key = checkpoint_key(run_id)
    if supports_journal(store):
        head = await store.journal_head(key)
        from_head = _from_head(head.metadata, budget) if head is not None else None
        if from_head is not None:
            return from_head
    if read_limit is not None and supports_value_size(store):
        size = await store.value_size(key)
        if size is not None and size > read_limit:
            raise CheckpointTooLargeToPoll(
                f"the latest checkpoint is over {_size(read_limit)}, the most the operator "
                "reads to poll a run's progress (OMA_POLL_READ_LIMIT_BYTES): tasks done and "
                "the last save time are shown again when an attempt ends. A journal-layout "
                "checkpoint (the default) is polled whatever its size"
            )
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    if snapshot is None:
        return None
    summary = summarize(snapshot, checkpoint_key(run_id), None)
    progress: dict[str, Any] = {"lastCheckpointAt": summary.saved_at}
    if summary.tasks:
        done = summary.task_counts.get("completed", 0)
        progress["taskSummary"] = f"{done}/{len(summary.tasks)}"
    # The model turns of the tasks in flight: a long task shows it moves before it completes.
    progress["turns"] = sum(task.turns for task in getattr(snapshot, "in_flight_tasks", None) or [])
    if budget is not None:
        saved = snapshot.budget if isinstance(snapshot, CheckpointSnapshotV4) else None
        progress.update(budget_status(budget_report(budget, saved)))
    return progress


def budget_status(report: BudgetReport) -> dict[str, Any]:
    """A TeamRun status's ``budget`` (limits and spend) and ``budgetSummary`` (its column)."""
    return {"budget": report.to_data(), "budgetSummary": budget_column(report)}


def _size(limit: int) -> str:
    mib = limit / (1024 * 1024)
    return f"{mib:g} MiB" if mib >= 1 else f"{limit} bytes"


def _from_head(metadata: dict[str, Any] | None, budget: RunBudget | None) -> dict[str, Any] | None:
    """Progress from a journal head's metadata; ``None`` when it has none that makes sense
    (then the journal itself is read)."""
    meta = metadata or {}
    counts, saved = meta.get("progress"), meta.get("createdAt")
    if not isinstance(counts, dict) or not isinstance(saved, str):
        return None
    tasks, done = counts.get("tasks"), counts.get("completed")
    if type(tasks) is not int or type(done) is not int or not 0 <= done <= tasks:
        return None
    progress: dict[str, Any] = {"lastCheckpointAt": saved}
    if tasks:
        progress["taskSummary"] = f"{done}/{tasks}"
    turns = counts.get("turns", 0)
    if type(turns) is int and turns >= 0:
        progress["turns"] = turns
    if budget is not None:
        progress.update(budget_status(_head_report(budget, meta.get("budget"))))
    return progress


def _head_report(budget: RunBudget, value: object) -> BudgetReport:
    """The run's budget from its journal head (spend, raises, tokens reserved); one that does
    not parse counts as nothing spent (the status only: the runner reads its checkpoint,
    strictly)."""
    if not isinstance(value, dict):
        return budget_report(budget, None)
    try:
        state = BudgetState.model_validate(
            {key: value[key] for key in ("spent", "raised") if value.get(key) is not None}
        )
    except ValidationError:
        return budget_report(budget, None)
    report = budget_report(budget, state)
    reserved = value.get("reservedTokens")
    if type(reserved) is int and reserved >= 0:
        report.reserved_tokens = reserved
    return report


def poll_due(status: TeamRunStatus, now: datetime, seconds: float) -> bool:
    """Whether the progress poll reads a running run's store now: not within ``seconds`` of
    its attempt's start (``Progressing`` turned True). A run that ends sooner is never polled:
    the status write at its end carries the same figures, so mirroring them before would be
    one more write per run and nothing a reader needs. Longer runs are polled as before, a
    write only when a figure changed."""
    found = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), None
    )
    if found is None or found.get("status") != "True":
        return True
    since = parse_iso(str(found.get("lastTransitionTime") or ""))
    return since is None or (now - since).total_seconds() >= seconds


QUIET_PERIODS = 4  # progress periods a run's liveness (checkpoint time, turns) may go unmirrored


def changed(
    status: TeamRunStatus, progress: dict[str, Any], period: float | None = None
) -> dict[str, Any]:
    """The part of ``progress`` that differs from ``status`` (empty: no write needed).

    With the poll's ``period``, only a change a reader needs is written, and then everything
    that changed with it: a task completed (``taskSummary``'s first number), the budget's spend,
    or a checkpoint time ``QUIET_PERIODS`` periods past the mirrored one, or past the attempt's
    start when none is (a run still saving shows it within a minute by default). Each save
    alone, and each model turn, are not worth a write of their own: they ride along, and the
    attempt's end writes them all."""
    update = {key: value for key, value in progress.items() if status.get(key) != value}
    if period is None or not update:
        return update
    summary = update.get("taskSummary")
    if summary is not None and _completed(summary) != _completed(status.get("taskSummary")):
        return update
    if "budget" in update or "budgetSummary" in update:
        return update
    if "lastCheckpointAt" in update:
        new = parse_iso(str(update["lastCheckpointAt"]))
        # Never mirrored: counted from the attempt's start (``Progressing`` turned True).
        old = parse_iso(str(status.get("lastCheckpointAt") or _progressing_since(status) or ""))
        if new is None or old is None or (new - old).total_seconds() >= QUIET_PERIODS * period:
            return update
    return {}


def _progressing_since(status: TeamRunStatus) -> str | None:
    found = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), None
    )
    return str(found.get("lastTransitionTime")) if found is not None else None


def _completed(summary: object) -> int:
    done, _, _total = str(summary or "0/0").partition("/")
    return int(done) if done.isdigit() else 0


def polled_conditions(
    status: TeamRunStatus, polled: Polled, generation: int
) -> list[Condition] | None:
    """The conditions with ``CheckpointPolled`` as this poll found it; None when nothing
    changes (no write): the condition appears only once a checkpoint was too large, and a
    store that did not answer changes nothing."""
    current = next((c for c in status.get("conditions") or [] if c.get("type") == POLLED), None)
    if not polled.answered:
        return None
    if polled.too_large is None:
        if current is None or current.get("status") == "True":
            return None
        wanted = condition(POLLED, True, "Polled", "the checkpoint is polled again", generation)
    else:
        if current is not None and (current.get("status"), current.get("message")) == (
            "False",
            polled.too_large,
        ):
            return None
        wanted = condition(POLLED, False, "CheckpointTooLarge", polled.too_large, generation)
    return merge_conditions(status.get("conditions") or [], [wanted])


# A run's output in its status: each completed task's result, cut at OUTPUT_CHARS, for the
# first OUTPUT_TASKS tasks; the whole of it stays in the checkpoint (`oma checkpoint show`).
# The status is one object of etcd, shared with everything else a run records.
OUTPUT_CHARS = 1024
OUTPUT_TASKS = 20
TITLE_CHARS = 256
OUTPUT_BYTES = 32 * 1024  # the whole of it, JSON-encoded: tasks past it are omitted


def run_output(snapshot: Any, where: str) -> dict[str, Any]:
    """``status.output`` from a snapshot: ``tasks`` (id, title and result, each cut, with
    ``truncated`` when one was), ``omitted`` (completed tasks past the first ``OUTPUT_TASKS``
    or past ``OUTPUT_BYTES`` in all) and ``more`` (where the whole results are)."""
    completed = [task for task in snapshot.queue.tasks if task.status == "completed"]
    tasks: list[dict[str, Any]] = []
    size = 0
    for task in completed[:OUTPUT_TASKS]:
        # A preview for people (kubectl -o jsonpath prints it raw): what a model or a tool
        # wrote may not drive their terminal, so hidden characters are shown escaped.
        result = visible(masking.mask(task.result or ""))
        title = visible(masking.mask(str(task.title)))
        item: dict[str, Any] = {"taskId": str(task.id)[:TITLE_CHARS], "title": title[:TITLE_CHARS]}
        item["result"] = result[:OUTPUT_CHARS]
        if len(result) > OUTPUT_CHARS or len(title) > TITLE_CHARS:
            item["truncated"] = True
        size += len(json.dumps(item).encode())
        if size > OUTPUT_BYTES:
            break
        tasks.append(item)
    output: dict[str, Any] = {"tasks": tasks, "more": where}
    if len(completed) > len(tasks):
        output["omitted"] = len(completed) - len(tasks)
    return output


async def read_output(store: MemoryStore, run_id: str, where: str) -> dict[str, Any] | None:
    """``run_output`` of the run's latest checkpoint (None: there is none)."""
    snapshot = await Checkpoint(store, run_id=run_id).load_latest()
    return run_output(snapshot, where) if snapshot is not None else None
