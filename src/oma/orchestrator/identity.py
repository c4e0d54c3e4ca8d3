"""Run identity: one logical run id across attempts, fresh trace ids per attempt."""

from __future__ import annotations

import secrets
import uuid

from oma.agent.result import IdentityLink, RunIdentity
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV1
from oma.errors import OmaError
from oma.jsstring import js_trim, utf16_length


class RunIdConflictError(OmaError):
    """Raised when run ids disagree: the run's ``run_id`` and ``CheckpointOptions.run_id``, or the
    one requested and the run the checkpoint belongs to."""

    code = "RUN_ID_CONFLICT"


def _hex(nbytes: int) -> str:
    while True:
        value = secrets.token_hex(nbytes)
        if value.strip("0"):
            return value


def new_trace_id() -> str:
    return _hex(16)


def new_span_id() -> str:
    return _hex(8)


class InvalidRunIdError(OmaError, ValueError):
    """A run id the reference would refuse, or one that could not resume (not transient)."""

    code = "INVALID_RUN_ID"


def validate_run_id(run_id: str) -> str:
    """1-128 UTF-16 units, as the reference counts them; "" is refused as the reference refuses
    it. Leading or trailing whitespace is refused too (a deliberate difference, see
    docs/limitations.md): approval requests store the run id trimmed, so such a run could
    never be restored once an approval gate suspended it."""
    length = utf16_length(run_id)
    if not 1 <= length <= 128:
        raise InvalidRunIdError(
            f"run id must be 1-128 characters (UTF-16 units, as JavaScript counts), got {length}"
        )
    if js_trim(run_id) != run_id:
        raise InvalidRunIdError(
            f"run id {run_id!r} starts or ends with whitespace: remove it (approval requests "
            "store run ids trimmed, so this run could not be restored after an approval)"
        )
    return run_id


def resolve_requested_run_id(
    option_run_id: str | None, checkpoint_run_id: str | None
) -> str | None:
    both = option_run_id is not None and checkpoint_run_id is not None
    if both and option_run_id != checkpoint_run_id:
        raise RunIdConflictError(
            f'runId conflict: run options requested "{option_run_id}" but checkpoint options '
            f'requested "{checkpoint_run_id}".'
        )
    requested = option_run_id if option_run_id is not None else checkpoint_run_id
    return validate_run_id(requested) if requested is not None else None


def fresh_identity(run_id: str | None) -> RunIdentity:
    return RunIdentity(
        run_id=run_id or str(uuid.uuid4()),
        attempt=1,
        trace_id=new_trace_id(),
        root_span_id=new_span_id(),
    )


def restored_identity(snapshot: CheckpointSnapshot, requested: str | None) -> RunIdentity:
    """The next attempt of the run a snapshot belongs to (v1 counts as attempt 1, no link)."""
    if isinstance(snapshot, CheckpointSnapshotV1):
        stored = snapshot.run_id
        if requested and stored and requested != stored:
            raise _restore_conflict(requested, stored)
        return RunIdentity(
            run_id=stored or requested or str(uuid.uuid4()),
            attempt=2,
            trace_id=new_trace_id(),
            root_span_id=new_span_id(),
        )
    saved = snapshot.identity
    if requested and requested != saved.run_id:
        raise _restore_conflict(requested, saved.run_id)
    return RunIdentity(
        run_id=saved.run_id,
        attempt=saved.attempt + 1,
        trace_id=new_trace_id(),
        root_span_id=new_span_id(),
        links=[IdentityLink(trace_id=saved.last_trace_id, span_id=saved.last_root_span_id)],
    )


def _restore_conflict(requested: str, stored: str) -> RunIdConflictError:
    return RunIdConflictError(
        f'restore runId conflict: requested "{requested}" but checkpoint belongs to "{stored}".'
    )
