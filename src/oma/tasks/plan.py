"""Plan artifacts (version 1): a frozen task graph that can be replayed verbatim."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from oma.errors import OmaError
from oma.task_metadata import TaskMetadata
from oma.tasks.loading import validate_dependency_graph
from oma.tasks.queue import TaskQueue
from oma.tasks.task import DependencyPayload, MemoryScope, Task


class InvalidPlanError(OmaError):
    """Raised when a plan artifact cannot be replayed (another version, duplicate task ids, bad
    dependencies) or a planned task has no description to store."""

    code = "INVALID_PLAN"


class PlanTask(BaseModel):
    """One task of a stored plan; the fields mean what they mean in a task list."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    id: str = Field(min_length=1, description="Task id, kept verbatim when the plan is replayed.")
    title: str = Field(description="Short name; the prompt's heading.")
    description: str = Field(description="What to do: the body of the task's prompt.")
    assignee: str | None = Field(default=None, description="The agent that runs it.")
    depends_on: list[str] | None = Field(
        default=None, description="Ids of tasks of this plan that must complete first."
    )
    memory_scope: MemoryScope | None = Field(
        default=None, description="As in a task list: dependencies or all shared memory."
    )
    dependency_payload: DependencyPayload | None = Field(
        default=None, description="As in a task list: what a dependency passes on."
    )
    role: str | None = Field(default=None, description="Free-form role label.")
    priority: str | None = Field(default=None, description="Free-form priority label.")
    metadata: TaskMetadata | None = Field(
        default=None, description="As in a task list: checked and redacted the same way."
    )
    max_retries: int | None = Field(default=None, description="Retries of a failed task.")
    retry_delay_ms: float | None = Field(default=None, description="First retry delay (ms).")
    retry_backoff: float | None = Field(default=None, description="Delay growth per retry.")
    requires: dict[str, Any] | None = Field(
        default=None, description="Free-form requirements recorded by the planner."
    )


class PlanArtifact(BaseModel):
    """A plan as a coordinator produced it, stored to be run again without planning."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    version: Literal[1] = Field(description="Plan format version (1).")
    goal: str | None = Field(default=None, description="The goal the plan was made for.")
    tasks: list[PlanTask] = Field(description="The tasks, with dependencies by id.")

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def plan_to_queue(plan: PlanArtifact | dict[str, Any]) -> TaskQueue:
    """Replay a plan: ids verbatim, dependencies by id only, every task pending."""
    if isinstance(plan, dict):
        if plan.get("version") != 1:
            raise InvalidPlanError(f"Unsupported plan artifact version: {plan.get('version')}")
        plan = PlanArtifact.model_validate(plan)
    tasks = [
        Task(
            id=item.id,
            title=item.title,
            description=item.description,
            assignee=item.assignee,
            depends_on=list(item.depends_on or []),
            memory_scope=item.memory_scope,
            dependency_payload=item.dependency_payload,
            role=item.role,
            priority=item.priority,
            metadata=item.metadata,
            requires=item.requires,
            max_retries=item.max_retries,
            retry_delay_ms=item.retry_delay_ms,
            retry_backoff=item.retry_backoff,
        )
        for item in plan.tasks
    ]
    if len({task.id for task in tasks}) != len(tasks):
        raise InvalidPlanError("Invalid plan artifact: duplicate task ids")
    try:
        validate_dependency_graph(tasks)
    except OmaError as exc:
        raise InvalidPlanError(f"Invalid plan artifact: {exc}") from exc
    queue = TaskQueue()
    for task in tasks:
        queue.add(task)
    return queue


def create_plan_artifact(tasks: list[Task], goal: str | None) -> PlanArtifact:
    """A replayable plan from planned (not yet executed) tasks."""
    items = []
    for task in tasks:
        if not task.description:
            raise InvalidPlanError(f'task "{task.title}" has no description')
        items.append(
            PlanTask(
                id=task.id,
                title=task.title,
                description=task.description,
                assignee=task.assignee,
                depends_on=list(task.depends_on) or None,
                memory_scope=task.memory_scope,
                dependency_payload=task.dependency_payload,
                role=task.role,
                priority=task.priority,
                metadata=task.metadata,
                requires=task.requires,
                max_retries=task.max_retries,
                retry_delay_ms=task.retry_delay_ms,
                retry_backoff=task.retry_backoff,
            )
        )
    return PlanArtifact(version=1, goal=goal, tasks=items)
