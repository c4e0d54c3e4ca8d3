"""``oma run``: run a spec in this process, resumably, showing progress.

The same command starts a run and resumes it: with a checkpoint for the run id in the store it
restores (completed tasks are not re-run, committed tool calls are replayed), without one it
starts fresh, unless the run is known to have saved one (then the checkpoint was lost, and the
run refuses to start over: ``CheckpointLostError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from oma.agent.result import RunIdentity
from oma.assemble import build_coordinator, build_team, gates_for, open_store, run_journal_for
from oma.checkpoint.attempts import AttemptEnd, end_attempt, load_attempt_log, run_trace_id
from oma.checkpoint.fork import ForkError, fork_run
from oma.checkpoint.manager import Checkpoint
from oma.checkpoint.snapshot import CheckpointSnapshot, CheckpointSnapshotV1, CheckpointSnapshotV4
from oma.errors import CheckpointFencedError, CheckpointLostError, OmaError
from oma.extras import needs_extra
from oma.orchestrator.events import OrchestratorEvent, ProgressCallback
from oma.orchestrator.identity import restored_identity
from oma.orchestrator.options import CheckpointOptions
from oma.orchestrator.orchestrator import OpenMultiAgent
from oma.orchestrator.results import TeamRunResult
from oma.pod_contract import EXIT_BY_STATUS, Exit
from oma.spec import HistorySpec, RunSpec
from oma.store.base import MemoryStore, close_store
from oma.tools.define import AnyTool
from oma.tools.mcp import record as mcp_record
from oma.tools.mcp.errors import McpToolNotOfferedError
from oma.tracing import run_tracer


class RunFinishedError(OmaError):
    """``oma run`` of a run whose checkpoint says it is over: nothing is run again."""

    code = "RUN_FINISHED"

    def __init__(self, run_id: str, attempt: int, what: str) -> None:
        self.run_id, self.attempt = run_id, attempt
        self.detail = (
            f"already complete (attempt {attempt} {what}); nothing to do. To run it again "
            f"from the start, delete its checkpoint (oma checkpoint delete --run-id {run_id} "
            "--store ...) or use another --run-id"
        )
        super().__init__(f"run {run_id}: {self.detail}")


def finished(snapshot: CheckpointSnapshot) -> str | None:
    """What a run whose checkpoint says it is over did (None: it has work left). A task list
    or plan is over when no task waits, runs or is blocked and no approval is pending; a team
    run (its coordinator may still plan or sum up) is never judged over from here, nor a run
    with a failed task (running it again reports the failure, with its exit code)."""
    if snapshot.mode == "runTeam" or isinstance(snapshot, CheckpointSnapshotV1):
        return None
    queue = snapshot.queue
    if not queue.tasks or queue.pending or queue.in_progress or queue.blocked or queue.failed:
        return None  # a failed task: the run did not succeed, and running it again says so
    if isinstance(snapshot, CheckpointSnapshotV4) and (
        snapshot.in_flight_tasks or snapshot.pending_approvals
    ):
        return None
    done = f"completed {len(queue.completed)} of {len(queue.tasks)} tasks"
    return done + (f", {len(queue.skipped)} skipped" if queue.skipped else "")


log = logging.getLogger(__name__)


@dataclass
class LocalRun:
    result: TeamRunResult
    resumed: bool

    @property
    def exit_code(self) -> Exit:
        """As a runner pod exits (``oma.pod_contract``): a run that did not succeed is a
        permanent failure (2), a suspended one 10."""
        return EXIT_BY_STATUS.get(self.result.status.code, Exit.PERMANENT)


async def run_spec(
    spec: RunSpec,
    *,
    run_id: str,
    tools: Mapping[str, AnyTool],
    default_store_path: Path,
    on_progress: ProgressCallback | None = None,
    on_start: Callable[[bool], None] | None = None,
    drain: asyncio.Event | None = None,
    expect_checkpoint: bool = False,
    refuse_finished: bool = False,
) -> LocalRun:
    """Resume the run's checkpoint, or start it fresh when it has none.

    A run known to have saved a checkpoint (``expect_checkpoint``: the caller knows, e.g. the
    operator from an earlier attempt; or the store's attempt log says so) never starts fresh
    without it: that raises ``CheckpointLostError`` before anything runs. With
    ``refuse_finished``, a run whose checkpoint says it is over raises ``RunFinishedError``
    instead of being restored (a new attempt that would do nothing)."""
    store = open_store(spec.store, default_store_path)
    tally = _Tally(on_progress)
    servers = contextlib.AsyncExitStack()
    try:
        # Before anything is read or run: a tool server that cannot be reached is a transient
        # failure of this attempt, and the next one starts from the same checkpoint.
        mcp_tools, not_offered = await _open_tools(servers, spec)
        checkpoint = CheckpointOptions(
            store=store,
            run_id=run_id,
            fence=True,
            attempt_log=True,
            journal=spec.store is None or spec.store.layout == "journal",
            history=(spec.store.history if spec.store else HistorySpec()).policy(),
        )
        events = spec.store.events if spec.store is not None else None
        orchestrator = OpenMultiAgent(
            journal=run_journal_for(spec.store, store, default_store_path, run_id),
            enforce_lineage=events is not None and events.enforce_lineage,
            on_progress=tally.see,
            max_concurrency=spec.max_concurrency,
            drain=drain,
            on_attempt=tally.attempt_started,
            park_on_model_outage=True,  # a provider outage is an interruption: resume later
            budget=spec.budget.run_budget() if spec.budget is not None else None,
            **gates_for(spec.approvals),
        )
        # Run ids are unique per tenant only: the tenant goes into task ids (and so into the
        # idempotency keys of tool calls) too.
        seed = f"{spec.store.tenant}/{run_id}" if spec.store and spec.store.tenant else None
        saved = Checkpoint(store, run_id=run_id)
        found = await saved.load_latest()
        if found is None and spec.fork_from is not None:
            await _refuse_if_lost(saved, expect_checkpoint)
            fork = spec.fork_from
            try:
                await fork_run(
                    store,
                    fork.run_id,
                    fork.seq,
                    child=run_id,
                    patch=fork.patch,
                    history=checkpoint.history,
                )
            except ForkError:
                # Another start of this run forked it first: go on from that fork.
                if await saved.load_latest() is None:
                    raise
            found = await saved.load_latest()
        resumed = found is not None
        if found is None:
            await _refuse_if_lost(saved, expect_checkpoint)
        elif refuse_finished and (what := finished(found)) is not None:
            raise RunFinishedError(run_id, restored_identity(found, run_id).attempt - 1, what)
        mcp_tools = await _settled_tools(store, run_id, mcp_tools, not_offered, resumed)
        team = build_team(spec, tools, name=run_id, store=store, mcp_tools=mcp_tools)
        coordinator = build_coordinator(spec, tools)
        if resumed:
            await tally.continue_run_trace(saved)
        if on_start is not None:
            on_start(resumed)
        attempt = restored_identity(found, run_id).attempt if found is not None else 1
        try:
            if resumed:
                result = await orchestrator.restore(
                    team, checkpoint=checkpoint, coordinator=coordinator, expect_checkpoint=True
                )
            elif spec.mode == "team":
                assert spec.goal is not None
                result = await orchestrator.run_team(
                    team,
                    spec.goal,
                    coordinator=coordinator,
                    checkpoint=checkpoint,
                    task_id_seed=seed,
                )
            elif spec.mode == "plan":
                assert spec.plan is not None
                result = await orchestrator.run_from_plan(team, spec.plan, checkpoint=checkpoint)
            else:
                assert spec.tasks is not None
                result = await orchestrator.run_tasks(
                    team, spec.tasks, checkpoint=checkpoint, task_id_seed=seed
                )
        except CheckpointLostError:
            raise  # the store lost the run: nothing of it is written again
        except CheckpointFencedError as exc:
            # Beaten to its first save by another start (same attempt number): the record of
            # that number is the winner's, not this attempt's.
            if not exc.first_save:
                await tally.record(saved, exc.attempt or attempt, "fenced", str(exc))
            raise
        except Exception as exc:
            code = getattr(exc, "code", type(exc).__name__)
            await tally.record(saved, attempt, "failed", f"{code}: {exc}")
            raise
        await tally.record(saved, result.identity.attempt, result.status.code, _closing(result))
        return LocalRun(result=result, resumed=resumed)
    finally:
        # Connections and pools end with the run, not with the event loop (a pool still open
        # when the loop shuts down may be mid-connect, and some do not let go then).
        await servers.aclose()
        await close_store(store)
        await tally.end_trace("unknown")  # ended without a record (fenced at its first save)


async def _open_tools(
    servers: contextlib.AsyncExitStack, spec: RunSpec
) -> tuple[dict[str, list[AnyTool]], McpToolNotOfferedError | None]:
    """The agents' MCP tools, connected for the attempt; or none and the allow-listed tool a
    server does not offer, which the checkpoint judges (``_settled_tools``)."""
    try:
        return await servers.enter_async_context(open_mcp_servers(spec)), None
    except McpToolNotOfferedError as exc:
        return {}, exc


async def _settled_tools(
    store: MemoryStore,
    run_id: str,
    tools: dict[str, list[AnyTool]],
    not_offered: McpToolNotOfferedError | None,
    resumed: bool,
) -> dict[str, list[AnyTool]]:
    """The MCP tools this attempt gets (``mcp_record.settle``). An allow-listed tool a server
    does not offer is, for a resumed run that recorded it, gone from its server (the run
    holds: ``McpToolChangedError``), for a new run a spec to fix."""
    if not_offered is not None:
        gone = await mcp_record.gone_or_not_offered(store, run_id, not_offered, resumed)
        if gone is not_offered:
            raise not_offered
        raise gone from not_offered
    if not tools:
        return tools
    return await mcp_record.settle(store, run_id, tools, resumed=resumed)


@contextlib.asynccontextmanager
async def open_mcp_servers(spec: RunSpec) -> AsyncIterator[dict[str, list[AnyTool]]]:
    """Agent name -> the tools of its MCP servers, connected for the attempt (nothing, and no
    import of the SDK, when no agent names one)."""
    servers = {agent.name: agent.mcp_servers for agent in spec.agents if agent.mcp_servers}
    if not servers:
        yield {}
        return
    with needs_extra("MCP tools", "mcp"):
        from oma.tools.mcp.toolset import open_mcp_tools
    async with open_mcp_tools(servers) as tools:
        yield tools


def _closing(result: TeamRunResult) -> str | None:
    """The run's status message, with each failed task's error: what ``oma checkpoint show``
    says of the attempt (the checkpoint itself keeps a failed task pending, to run again)."""
    failed = [f"{task.title}: {task.result}" for task in result.tasks if task.status == "failed"]
    parts = [part for part in (result.status.message, *failed) if part]
    return " ".join(parts) or None


class _Tally:
    """The attempt's tool calls (executed, replayed: from the engine's ``tool_call`` events),
    passing every event on; and the record of how the attempt ended, in the attempt log."""

    def __init__(self, on_progress: ProgressCallback | None) -> None:
        self.on_progress = on_progress
        self.executed = 0
        self.replayed = 0
        self.tracer = run_tracer()  # None unless OTEL_* asks for traces (oma.tracing)

    def attempt_started(self, identity: RunIdentity) -> None:
        if self.tracer is not None:
            try:
                self.tracer.attempt_started(identity)
            except Exception:  # telemetry never fails a run: this attempt goes untraced
                log.warning("tracing: the attempt's span could not start", exc_info=True)
                self.tracer = None

    async def continue_run_trace(self, checkpoint: Checkpoint) -> None:
        """A resumed attempt exports into the run's trace, which the attempt log names."""
        if self.tracer is None:
            return
        try:
            attempts = await load_attempt_log(checkpoint.store, checkpoint.key)
        except Exception:  # telemetry never fails a run: this attempt gets a trace of its own
            log.warning("tracing: no attempt log to read the run's trace from", exc_info=True)
            return
        origin = attempts.forked_from if attempts is not None else None
        self.tracer.continue_run_trace(
            run_trace_id(attempts) if attempts is not None else None,
            (origin.run_id, origin.seq) if origin is not None else None,
        )

    def see(self, event: OrchestratorEvent) -> Awaitable[None] | None:
        if event.type == "tool_call":
            if event.data.get("executed"):
                self.executed += 1
            else:
                self.replayed += 1
        if self.tracer is not None:
            try:
                self.tracer.see(event)
            except Exception:
                log.warning("tracing: a %s event was not traced", event.type, exc_info=True)
        return self.on_progress(event) if self.on_progress is not None else None

    async def end_trace(self, status: str, message: str | None = None) -> None:
        """Export the attempt's spans (a blocking HTTP call: off the event loop); once."""
        tracer, self.tracer = self.tracer, None
        if tracer is not None:
            with contextlib.suppress(Exception):  # telemetry never fails a run
                await asyncio.to_thread(tracer.finish, status, message)

    async def record(
        self, checkpoint: Checkpoint, attempt: int, outcome: str, message: str | None
    ) -> None:
        """Best effort, like the start record: a store that fails here fails the next run's
        reads anyway, and this attempt's result stands."""
        end = AttemptEnd(outcome, message, self.executed, self.replayed)
        with contextlib.suppress(Exception):
            await end_attempt(checkpoint.store, checkpoint.key, attempt, end)
        await self.end_trace(outcome, message)


async def _refuse_if_lost(checkpoint: Checkpoint, expected: bool) -> None:
    if expected:
        why = "an earlier attempt of this run saved one"
    elif await load_attempt_log(checkpoint.store, checkpoint.key) is not None:
        why = "the store's attempt log shows that earlier attempts of this run saved one"
    else:
        return
    raise CheckpointLostError(checkpoint.key, None, why)
