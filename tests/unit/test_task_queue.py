"""Task queue (reference §3.2): statuses, blocking, promotion, cascades, events, snapshots."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from oma.tasks import (
    InvalidPlanError,
    InvalidTaskDependenciesError,
    Task,
    TaskNotFoundError,
    TaskQueue,
    create_plan_artifact,
    load_task_specs,
    plan_to_queue,
)


def _queue(*tasks: Task) -> TaskQueue:
    queue = TaskQueue()
    for task in tasks:
        queue.add(task)
    return queue


def test_add_blocks_until_dependencies_complete_then_promotes() -> None:
    a, b = Task("a", "", id="a"), Task("b", "", id="b")
    c = Task("c", "", id="c", depends_on=["a", "b"])
    ready: list[str] = []
    queue = TaskQueue()
    queue.on("task:ready", lambda t: ready.append(t.id if t else "?"))
    for task in (a, b, c):
        queue.add(task)
    assert (a.status, b.status, c.status) == ("pending", "pending", "blocked")
    queue.complete("a", "A")
    assert c.status == "blocked"
    queue.complete("b", "B")
    assert queue.get("c").status == "pending"  # re-read: mypy narrowed c.status above
    assert ready == ["a", "b", "c"]


def test_a_dependency_missing_from_the_queue_blocks() -> None:
    queue = _queue(Task("x", "", id="x", depends_on=["later"]))
    assert queue.get("x").status == "blocked"


def test_fail_cascades_transitively_to_pending_and_blocked_dependents() -> None:
    queue = _queue(
        Task("a", "", id="a"),
        Task("b", "", id="b", depends_on=["a"]),
        Task("c", "", id="c", depends_on=["b"]),
        Task("d", "", id="d"),
    )
    failed: list[str] = []
    queue.on("task:failed", lambda t: failed.append(t.id if t else "?"))
    queue.fail("a", "boom")
    assert queue.get("a").result == "boom"
    assert queue.get("b").result == 'Cancelled: dependency "a" failed.'
    assert queue.get("c").result == 'Cancelled: dependency "b" failed.'
    assert queue.get("d").status == "pending" and failed == ["a", "b", "c"]


def test_skip_cascades_even_with_other_completed_dependencies() -> None:
    queue = _queue(
        Task("a", "", id="a"), Task("b", "", id="b"), Task("c", "", id="c", depends_on=["a", "b"])
    )
    queue.complete("a")
    queue.skip("b", "not needed")
    assert queue.get("c").status == "skipped"
    assert queue.get("c").result == 'Skipped: dependency "b" was skipped.'


def test_skip_remaining_skips_every_non_terminal_task_and_completes_the_queue() -> None:
    queue = _queue(Task("a", "", id="a"), Task("b", "", id="b"), Task("c", "", id="c"))
    queue.complete("a")
    queue.start("b")
    done: list[object] = []
    unsubscribe = queue.on("all:complete", done.append)
    skipped = queue.skip_remaining()
    assert [t.id for t in skipped] == ["b", "c"]
    assert {t.result for t in skipped} == {"Skipped: approval rejected."}
    assert queue.is_complete() and done == [None]
    unsubscribe()
    unsubscribe()  # idempotent


def test_unknown_ids_raise() -> None:
    queue = TaskQueue()
    actions: list[Callable[[], object]] = [
        lambda: queue.complete("x"),
        lambda: queue.fail("x", "e"),
        lambda: queue.skip("x", "r"),
        lambda: queue.update("x", result="r"),
    ]
    for action in actions:
        with pytest.raises(TaskNotFoundError, match=r'Task "x" not found\.'):
            action()


def test_snapshot_round_trip_and_reset_in_progress() -> None:
    queue = _queue(
        Task("a", "", id="a"), Task("b", "", id="b", depends_on=["a"]), Task("c", "", id="c")
    )
    queue.complete("a", "A")
    queue.start("b")
    queue.start("c")
    snapshot = queue.snapshot()
    assert snapshot.in_progress == ["b", "c"] and snapshot.completed == ["a"]
    exact = TaskQueue.from_snapshot(snapshot)
    assert [t.status for t in exact.tasks] == ["completed", "in_progress", "in_progress"]
    reset = TaskQueue.from_snapshot(snapshot, reset_in_progress=True)
    assert [t.status for t in reset.tasks] == ["completed", "pending", "pending"]
    assert reset.snapshot().tasks[0] == snapshot.tasks[0]  # untouched tasks keep their times


def test_reset_recomputes_readiness() -> None:
    queue = _queue(Task("a", "", id="a"), Task("b", "", id="b", depends_on=["a"]))
    queue.start("a")
    snapshot = queue.snapshot()
    snapshot.tasks[1] = snapshot.tasks[1].model_copy(update={"status": "in_progress"})
    reset = TaskQueue.from_snapshot(snapshot, reset_in_progress=True)
    assert [t.status for t in reset.tasks] == ["pending", "blocked"]


def test_specs_resolve_dependencies_by_id_or_title() -> None:
    queue = load_task_specs(
        [
            {"title": "Research", "description": "r"},
            {"title": "Write", "description": "w", "dependsOn": ["  research "], "assignee": "bob"},
            {"title": "Edit", "description": "e", "assignee": "ghost"},
        ],
        roster=["bob"],
    )
    research, write, edit = queue.tasks
    assert write.depends_on == [research.id] and write.status == "blocked"
    assert write.assignee == "bob" and edit.assignee is None  # unknown assignee dropped


def test_unresolvable_and_ambiguous_references_fail_the_task() -> None:
    queue = load_task_specs(
        [
            {"title": "Dup", "description": ""},
            {"title": "Dup", "description": ""},
            {"title": "Needs", "description": "", "dependsOn": ["dup"]},
            {"title": "After", "description": "", "dependsOn": ["Needs"]},
        ],
        roster=[],
    )
    needs, after = queue.tasks[2], queue.tasks[3]
    assert needs.status == "failed" and "ambiguous duplicate title" in (needs.result or "")
    assert (
        after.status == "failed" and after.result == f'Cancelled: dependency "{needs.id}" failed.'
    )


def test_cycles_and_self_dependencies_refuse_before_queueing() -> None:
    with pytest.raises(InvalidTaskDependenciesError, match="cycle a -> b -> a"):
        load_task_specs(
            [
                {"title": "a", "description": "", "dependsOn": ["b"]},
                {"title": "b", "description": "", "dependsOn": ["a"]},
            ],
            roster=[],
        )
    with pytest.raises(InvalidPlanError, match=r'Invalid plan artifact: .*"x" depends on itself'):
        plan_to_queue(
            {
                "version": 1,
                "tasks": [{"id": "x", "title": "x", "description": "", "dependsOn": ["x"]}],
            }
        )


def test_plan_replay_keeps_ids_and_rejects_bad_plans() -> None:
    queue = plan_to_queue(
        {
            "version": 1,
            "goal": "g",
            "tasks": [
                {"id": "p1", "title": "One", "description": "1"},
                {
                    "id": "p2",
                    "title": "Two",
                    "description": "2",
                    "dependsOn": ["p1"],
                    "assignee": "w",
                },
            ],
        }
    )
    assert [(t.id, t.status) for t in queue.tasks] == [("p1", "pending"), ("p2", "blocked")]
    artifact = create_plan_artifact(queue.tasks, "g")
    assert artifact.to_wire()["tasks"][0] == {"id": "p1", "title": "One", "description": "1"}
    assert plan_to_queue(artifact).snapshot().tasks[1].depends_on == ["p1"]
    with pytest.raises(InvalidPlanError, match="Unsupported plan artifact version: 2"):
        plan_to_queue({"version": 2, "tasks": []})
    with pytest.raises(InvalidPlanError, match="unknown task id"):
        plan_to_queue(
            {
                "version": 1,
                "tasks": [{"id": "a", "title": "a", "description": "", "dependsOn": ["zz"]}],
            }
        )
