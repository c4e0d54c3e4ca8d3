"""Run outcomes: status codes, identities, and the JSON-safe result of one agent run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from oma.checkpoint.runner_state import ToolCallRecord
from oma.wire import WireModel

StatusCode = Literal[
    "ok", "error", "cancelled", "timeout", "budget_exhausted", "rejected", "suspended", "skipped"
]


class RunStatus(WireModel):
    """How a run or task ended: a ``code`` (``ok``, ``error``, ``suspended``, ...) and a message."""

    code: StatusCode
    message: str | None = None


class IdentityLink(WireModel):
    """Links an attempt to the one it continues, by that attempt's trace and root span ids."""

    trace_id: str
    span_id: str
    relation: Literal["continued_from"] = "continued_from"


class RunIdentity(WireModel):
    """One attempt of a run: the run id, kept across attempts, the attempt number (from 1), this
    attempt's trace and root span ids, and a link to the attempt before."""

    run_id: str
    attempt: int = Field(ge=1)
    trace_id: str
    root_span_id: str
    links: list[IdentityLink] | None = None


class Usage(WireModel):
    input_tokens: int = Field(default=0, alias="input_tokens")
    output_tokens: int = Field(default=0, alias="output_tokens")


class AgentRunResult(WireModel):
    """What one agent produced for one task; persisted in completed-task checkpoints."""

    success: bool
    identity: RunIdentity | None = None
    status: RunStatus | None = None  # absent in results written before run statuses existed
    output: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    token_usage: Usage = Field(default_factory=Usage)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    structured: Any | None = None
