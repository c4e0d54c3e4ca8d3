"""Forking a run: a new run whose checkpoint starts as another's at one of its past boundaries.

``fork_run`` rebuilds the parent's snapshot at boundary ``seq`` from its history
(``oma.checkpoint.history``), applies an optional JSON Patch (RFC 6902) to it, makes it the
child's (its run id), and writes it as the child's first checkpoint, a journal with a history of
its own. Nothing of the parent's checkpoint is written. Resuming the child (``oma run --run-id
CHILD``, a TeamRun with ``spec.forkFrom``) then goes on from there: the tool calls committed
before the fork point are in the snapshot and are replayed, never executed; every call after it
runs with the child's run id in its idempotency key (``run_id:task_id:tool_call_id``).

Approvals do not cross runs: a request and its decision are bound to their run
(``ApprovalRequest.run_id``), so every request and decision in the snapshot at the fork point
(pending, decided, acted on) is dropped, and the child asks again at each gate it reaches, for
the content it then has (a patched tool input gets a new hash, so a reviewer sees what
changed). A resumed run does not come back to a plan or round gate, so a boundary that waits
on one of those is refused (fork before the request, or after the decision was acted on).
What the parent's decisions already did (a call they allowed, committed before the fork point)
stays done. The ids of the dropped requests are kept with the lineage.

Lineage is kept in the attempt logs (``oma.checkpoint.attempts``): the child's names its parent
and boundary (``forkedFrom``), the parent's lists its forks; ``oma checkpoint show`` prints
both, and the child's attempts trace it.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

from oma import jsonutil
from oma.checkpoint.attempts import ForkedFrom, ForkRef, note_fork, start_fork_log
from oma.checkpoint.history import load_history
from oma.checkpoint.journal import JournalWriter
from oma.checkpoint.keys import checkpoint_key
from oma.checkpoint.manager import snapshot_metadata
from oma.checkpoint.retention import HistoryPolicy
from oma.checkpoint.validation import parse_snapshot
from oma.errors import CheckpointHistoryError, OmaError
from oma.store.base import MemoryStore
from oma.store.journal import supports_journal
from oma.timeutil import now_iso

# What a patch may not touch: who the run is (the fork sets it) and the approvals (the child
# asks again; a patch that wrote a decision would be a decision nobody made).
_PROTECTED = ("/identity", "/pendingApprovals", "/approvalDecisions")
_KEEP_ALL = HistoryPolicy()


class ForkError(OmaError):
    """A fork that cannot be made: a bad patch, a child run that exists, a snapshot the patch
    made invalid. Not transient: nothing was written."""

    code = "FORK_REFUSED"
    transient = False


@dataclass(frozen=True)
class ForkResult:
    """The fork made: its parent and boundary, the child's run id, whether a patch was
    applied, and the approval requests the child will ask again."""

    parent: str
    seq: int
    child: str
    patched: bool
    asked_again: list[str] = field(default_factory=list)  # approval request ids dropped


async def fork_run(
    store: MemoryStore,
    parent: str,
    seq: int,
    *,
    child: str | None = None,
    patch: list[dict[str, Any]] | None = None,
    history: HistoryPolicy | None = _KEEP_ALL,
) -> ForkResult:
    """Make run ``child`` (default: a new id) start from ``parent``'s boundary ``seq``; its
    journal keeps a history for ``history`` (``None``: the latest only)."""
    child = child or f"{parent}-fork-{seq}-{uuid.uuid4().hex[:6]}"
    if child == parent:
        raise ForkError(f"a fork needs a run id of its own: {child!r} is the parent's")
    parent_key, child_key = checkpoint_key(parent), checkpoint_key(child)
    found = await load_history(store, parent_key)
    if found is None:
        raise CheckpointHistoryError(parent_key, f'no checkpoint for run "{parent}"')
    document = found.rebuild(seq)
    if patch is not None:
        document = _patched(document, patch)
    # The child's attempts go on counting from the parent's (its first is the parent's + 1),
    # and its first attempt's trace links to the attempt that saved the boundary.
    document.setdefault("identity", {})["runId"] = child
    _refuse_open_plan_or_round(document, parent, seq)
    asked_again, dropped = _without_approvals(document)
    snapshot = parse_snapshot(document, child_key)  # the patch may have made it invalid
    assert supports_journal(store)  # load_history found a journal
    if await store.journal_version(child_key) is not None or await store.get(child_key):
        raise ForkError(f'run "{child}" already has a checkpoint: choose another run id')
    writer = JournalWriter(store, child_key, fenced=True, history=history)
    what = f"forked from {parent} at boundary {seq}" + (" (patched)" if patch else "")
    if not await writer.start(document, snapshot_metadata(snapshot), what):
        raise ForkError(f'run "{child}" got a checkpoint meanwhile: choose another run id')
    digest = hashlib.sha256(jsonutil.dumps(patch).encode()).hexdigest() if patch else None
    at = now_iso()
    lineage = ForkedFrom(
        run_id=parent, seq=seq, patch_sha256=digest, at=at, approvals_dropped=dropped
    )
    await start_fork_log(store, child_key, lineage)
    await note_fork(store, parent_key, ForkRef(run_id=child, seq=seq, at=at))
    return ForkResult(parent, seq, child, patch is not None, asked_again)


def _patched(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise ForkError("a patch is a JSON array of operations (RFC 6902)")
    for number, op in enumerate(patch):
        for where in ("path", "from"):
            pointer = op.get(where)
            # "" is the whole document, which holds them all
            if isinstance(pointer, str) and (
                pointer == ""
                or any(pointer == p or pointer.startswith(p + "/") for p in _PROTECTED)
            ):
                raise ForkError(
                    f"patch operation {number} touches {pointer!r}: the fork sets the run's "
                    "identity, and approvals are asked again by the child, never patched"
                )
    try:
        patched = jsonpatch.apply_patch(document, patch, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise ForkError(f"the patch does not apply to boundary's snapshot: {exc}") from None
    if not isinstance(patched, dict):
        raise ForkError("the patch replaced the whole snapshot with something not an object")
    return patched


# Gates a resumed run does not come back to: a request of these scopes still open at the fork
# point would be lost with the parent's run id, and the child would go past its gate unasked.
_NOT_ASKED_AGAIN = ("plan", "task_round")


def _refuse_open_plan_or_round(document: dict[str, Any], parent: str, seq: int) -> None:
    for request in document.get("pendingApprovals") or []:
        if isinstance(request, dict) and request.get("scope") in _NOT_ASKED_AGAIN:
            raise ForkError(
                f"boundary {seq} of {parent} waits on a {request['scope']} approval, which a "
                "resumed run does not ask again: fork at a boundary before the request, or "
                "after the decision was acted on"
            )


def _without_approvals(document: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Drop every approval request and decision (the run's lists and the copies on tool calls);
    the ids of the open requests (the child asks them again) and of everything dropped."""
    asked_again = [
        str(r["id"])
        for r in document.get("pendingApprovals") or []
        if isinstance(r, dict) and "id" in r
    ]
    dropped = asked_again + [
        str(d["requestId"])
        for d in document.get("approvalDecisions") or []
        if isinstance(d, dict) and "requestId" in d and d["requestId"] not in asked_again
    ]
    document["pendingApprovals"], document["approvalDecisions"] = [], []
    for task in document.get("inFlightTasks") or []:
        for call in (task.get("pendingToolCalls") or []) if isinstance(task, dict) else []:
            if isinstance(call, dict):
                call.pop("approvalRequest", None)
                call.pop("approvalDecision", None)
    return asked_again, dropped
