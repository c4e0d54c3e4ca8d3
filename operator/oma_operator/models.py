"""``TeamRun`` and ``ApprovalDecision`` resources (group ``oma.dev``, version ``v1alpha1``).

A TeamRun's spec is the engine's run spec (agents, work, store) reshaped for Kubernetes (the
agents under ``team``, credentials as Secret references) plus Kubernetes-only fields: runner pod
settings and retry budgets. ``to_run_spec`` maps it onto ``oma.spec.RunSpec``, so both validate
with one model. The CRD YAML in ``crds/`` is generated from these models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from oma.spec import AgentSpec, ApprovalsSpec, ModelSpec, SpecModel
from oma.tasks.loading import TaskSpec
from oma.tasks.plan import PlanArtifact

GROUP, VERSION = "oma.dev", "v1alpha1"


class SecretKeyRef(SpecModel):
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class TeamRunModel(ModelSpec):
    api_key_secret_ref: SecretKeyRef | None = None


class TeamRunAgent(AgentSpec):
    model: TeamRunModel


class TeamSpec(SpecModel):
    agents: list[TeamRunAgent] = Field(min_length=1, max_length=64)


class RedisRef(SpecModel):
    url_secret_ref: SecretKeyRef
    namespace: str = Field(default="oma", min_length=1, max_length=63)


class PostgresRef(SpecModel):
    dsn_secret_ref: SecretKeyRef
    table: str = Field(default="oma_store", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
    schema_name: str | None = Field(default=None, alias="schema", max_length=63)


class TeamRunStore(SpecModel):
    """Exactly one of ``redis`` or ``postgres`` (checked by the API server)."""

    redis: RedisRef | None = None
    postgres: PostgresRef | None = None
    redact: bool = False


class RetryPolicy(SpecModel):
    max_disruptions: int = Field(default=20, ge=0, le=1000)
    max_failures: int = Field(default=3, ge=0, le=100)
    max_oom_kills: int = Field(default=2, ge=0, le=100)
    backoff_seconds: int = Field(default=10, ge=0, le=3600)


class RunnerSettings(SpecModel):
    image: str | None = Field(default=None, max_length=512)
    resources: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    node_selector: dict[str, str] | None = None
    env: list[dict[str, Any]] | None = Field(default=None, max_length=64)  # extra EnvVars
    termination_grace_period_seconds: int = Field(default=60, ge=1, le=3600)


class TeamRunSpec(SpecModel):
    run_id: str | None = Field(default=None, min_length=1, max_length=128)
    mode: Literal["tasks", "team", "plan"] = "tasks"
    goal: str | None = None
    team: TeamSpec
    coordinator: TeamRunAgent | None = None
    tasks: list[TaskSpec] | None = Field(default=None, max_length=1000)
    plan: PlanArtifact | None = None
    store: TeamRunStore
    approvals: ApprovalsSpec | None = None
    max_concurrency: int = Field(default=5, ge=1, le=256)
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)


STORE_URL_ENV = "OMA_STORE_URL"


def model_key_env(agent: str) -> str:
    return "OMA_MODEL_KEY_" + "".join(c if c.isalnum() else "_" for c in agent.upper())


def to_run_spec(spec: TeamRunSpec, run_id: str) -> dict[str, Any]:
    """The engine run spec (JSON) a runner pod gets; credentials become env variable names."""
    agents = [_agent(agent) for agent in spec.team.agents]
    store: dict[str, Any]
    if spec.store.redis is not None:
        store = {"redis": {"urlEnv": STORE_URL_ENV, "namespace": spec.store.redis.namespace}}
    else:
        assert spec.store.postgres is not None
        pg = spec.store.postgres
        store = {
            "postgres": {
                "dsnEnv": STORE_URL_ENV,
                "table": pg.table,
                **({"schema": pg.schema_name} if pg.schema_name else {}),
            }
        }
    store["redact"] = spec.store.redact
    run: dict[str, Any] = {
        "runId": run_id,
        "mode": spec.mode,
        "agents": agents,
        "store": store,
        "maxConcurrency": spec.max_concurrency,
    }
    if spec.coordinator is not None:
        run["coordinator"] = _agent(spec.coordinator)
    if spec.approvals is not None:
        run["approvals"] = spec.approvals.model_dump(mode="json", by_alias=True)
    for name, value in (("goal", spec.goal), ("tasks", spec.tasks), ("plan", spec.plan)):
        if value is not None:
            run[name] = value if isinstance(value, str) else _dump(value)
    return run


def _agent(agent: TeamRunAgent) -> dict[str, Any]:
    data: dict[str, Any] = agent.model_dump(mode="json", by_alias=True, exclude_none=True)
    if data["model"].pop("apiKeySecretRef", None) is not None:
        data["model"]["apiKeyEnv"] = model_key_env(agent.name)
    return data


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in value]
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


class ApprovalDecisionSpec(SpecModel):
    team_run: str = Field(min_length=1, max_length=253)
    request_id: str = Field(pattern=r"^apr_[0-9a-f]{32}$")
    request_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    scope: Literal["plan", "task_round", "task_dispatch", "tool_call"]
    summary: str = Field(default="", max_length=16384)
    decision: Literal["Pending", "Approved", "Rejected"] = "Pending"
    reviewer: str | None = Field(default=None, max_length=253)
    reason: str | None = Field(default=None, max_length=4096)
