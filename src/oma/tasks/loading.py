"""From task specs and plan artifacts to queued tasks, with dependency graph validation."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from oma.errors import OmaError
from oma.task_metadata import TaskMetadata
from oma.tasks.queue import TaskQueue
from oma.tasks.task import DependencyPayload, MemoryScope, Task


class InvalidTaskDependenciesError(OmaError):
    """Raised when a task depends on itself or an unknown task id, or dependencies form a cycle."""

    code = "INVALID_TASK_DEPENDENCIES"


class TaskSpec(BaseModel):
    """A task to run: ``depends_on`` names other tasks of the same list by id or title."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    title: str = Field(min_length=1, description="Short name; the prompt's heading.")
    description: str = Field(description="What to do: the body of the task's prompt.")
    assignee: str | None = Field(
        default=None, description="The agent that runs it (default: the first agent)."
    )
    depends_on: list[str] = Field(
        default_factory=list,
        description="Tasks (by id or title) that must complete first; their results become "
        "the prompt's context.",
    )
    memory_scope: MemoryScope | None = Field(
        default=None,
        description='Context from dependencies only ("dependencies") or the whole shared '
        'memory summary ("all").',
    )
    dependency_payload: DependencyPayload | None = Field(
        default=None,
        description="What a dependency passes on: its output text, its structured result, or both.",
    )
    metadata: TaskMetadata | None = Field(
        default=None,
        description="Data kept with the task in checkpoints: at most 16 entries of strings "
        "(1024 characters at most; credential text redacted), numbers, booleans or arrays of "
        "one of them; keys [A-Za-z][A-Za-z0-9_.-]{0,63}, not oma.* nor a credential's name.",
    )
    max_retries: int | None = Field(
        default=None, ge=0, description="Retries of a failed task (each starts afresh)."
    )
    retry_delay_ms: float | None = Field(
        default=None, ge=0, description="First retry delay in milliseconds."
    )
    retry_backoff: float | None = Field(
        default=None, ge=1, description="Factor the delay grows by per retry (capped at 30 s)."
    )
    role: str | None = Field(default=None, description="Free-form role label.")
    priority: str | None = Field(default=None, description="Free-form priority label.")


def validate_dependency_graph(tasks: Sequence[Task], *, known_ids: Iterable[str] = ()) -> None:
    """Refuse self-dependencies, unknown ids and cycles, naming them."""
    ids = {task.id for task in tasks} | set(known_ids)
    problems: list[str] = []
    for task in tasks:
        for dep in task.depends_on:
            if dep == task.id:
                problems.append(f'task "{task.title}" depends on itself')
            elif dep not in ids:
                problems.append(f'task "{task.title}" depends on unknown task id "{dep}"')
    problems.extend(_cycles(tasks))
    if problems:
        raise InvalidTaskDependenciesError(f"Invalid task dependencies: {'; '.join(problems)}")


def _cycles(tasks: Sequence[Task]) -> list[str]:
    graph = {task.id: [d for d in task.depends_on if d != task.id] for task in tasks}
    titles = {task.id: task.title for task in tasks}
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                cycle = [*path[path.index(dep) :], dep]
                found.append("cycle " + " -> ".join(titles.get(n, n) for n in cycle))
            elif dep in graph and state.get(dep) is None:
                visit(dep, [*path, dep])
        state[node] = 2

    for task in tasks:
        if state.get(task.id) is None:
            visit(task.id, [task.id])
    return found


def load_task_specs(
    specs: Sequence[TaskSpec | dict[str, Any]],
    roster: Iterable[str],
    *,
    run_id: str | None = None,
) -> TaskQueue:
    """Fresh tasks in spec order; dependencies by exact id or unique title.

    With ``run_id``, a task's id is derived from the run id, its place in the list and its
    title (``derived_task_id``): a run started again under the same id (its checkpoint lost)
    gives its tool calls the same idempotency keys. Without, ids are random UUIDs."""
    parsed = [
        spec if isinstance(spec, TaskSpec) else TaskSpec.model_validate(spec) for spec in specs
    ]
    agents = set(roster)
    tasks = [
        Task(
            title=spec.title,
            description=spec.description,
            assignee=spec.assignee if spec.assignee in agents else None,
            memory_scope=spec.memory_scope,
            dependency_payload=spec.dependency_payload,
            metadata=spec.metadata,
            max_retries=spec.max_retries,
            retry_delay_ms=spec.retry_delay_ms,
            retry_backoff=spec.retry_backoff,
            role=spec.role,
            priority=spec.priority,
        )
        for spec in parsed
    ]
    if run_id is not None:
        for index, task in enumerate(tasks):
            task.id = derived_task_id(run_id, index, task.title)
    by_title: dict[str, list[Task]] = {}
    for task in tasks:
        by_title.setdefault(task.title.strip().lower(), []).append(task)
    ids = {task.id for task in tasks}
    unresolved: dict[str, list[str]] = {}
    for task, spec in zip(tasks, parsed, strict=True):
        for ref in spec.depends_on:
            if ref in ids:
                task.depends_on.append(ref)
                continue
            matches = by_title.get(ref.strip().lower(), [])
            if len(matches) == 1:
                task.depends_on.append(matches[0].id)
            else:
                why = "ambiguous duplicate title" if matches else "no such task"
                unresolved.setdefault(task.id, []).append(f"{ref!r} ({why})")
    validate_dependency_graph(tasks)
    queue = TaskQueue()
    for task in tasks:
        queue.add(task)
    for task_id, refs in unresolved.items():
        queue.fail(task_id, f"Unresolved dependency reference(s): {', '.join(refs)}")
    return queue


_TASK_IDS = uuid.UUID("5d0f3c1e-8a51-4c4e-9d55-0a6d1f2b7c11")  # the namespace of derived ids


def derived_task_id(run_id: str, index: int, title: str) -> str:
    """The id of the ``index``-th task (from 0) of run ``run_id``: a UUID (version 5)."""
    return str(uuid.uuid5(_TASK_IDS, f"{run_id}\x00{index}\x00{title}"))
