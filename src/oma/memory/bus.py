"""A message bus between the agents of a team; messages and read state are checkpointed."""

from __future__ import annotations

import uuid

from oma.checkpoint.snapshot import BusMessage, BusReadState, MessageBusSnapshot
from oma.timeutil import now_iso

BROADCAST = "*"


class MessageBus:
    """Messages between the agents of a team, to one agent or to all (``"*"``), and what each
    agent has read."""

    def __init__(self) -> None:
        self._messages: list[BusMessage] = []
        self._read: dict[str, set[str]] = {}

    def send(self, sender: str, to: str, content: str) -> BusMessage:
        message = BusMessage(
            id=str(uuid.uuid4()), sender=sender, to=to, content=content, timestamp=now_iso()
        )
        self._messages.append(message)
        return message

    def unread_for(self, agent: str) -> list[BusMessage]:
        read = self._read.get(agent, set())
        return [
            m
            for m in self._messages
            if m.to in (agent, BROADCAST) and m.sender != agent and m.id not in read
        ]

    def mark_read(self, agent: str, ids: list[str]) -> None:
        self._read.setdefault(agent, set()).update(ids)

    def snapshot(self) -> MessageBusSnapshot:
        return MessageBusSnapshot(
            version=1,
            messages=list(self._messages),
            read_state=[
                BusReadState(agent_name=agent, message_ids=sorted(ids))
                for agent, ids in self._read.items()
            ],
        )

    def restore(self, snapshot: MessageBusSnapshot) -> None:
        self._messages = list(snapshot.messages)
        self._read = {state.agent_name: set(state.message_ids) for state in snapshot.read_state}
