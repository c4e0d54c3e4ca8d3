"""A request's task by its title (pure): the content names the task by id, and a TeamRun's task
ids derive from its run's seed, the task's place and its title (``oma.tasks.loading``)."""

from __future__ import annotations

from oma.tasks.loading import derived_task_id
from oma_operator.resources.bodies import TeamRunBody


def task_title(teamrun: TeamRunBody | None, task_id: str) -> str:
    """The title of the spec's task with ``task_id``: ids derive from the run's seed (on
    Kubernetes ``<namespace>/<runId>``, the store's tenant and the run), index and title."""
    if not task_id or teamrun is None:
        return task_id
    spec, status = teamrun.get("spec") or {}, teamrun.get("status") or {}
    run_id = str(status.get("runId") or spec.get("runId") or "")
    namespace = str(teamrun["metadata"].get("namespace") or "")
    seeds = (f"{namespace}/{run_id}", run_id)
    for index, task in enumerate(spec.get("tasks") or []):
        title = str(task.get("title") or "")
        if task.get("id") == task_id or any(
            derived_task_id(seed, index, title) == task_id for seed in seeds
        ):
            return title
    return task_id
