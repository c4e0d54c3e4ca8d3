"""What the model is asked: task prompts, goal decomposition and synthesis."""

from __future__ import annotations

import json

from oma.orchestrator.context import RunContext
from oma.tasks.task import Task


async def task_prompt(context: RunContext, task: Task) -> str:
    parts = [f"# Task: {task.title}\n\n{task.description}"]
    shared = context.team.shared_memory
    if task.memory_scope == "all" and shared is not None:
        summary = await shared.summary()
        if summary:
            parts.append(f"## Shared memory\n\n{summary}")
    else:
        sections = []
        for dep_id in task.depends_on:
            dep = context.queue.find(dep_id)
            if dep is None or dep.status != "completed":
                continue
            sections.append(f"### {dep.title} (by {dep.assignee})\n{_payload(context, task, dep)}")
        if sections:
            parts.append("## Context from prerequisite tasks\n\n" + "\n\n".join(sections))
    if task.assignee:
        unread = context.team.bus.unread_for(task.assignee)
        if unread:
            lines = "\n".join(f"- from {m.sender}: {m.content}" for m in unread)
            parts.append(f"## Messages from teammates\n\n{lines}")
            context.team.bus.mark_read(task.assignee, [m.id for m in unread])
    return "\n\n".join(parts)


def _payload(context: RunContext, task: Task, dep: Task) -> str:
    output = dep.result or ""
    if task.dependency_payload not in ("structured", "both"):
        return output
    result = context.result_for(dep.id)
    structured = (
        json.dumps(result.structured, sort_keys=True) if result and result.structured else ""
    )
    return structured if task.dependency_payload == "structured" else f"{output}\n{structured}"


def decomposition_prompt(goal: str, context: RunContext) -> str:
    roster = "\n".join(
        f"- {agent.name}: {agent.system_prompt or 'general assistant'}"
        for agent in context.team.agents
    )
    return (
        "# Goal decomposition\n\n"
        f"Goal: {goal}\n\n"
        f"## Team\n{roster}\n\n"
        "Break the goal into tasks for these agents. Answer with only a JSON array of objects "
        '{"title": str, "description": str, "assignee": agent name, '
        '"dependsOn": [titles of tasks it needs]}.'
    )


def synthesis_prompt(goal: str, context: RunContext) -> str:
    """The reference's synthesis prompt, so a scripted or cached coordinator sees the same text."""
    sections = [
        f"### {task.title} ({task.status} by {task.assignee})\n{task.result or ''}"
        for task in context.queue.tasks
    ]
    return (
        f"## Original Goal\n{goal}\n\n"
        "## Task Results\n" + "\n".join(sections) + "\n\n"
        "## Your Task\n"
        "Synthesise the above results into a comprehensive final answer that addresses the "
        "original goal.\nIf some tasks failed or were skipped, note any gaps in the result."
    )
