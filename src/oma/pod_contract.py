"""The runner pod contract: what a runner is given, and how it reports how it ended.

One module for the three parties: the operator builds runner pods from it, ``oma-runner`` reads
its inputs and writes its report with it, and ``oma run`` exits with the same codes. A
TeamRun's own ``spec.runner.env`` may not use the names reserved here.

| exit | meaning | what the operator does |
|---|---|---|
| 0 | succeeded | ``Succeeded`` |
| 1 | transient: the store unreachable, or another transient error | retries after a backoff |
| 2 | permanent failure (bad input; a failed or rejected run) | ``Failed`` (``Rejected``) |
| 10 | suspended: approvals pending | ``AwaitingApproval`` |
| 11 | drained after SIGTERM, checkpoint flushed | next attempt (a disruption) |
| 12 | fenced: another writer replaced the run's checkpoint | next attempt's or ``Superseded`` |
| 13 | checkpoint lost: saved before, missing now; nothing run | ``Failed`` (``CheckpointLost``) |
| 14 | the model provider unavailable after the SDK's retries | ``ModelUnavailable``: retries |
| 15 | a tool the run recorded changed or gone (nothing called) | ``ToolChanged``: holds, retries |
| 130 | interrupted (``oma run`` only: Ctrl-C) | |

A model call that still fails transiently after its retries ends the attempt with 14 (the
task keeps its place in the checkpoint; the operator starts the next attempt after a backoff,
using no failure budget, until ``retryPolicy.modelOutageSeconds``); one the provider refuses
as such (400, 401, ...) fails its task, and a run with a failed task exits 2. A resumed run
whose recorded MCP tool changed on its server exits 15 before calling anything; the operator
holds it, trying again with backoff until ``retryPolicy.toolChangeSeconds``. A store that
fails at a strict save (a suspension, a ``started`` mark) ends the attempt: 1 when transient.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from oma import jsonutil
from oma.budget.state import BudgetReport
from oma.errors import ModelUnavailableError, OmaError, ToolChangedError

# Inputs: the run spec (one of three forms), who and which attempt this is, where to report.
RUN_SPEC_ENV = "OMA_RUN_SPEC"  # JSON
RUN_SPEC_GZIP_ENV = "OMA_RUN_SPEC_GZIP"  # gzip + base64: one env string is at most 128 KiB
RUN_SPEC_FILE_ENV = "OMA_RUN_SPEC_FILE"
RUN_ID_ENV = "OMA_RUN_ID"
ATTEMPT_ENV = "OMA_ATTEMPT"
# "1": an earlier attempt saved a checkpoint, so this one must find it (or stop: exit 13).
EXPECT_CHECKPOINT_ENV = "OMA_RUN_EXPECT_CHECKPOINT"
POD_NAME_ENV = "OMA_POD_NAME"  # from metadata.name: the attempt log records the pod
TERMINATION_LOG_ENV = "OMA_TERMINATION_LOG"
STORE_URL_ENV = "OMA_STORE_URL"  # the store's URL or DSN, from the TeamRun's Secret
METRICS_PORT_ENV = "OMA_METRICS_PORT"  # unset or 0: no metrics endpoint
MODEL_KEY_ENV_PREFIX = "OMA_MODEL_KEY_"  # + the agent's name: its provider API key
SCRATCH_DIR_ENV = "OMA_SCRATCH_DIR"  # set when the TeamRun asks for a scratch volume
# For the runner's JSON log lines: which TeamRun, in which namespace (the downward API).
TEAMRUN_NAME_ENV = "OMA_RUN_TEAMRUN"
NAMESPACE_ENV = "OMA_RUN_NAMESPACE"
# How the runner writes its log lines: "plain" (the default) or "json", one object per line.
# Not reserved: the operator sets its own format, and a TeamRun's spec.runner.env may override it.
LOG_FORMAT_ENV = "OMA_LOG_FORMAT"
LOG_FORMATS = ("plain", "json")
TERMINATION_LOG = "/dev/termination-log"

RESERVED_ENV = frozenset(
    {
        RUN_SPEC_ENV,
        RUN_SPEC_GZIP_ENV,
        RUN_SPEC_FILE_ENV,
        RUN_ID_ENV,
        ATTEMPT_ENV,
        EXPECT_CHECKPOINT_ENV,
        POD_NAME_ENV,
        TERMINATION_LOG_ENV,
        STORE_URL_ENV,
        METRICS_PORT_ENV,
        SCRATCH_DIR_ENV,
    }
)
RESERVED_ENV_PREFIXES = (MODEL_KEY_ENV_PREFIX, "OMA_RUN_", "OMA_STORE_")


def is_reserved_env(name: str) -> bool:
    """Whether ``name`` belongs to the contract (a TeamRun cannot set it for its runner)."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES)


def model_key_env(agent: str) -> str:
    return MODEL_KEY_ENV_PREFIX + "".join(c if c.isalnum() else "_" for c in agent.upper())


class Exit(IntEnum):
    OK = 0
    TRANSIENT = 1
    PERMANENT = 2
    SUSPENDED = 10
    DRAINED = 11
    FENCED = 12
    CHECKPOINT_LOST = 13
    MODEL_UNAVAILABLE = 14
    TOOL_CHANGED = 15
    INTERRUPTED = 130


def exit_for_error(error: OmaError) -> Exit:
    """How an error that ended a run ends the process: a model provider's outage and a changed
    tool by their own codes (the operator waits them out without using the failure budget), any
    other error by whether it says it is transient."""
    if isinstance(error, ModelUnavailableError):
        return Exit.MODEL_UNAVAILABLE
    if isinstance(error, ToolChangedError):
        return Exit.TOOL_CHANGED
    return Exit.TRANSIENT if error.transient else Exit.PERMANENT


# How a finished run's status code ends the process; any other status is a permanent failure.
EXIT_BY_STATUS = {"ok": Exit.OK, "suspended": Exit.SUSPENDED, "cancelled": Exit.DRAINED}
MAX_REPORT_BYTES = 4096  # what Kubernetes keeps of a termination message


class _Report(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class TaskCounts(_Report):
    total: int = 0
    completed: int = 0
    failed: int = 0


class TerminationReport(_Report):
    """The runner's JSON termination message (``/dev/termination-log``).

    ``status`` is the run's status code (``ok``, ``suspended``, ``rejected``, ``error``, ...) or
    how the runner itself ended (``fenced``, ``checkpoint_lost``, ``crashed``, ``failed``,
    ``invalid``). ``checkpointed``: the attempt saved (or resumed from) a checkpoint, so later
    attempts must find one."""

    run_id: str | None = None
    attempt: int | None = None
    pod_attempt: int | None = None
    status: str = ""
    message: str = ""
    tasks: TaskCounts | None = None
    pending_approvals: list[str] = Field(default_factory=list)
    truncated: bool = False
    checkpointed: bool | None = None
    metrics: dict[str, Any] | None = None
    budget: BudgetReport | None = None  # the run's limits and spend, when it has a budget

    @classmethod
    def parse(cls, text: str) -> TerminationReport | None:
        """The report in a termination message, or None when it holds none (a crash, or a
        message Kubernetes wrote itself)."""
        try:
            return cls.model_validate(jsonutil.loads(text))
        except (ValueError, ValidationError, RecursionError):
            return None

    def to_text(self) -> str:
        """At most ``MAX_REPORT_BYTES`` of JSON: pending approvals are dropped from the end
        (``truncated``) before anything else is cut."""
        report = self
        text = report._json()
        while len(text.encode()) > MAX_REPORT_BYTES and report.pending_approvals:
            report = report.model_copy(
                update={"pending_approvals": report.pending_approvals[:-1], "truncated": True}
            )
            text = report._json()
        return text.encode()[:MAX_REPORT_BYTES].decode("utf-8", "ignore")

    def _json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=False)
