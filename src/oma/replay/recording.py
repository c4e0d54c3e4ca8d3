"""What a recorded run's history says the model answered and the tools returned.

Every turn of an agent's task is in some boundary's in-flight conversation (a boundary is saved
as soon as the model replied), and every tool result in the boundary that committed it, so one
walk over the history (``History.walk``) collects them: the assistant messages by agent, task
title and turn, with the tokens each turn cost (the task's usage after it, less before), and
the commits by agent and tool call id.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from oma.checkpoint.history import History

TurnKey = tuple[str, str, int]  # agent, task title, turn (assistant messages before it)


@dataclass(frozen=True)
class RecordedTurn:
    """One assistant message as saved, and the tokens its turn cost."""

    content: list[dict[str, Any]]  # the assistant message's blocks, as saved
    input_tokens: int
    output_tokens: int


@dataclass
class Recording:
    """The recorded turns by agent, task title and turn, and the commits by agent and call."""

    turns: dict[TurnKey, RecordedTurn] = field(default_factory=dict)
    commits: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # agent, call
    boundaries: int = 0

    @classmethod
    def of(cls, history: History) -> Recording:
        recording = cls()
        usage: dict[str, tuple[int, int]] = {}  # task id -> tokens after its last turn seen
        for _, document in history.walk():
            recording.boundaries += 1
            titles = {
                t.get("id"): t.get("title")
                for t in (document.get("queue") or {}).get("tasks") or []
                if isinstance(t, dict)
            }
            for task in document.get("inFlightTasks") or []:
                recording._see(task, str(titles.get(task.get("taskId")) or ""), usage)
        return recording

    def _see(self, task: dict[str, Any], title: str, usage: dict[str, tuple[int, int]]) -> None:
        agent, task_id = str(task.get("assignee")), str(task.get("taskId"))
        turn = 0
        for message in task.get("conversationMessages") or []:
            if message.get("role") != "assistant":
                continue
            key = (agent, title, turn)
            turn += 1
            if key in self.turns:
                continue
            spent = task.get("tokenUsage") or {}
            now = (int(spent.get("input_tokens", 0)), int(spent.get("output_tokens", 0)))
            before = usage.get(task_id, (0, 0))
            usage[task_id] = now
            self.turns[key] = RecordedTurn(
                copy.deepcopy(message.get("content") or []), now[0] - before[0], now[1] - before[1]
            )
        for call in task.get("pendingToolCalls") or []:
            commit = call.get("commit")
            if isinstance(commit, dict):
                self.commits.setdefault((agent, str(call["call"]["id"])), copy.deepcopy(commit))
