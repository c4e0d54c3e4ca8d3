"""From a run spec to live objects: adapters, tools, the team, the coordinator, the store."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from oma.approval.gates import Allow, Suspend
from oma.errors import OmaError
from oma.journal.recorder import RunJournal
from oma.journal.sinks import JsonlRunJournal
from oma.journal.store_sink import StoreRunJournal
from oma.llm.adapter import LLMAdapter
from oma.llm.factory import make_adapter
from oma.llm.scripted import ScriptedAdapter
from oma.spec import AgentSpec, ApprovalsSpec, RunSpec, StoreSpec
from oma.store.base import MemoryStore
from oma.store.faults import with_faults_from_env
from oma.store.file import FileStore
from oma.store.journal import supports_journal
from oma.store.memory import InMemoryStore
from oma.store.prefixed import PrefixedStore, memory_prefix, tenant_prefix
from oma.store.redacting import RedactingStore
from oma.store.urls import POSTGRES_SCHEMES, REDIS_SCHEMES, open_secret_store
from oma.store.urls import open_store as open_store_url
from oma.team import AgentConfig, Team
from oma.tools.define import AnyTool


class SpecError(OmaError):
    code = "SPEC_INVALID"


def build_agent(
    spec: AgentSpec, tools: Mapping[str, AnyTool], mcp_tools: Sequence[AnyTool] = ()
) -> AgentConfig:
    """``mcp_tools``: the tools of the agent's MCP servers (``oma.tools.mcp``), besides the
    ones its ``tools`` names."""
    unknown = [name for name in spec.tools if name not in tools]
    if unknown:
        raise SpecError(
            f"agent {spec.name!r} uses unknown tool(s) {unknown}; available: {sorted(tools)}"
        )
    clash = sorted({tool.name for tool in mcp_tools} & set(spec.tools))
    if clash:
        raise SpecError(
            f"agent {spec.name!r}: MCP tool(s) {clash} have the names of tools in its 'tools'; "
            "rename the MCP server in the spec"
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
        tools=[*(tools[name] for name in spec.tools), *mcp_tools],
        max_turns=spec.max_turns,
        max_tokens=model.max_tokens,
    )


def build_team(
    spec: RunSpec,
    tools: Mapping[str, AnyTool],
    name: str,
    store: MemoryStore | None = None,
    mcp_tools: Mapping[str, Sequence[AnyTool]] | None = None,
) -> Team:
    """With ``sharedMemory``, the team's shared memory lives in the run's ``store``, in the
    run's own part of it (``name`` is the run id) or the scope the spec names. ``mcp_tools``:
    agent name -> the tools of its MCP servers."""
    mcp = mcp_tools or {}
    agents = [build_agent(agent, tools, mcp.get(agent.name, ())) for agent in spec.agents]
    memory = None
    if spec.shared_memory and store is not None:
        memory = PrefixedStore(store, memory_prefix(name, spec.shared_memory_scope))
    return Team(name=name, agents=agents, shared_memory_store=memory)


def build_coordinator(spec: RunSpec, tools: Mapping[str, AnyTool]) -> AgentConfig | None:
    return build_agent(spec.coordinator, tools) if spec.coordinator else None


def gates_for(approvals: ApprovalsSpec | None) -> dict[str, Any]:
    """Orchestrator gate callbacks for the boundaries a spec says wait for a human."""
    if approvals is None:
        return {}
    gates: dict[str, Any] = {}
    tools, tasks = set(approvals.tools), set(approvals.dispatch)
    if tools:
        gates["on_tool_call"] = lambda ctx: (
            Suspend(f"tool {ctx.tool_name} needs approval")
            if "*" in tools or ctx.tool_name in tools
            else Allow()
        )
    if tasks:
        gates["on_task_dispatch"] = lambda task: (
            Suspend(f"task {task.title} needs approval")
            if "*" in tasks or task.title in tasks
            else Allow()
        )
    if approvals.plan:
        gates["on_plan_ready"] = lambda plan: Suspend("the plan needs approval")
    return gates


def open_store(spec: StoreSpec | None, default_path: Path) -> MemoryStore:
    """The run's store (fault injection wraps it only when its variables are set)."""
    return with_faults_from_env(_open_store(spec, default_path))


def _open_store(spec: StoreSpec | None, default_path: Path) -> MemoryStore:
    if spec is None:
        return FileStore(default_path)
    store: MemoryStore
    if spec.file is not None:
        store = FileStore(spec.file.path)
    elif spec.memory is not None:
        store = InMemoryStore()
    elif spec.redis is not None:
        # The spec's defaults yield to the URL's query (?namespace=, ?table=): only a value the
        # spec writes out is passed, so one the URL also names, differently, is refused.
        store = _open_url(
            spec.redis.url,
            spec.redis.url_env,
            "redis URL",
            REDIS_SCHEMES,
            namespace=spec.redis.given_namespace(),
        )
    else:
        assert spec.postgres is not None  # the spec model requires exactly one backend
        store = _open_url(
            spec.postgres.dsn,
            spec.postgres.dsn_env,
            "postgres DSN",
            POSTGRES_SCHEMES,
            table=spec.postgres.given_table(),
            schema=spec.postgres.schema_name,
        )
    if spec.tenant is not None:
        store = PrefixedStore(store, tenant_prefix(spec.tenant))
    return RedactingStore(store) if spec.redact else store


def _open_url(
    value: str | None,
    env: str | None,
    what: str,
    schemes: tuple[str, ...],
    *,
    namespace: str | None = None,
    table: str | None = None,
    schema: str | None = None,
) -> MemoryStore:
    """A redis or postgres spec's store: only its own schemes (a redis spec never opens a file
    or memory store). A URL from the environment is a secret (a runner pod's comes from the
    TeamRun's Secret): its errors show nothing of it (``open_secret_store``)."""
    url = _from_env(value, env, what)
    if value is not None:
        return open_store_url(url, schemes=schemes, namespace=namespace, table=table, schema=schema)
    kind = "redis" if schemes == REDIS_SCHEMES else "postgres"
    return open_secret_store(
        url,
        f"${env}",
        schemes=schemes,
        user=f"a run spec's {kind} store",
        namespace=namespace,
        table=table,
        schema=schema,
    )


def _from_env(value: str | None, env: str | None, what: str) -> str:
    if value is not None:
        return value
    assert env is not None
    found = os.environ.get(env)
    if not found:
        raise SpecError(f"the {what} is read from ${env}, which is not set")
    return found


def run_journal_for(
    spec: StoreSpec | None, store: MemoryStore, default_path: Path, run_id: str
) -> RunJournal | None:
    """Where the run keeps its event journal (``store.events``): a JSON-lines file beside a
    file store (``<file>.events/[<tenant>/]<runId>.jsonl``, the run id percent-encoded), else
    the store itself; ``None`` when the spec keeps none."""
    if spec is None or not spec.events.enabled:
        return None
    if spec.file is not None:
        folder = Path(f"{spec.file.path}.events")
        if spec.tenant is not None:
            folder = folder / spec.tenant
        return JsonlRunJournal(folder / f"{quote(run_id, safe='')}.jsonl")
    if not supports_journal(store):
        raise SpecError(
            f"store.events: {type(store).__name__} keeps no journals; use a file, memory, "
            "Redis or PostgreSQL store without redact"
        )
    return StoreRunJournal(store)
