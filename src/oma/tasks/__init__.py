"""Tasks, the task queue, task specs and plan artifacts."""

from oma.tasks.loading import (
    InvalidTaskDependenciesError,
    TaskSpec,
    load_task_specs,
    validate_dependency_graph,
)
from oma.tasks.plan import (
    InvalidPlanError,
    PlanArtifact,
    PlanTask,
    create_plan_artifact,
    plan_to_queue,
)
from oma.tasks.queue import TaskNotFoundError, TaskQueue
from oma.tasks.task import TERMINAL_STATUSES, Task

__all__ = [
    "TERMINAL_STATUSES",
    "InvalidPlanError",
    "InvalidTaskDependenciesError",
    "PlanArtifact",
    "PlanTask",
    "Task",
    "TaskNotFoundError",
    "TaskQueue",
    "TaskSpec",
    "create_plan_artifact",
    "load_task_specs",
    "plan_to_queue",
    "validate_dependency_graph",
]
