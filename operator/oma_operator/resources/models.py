"""``TeamRun`` and ``ApprovalDecision`` resources (group ``oma.dev``, version ``v1alpha1``).

A TeamRun's spec is the engine's run spec (agents, work, store) reshaped for Kubernetes (the
agents under ``team``, credentials as Secret references) plus Kubernetes-only fields: runner pod
settings and retry budgets. ``to_run_spec`` maps it onto ``oma.spec.RunSpec``, so both validate
with one model. The CRD YAML in ``crds/`` is generated from these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from oma.pod_contract import (
    LOG_FORMAT_ENV,
    LOG_FORMATS,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    STORE_URL_ENV,
    is_reserved_env,
    model_key_env,
)
from oma.spec import (
    SHARED_MEMORY,
    SHARED_MEMORY_SCOPE,
    AgentSpec,
    ApprovalsSpec,
    BudgetSpec,
    EventsSpec,
    ModelSpec,
    SpecModel,
    check_work,
)
from oma.store.names import POSTGRES_IDENTIFIER, REDIS_NAMESPACE
from oma.tasks.loading import TaskSpec
from oma.tasks.plan import PlanArtifact
from oma_operator.resources.pod_extras import (
    Annotations,
    Labels,
    ScratchVolume,
    check_keys,
    check_label_values,
)

GROUP, VERSION = "oma.dev", "v1alpha1"
MAX_TEAMRUN_NAME = 52  # <name>-a<attempt> (a pod name, and its host name) fits 63 characters
# Set by the API server (the chart's MutatingAdmissionPolicy) to the user who created a TeamRun;
# a ValidatingAdmissionPolicy keeps anyone from forging or changing it.
CREATOR_ANNOTATION = "oma.dev/created-by"
# Likewise every user who changed what a TeamRun executes (its work fields), one per line, in
# the order of their first change; separation of duties excludes them as it does the creator.
EDITORS_ANNOTATION = "oma.dev/edited-by"
# Set by ``oma retry`` to the time of the request: the operator takes a Failed run up again.
RETRY_ANNOTATION = "oma.dev/retry"
# The spec fields that hold, stop, retry or retain a run without changing what it executes: open
# while an attempt runs or waits, and changing them makes nobody an editor.
HOLD_FIELDS = ("suspend", "cancel", "retryPolicy", "ttlSecondsAfterFinished")
# Likewise the runner settings that say where its pod may go and what it may use, not what it
# runs: a pod no node can take, or that needs more memory, is fixed in place. (Pod labels and
# annotations are not among them: either can make a webhook inject a container or a Secret.)
PLACEMENT_FIELDS = (
    "resources",
    "tolerations",
    "nodeSelector",
    "priorityClassName",
    "terminationGracePeriodSeconds",
)
CONTENT_LIMIT = 262144  # characters of a request's canonical JSON an ApprovalDecision holds
SUMMARY_LIMIT = 16384  # characters of an ApprovalDecision's summary
Identity = Annotated[str, Field(min_length=1, max_length=253)]


class SecretKeyRef(SpecModel):
    name: str = Field(
        min_length=1, max_length=253, description="Secret name, in the TeamRun's namespace."
    )
    key: str = Field(min_length=1, max_length=253, description="Key within the Secret's data.")


class TeamRunModel(ModelSpec):
    api_key_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the provider's API key (handed to the runner as "
        "OMA_MODEL_KEY_<AGENT>); leave out for the scripted provider.",
    )


class TeamRunAgent(AgentSpec):
    model: TeamRunModel = Field(description="The model this agent talks to.")


class TeamSpec(SpecModel):
    agents: list[TeamRunAgent] = Field(
        min_length=1, max_length=64, description="The agents; task assignees name one of them."
    )


class RedisRef(SpecModel):
    url_secret_ref: SecretKeyRef = Field(
        description="Secret key holding the Redis URL (redis:// or rediss://)."
    )
    namespace: str = Field(
        default="oma",
        max_length=63,
        pattern=REDIS_NAMESPACE,
        description="Key prefix in Redis (no braces); runs with different namespaces never see "
        "each other.",
    )


class PostgresRef(SpecModel):
    dsn_secret_ref: SecretKeyRef = Field(
        description="Secret key holding the PostgreSQL connection string (postgresql://...)."
    )
    table: str = Field(
        default="oma_store",
        pattern=POSTGRES_IDENTIFIER,
        description="Table the store keeps its rows in (created if missing).",
    )
    schema_name: str | None = Field(
        default=None,
        alias="schema",
        pattern=POSTGRES_IDENTIFIER,
        description="Schema of the table (created if missing); default: the search path's.",
    )


class TeamRunHistory(SpecModel):
    """Retention of the checkpoint's past boundaries (journal layout)."""

    enabled: bool = Field(
        default=True, description="Keep past boundaries; false keeps the latest only."
    )
    keep: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Boundaries kept behind the latest; older ones go at the next compaction.",
    )
    max_age_seconds: int | None = Field(
        default=None,
        gt=0,
        description="Seconds a boundary is kept; older ones go at the next compaction.",
    )


class TeamRunStore(SpecModel):
    """Exactly one of ``redis`` or ``postgres`` (checked by the API server)."""

    redis: RedisRef | None = Field(default=None, description="Checkpoint into Redis.")
    postgres: PostgresRef | None = Field(default=None, description="Checkpoint into PostgreSQL.")
    redact: bool = Field(
        default=False,
        description="Redact secret-shaped values before they reach the store (the run is then "
        "not fenced and cannot suspend for approvals).",
    )
    layout: Literal["journal", "snapshot"] = Field(
        default="journal",
        description="How the run keeps its checkpoint: journal (a snapshot, then one delta per "
        "durable boundary: the bytes written stay a small multiple of the snapshot) or snapshot "
        "(the whole snapshot at every boundary, what the TypeScript reference reads). A run "
        "keeps the layout it started with; a redacting store keeps snapshots.",
    )
    history: TeamRunHistory = Field(
        default_factory=TeamRunHistory,
        description="Past boundaries the journal keeps (`oma checkpoint history`): every one "
        "by default, kept in the store after the TeamRun is gone until the checkpoint is "
        "deleted (`oma checkpoint delete` or `prune`).",
    )
    events: EventsSpec = Field(
        default_factory=EventsSpec,
        description="The run's event journal, kept in the store beside its checkpoint (then "
        "of schema v5); `oma verify --run-id` checks it. Off by default; not with redact.",
    )


class RetryPolicy(SpecModel):
    max_disruptions: int = Field(
        default=20,
        ge=0,
        le=1000,
        description="Evictions, preemptions, drains and lost nodes tolerated before the run "
        "ends Failed (DisruptionsExhausted).",
    )
    max_failures: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Crashes and start timeouts tolerated before the run ends Failed "
        "(FailuresExhausted).",
    )
    max_oom_kills: int = Field(
        default=2,
        ge=0,
        le=100,
        description="OOM kills tolerated before the run ends Failed (OomKillsExhausted).",
    )
    backoff_seconds: int = Field(
        default=10,
        ge=0,
        le=3600,
        description="Wait before the attempt after a crash; doubled per failure, at most 1 h.",
    )
    model_outage_seconds: int = Field(
        default=3600,
        ge=0,
        le=604800,
        description="How long a model provider may stay unavailable (attempts ending "
        "ModelUnavailable after the SDK's retries, one after another) before the run ends "
        "Failed (ModelOutageExhausted). Waiting uses no failure budget; attempts back off from "
        "backoffSeconds, doubling, up to 5 minutes apart.",
    )
    tool_change_seconds: int = Field(
        default=3600,
        ge=0,
        le=604800,
        description="How long the run holds for a tool it recorded that changed or went on its "
        "MCP server (attempts ending ToolChanged, one after another; nothing is called) before "
        "it ends Failed (ToolChangeExhausted). Holding uses no failure budget; attempts back off "
        "from backoffSeconds, doubling, up to 5 minutes apart, and the run goes on once the tool "
        "is back.",
    )
    start_timeout_seconds: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="A runner pod not started this long after creation ends its attempt as a "
        "failure (StartTimeout) and is deleted.",
    )
    node_loss_grace_seconds: int = Field(
        default=60,
        ge=0,
        le=3600,
        description="How long a runner pod's node may be unreachable (after the node controller "
        "marks the pod not ready) before its attempt ends as a disruption (NodeLost).",
    )


_RESERVED = ", ".join([*sorted(RESERVED_ENV), *(p + "*" for p in RESERVED_ENV_PREFIXES)])
_RESERVED_RULE = f"!(self.name in {sorted(RESERVED_ENV)!r}) && " + " && ".join(
    f"!self.name.startsWith({prefix!r})" for prefix in RESERVED_ENV_PREFIXES
)


class EnvVar(SpecModel):
    """One environment variable of the runner container (a Kubernetes EnvVar). The names the
    runner pod contract uses are the operator's (``oma.pod_contract``) and are refused."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _RESERVED_RULE,
                    "message": f"this name is reserved for the runner pod contract ({_RESERVED}): "
                    "the operator sets it",
                }
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name (not one the runner pod contract reserves).",
    )
    value: str | None = Field(default=None, description="Its value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="Where the value comes from (a Kubernetes EnvVarSource: secretKeyRef, "
        "configMapKeyRef, fieldRef, resourceFieldRef); a Secret or ConfigMap named here must "
        "be readable by whoever writes the TeamRun.",
    )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if is_reserved_env(name):
            raise ValueError(
                f"{name} is reserved for the runner pod contract: the operator sets it"
            )
        return name

    @model_validator(mode="after")
    def _a_known_log_format(self) -> EnvVar:
        # Refused with the spec (InvalidSpec), not by the runner at its start (a failed pod).
        named = self.name == LOG_FORMAT_ENV and self.value is not None
        if named and str(self.value).strip() not in LOG_FORMATS:
            raise ValueError(
                f"{LOG_FORMAT_ENV}={self.value!r}: use one of {', '.join(LOG_FORMATS)}"
            )
        return self


class RunnerSettings(SpecModel):
    image: str | None = Field(
        default=None, max_length=512, description="Runner image; default: the operator's."
    )
    resources: dict[str, Any] | None = Field(
        default=None, description="Container resources (requests, limits) of the runner."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, description="Pod tolerations of runner pods."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels runner pods must land on."
    )
    env: list[EnvVar] | None = Field(
        default=None,
        max_length=64,
        description="Extra environment variables of the runner container; names the runner pod "
        "contract uses (OMA_RUN_*, OMA_STORE_*, OMA_MODEL_KEY_*, OMA_ATTEMPT, ...) are refused.",
    )
    termination_grace_period_seconds: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="Time a runner gets after SIGTERM to reach its next durable boundary and "
        "save; make it longer than the slowest model call.",
    )
    labels: Labels | None = Field(
        default=None,
        description="Extra labels of runner pods (e.g. cost allocation); keys under oma.dev/ "
        "are the operator's.",
    )
    annotations: Annotations | None = Field(
        default=None,
        description="Extra annotations of runner pods (e.g. karpenter.sh/do-not-disrupt); keys "
        "under oma.dev/ are the operator's.",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="PriorityClass of runner pods (it must exist).",
    )
    scratch: ScratchVolume | None = Field(
        default=None,
        description="A writable emptyDir at /scratch ($OMA_SCRATCH_DIR) for the runner's tools; "
        "it is lost with the pod.",
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        return check_label_values(check_keys(labels, "label"))

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str] | None) -> dict[str, str] | None:
        return check_keys(annotations, "annotation")


class ReviewerSet(SpecModel):
    """Who may decide: any of these users, or any member of these groups (as the API server
    authenticates them: ``request.userInfo``)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.users) ? size(self.users) : 0) + "
                    "(has(self.groups) ? size(self.groups) : 0) > 0",
                    "message": "name at least one reviewer user or group",
                }
            ]
        }
    )

    users: list[Identity] = Field(
        default_factory=list, max_length=64, description="User names that may decide."
    )
    groups: list[Identity] = Field(
        default_factory=list, max_length=64, description="Groups whose members may decide."
    )

    @model_validator(mode="after")
    def _names_someone(self) -> ReviewerSet:
        if not self.users and not self.groups:
            raise ValueError("name at least one reviewer user or group")
        return self


class ReviewersSpec(SpecModel):
    """Who decides which request. A tool call (and an uncertain tool call) takes its tool's
    entry in ``tools``, a task dispatch its task title's in ``dispatch``, a plan ``plan``, a
    budget raise ``budget``; ``*``
    matches any tool or task; anything without an entry takes ``default``. A request none of
    these names is decided by whoever RBAC lets update ApprovalDecisions."""

    default: ReviewerSet | None = Field(
        default=None, description="Reviewers of every request nothing more specific names."
    )
    tools: dict[str, ReviewerSet] = Field(
        default_factory=dict,
        max_length=64,
        description='Reviewers of a tool\'s calls, by tool name ("*": any tool).',
    )
    dispatch: dict[str, ReviewerSet] = Field(
        default_factory=dict,
        max_length=64,
        description='Reviewers of a task\'s dispatch, by task title ("*": any task).',
    )
    plan: ReviewerSet | None = Field(default=None, description="Reviewers of the plan.")
    budget: ReviewerSet | None = Field(
        default=None, description="Reviewers of raises of the run's budget."
    )


class TeamRunApprovals(ApprovalsSpec):
    """The run spec's approval gates, plus who may decide (Kubernetes identities)."""

    reviewers: ReviewersSpec | None = Field(
        default=None,
        description="Who may decide which request; the API server refuses anyone else.",
    )
    separation_of_duties: bool = Field(
        default=False,
        description="The TeamRun's creator and every user who changed what it executes "
        f"(recorded by the API server in the {CREATOR_ANNOTATION} and {EDITORS_ANNOTATION} "
        "annotations) may not decide its requests.",
    )
    expire_after_seconds: int | None = Field(
        default=None,
        ge=1,
        le=31536000,
        description="A request nobody decided this long after it was made is decided by "
        "expiry (as onExpiry says; an uncertain tool call is always settled Failed, never run "
        "again, and a budget raise always Rejected), recorded with reviewer 'expired'; a "
        "decision set later is not recorded. Its ApprovalDecision shows status.expiresAt. "
        "Default: requests never expire.",
    )
    on_expiry: Literal["Reject", "Approve"] = Field(
        default="Reject",
        description="What an expired request is decided as. Approve is refused with reviewers "
        "or separationOfDuties: it would let requests pass that nobody allowed looked at.",
    )

    @model_validator(mode="after")
    def _expiry_does_not_bypass_reviewers(self) -> TeamRunApprovals:
        if self.on_expiry == "Approve" and (self.reviewers or self.separation_of_duties):
            raise ValueError(
                "onExpiry: Approve cannot be combined with reviewers or separationOfDuties: an "
                "expired request would pass without any of them; use Reject"
            )
        return self


class TeamRunForkFrom(SpecModel):
    """Start as a fork of another run of this namespace at one of its past boundaries."""

    run_id: str = Field(
        min_length=1,
        max_length=128,
        description="The run forked from (its runId; a run of this namespace only).",
    )
    seq: int = Field(ge=1, description="Its boundary to start from (`oma checkpoint history`).")
    patch: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=1000,
        description="A JSON Patch (RFC 6902) applied to that boundary's snapshot first; it may "
        "not touch /identity, /pendingApprovals or /approvalDecisions.",
    )


class TeamRunSpec(SpecModel):
    run_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Logical run id, the checkpoint's key in the store; immutable. Default: "
        "<namespace>.<name>.",
    )
    mode: Literal["tasks", "team", "plan"] = Field(
        default="tasks",
        description="tasks: run the task list; team: a coordinator plans the goal; plan: run a "
        "stored plan artifact.",
    )
    goal: str | None = Field(default=None, description="What the team is to do (mode team).")
    team: TeamSpec = Field(description="The agents of the run.")
    coordinator: TeamRunAgent | None = Field(
        default=None, description="The agent that plans in mode team (default: a built-in one)."
    )
    tasks: list[TaskSpec] | None = Field(
        default=None, max_length=1000, description="The task list (mode tasks)."
    )
    plan: PlanArtifact | None = Field(default=None, description="The plan to run (mode plan).")
    store: TeamRunStore = Field(description="Where checkpoints and approvals live.")
    fork_from: TeamRunForkFrom | None = Field(
        default=None,
        description="Start as a fork of another run at a past boundary: its first attempt "
        "writes the fork (the parent is not written; committed calls are replayed, open "
        "approvals asked again), later attempts resume the fork's own checkpoint. Immutable.",
    )
    approvals: TeamRunApprovals | None = Field(
        default=None,
        description="Approval gates and their reviewers; a run suspends at each until "
        "decided. Immutable.",
    )
    max_concurrency: int = Field(
        default=5, ge=1, le=256, description="Tasks run at the same time at most."
    )
    budget: BudgetSpec | None = Field(
        default=None,
        description="Limits on the run's tokens, model calls and tool calls across all its "
        "attempts; a step that would pass one waits for an ApprovalDecision (scope budget) "
        "to raise it. Immutable: raises go through reviewers.",
    )
    shared_memory: bool = SHARED_MEMORY
    shared_memory_scope: str | None = SHARED_MEMORY_SCOPE
    retry_policy: RetryPolicy = Field(
        default_factory=RetryPolicy, description="Budgets and timers for attempts."
    )
    runner: RunnerSettings = Field(
        default_factory=RunnerSettings, description="Runner pod settings."
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=31_536_000,
        description="Delete the TeamRun this many seconds after it finished (Succeeded, "
        "Failed, Rejected or Cancelled); 0: at once. Default: the operator's (the chart's "
        "retention.ttlSecondsAfterFinished), else never. Its store records stay.",
    )
    suspend: bool = Field(
        default=False,
        description="Pause the run: its runner drains at the next durable boundary and no "
        "pod runs while true (phase Suspended). Set it back to false to resume from the "
        "checkpoint as the next attempt. A TeamRun created suspended starts when cleared.",
    )
    cancel: bool = Field(
        default=False,
        description="Stop the run for good: its runner drains at the next durable boundary "
        "and the run ends Cancelled (its checkpoint is kept). Cannot be set back to false.",
    )

    @model_validator(mode="after")
    def _work_matches_mode(self) -> TeamRunSpec:
        # The run spec's own rules (one validation for a spec file and a TeamRun); the CRD
        # repeats what CEL can say, so most mistakes are refused before they are stored.
        check_work(self.mode, [a.name for a in self.team.agents], self.goal, self.tasks, self.plan)
        if self.shared_memory_scope is not None and not self.shared_memory:
            raise ValueError("sharedMemoryScope needs sharedMemory: true")
        return self


def work_fields() -> list[str]:
    """The spec fields (dotted paths, as the API names them) that say what a TeamRun executes:
    all but the hold and placement fields, so a field added to the spec is frozen and recorded
    unless said otherwise."""
    top = [field.alias or name for name, field in TeamRunSpec.model_fields.items()]
    runner = [field.alias or name for name, field in RunnerSettings.model_fields.items()]
    return [field for field in top if field not in (*HOLD_FIELDS, "runner")] + [
        f"runner.{field}" for field in runner if field not in PLACEMENT_FIELDS
    ]


def to_run_spec(spec: TeamRunSpec, namespace: str) -> dict[str, Any]:
    """The engine run spec (JSON) a runner pod gets; credentials become env variable names,
    and the store is the TeamRun's namespace's part of it. The run id is not in it: the pod has
    one place for it (``OMA_RUN_ID``)."""
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
    store["tenant"] = namespace
    store["layout"] = spec.store.layout
    store["history"] = spec.store.history.model_dump(by_alias=True, exclude_none=True)
    if spec.store.events.enabled:
        store["events"] = spec.store.events.model_dump(by_alias=True)
    run: dict[str, Any] = {
        "mode": spec.mode,
        "agents": agents,
        "store": store,
        "maxConcurrency": spec.max_concurrency,
        "sharedMemory": spec.shared_memory,
    }
    if spec.shared_memory_scope is not None:
        run["sharedMemoryScope"] = spec.shared_memory_scope
    if spec.budget is not None:
        run["budget"] = spec.budget.model_dump(mode="json", by_alias=True, exclude_none=True)
    if spec.fork_from is not None:
        run["forkFrom"] = spec.fork_from.model_dump(mode="json", by_alias=True, exclude_none=True)
    if spec.coordinator is not None:
        run["coordinator"] = _agent(spec.coordinator)
    if spec.approvals is not None:
        # Reviewers are Kubernetes identities: enforced by the API server, not by the engine.
        gates = set(ApprovalsSpec.model_fields)
        run["approvals"] = spec.approvals.model_dump(mode="json", by_alias=True, include=gates)
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
    team_run: str = Field(
        min_length=1, max_length=253, description="The TeamRun that asks (same namespace)."
    )
    request_id: str = Field(
        pattern=r"^apr_[0-9a-f]{32}$", description="The approval request's id in the ledger."
    )
    request_hash: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the exact content asked about; a decision binds to it.",
    )
    scope: Literal[
        "plan", "task_round", "task_dispatch", "tool_call", "uncertain_tool_call", "budget"
    ] = Field(
        description="What is to be approved: a plan, a round of tasks, one task, one tool "
        "call, an uncertain tool call (a non-idempotent call that started before a crash "
        "and may or may not have happened), or a raise of the run's budget."
    )
    boundary: str | None = Field(
        default=None, max_length=4096, description="The request's boundary (part of the hash)."
    )
    summary: str = Field(
        default="",
        max_length=SUMMARY_LIMIT,
        description="The content asked about, in words; says so when it is cut.",
    )
    content: str | None = Field(
        default=None,
        max_length=CONTENT_LIMIT,
        description="The exact content asked about, as the canonical JSON its requestHash "
        "binds (oma approve checks it against the hash and prints it); left out when larger "
        "than 256 KiB (the summary then says how to read it).",
    )
    reviewers: ReviewerSet | None = Field(
        default=None,
        description="Who may decide (from the TeamRun); none: whoever RBAC lets update it.",
    )
    excluded_reviewers: list[Identity] | None = Field(
        default=None,
        max_length=16,
        description="Users who may not decide (the TeamRun's creator, with separation of duties).",
    )
    decision: Literal["Pending", "Approved", "Rejected"] = Field(
        default="Pending",
        description="Set to Approved or Rejected to decide; final once set (first wins).",
    )
    reviewer: str | None = Field(
        default=None,
        max_length=253,
        description="Who decides: your own user name, set together with the decision "
        "(oma approve fills it in).",
    )
    reason: str | None = Field(
        default=None,
        max_length=4096,
        description="Why, set together with the decision; kept in the store's ledger.",
    )
    resolution: Literal["Retry", "Done", "Failed"] | None = Field(
        default=None,
        description="Only for scope uncertain_tool_call: Approved means Retry (run the call "
        "again); Rejected means Failed (record it as not done, the default) or Done (record it "
        "as having happened without running it; say what it did in result).",
    )
    result: str | None = Field(
        default=None,
        max_length=16384,
        description="With resolution Done: what the call did, given to the model as its result.",
    )
