"""The run spec: one pydantic model for ``oma run``, the runner pod and the TeamRun resource.

Agents (model, prompt, tools, turn limit), the work (``tasks``, a ``goal`` for a coordinator, or
a frozen ``plan``), and where checkpoints go. Field names are camelCase in files, as in the
Kubernetes resource; one validation serves every entry point.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from oma.budget.limits import RunBudget
from oma.checkpoint.retention import HistoryPolicy
from oma.errors import OmaError
from oma.store.names import POSTGRES_IDENTIFIER, REDIS_NAMESPACE
from oma.store.prefixed import SCOPE_PATTERN
from oma.tasks.loading import TaskSpec
from oma.tasks.plan import PlanArtifact
from oma.tools.mcp.spec import McpServerSpec, check_unique


class SpecModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ModelSpec(SpecModel):
    provider: Literal["scripted", "anthropic", "openai"] = Field(
        description="scripted: a fixed script, no network; anthropic / openai: the official SDK."
    )
    name: str = Field(default="", description="Model name, e.g. claude-sonnet-4-5 or gpt-4o.")
    base_url: str | None = Field(
        default=None,
        alias="baseURL",
        description="API base URL (a proxy, a gateway, a compatible server); default: the SDK's.",
    )
    api_key_env: str | None = Field(
        default=None,
        description="Environment variable holding the API key; default: the SDK's own "
        "(ANTHROPIC_API_KEY, OPENAI_API_KEY).",
    )
    timeout_seconds: float = Field(default=60.0, gt=0, description="Per model call.")
    max_retries: int = Field(
        default=2, ge=0, description="The SDK's retries of a failed call (rate limits, 5xx)."
    )
    max_tokens: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description="Most tokens one model call may generate (sent as the call's limit); with "
        "a budget, also what each call reserves for its output.",
    )
    script: list[Any] | dict[str, list[Any]] | None = Field(
        default=None,
        description="Turns of the scripted model ({text} or {tool_calls}, optional delay), or "
        "a map from a substring of the task prompt to its turns.",
    )

    @model_validator(mode="after")
    def _script_only_for_scripted(self) -> ModelSpec:
        if self.provider == "scripted" and self.script is None:
            raise ValueError("a scripted model needs a 'script'")
        if self.provider != "scripted":
            if self.script is not None:
                raise ValueError(f"'script' is only for the scripted provider, not {self.provider}")
            if not self.name:
                raise ValueError(f"a {self.provider} model needs a 'name'")
        return self


class AgentSpec(SpecModel):
    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="Unique within the run; tasks name it as their assignee.",
    )
    model: ModelSpec = Field(description="The model this agent talks to.")
    system_prompt: str | None = Field(default=None, description="The agent's system prompt.")
    tools: list[str] = Field(
        default_factory=list,
        description="Tool names: built-in (echo, wait, ledger_append, tally) or from installed "
        "packages (oma.tools entry points).",
    )
    max_turns: int = Field(
        default=10, ge=1, le=1000, description="Model turns per task before it stops."
    )
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list,
        max_length=32,
        description="MCP servers whose tools the agent uses besides 'tools' (the model sees "
        "each as <server>__<tool>); needs the mcp extra. See docs/mcp.md.",
    )

    @model_validator(mode="after")
    def _unique_servers(self) -> AgentSpec:
        check_unique(self.mcp_servers, self.name)
        return self


class FileStoreSpec(SpecModel):
    path: str = Field(description="The JSON state file (created if missing).")


class RedisStoreSpec(SpecModel):
    """``url`` (redis:// or rediss://) or ``urlEnv``: the variable holding it (secrets)."""

    url: str | None = Field(default=None, description="redis:// or rediss:// URL.")
    url_env: str | None = Field(default=None, description="Variable holding the URL.")
    namespace: str = Field(
        default="oma", pattern=REDIS_NAMESPACE, description="Key prefix in Redis (no braces)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> RedisStoreSpec:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("redis store needs exactly one of 'url' or 'urlEnv'")
        return self

    def given_namespace(self) -> str | None:
        """The namespace the spec names, or None when it leaves it to the URL's
        ``?namespace=`` (and, without one, to the default ``oma``): written out, even as
        ``oma``, it is given, and a URL naming another is refused."""
        return self.namespace if "namespace" in self.model_fields_set else None


class PostgresStoreSpec(SpecModel):
    """``dsn`` (postgresql://...) or ``dsnEnv``: the variable holding it (secrets)."""

    dsn: str | None = Field(default=None, description="postgresql:// connection string.")
    dsn_env: str | None = Field(default=None, description="Variable holding the DSN.")
    table: str = Field(
        default="oma_store",
        pattern=POSTGRES_IDENTIFIER,
        description="Table the rows live in (created if missing).",
    )
    schema_name: str | None = Field(
        default=None,
        alias="schema",
        pattern=POSTGRES_IDENTIFIER,
        description="Schema of the table; default: search path.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> PostgresStoreSpec:
        if (self.dsn is None) == (self.dsn_env is None):
            raise ValueError("postgres store needs exactly one of 'dsn' or 'dsnEnv'")
        return self

    def given_table(self) -> str | None:
        """The table the spec names, or None when it leaves it to the DSN's ``?table=`` (and,
        without one, to the default ``oma_store``), as ``given_namespace`` for Redis."""
        return self.table if "table" in self.model_fields_set else None


class HistorySpec(SpecModel):
    """How long a journal keeps the run's past boundaries (``oma checkpoint history``)."""

    enabled: bool = Field(
        default=True,
        description="Keep past boundaries, chained (journal layout only); false keeps the "
        "latest only, as before histories.",
    )
    keep: int | None = Field(
        default=None,
        ge=1,
        description="Boundaries kept behind the latest; older ones go at the next compaction.",
    )
    max_age_seconds: int | None = Field(
        default=None,
        gt=0,
        description="Seconds a boundary is kept; older ones go at the next compaction. With "
        "neither limit, every boundary is kept until the checkpoint is deleted.",
    )

    def policy(self) -> HistoryPolicy | None:
        """The writer's retention, or ``None`` when history is off."""
        if not self.enabled:
            return None
        return HistoryPolicy(keep=self.keep, max_age_seconds=self.max_age_seconds)


class EventsSpec(SpecModel):
    """The run's event journal (the reference's run journal): every step of the run as an
    event, numbered across attempts, beside its checkpoint (then of schema v5)."""

    enabled: bool = Field(
        default=False,
        description="Keep the journal: a JSON-lines file beside a file store "
        "(<file>.events/<runId>.jsonl), else in the store (__oma_checkpoint__/<runId>/events). "
        "`oma verify --run-id` checks it.",
    )
    enforce_lineage: bool = Field(
        default=False,
        description="Refuse a model request showing a block no journal event explains (a "
        "conversation restored from a checkpoint written without a journal).",
    )


class StoreSpec(SpecModel):
    """Exactly one backend; ``redact`` scrubs secrets before they are stored (lossy, and it
    rules out durable approvals, which need the verbatim content)."""

    file: FileStoreSpec | None = Field(default=None, description="A local JSON file.")
    memory: dict[str, Any] | None = Field(
        default=None, description="In memory ({}): nothing survives the process."
    )
    redis: RedisStoreSpec | None = Field(default=None, description="A Redis server.")
    postgres: PostgresStoreSpec | None = Field(default=None, description="A PostgreSQL table.")
    redact: bool = Field(default=False, description="Scrub secret-shaped values before storing.")
    layout: Literal["journal", "snapshot"] = Field(
        default="journal",
        description="How a new run keeps its checkpoint where the store can (Redis, PostgreSQL, "
        "memory): journal (a snapshot, then one delta per boundary) or snapshot (the whole "
        "snapshot at every boundary, what the TypeScript reference reads). A run resumed keeps "
        "the layout it was found in; a file store always keeps snapshots.",
    )
    history: HistorySpec = Field(
        default_factory=HistorySpec,
        description="Past boundaries kept in the journal (default: every one).",
    )
    events: EventsSpec = Field(
        default_factory=EventsSpec,
        description="The run's event journal (off by default).",
    )
    tenant: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        description="Keep the run's keys in this tenant's part of the store (the operator sets "
        "the TeamRun's Kubernetes namespace): equal run ids of different tenants never meet.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> StoreSpec:
        chosen = [
            n for n in ("file", "memory", "redis", "postgres") if getattr(self, n) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                f"store needs exactly one of file, memory, redis, postgres; got {chosen}"
            )
        if self.redact and self.events.enabled:
            raise ValueError(
                "store.events needs the verbatim content (its blocks are checked by their "
                "hashes): turn off store.redact, or store.events"
            )
        return self


class ApprovalsSpec(SpecModel):
    """Which boundaries wait for a human decision (durable: the run suspends, exit code 10).

    ``tools``: tool names whose calls suspend ("*" for every tool); ``dispatch``: task titles
    whose dispatch suspends ("*" for every task); ``plan``: a team run's plan suspends before
    any task runs. Needs a store with compare-and-set (not a redacting store).
    """

    tools: list[str] = Field(
        default_factory=list, description='Tool names whose calls wait for a decision ("*": all).'
    )
    dispatch: list[str] = Field(
        default_factory=list,
        description='Task titles whose dispatch waits for a decision ("*": all).',
    )
    plan: bool = Field(
        default=False, description="A team run's plan waits for a decision before any task."
    )


class BudgetSpec(SpecModel):
    """What the run may spend across all its attempts, retries and crashes. A step that would
    pass a limit suspends the run on a request to raise it (an approval of scope ``budget``);
    rejected, the run ends rejected. Needs a store with compare-and-set, like approvals."""

    tokens: int | None = Field(
        default=None,
        ge=1,
        description="Input plus output tokens as the providers report them; a model call lost "
        "in a crash counts at what it reserved (its input estimate plus maxTokens).",
    )
    model_calls: int | None = Field(default=None, ge=1, description="Model calls, lost ones too.")
    tool_calls: int | None = Field(
        default=None, ge=1, description="Tool calls committed (a call re-run after a crash: once)."
    )

    @model_validator(mode="after")
    def _limits_something(self) -> BudgetSpec:
        self.run_budget()  # RunBudget's own rules: at least one limit
        return self

    def run_budget(self) -> RunBudget:
        return RunBudget(self.tokens, self.model_calls, self.tool_calls)


# Declared once for both run spec forms (a spec file, a TeamRun).
SHARED_MEMORY: Any = Field(
    default=False,
    description="Keep a shared memory in the run's store; agents see earlier results. It is the "
    "run's own unless sharedMemoryScope names one to share.",
)
SHARED_MEMORY_SCOPE: Any = Field(
    default=None,
    pattern=SCOPE_PATTERN,
    description="Share the memory with every run that names the same scope (in the same store "
    "and tenant); a restore of any of them rewrites it.",
)


class ForkFromSpec(SpecModel):
    """Start this run as a fork of another run of the same store (and tenant) at one of its
    past boundaries (``oma checkpoint history``), optionally with its state patched."""

    run_id: str = Field(min_length=1, max_length=253, description="The run forked from.")
    seq: int = Field(ge=1, description="Its boundary to start from (`oma checkpoint history`).")
    patch: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=1000,
        description="A JSON Patch (RFC 6902) applied to that boundary's snapshot first; it may "
        "not touch /identity, /pendingApprovals or /approvalDecisions.",
    )


class RunSpec(SpecModel):
    run_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Logical run id: the checkpoint's key; run again with it to resume.",
    )
    mode: Literal["tasks", "team", "plan"] = Field(
        default="tasks",
        description="tasks: run the task list; team: a coordinator plans the goal; plan: run a "
        "stored plan.",
    )
    agents: list[AgentSpec] = Field(min_length=1, description="The agents of the run.")
    coordinator: AgentSpec | None = Field(
        default=None, description="The planning agent of mode team (default: a built-in one)."
    )
    goal: str | None = Field(default=None, description="What the team is to do (mode team).")
    tasks: list[TaskSpec] | None = Field(default=None, description="The task list (mode tasks).")
    plan: PlanArtifact | None = Field(default=None, description="The plan to run (mode plan).")
    store: StoreSpec | None = Field(
        default=None, description="Where checkpoints go; default: a file under .oma/."
    )
    fork_from: ForkFromSpec | None = Field(
        default=None,
        description="Start as a fork of another run at a past boundary (only when this run "
        "has no checkpoint yet; afterwards it resumes from its own).",
    )
    approvals: ApprovalsSpec | None = Field(
        default=None, description="Approval gates; the run suspends at each until decided."
    )
    max_concurrency: int = Field(
        default=5, ge=1, le=256, description="Tasks run at the same time at most."
    )
    budget: BudgetSpec | None = Field(
        default=None, description="Limits on the run's tokens, model calls and tool calls."
    )
    # Agents see earlier results (each task's result is written as `<agent>/task:<id>:result`)
    # through a shared memory kept in the run's store, next to the checkpoint.
    shared_memory: bool = SHARED_MEMORY
    shared_memory_scope: str | None = SHARED_MEMORY_SCOPE

    @model_validator(mode="after")
    def _work_matches_mode(self) -> RunSpec:
        check_work(self.mode, [a.name for a in self.agents], self.goal, self.tasks, self.plan)
        if self.shared_memory_scope is not None and not self.shared_memory:
            raise ValueError("sharedMemoryScope needs sharedMemory: true")
        if self.coordinator is not None and self.coordinator.mcp_servers:
            raise ValueError("the coordinator plans and takes no MCP servers; give them to agents")
        return self


def check_work(
    mode: str,
    agent_names: list[str],
    goal: str | None,
    tasks: list[TaskSpec] | None,
    plan: PlanArtifact | None,
) -> None:
    """The rules across a run's fields, for every form a run spec takes (a spec file, a
    TeamRun): unique agent names, exactly the work its mode takes, assignees that exist.
    Raises ``ValueError`` naming the first broken rule."""
    if len(set(agent_names)) != len(agent_names):
        raise ValueError(f"agent names must be unique: {agent_names}")
    work = {"tasks": tasks, "goal": goal, "plan": plan}
    needed = {"tasks": "tasks", "team": "goal", "plan": "plan"}[mode]
    if work[needed] is None:
        raise ValueError(f"mode {mode!r} needs '{needed}'")
    for other in sorted(set(work) - {needed}):
        if work[other] is not None:
            raise ValueError(f"mode {mode!r} does not take '{other}'")
    for task in tasks or []:
        if task.assignee is not None and task.assignee not in agent_names:
            raise ValueError(f"task {task.title!r} is assigned to unknown agent {task.assignee!r}")
    for item in plan.tasks if plan else []:
        if item.assignee is not None and item.assignee not in agent_names:
            raise ValueError(
                f"plan task {item.id!r} is assigned to unknown agent {item.assignee!r}"
            )


class RunSpecError(OmaError):
    """A run spec document could not be read or is not a valid ``RunSpec`` (one line)."""

    code = "RUN_SPEC_INVALID"


def load_run_spec(text: str | bytes, source: str) -> RunSpec:
    """A validated ``RunSpec`` from YAML or JSON text; every problem is a ``RunSpecError``.

    Loaders should read the document through here: besides ``yaml.YAMLError``, PyYAML raises
    ``UnicodeDecodeError`` on bytes that are not UTF-8, ``RecursionError`` on deeply nested
    documents and ``ValueError`` on integers with too many digits.
    """
    try:
        raw: Any = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__  # one line, whatever it was
        raise RunSpecError(f"run spec {source} is not valid YAML/JSON: {detail[:500]}") from exc
    try:
        return RunSpec.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(_printable(p) for p in e['loc']) or 'spec'}: {_printable(e['msg'])}"
            for e in exc.errors()
        )
        raise RunSpecError(f"run spec {source} is invalid: {problems}") from exc


def _printable(part: object) -> str:
    """A field name or message as one line: control characters (a key may hold any) escaped."""
    text = str(part)
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]
