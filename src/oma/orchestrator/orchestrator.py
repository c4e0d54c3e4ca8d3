"""``OpenMultiAgent``: run a team over tasks, a plan or a goal, checkpointed; restore it later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from oma.agent.result import AgentRunResult, RunIdentity, RunStatus
from oma.approval.gates import ToolCallGate
from oma.approval.ledger import DurableApprovalLedger
from oma.budget.account import BudgetAccount
from oma.budget.limits import RunBudget
from oma.checkpoint.attempts import load_attempt_log
from oma.checkpoint.snapshot import CheckpointSnapshotV4, RunMode
from oma.errors import CheckpointFencedError, CheckpointLostError, ModelUnavailableError
from oma.journal.recorder import RunJournal
from oma.orchestrator.activation import Activation, CheckpointConfigError, activate
from oma.orchestrator.approval_restore import continue_approvals
from oma.orchestrator.context import RunContext
from oma.orchestrator.coordinator import decompose, synthesize
from oma.orchestrator.events import (
    OrchestratorEvent,
    ProgressCallback,
    ProgressDelivery,
    delivers_progress,
)
from oma.orchestrator.executor import execute_queue
from oma.orchestrator.gate_config import Gates
from oma.orchestrator.identity import fresh_identity, resolve_requested_run_id
from oma.orchestrator.journaling import (
    fold_tail,
    journaled,
    open_journal,
    plan_set,
    run_started,
)
from oma.orchestrator.options import CheckpointArg, CheckpointOptions, normalize_checkpoint
from oma.orchestrator.outcome import build_result, queue_status
from oma.orchestrator.planning import assign_unassigned, plan_gate
from oma.orchestrator.restore import rebuild_context
from oma.orchestrator.results import TeamRunResult
from oma.run_metadata import validate_run_metadata
from oma.store.memory import InMemoryStore
from oma.tasks.loading import TaskSpec, load_task_specs
from oma.tasks.plan import PlanArtifact, plan_to_queue
from oma.tasks.queue import TaskQueue
from oma.tasks.task import Task
from oma.team import AgentConfig, Team

TaskSource = Sequence[TaskSpec | dict[str, Any]] | PlanArtifact | dict[str, Any]
DEFAULT_MAX_CONCURRENCY = 5
CLAIM_ATTEMPTS = 5


class OpenMultiAgent:
    """The engine: runs a team over a task list (``run_tasks``), a stored plan (``run_from_plan``)
    or a goal (``run_team``), checkpointing as it goes; ``restore`` resumes a run."""

    def __init__(
        self,
        *,
        checkpoint: CheckpointArg = None,
        on_progress: ProgressCallback | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        on_plan_ready: Callable[[list[Task]], Any] | None = None,
        on_task_dispatch: Callable[[Task], Any] | None = None,
        on_approval: Callable[[list[Task], list[Task]], Any] | None = None,
        on_tool_call: ToolCallGate | None = None,
        drain: asyncio.Event | None = None,
        on_attempt: Callable[[RunIdentity], None] | None = None,
        park_on_model_outage: bool = False,
        budget: RunBudget | None = None,
        journal: RunJournal | None = None,
        enforce_lineage: bool = False,
    ) -> None:
        if on_approval is not None and on_task_dispatch is not None:
            raise ValueError(
                "on_approval (gates between rounds) and on_task_dispatch (a gate per task) "
                "cannot be combined: choose one"
            )
        self.gates = Gates(on_plan_ready, on_task_dispatch, on_approval, on_tool_call)
        self.drain = drain  # once set, every run stops at its next durable boundary
        # A model call that fails transiently after the SDK's retries ends the attempt
        # (ModelUnavailableError) instead of failing its task: for callers that resume.
        self.park_on_model_outage = park_on_model_outage
        # Limits every run of this engine keeps across its attempts (``oma.budget``).
        self.budget = budget
        # Told each run's identity (run id, attempt, trace and root span ids, the link to the
        # attempt before) before any of its work starts: tracing starts its spans from it.
        self.on_attempt = on_attempt
        self.default_checkpoint = checkpoint
        self.on_progress = ProgressDelivery(on_progress) if on_progress is not None else None
        self.max_concurrency = max_concurrency
        # Where each run's events are kept (``oma.journal``); with one, checkpoints are v5.
        # ``enforce_lineage``: a model request showing a block no event explains is refused.
        self.journal = journal
        self.enforce_lineage = enforce_lineage
        # Used only when a run has neither an explicit store nor a team store.
        self._fallback_store = InMemoryStore()

    @delivers_progress
    @journaled
    async def run_tasks(
        self,
        team: Team,
        tasks: Sequence[TaskSpec | dict[str, Any]],
        *,
        checkpoint: CheckpointArg = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        task_id_seed: str | None = None,
    ) -> TeamRunResult:
        """``task_id_seed`` (default: the run id) is what task ids derive from: give it
        whatever else makes the run unique (a tenant), since idempotency keys contain them."""
        options = self._options(checkpoint)
        activation, identity = self._prepare(team, options, run_id, metadata)
        queue = load_task_specs(tasks, team.roster, run_id=task_id_seed or identity.run_id)
        context = self._context(team, queue, identity, "runTasks", activation, None, metadata)
        await self._start_journal(context, "runTasks")
        await execute_queue(context)
        return build_result(context, queue_status(context))

    @delivers_progress
    @journaled
    async def run_from_plan(
        self,
        team: Team,
        plan: PlanArtifact | dict[str, Any],
        *,
        checkpoint: CheckpointArg = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TeamRunResult:
        options = self._options(checkpoint)
        activation, identity = self._prepare(team, options, run_id, metadata)
        queue = plan_to_queue(plan)
        goal = plan.goal if isinstance(plan, PlanArtifact) else plan.get("goal")
        context = self._context(team, queue, identity, "runFromPlan", activation, goal, metadata)
        await self._start_journal(context, "runFromPlan")
        await execute_queue(context)
        return build_result(context, queue_status(context))

    @delivers_progress
    @journaled
    async def run_team(
        self,
        team: Team,
        goal: str,
        *,
        coordinator: AgentConfig | None = None,
        checkpoint: CheckpointArg = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        plan_only: bool = False,
        task_id_seed: str | None = None,
    ) -> TeamRunResult:
        """Decompose ``goal`` with the coordinator, gate the plan, run it, synthesize."""
        options = self._options(checkpoint)
        activation, identity = self._prepare(team, options, run_id, metadata)
        lead = coordinator or _default_coordinator(team)
        context = self._context(team, TaskQueue(), identity, "runTeam", activation, goal, metadata)
        await self._start_journal(context, "runTeam", plan=False)
        specs = await decompose(lead, goal, context)
        context.queue = load_task_specs(specs, team.roster, run_id=task_id_seed or identity.run_id)
        assign_unassigned(context)
        plan_set(context)
        stopped = await plan_gate(context, plan_only)
        if stopped is not None:
            return build_result(context, stopped)
        if plan_only:
            return build_result(context, RunStatus(code="ok", message="Plan only."))
        await execute_queue(context)
        status = queue_status(context)
        if status.code != "ok":
            return build_result(context, status)
        synthesis = await synthesize(lead, goal, context)
        return build_result(context, status, {"coordinator": synthesis})

    @delivers_progress
    @journaled
    async def restore(
        self,
        team: Team,
        source: TaskSource | None = None,
        *,
        checkpoint: CheckpointArg = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        coordinator: AgentConfig | None = None,
        expect_checkpoint: bool = False,
    ) -> TeamRunResult:
        """Resume the run in the checkpoint; with none, run ``source`` fresh (or do nothing).

        A run known to have a checkpoint is never started fresh (nor reported done) without it:
        ``CheckpointLostError``, before anything runs, when ``expect_checkpoint`` (the caller
        saw it, or an earlier attempt saved it), when this restore read it and it went before
        the claim, or when the run's attempt log (``attempt_log``) shows earlier attempts."""
        options = self._options(checkpoint, default=True)
        if options is None:
            raise CheckpointConfigError(
                "restore() needs checkpointing: it was turned off (checkpoint=False, "
                "CheckpointOptions(enabled=False) or a disabled default). Pass checkpoint=True "
                "or CheckpointOptions(...) naming the store to resume from."
            )
        requested = resolve_requested_run_id(run_id, options.run_id)
        if metadata is not None:
            metadata = validate_run_metadata(metadata)
        activation = activate(options, team, self._fallback_store)
        seen = False
        for _ in range(CLAIM_ATTEMPTS):
            snapshot, loaded = await activation.checkpoint.load_stored()
            if snapshot is None:
                await _refuse_if_lost(activation, options, seen=seen, expected=expect_checkpoint)
                return await self._fresh_from(team, source, options, run_id, metadata)
            seen = True
            # What the last attempt did after its last save, from the run's journal (v5).
            tail = await fold_tail(snapshot, self.journal, self._warn)
            snapshot = tail.snapshot
            context = await rebuild_context(
                snapshot,
                team,
                requested_run_id=requested,
                metadata=metadata,
                emit=self.on_progress,
                max_concurrency=self.max_concurrency,
            )
            context.checkpoint = activation.active
            context.gates = self.gates
            context.drain = self.drain
            context.park_on_model_outage = self.park_on_model_outage
            context.ledger = DurableApprovalLedger(activation.checkpoint.store)
            # Before the claim, which saves the run (v5, numbering on from its watermark).
            await open_journal(
                context,
                self.journal,
                enforce_lineage=self.enforce_lineage,
                snapshot=snapshot,
                known=tail.events,
            )
            # Before the claim, which saves the run: with the spend its reservations left.
            context.budget = self._account(context, snapshot)
            # With fencing, the run is claimed before any work: an older attempt still alive
            # fails its next save. If it wrote since we loaded, load its newer state instead.
            if await activation.active.claim(context, loaded):
                break
        else:
            raise CheckpointFencedError(activation.checkpoint.key, None)
        self._announce(context.identity)
        _warn_if_unfenced(context, activation)
        run_started(context, "restore")
        if isinstance(snapshot, CheckpointSnapshotV4):
            continuation = await continue_approvals(context, snapshot)
            if continuation.status is not None:
                result = build_result(context, continuation.status)
                if continuation.undecided:
                    result.pending_approvals = continuation.undecided
                return result
            if continuation.plan_only:
                return build_result(context, RunStatus(code="ok", message="Plan only."))
        await execute_queue(context)
        status = queue_status(context)
        if context.mode != "runTeam" or not context.goal or status.code != "ok":
            return build_result(context, status)
        return await self._resynthesize(team, context, coordinator, status)

    async def _resynthesize(
        self, team: Team, context: RunContext, coordinator: AgentConfig | None, status: RunStatus
    ) -> TeamRunResult:
        assert context.goal is not None
        try:
            lead = coordinator or _default_coordinator(team)
            synthesis: AgentRunResult = await synthesize(lead, context.goal, context)
        except ModelUnavailableError:
            raise  # parked: the next attempt synthesizes once the provider is back
        except Exception as exc:  # best-effort: the task outputs are still returned
            context.emit(
                OrchestratorEvent("error", data={"kind": "synthesis_failed", "error": exc})
            )
            return build_result(
                context, RunStatus(code="error", message=f"Synthesis failed: {exc}")
            )
        return build_result(context, status, {"coordinator": synthesis})

    async def _fresh_from(
        self,
        team: Team,
        source: TaskSource | None,
        options: CheckpointOptions,
        run_id: str | None,
        metadata: dict[str, Any] | None,
    ) -> TeamRunResult:
        if isinstance(source, PlanArtifact) or (isinstance(source, dict) and "tasks" in source):
            return await self.run_from_plan(
                team, source, checkpoint=options, run_id=run_id, metadata=metadata
            )
        if source is not None and not isinstance(source, dict | PlanArtifact):
            return await self.run_tasks(
                team, source, checkpoint=options, run_id=run_id, metadata=metadata
            )
        identity = fresh_identity(resolve_requested_run_id(run_id, options.run_id))
        context = RunContext(
            team=team,
            queue=TaskQueue(),
            identity=identity,
            mode="runTasks",
            emit_event=self.on_progress,
        )
        return build_result(context, RunStatus(code="ok"))

    async def _start_journal(self, context: RunContext, mode: str, *, plan: bool = True) -> None:
        await open_journal(context, self.journal, enforce_lineage=self.enforce_lineage)
        run_started(context, mode)
        if plan:
            plan_set(context)

    def _options(self, given: CheckpointArg, *, default: bool = False) -> CheckpointOptions | None:
        if given is not None:
            return normalize_checkpoint(given)
        if self.default_checkpoint is not None:
            return normalize_checkpoint(self.default_checkpoint)
        return normalize_checkpoint(True) if default else None

    def _prepare(
        self,
        team: Team,
        options: CheckpointOptions | None,
        run_id: str | None,
        metadata: dict[str, Any] | None,
    ) -> tuple[Activation | None, RunIdentity]:
        requested = resolve_requested_run_id(run_id, options.run_id if options else None)
        if metadata is not None:
            validate_run_metadata(metadata)
        activation = activate(options, team, self._fallback_store) if options else None
        return activation, fresh_identity(requested)

    def _context(
        self,
        team: Team,
        queue: TaskQueue,
        identity: RunIdentity,
        mode: RunMode,
        activation: Activation | None,
        goal: str | None,
        metadata: dict[str, Any] | None,
    ) -> RunContext:
        context = RunContext(
            team=team,
            queue=queue,
            identity=identity,
            mode=mode,
            emit_event=self.on_progress,
            checkpoint=activation.active if activation else None,
            goal=goal,
            metadata=validate_run_metadata(metadata) if metadata is not None else None,
            max_concurrency=self.max_concurrency,
            gates=self.gates,
            drain=self.drain,
            park_on_model_outage=self.park_on_model_outage,
            ledger=DurableApprovalLedger(activation.checkpoint.store) if activation else None,
            budget=BudgetAccount(self.budget) if self.budget is not None else None,
        )
        self._announce(identity)
        _warn_if_unfenced(context, activation)
        return context

    def _account(self, context: RunContext, snapshot: object) -> BudgetAccount | None:
        saved = snapshot.budget if isinstance(snapshot, CheckpointSnapshotV4) else None
        if self.budget is None:
            # Kept as it is: a restore given no budget does not erase the run's spend.
            context.kept_budget = saved
            return None
        account = BudgetAccount(self.budget, saved)
        for lost in account.recovered:
            message = (
                f"model call {lost.id} of task {lost.task_id} (attempt {lost.attempt}) was under "
                f"way when that attempt ended: counted as spent at its reservation of "
                f"{lost.tokens} tokens"
            )
            context.emit(
                OrchestratorEvent("warning", data={"kind": "budget_call_lost", "message": message})
            )
        return account

    def _warn(self, event: OrchestratorEvent) -> None:
        if self.on_progress is not None:
            self.on_progress(event)

    def _announce(self, identity: RunIdentity) -> None:
        if self.on_attempt is not None:
            self.on_attempt(identity)


async def _refuse_if_lost(
    activation: Activation, options: CheckpointOptions, *, seen: bool, expected: bool
) -> None:
    """No checkpoint to resume: lost (``CheckpointLostError``) if the run is known to have
    one; else a run never started (``restore`` runs its source fresh, as the reference)."""
    checkpoint = activation.checkpoint
    if seen:  # read by this restore, then changed, and now gone
        why = "it was read a moment ago, while this attempt was resuming it"
    elif expected:
        why = "one was expected (the caller saw it, or an earlier attempt saved it)"
    elif (
        options.attempt_log and await load_attempt_log(checkpoint.store, checkpoint.key) is not None
    ):
        why = "the store's attempt log shows that earlier attempts of this run saved one"
    else:
        return
    raise CheckpointLostError(checkpoint.key, None, why)


def _warn_if_unfenced(context: RunContext, activation: Activation | None) -> None:
    if activation is None or not activation.active.fence_unavailable:
        return
    store = type(activation.checkpoint.store).__name__
    message = (
        f"{store} offers no compare_and_set: this run is NOT fenced, and a second live attempt "
        "could overwrite its checkpoint"
    )
    context.emit(
        OrchestratorEvent("warning", data={"kind": "fencing_unavailable", "message": message})
    )


def _default_coordinator(team: Team) -> AgentConfig:
    first = team.agents[0]
    return AgentConfig(name="coordinator", adapter=first.adapter, model=first.model)
