"""What a runner writes to its run's journal, and the lineage it keeps for it.

Per turn, in the reference's order: ``turn/start``, ``llm/request`` (every block the model is
shown, named by the events that produced it), ``assistant/message`` (naming the request), one
``tool/call`` per call (naming the assistant message), one ``tool/result`` per commit (naming
its call), the ``tool_results`` ``user/message`` (naming the results) and ``turn/end``. A
task's first prompt is a ``user/message`` of origin ``input``. A result replayed on a resume
writes nothing: its events are already in the journal.

The lineage (per conversation message, per block, the events that produced it) and the task's
high-water mark (``journalSeq``, the last of its events its state reflects) are kept in the
runner's state, so a v5 checkpoint carries them across attempts.
"""

from __future__ import annotations

from typing import Any

from oma.agent.state import RunnerState
from oma.journal.blocks import Lineage, block_descriptors, enforce_lineage, json_hash
from oma.journal.recorder import JournalRecorder
from oma.llm.types import ChatRequest, ChatResponse, LLMMessage

TurnOutcome = str  # tool_use, completed, loop_detected, budget_exceeded, suspended, aborted, error


class RunnerJournal:
    """One task's events, through its run's recorder."""

    def __init__(
        self, recorder: JournalRecorder, *, task_id: str, agent: str, enforce: bool = False
    ) -> None:
        self.recorder = recorder
        self.task_id = task_id
        self.agent = agent
        self.enforce = enforce
        self._call_seqs: dict[str, int] = {}  # tool call id -> its tool/call event
        self._result_seqs: dict[str, int] = {}  # tool call id -> its tool/result event
        # The descriptors of the conversation's messages already described (by identity): a
        # conversation only grows and its lineage with it, so a request describes (and hashes)
        # only its new messages, not the whole conversation at every turn.
        self._described: list[LLMMessage] = []
        self._blocks: list[dict[str, Any]] = []

    def _emit(
        self, state: RunnerState, kind: str, payload: dict[str, Any], sources: list[int] | None
    ) -> int:
        seq = self.recorder.emit(
            kind, payload, task=self.task_id, agent=self.agent, sources=sources
        )
        state.journal_seq = seq
        return seq

    def started(self, state: RunnerState) -> None:
        """A fresh task: its prompt."""
        message = state.conversation[0]
        seq = self._emit(
            state, "user/message", {"message": message.to_wire(), "origin": "input"}, None
        )
        state.lineage = [_lineage_of(message, seq)]

    def resumed(self, state: RunnerState) -> None:
        """A task restored from a checkpoint: a lineage it did not keep is unknown."""
        if state.lineage is None or len(state.lineage) != len(state.conversation):
            state.lineage = [[None] * len(message.content) for message in state.conversation]

    def check(self, state: RunnerState, request: ChatRequest) -> list[dict[str, Any]]:
        """The request's block descriptors; with ``enforce``, ``JournalLineageError`` for a
        block no event explains (before anything is reserved or called)."""
        assert state.lineage is not None
        messages, known = request.messages, len(self._described)
        if known > len(messages) or any(
            messages[i] is not self._described[i] for i in {0, known - 1} if known
        ):
            self._described, self._blocks, known = [], [], 0
        added = messages[known:]
        wires = [m.to_wire() for m in added]
        self._blocks += block_descriptors(wires, state.lineage, start=known)
        self._described += added
        if self.enforce:
            enforce_lineage(self._blocks)
        return list(self._blocks)

    def request(
        self, state: RunnerState, request: ChatRequest, blocks: list[dict[str, Any]]
    ) -> int:
        """``turn/start`` and ``llm/request``, once the call will be made; the request's seq."""
        turn = state.turns + 1
        self._emit(state, "turn/start", {"turn": turn}, None)
        payload: dict[str, Any] = {"turn": turn, "model": request.model, "blocks": blocks}
        if request.system:
            payload["systemPromptHash"] = json_hash(request.system)
        if request.tools:
            payload["toolsHash"] = json_hash(
                [tool.model_dump(mode="json") for tool in request.tools]
            )
        return self._emit(state, "llm/request", payload, None)

    def answered(
        self, state: RunnerState, response: ChatResponse, message: LLMMessage, request_seq: int
    ) -> None:
        """The assistant's message, and one ``tool/call`` per call it asks for."""
        payload: dict[str, Any] = {"message": message.to_wire(), "origin": "response"}
        if response.usage_reported:
            payload["usage"] = {
                "input_tokens": response.usage.input_tokens,
                "output_tokens": response.usage.output_tokens,
            }
        if response.model:
            payload["model"] = response.model
        if response.stop_reason:
            payload["stopReason"] = response.stop_reason
        seq = self._emit(state, "assistant/message", payload, [request_seq])
        assert state.lineage is not None
        state.lineage.append(_lineage_of(message, seq))
        for call in message.tool_uses:
            call_seq = self._emit(state, "tool/call", {"call": call.model_dump(mode="json")}, [seq])
            self._call_seqs[call.id] = call_seq

    def committed(
        self, state: RunnerState, call_id: str, result: dict[str, Any], record: dict[str, Any]
    ) -> None:
        call_seq = self._call_seqs.get(call_id)
        payload = {"toolCallId": call_id, "result": result, "record": record}
        seq = self._emit(state, "tool/result", payload, [call_seq] if call_seq else None)
        self._result_seqs[call_id] = seq

    def results(self, state: RunnerState, message: LLMMessage, call_ids: list[str]) -> None:
        """The ``tool_results`` message, then the turn's end."""
        named = [self._result_seqs[c] for c in call_ids if c in self._result_seqs]
        payload = {"message": message.to_wire(), "origin": "tool_results"}
        seq = self._emit(state, "user/message", payload, named or None)
        assert state.lineage is not None
        state.lineage.append(_lineage_of(message, seq))
        self.turn_ended(state, "tool_use")

    def turn_ended(
        self, state: RunnerState, outcome: TurnOutcome, *, turn: int | None = None
    ) -> None:
        number = state.turns if turn is None else turn
        self._emit(state, "turn/end", {"turn": number, "outcome": outcome}, None)


def _lineage_of(message: LLMMessage, seq: int) -> Lineage:
    """Each block of ``message`` is reproduced by the event that carries the message."""
    return [[seq] for _ in message.content]
