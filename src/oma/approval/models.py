"""Approval requests and decision records, with the reference's integrity rules.

A request binds its content: ``requestHash`` is recomputed from scope, boundary and content and
``id`` from run id, scope, boundary and hash, so tampering with any of them is detected. Content
is kept as the exact JSON object that was hashed, checked against the typed models of its kind.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from oma.approval.canonical import canonical_json, sha256_hex
from oma.approval.errors import DurableApprovalError
from oma.jsstring import js_trim
from oma.timeutil import is_iso_timestamp
from oma.wire import WireModel

ApprovalScope = Literal[
    "plan", "task_round", "task_dispatch", "tool_call", "uncertain_tool_call", "budget"
]
# Scopes whose request is about one tool call and is attached to that call on restore.
TOOL_CALL_SCOPES: frozenset[str] = frozenset({"tool_call", "uncertain_tool_call"})
# How a reviewer settles an uncertain tool call: run it again, or record it without running it.
Resolution = Literal["retry", "done", "failed"]
REQUEST_ID_PATTERN = r"^apr_[0-9a-f]{32}$"
HASH_PATTERN = r"^[0-9a-f]{64}$"
REASON_LIMIT = 4096  # characters of a reviewer's reason kept with a decision


class JsonDataModel(WireModel):
    """A wire model holding only JSON data, dumped in python mode.

    pydantic's JSON mode turns a lone surrogate in an object key (``"\\ud800"``, legal JSON that
    the reference writes) into U+FFFD, or raises ``UnicodeEncodeError`` when the key is nested:
    approval content would change, and its hash no longer match. ``jsonutil.dumps`` writes
    such keys as escapes.
    """

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="python", by_alias=True)


class ApprovalTaskSnapshot(WireModel):
    """The fields of a task snapshot an approval content must carry (others are kept)."""

    id: str
    title: str
    description: str
    status: str
    created_at: str
    updated_at: str


class PlanContent(WireModel):
    kind: Literal["plan"]
    continuation: Literal["execute", "plan_only"]
    tasks: list[ApprovalTaskSnapshot]


class TaskRoundContent(WireModel):
    kind: Literal["task_round"]
    completed_tasks: list[ApprovalTaskSnapshot]
    next_tasks: list[ApprovalTaskSnapshot]


class TaskDispatchContent(WireModel):
    kind: Literal["task_dispatch"]
    task: ApprovalTaskSnapshot


class _ToolCallFields(WireModel):
    """The seven fields of the reference's tool content: the call as the reviewer sees it."""

    tool_name: str
    raw_input: dict[str, Any]
    input: dict[str, Any]
    agent_name: str
    task_id: str
    tool_call_id: str
    consequential: bool


class ToolCallContent(_ToolCallFields):
    kind: Literal["tool_call"]


class UncertainToolCallContent(_ToolCallFields):
    """A non-idempotent call that started and never committed: it may or may not have happened.

    Not in the reference (whose scopes are the four above): only this engine marks calls as
    started, so only it can find one uncertain. Its own scope keeps its request id apart from
    the ``tool_call`` request a gate may make for the same call.
    """

    kind: Literal["uncertain_tool_call"]
    started_at: str
    started_attempt: Annotated[int, Field(ge=1)]
    after_approval: str | None = None


class BudgetContent(WireModel):
    """Raise one of the run's limits from ``current`` to ``proposed`` (not in the reference:
    only this engine keeps budgets). ``used`` is what the run had spent and reserved, ``needed``
    what the step that stopped needs; the task and agent name that step."""

    kind: Literal["budget"]
    limit: Literal["tokens", "modelCalls", "toolCalls"]
    current: Annotated[int, Field(ge=1)]
    proposed: Annotated[int, Field(ge=1)]
    used: Annotated[int, Field(ge=0)]
    needed: Annotated[int, Field(ge=1)]
    task_id: str
    agent_name: str

    @model_validator(mode="after")
    def _raises(self) -> BudgetContent:
        if self.proposed <= self.current:
            raise ValueError(f"proposed {self.proposed} is not above current {self.current}")
        return self


TypedContent = (
    PlanContent
    | TaskRoundContent
    | TaskDispatchContent
    | ToolCallContent
    | UncertainToolCallContent
    | BudgetContent
)
ApprovalContent = Annotated[TypedContent, Field(discriminator="kind")]
_CONTENT = TypeAdapter[ApprovalContent](ApprovalContent)


def hash_approval_request(scope: str, boundary: str, content: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``{scope, boundary, content}`` (boundary trimmed)."""
    payload = {"scope": scope, "boundary": js_trim(boundary), "content": content}
    return sha256_hex(canonical_json(payload))


def derive_request_id(run_id: str, scope: str, boundary: str, request_hash: str) -> str:
    """``apr_`` and 32 hex digits of sha256 over run id, scope, boundary and hash: the same request
    of the same run always gets the same id."""
    preimage = f"{js_trim(run_id)}\n{scope}\n{js_trim(boundary)}\n{request_hash}"
    return "apr_" + sha256_hex(preimage)[:32]


class ApprovalRequest(JsonDataModel):
    """An immutable request for a human decision on exactly this content."""

    version: Literal[1]
    id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    run_id: str
    scope: ApprovalScope
    boundary: str
    request_hash: Annotated[str, Field(pattern=HASH_PATTERN)]
    requested_at: str
    reason: str | None = None
    content: dict[str, Any]

    @field_validator("requested_at")
    @classmethod
    def _requested_at_is_a_date(cls, value: str) -> str:
        if not is_iso_timestamp(value):
            raise ValueError(f"requestedAt {value!r} is not a timestamp")
        return value

    @field_validator("content")
    @classmethod
    def _content_is_valid_for_its_kind(cls, value: dict[str, Any]) -> dict[str, Any]:
        _CONTENT.validate_python(value)
        return value

    @model_validator(mode="after")
    def _binds_its_content(self) -> ApprovalRequest:
        if self.content.get("kind") != self.scope:
            raise ValueError(f"content kind {self.content.get('kind')!r} != scope {self.scope!r}")
        try:
            expected_hash = hash_approval_request(self.scope, self.boundary, self.content)
        except DurableApprovalError as exc:
            raise ValueError(str(exc)) from exc
        if expected_hash != self.request_hash:
            raise ValueError("requestHash does not match the request content")
        if derive_request_id(self.run_id, self.scope, self.boundary, self.request_hash) != self.id:
            raise ValueError("request id does not match its run id, scope, boundary and hash")
        return self


class Reviewer(WireModel):
    """Who decided on a request: a non-empty id and, optionally, a name to show."""

    id: str
    display_name: str | None = None

    @field_validator("id")
    @classmethod
    def _id_not_blank(cls, value: str) -> str:
        if not js_trim(value):
            raise ValueError("reviewer id is empty")
        return value


class ApprovalDecisionRecord(JsonDataModel):
    """A recorded decision. It binds one request by id, run id, scope and hash."""

    version: Literal[1]
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)]
    run_id: Annotated[str, Field(min_length=1)]
    scope: ApprovalScope
    request_hash: Annotated[str, Field(pattern=HASH_PATTERN)]
    decision: Literal["approved", "rejected"]
    reviewer: Reviewer
    decided_at: str
    # Only for uncertain_tool_call (not in the reference): approved is "retry"; rejected is
    # "done" (recorded as having happened, with the reviewer's ``result`` text) or "failed".
    resolution: Resolution | None = None
    result: Annotated[str, Field(max_length=16384)] | None = None
    # Why the reviewer decided (not in the reference, whose readers keep unknown fields): on
    # Kubernetes the ApprovalDecision's spec.reason, which would otherwise go with the resource.
    reason: Annotated[str, Field(max_length=REASON_LIMIT)] | None = None

    @field_validator("decided_at")
    @classmethod
    def _decided_at_is_a_date(cls, value: str) -> str:
        if not is_iso_timestamp(value):
            raise ValueError(f"decidedAt {value!r} is not a timestamp")
        return value

    @model_validator(mode="after")
    def _resolution_fits_the_scope(self) -> ApprovalDecisionRecord:
        if self.scope != "uncertain_tool_call":
            if self.resolution is not None or self.result is not None:
                raise ValueError(
                    f"resolution and result are only for uncertain_tool_call, not {self.scope}"
                )
            return self
        expected = ("retry",) if self.decision == "approved" else ("done", "failed")
        if self.resolution not in expected:
            raise ValueError(
                f"an uncertain_tool_call decision {self.decision} needs resolution "
                f"{' or '.join(expected)}, not {self.resolution!r}"
            )
        if self.result is not None and self.resolution != "done":
            raise ValueError("result is only recorded with resolution done")
        return self

    def binds(self, request: ApprovalRequest) -> bool:
        return (
            self.request_id == request.id
            and self.run_id == request.run_id
            and self.scope == request.scope
            and self.request_hash == request.request_hash
        )


def validation_summary(error: ValidationError) -> str:
    """One line per problem: ``path: message``."""
    lines = []
    for problem in error.errors():
        path = ".".join(str(part) for part in problem["loc"]) or "(root)"
        lines.append(f"{path}: {problem['msg']}")
    return "; ".join(lines)
