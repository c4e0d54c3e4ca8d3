"""Typed errors shared by every layer of the engine.

Each error carries a stable ``code`` (for scripts and the CLI), a ``transient`` flag and a
message that says what was wrong and what to do about it. ``docs/errors.md`` lists them all.
"""

from __future__ import annotations


class OmaError(Exception):
    """Base class of every error the engine raises on purpose.

    ``transient``: True when the same operation, tried again later and unchanged, may succeed
    (a server that was unreachable, a run drained for a restart); False when it will fail the
    same way until something is changed (settings, data, the spec, a newer attempt that took
    over). Each class declares its default; ``transient=`` given to the constructor overrides
    it for one error where it depends on the cause.
    """

    code: str = "OMA_ERROR"
    transient: bool = False

    def __init__(self, *args: object, transient: bool | None = None) -> None:
        super().__init__(*args)
        if transient is not None:
            self.transient = transient


class StoreError(OmaError):
    """A ``MemoryStore`` could not do what was asked. Permanent unless the raiser knows that
    the cause passes by itself (``transient=True``: e.g. a Redis replica promoted mid-write)."""

    code = "STORE_ERROR"


class StoreUnavailableError(StoreError):
    """The store's server could not be reached or stopped answering: transient.

    Raised by a mutation, the outcome of that mutation is unknown: it may have been applied.
    """

    code = "STORE_UNAVAILABLE"
    transient = True


class StoreConfigError(StoreError, ValueError):
    """The store's settings are wrong (an unsupported URL scheme, a table or namespace the
    store cannot use): permanent, fix the settings. Also a ``ValueError``, as it was before."""

    code = "STORE_CONFIG"


class StoreAuthError(StoreError):
    """The server rejected the credentials (or TLS identity): retrying will not help."""

    code = "STORE_AUTH_FAILED"


class StoreCapabilityError(StoreError, TypeError):
    """A store declares a capability (``StoreCapabilities``) without the methods it needs, or
    its ``capabilities`` attribute is not a ``StoreCapabilities``: a bug in the store's class,
    permanent. Also a ``TypeError``, as a missing method would be."""

    code = "STORE_CAPABILITY"


class StoreCorruptError(StoreError):
    """Durable store contents are unreadable; the store refuses to start empty over them."""

    code = "STORE_CORRUPT"
    transient = False

    def __init__(self, location: str, problem: str, *, remedy: str | None = None) -> None:
        self.location = location
        self.problem = problem
        if remedy is None:  # a store file
            message = (
                f"store file {location!r} is unusable: {problem}. Nothing was changed; restore "
                "the file from a backup or move it away to start with an empty store."
            )
        else:  # a damaged key of a server's store (``oma.store.damaged``)
            message = f"{location} is damaged: {problem}. Nothing was changed. {remedy}"
        super().__init__(message)


_DAMAGED = (
    "restore the key from a backup, or delete it (oma checkpoint delete) to start the run "
    "over, which repeats the side effects it already committed"
)


class CheckpointError(OmaError):
    """Base class of checkpoint load and save errors."""

    code = "CHECKPOINT_ERROR"


class CheckpointFencedError(CheckpointError):
    """A newer attempt claimed the run: this attempt must stop without running more tools."""

    code = "FENCED"

    def __init__(self, key: str, attempt: int | None, *, first_save: bool = False) -> None:
        self.key = key
        self.attempt = attempt
        self.first_save = first_save  # it never saved: another start of the run saved first
        which = f"attempt {attempt}" if attempt is not None else "this attempt"
        if first_save:
            # Two fresh starts of one run id race for its first save: neither is "newer".
            super().__init__(
                f'checkpoint "{key}" was saved first by another start of the same run (another '
                f"process with this run id, started at the same time); {which} stopped without "
                "running further tools. Give each run its own run id, or let the one that "
                "saved first go on"
            )
            return
        super().__init__(
            f'checkpoint "{key}" was written by a newer attempt of the run; {which} is '
            "superseded and stopped without running further tools. Nothing to do: the newer "
            "attempt carries the run on"
        )


class CheckpointLostError(CheckpointFencedError):
    """The run saved a checkpoint before, and the store no longer has it (flushed, restarted
    without persistence, deleted by hand). Starting over would run committed side effects
    again, so the attempt stops instead, without running any (more) tools. Permanent."""

    code = "CHECKPOINT_LOST"

    def __init__(self, key: str, attempt: int | None, why: str) -> None:
        CheckpointError.__init__(
            self,
            f'checkpoint "{key}" is missing from the store, but {why}. Nothing more was run: '
            "starting over would repeat side effects already committed. Restore the store from a "
            "backup and run again, or start the work again under a new run id once you have "
            "checked what the lost attempts did",
        )
        self.first_save = False
        self.key = key
        self.attempt = attempt


class RunDrained(OmaError):
    """The run was asked to stop (e.g. SIGTERM) and stopped at a durable boundary: transient,
    running it again resumes from that boundary."""

    code = "DRAINED"
    transient = True


class CheckpointDecodeError(CheckpointError):
    """The value stored at a checkpoint key is not JSON."""

    code = "CHECKPOINT_NOT_JSON"

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(
            f'Checkpoint: stored value at "{key}" is not valid JSON ({detail}). Nothing was '
            f"run: {_DAMAGED}."
        )


class CheckpointHistoryError(CheckpointError):
    """A past boundary asked of a checkpoint that does not keep it (never kept: the snapshot
    layout or history off; or dropped by the history's retention)."""

    code = "CHECKPOINT_HISTORY"

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(
            f'Checkpoint "{key}": {detail}. `oma checkpoint history` lists the boundaries it '
            "keeps; a run keeps them in the journal layout (Redis, PostgreSQL, memory), for "
            "the retention set in store.history."
        )


class CheckpointValidationError(CheckpointError):
    """The value stored at a checkpoint key is JSON but not a valid checkpoint snapshot.

    ``problems`` lists every violation as ``"<path>: <message>"``; ``rules`` names the clauses of
    the snapshot validation rules (reference §2.6.1-§2.6.6) that failed.
    """

    code = "CHECKPOINT_INVALID"

    def __init__(self, key: str, problems: list[str], rules: set[str]) -> None:
        self.key = key
        self.problems = problems
        self.rules = rules
        listed = "; ".join(problems[:10])
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        super().__init__(
            f'Checkpoint: stored value at "{key}" is not a checkpoint snapshot: {listed}{more}. '
            f"If a newer oma wrote it, use that version; otherwise {_DAMAGED}"
        )


class AttemptLogError(CheckpointError):
    """The attempt log next to a checkpoint is unreadable; the snapshot itself is unaffected."""

    code = "ATTEMPT_LOG_INVALID"

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        super().__init__(
            f'attempt log at "{key}" is unreadable ({detail}); the checkpoint itself is not '
            "affected: delete this key to start a new log"
        )


class AttemptInterruptedError(OmaError):
    """Something the attempt depends on failed in a way that leaves a step's outcome unknown (a
    tool's server lost mid-call, a model provider that stays unavailable): not a result the
    model sees, nor a task's failure. The attempt ends, its checkpoint as it was, and the next
    attempt resumes from it. Transient unless the raiser knows better."""

    code = "ATTEMPT_INTERRUPTED"
    transient = True


class ModelUnavailableError(AttemptInterruptedError):
    """A model call still failed transiently after the SDK's retries (unreachable, timed out,
    408/409/429/5xx, overloaded) in a run that parks on provider outages (``oma run``, the
    runner pod): the attempt ends at its last boundary instead of failing the task, and the
    next attempt resumes there. ``provider_message`` is the adapter's error message."""

    code = "MODEL_UNAVAILABLE"

    def __init__(self, provider_message: str) -> None:
        self.provider_message = provider_message
        super().__init__(
            f"the model provider is unavailable: {provider_message}. The run stopped at its "
            "last durable boundary; run it again (the operator does, with backoff) to resume"
        )


class ToolChangedError(OmaError):
    """A resumed attempt found a tool the run recorded at its start changed or gone: nothing was
    called, and the run holds (exit 15) rather than call something else under the same name.
    It goes on once the tool is back as it was; ``agent`` and ``tool`` name it. Not transient
    for a caller that does not wait (``oma run`` says run it again once the tool is back)."""

    code = "TOOL_CHANGED"

    def __init__(self, agent: str, tool: str, message: str) -> None:
        self.agent, self.tool = agent, tool
        super().__init__(message)


class MissingExtraError(OmaError, ImportError):
    """A part of oma was used whose optional dependencies are not installed: ``pip install`` the
    extra the message names (``oma[redis]``, ``oma[postgres]``, ...). Also an ``ImportError``."""

    code = "MISSING_EXTRA"

    @classmethod
    def naming(cls, extra: str, what: str, cause: ImportError) -> MissingExtraError:
        package = cause.name.split(".")[0] if cause.name else "its driver"
        return cls(f"{what} needs the {package} package: pip install 'oma[{extra}]'")
