"""The task queue: statuses, dependency blocking and promotion, fail and skip cascades, events."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from oma.checkpoint.queue_snapshot import (
    PlanRevision,
    TaskQueueSnapshotV1,
    TaskQueueSnapshotV2,
    TaskStatus,
)
from oma.errors import OmaError
from oma.tasks.task import Task

QueueEvent = Literal["task:ready", "task:complete", "task:failed", "task:skipped", "all:complete"]
Listener = Callable[[Task | None], None]


class TaskNotFoundError(OmaError):
    """Raised when the queue is asked for a task id it does not hold."""

    code = "TASK_NOT_FOUND"


class TaskQueue:
    """A run's tasks and their statuses: a task waits (blocked) until its dependencies complete,
    failures and skips cascade to dependents, and listeners (``on``) hear each change."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._listeners: dict[QueueEvent, list[Listener]] = {}
        # Plan revisions of a restored v2 queue are carried forward so no save drops them.
        self._plan_revisions: list[PlanRevision] = []

    # -- reading -----------------------------------------------------------------------------
    @property
    def tasks(self) -> list[Task]:
        return list(self._tasks.values())

    def get(self, task_id: str) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise TaskNotFoundError(f'Task "{task_id}" not found.') from None

    def find(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def by_status(self, status: TaskStatus) -> list[Task]:
        return [task for task in self._tasks.values() if task.status == status]

    def is_complete(self) -> bool:
        return all(task.terminal for task in self._tasks.values())

    def progress(self) -> dict[TaskStatus, int]:
        counts: dict[TaskStatus, int] = {
            "pending": 0,
            "in_progress": 0,
            "completed": 0,
            "failed": 0,
            "blocked": 0,
            "skipped": 0,
        }
        for task in self._tasks.values():
            counts[task.status] += 1
        return counts

    def dependencies_met(self, task: Task) -> bool:
        return all(
            dep in self._tasks and self._tasks[dep].status == "completed" for dep in task.depends_on
        )

    # -- events ------------------------------------------------------------------------------
    def on(self, event: QueueEvent, listener: Listener) -> Callable[[], None]:
        self._listeners.setdefault(event, []).append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners.get(event, []):
                self._listeners[event].remove(listener)

        return unsubscribe

    def _emit(self, event: QueueEvent, task: Task | None = None) -> None:
        for listener in list(self._listeners.get(event, [])):
            listener(task)

    # -- transitions -------------------------------------------------------------------------
    def add(self, task: Task) -> None:
        self._tasks[task.id] = task
        if task.depends_on and not self.dependencies_met(task):
            task.status = "blocked"
            task.touch()
        elif task.status == "pending":
            self._emit("task:ready", task)

    def start(self, task_id: str) -> Task:
        task = self.get(task_id)
        task.status = "in_progress"
        task.touch()
        return task

    def complete(self, task_id: str, result: str | None = None) -> Task:
        task = self.get(task_id)
        task.status = "completed"
        if result is not None:
            task.result = result
        task.touch()
        self._emit("task:complete", task)
        for other in self._tasks.values():
            unblocked = other.status == "blocked" and task_id in other.depends_on
            if unblocked and self.dependencies_met(other):
                other.status = "pending"
                other.touch()
                self._emit("task:ready", other)
        self._check_all_complete()
        return task

    def fail(self, task_id: str, error: str) -> Task:
        task = self.get(task_id)
        self._finish(task, "failed", error, "task:failed")
        self._cascade(task_id, "failed", lambda dep: f'Cancelled: dependency "{dep}" failed.')
        self._check_all_complete()
        return task

    def skip(self, task_id: str, reason: str) -> Task:
        task = self.get(task_id)
        self._finish(task, "skipped", reason, "task:skipped")
        self._cascade(task_id, "skipped", lambda dep: f'Skipped: dependency "{dep}" was skipped.')
        self._check_all_complete()
        return task

    def skip_remaining(self, reason: str = "Skipped: approval rejected.") -> list[Task]:
        """Every non-terminal task (in-progress too) becomes skipped; call after draining."""
        skipped = [task for task in self._tasks.values() if not task.terminal]
        for task in skipped:
            self._finish(task, "skipped", reason, "task:skipped")
        self._check_all_complete()
        return skipped

    def update(
        self,
        task_id: str,
        *,
        status: TaskStatus | None = None,
        result: str | None = None,
        assignee: str | None = None,
    ) -> Task:
        task = self.get(task_id)
        if status is not None:
            task.status = status
        if result is not None:
            task.result = result
        if assignee is not None:
            task.assignee = assignee
        task.touch()
        return task

    def _finish(self, task: Task, status: TaskStatus, result: str, event: QueueEvent) -> None:
        task.status = status
        task.result = result
        task.touch()
        self._emit(event, task)

    def _cascade(self, origin: str, status: TaskStatus, reason: Callable[[str], str]) -> None:
        frontier = [origin]
        while frontier:
            dep = frontier.pop()
            for other in self._tasks.values():
                if other.status in ("pending", "blocked") and dep in other.depends_on:
                    event: QueueEvent = "task:failed" if status == "failed" else "task:skipped"
                    self._finish(other, status, reason(dep), event)
                    frontier.append(other.id)

    def _check_all_complete(self) -> None:
        if self.is_complete():
            self._emit("all:complete")

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self) -> TaskQueueSnapshotV1 | TaskQueueSnapshotV2:
        tasks = self.tasks
        v1 = TaskQueueSnapshotV1(
            version=1,
            tasks=[task.to_snapshot() for task in tasks],
            pending=[t.id for t in tasks if t.status == "pending"],
            in_progress=[t.id for t in tasks if t.status == "in_progress"],
            completed=[t.id for t in tasks if t.status == "completed"],
            failed=[t.id for t in tasks if t.status == "failed"],
            blocked=[t.id for t in tasks if t.status == "blocked"],
            skipped=[t.id for t in tasks if t.status == "skipped"],
        )
        if not self._plan_revisions:
            return v1
        return TaskQueueSnapshotV2.model_validate(
            {
                **v1.model_dump(),
                "version": 2,
                "plan_revision": len(self._plan_revisions),
                "plan_revisions": self._plan_revisions,
            }
        )

    @classmethod
    def from_snapshot(
        cls, snapshot: TaskQueueSnapshotV1, *, reset_in_progress: bool = False
    ) -> TaskQueue:
        queue = cls()
        for task_snapshot in snapshot.tasks:
            task = Task.from_snapshot(task_snapshot)
            queue._tasks[task.id] = task
        if isinstance(snapshot, TaskQueueSnapshotV2):
            queue._plan_revisions = list(snapshot.plan_revisions)
        if reset_in_progress:
            queue._reset_in_progress()
        return queue

    def _reset_in_progress(self) -> None:
        for task in self._tasks.values():
            if task.status == "in_progress":
                task.status = "pending"
                task.touch()
        for task in self._tasks.values():
            met = self.dependencies_met(task)
            if task.status == "pending" and not met:
                task.status = "blocked"
                task.touch()
            elif task.status == "blocked" and met:
                task.status = "pending"
                task.touch()
