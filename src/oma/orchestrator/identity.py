"""Run identity: one logical run id across attempts, fresh trace ids per attempt."""

from __future__ import annotations

import secrets
import uuid

from oma.agent.result import IdentityLink, RunIdentity
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV1
from oma.errors import OmaError


class RunIdConflictError(OmaError):
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


def validate_run_id(run_id: str) -> str:
    if not 1 <= len(run_id) <= 128:
        raise ValueError(f"run id must be 1-128 characters, got {len(run_id)}")
    return run_id


def resolve_requested_run_id(
    option_run_id: str | None, checkpoint_run_id: str | None
) -> str | None:
    if option_run_id and checkpoint_run_id and option_run_id != checkpoint_run_id:
        raise RunIdConflictError(
            f'runId conflict: run options requested "{option_run_id}" but checkpoint options '
            f'requested "{checkpoint_run_id}".'
        )
    requested = option_run_id or checkpoint_run_id
    return validate_run_id(requested) if requested else None


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
