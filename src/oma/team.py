"""A team: named agents (model, prompt, tools, turn limit) and optional shared memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from oma.llm.adapter import LLMAdapter
from oma.memory.bus import MessageBus
from oma.memory.shared import SharedMemory
from oma.store.base import MemoryStore
from oma.tools.define import AnyTool

DEFAULT_MAX_TURNS = 10


@dataclass
class AgentConfig:
    """One agent of a team: its name, model adapter and model, system prompt, tools, and limits
    (turns per task, tokens per model call, a token budget per task)."""

    name: str
    adapter: LLMAdapter
    system_prompt: str | None = None
    model: str = ""
    tools: Sequence[AnyTool] = ()
    max_turns: int = DEFAULT_MAX_TURNS
    max_tokens: int = 4096
    max_token_budget: int | None = None

    def tool(self, name: str) -> AnyTool | None:
        return next((tool for tool in self.tools if tool.name == name), None)


@dataclass
class Team:
    """Named agents (at least one, names unique), with an optional shared-memory store and the
    bus they send messages over."""

    name: str
    agents: list[AgentConfig]
    shared_memory_store: MemoryStore | None = None
    bus: MessageBus = field(default_factory=MessageBus)

    def __post_init__(self) -> None:
        names = [agent.name for agent in self.agents]
        if not names:
            raise ValueError(f"team {self.name!r} has no agents")
        if len(set(names)) != len(names):
            raise ValueError(f"team {self.name!r} has duplicate agent names: {names}")
        self.shared_memory = (
            SharedMemory(self.shared_memory_store) if self.shared_memory_store else None
        )

    def agent(self, name: str) -> AgentConfig:
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(f"team {self.name!r} has no agent {name!r}")

    @property
    def roster(self) -> list[str]:
        return [agent.name for agent in self.agents]
