"""The run spec: one pydantic model for ``oma run``, the runner pod and the TeamRun resource.

Agents (model, prompt, tools, turn limit), the work (``tasks``, a ``goal`` for a coordinator, or
a frozen ``plan``), and where checkpoints go. Field names are camelCase in files, as in the
Kubernetes resource; one validation serves every entry point.
"""

from __future__ import annotations

from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from oma.errors import OmaError
from oma.tasks.loading import TaskSpec
from oma.tasks.plan import PlanArtifact


class SpecModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ModelSpec(SpecModel):
    provider: Literal["scripted", "anthropic", "openai"]
    name: str = ""
    base_url: str | None = Field(default=None, alias="baseURL")
    api_key_env: str | None = None
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    script: list[Any] | dict[str, list[Any]] | None = None

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
    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: ModelSpec
    system_prompt: str | None = None
    tools: list[str] = Field(default_factory=list)
    max_turns: int = Field(default=10, ge=1, le=1000)


class FileStoreSpec(SpecModel):
    path: str


class RedisStoreSpec(SpecModel):
    """``url`` (redis:// or rediss://) or ``urlEnv``: the variable holding it (secrets)."""

    url: str | None = None
    url_env: str | None = None
    namespace: str = Field(default="oma", min_length=1)

    @model_validator(mode="after")
    def _one_source(self) -> RedisStoreSpec:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("redis store needs exactly one of 'url' or 'urlEnv'")
        return self


class PostgresStoreSpec(SpecModel):
    """``dsn`` (postgresql://...) or ``dsnEnv``: the variable holding it (secrets)."""

    dsn: str | None = None
    dsn_env: str | None = None
    table: str = Field(default="oma_store", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    schema_name: str | None = Field(default=None, alias="schema")

    @model_validator(mode="after")
    def _one_source(self) -> PostgresStoreSpec:
        if (self.dsn is None) == (self.dsn_env is None):
            raise ValueError("postgres store needs exactly one of 'dsn' or 'dsnEnv'")
        return self


class StoreSpec(SpecModel):
    """Exactly one backend; ``redact`` scrubs secrets before they are stored (lossy, and it
    rules out durable approvals, which need the verbatim content)."""

    file: FileStoreSpec | None = None
    memory: dict[str, Any] | None = None
    redis: RedisStoreSpec | None = None
    postgres: PostgresStoreSpec | None = None
    redact: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> StoreSpec:
        chosen = [
            n for n in ("file", "memory", "redis", "postgres") if getattr(self, n) is not None
        ]
        if len(chosen) != 1:
            raise ValueError(
                f"store needs exactly one of file, memory, redis, postgres; got {chosen}"
            )
        return self


class ApprovalsSpec(SpecModel):
    """Which boundaries wait for a human decision (durable: the run suspends, exit code 10).

    ``tools``: tool names whose calls suspend ("*" for every tool); ``dispatch``: task titles
    whose dispatch suspends ("*" for every task); ``plan``: a team run's plan suspends before
    any task runs. Needs a store with compare-and-set (not a redacting store).
    """

    tools: list[str] = Field(default_factory=list)
    dispatch: list[str] = Field(default_factory=list)
    plan: bool = False


class RunSpec(SpecModel):
    run_id: str | None = Field(default=None, min_length=1, max_length=128)
    mode: Literal["tasks", "team", "plan"] = "tasks"
    agents: list[AgentSpec] = Field(min_length=1)
    coordinator: AgentSpec | None = None
    goal: str | None = None
    tasks: list[TaskSpec] | None = None
    plan: PlanArtifact | None = None
    store: StoreSpec | None = None
    approvals: ApprovalsSpec | None = None
    max_concurrency: int = Field(default=5, ge=1, le=256)
    # Agents see earlier results (each task's result is written as `<agent>/task:<id>:result`)
    # through a shared memory kept in the run's store, next to the checkpoint.
    shared_memory: bool = False

    @model_validator(mode="after")
    def _work_matches_mode(self) -> RunSpec:
        names = [agent.name for agent in self.agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agent names must be unique: {names}")
        needed = {"tasks": "tasks", "team": "goal", "plan": "plan"}[self.mode]
        if getattr(self, needed) is None:
            raise ValueError(f"mode {self.mode!r} needs '{needed}'")
        for other in {"tasks", "goal", "plan"} - {needed}:
            if getattr(self, other) is not None:
                raise ValueError(f"mode {self.mode!r} does not take '{other}'")
        for task in self.tasks or []:
            if task.assignee is not None and task.assignee not in names:
                raise ValueError(
                    f"task {task.title!r} is assigned to unknown agent {task.assignee!r}"
                )
        for item in self.plan.tasks if self.plan else []:
            if item.assignee is not None and item.assignee not in names:
                raise ValueError(
                    f"plan task {item.id!r} is assigned to unknown agent {item.assignee!r}"
                )
        return self


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
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()
        )
        raise RunSpecError(f"run spec {source} is invalid: {problems}") from exc
