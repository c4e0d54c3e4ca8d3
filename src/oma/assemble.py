"""From a run spec to live objects: adapters, tools, the team, the coordinator, the store."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from oma.errors import OmaError
from oma.llm.adapter import LLMAdapter
from oma.llm.factory import make_adapter
from oma.llm.scripted import ScriptedAdapter
from oma.spec import AgentSpec, RunSpec, StoreSpec
from oma.store.base import MemoryStore
from oma.store.file import FileStore
from oma.store.memory import InMemoryStore
from oma.team import AgentConfig, Team
from oma.tools.define import AnyTool


class SpecError(OmaError):
    code = "SPEC_INVALID"


def build_agent(spec: AgentSpec, tools: Mapping[str, AnyTool]) -> AgentConfig:
    unknown = [name for name in spec.tools if name not in tools]
    if unknown:
        raise SpecError(
            f"agent {spec.name!r} uses unknown tool(s) {unknown}; available: {sorted(tools)}"
        )
    model = spec.model
    adapter: LLMAdapter
    if model.provider == "scripted":
        assert model.script is not None  # the spec model requires it
        adapter = ScriptedAdapter(model.script)
    else:
        api_key = os.environ.get(model.api_key_env) if model.api_key_env else None
        adapter = make_adapter(
            model.provider,
            model.name,
            base_url=model.base_url,
            api_key=api_key,
            timeout=model.timeout_seconds,
            max_retries=model.max_retries,
        )
    return AgentConfig(
        name=spec.name,
        adapter=adapter,
        model=model.name,
        system_prompt=spec.system_prompt,
        tools=[tools[name] for name in spec.tools],
        max_turns=spec.max_turns,
    )


def build_team(spec: RunSpec, tools: Mapping[str, AnyTool], name: str) -> Team:
    return Team(name=name, agents=[build_agent(agent, tools) for agent in spec.agents])


def build_coordinator(spec: RunSpec, tools: Mapping[str, AnyTool]) -> AgentConfig | None:
    return build_agent(spec.coordinator, tools) if spec.coordinator else None


def open_store(spec: StoreSpec | None, default_path: Path) -> MemoryStore:
    if spec is None:
        return FileStore(default_path)
    if spec.file is not None:
        return FileStore(spec.file.path)
    if spec.memory is not None:
        return InMemoryStore()
    raise SpecError("redis and postgres stores are not available in this build yet")
