"""``oma-runner``: the process inside a runner pod.

Reads its run spec, run id and attempt from the pod (see ``config``), restores the run from its
store (fenced: an older attempt still alive is stopped), runs it, writes a JSON termination
message and exits with the code the operator acts on (see ``outcome``). On SIGTERM it stops
admitting work, lets running tasks reach their next durable boundary, flushes the checkpoint
and exits 11. It needs no Kubernetes API access.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from oma.errors import (
    CheckpointFencedError,
    CheckpointLostError,
    ModelUnavailableError,
    OmaError,
    ToolChangedError,
)
from oma.local_run import run_spec
from oma.orchestrator.events import OrchestratorEvent
from oma.pod_contract import (
    ATTEMPT_ENV,
    RUN_ID_ENV,
    RUN_SPEC_ENV,
    RUN_SPEC_FILE_ENV,
    RUN_SPEC_GZIP_ENV,
    TERMINATION_LOG_ENV,
    Exit,
    TerminationReport,
    exit_for_error,
)
from oma.store.remote import mask_secret
from oma_runner.config import RunnerConfig, RunnerConfigError, termination_log_path
from oma_runner.logs import RunnerLog
from oma_runner.metrics import RunnerMetrics, serve
from oma_runner.outcome import exit_code_for, report_for, write_termination_message
from oma_runner.tools import available_tools


async def run(config: RunnerConfig, metrics: RunnerMetrics, log: RunnerLog) -> Exit:
    drain = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, drain.set)
    try:
        outcome = await run_spec(
            config.spec,
            run_id=config.run_id,
            tools=available_tools(),
            default_store_path=Path("/nonexistent"),  # the config requires a store in the spec
            on_progress=_both(metrics.on_progress, log.on_progress),
            drain=drain,
            expect_checkpoint=config.expect_checkpoint,
        )
    except CheckpointLostError as exc:
        _report(config, "checkpoint_lost", str(exc), metrics, log)
        return Exit.CHECKPOINT_LOST
    except CheckpointFencedError as exc:
        _report(config, "fenced", str(exc), metrics, log)
        return Exit.FENCED
    except OmaError as exc:
        # A transient error: the operator retries the attempt after a backoff.
        how = "crashed" if exc.transient else "failed"
        if isinstance(exc, ModelUnavailableError):
            how = "model_unavailable"  # exit 14: the operator waits the outage out
        elif isinstance(exc, ToolChangedError):
            how = "tool_changed"  # exit 15: the operator holds the run until the tool is back
        _report(config, how, f"{exc.code}: {exc}", metrics, log)
        return exit_for_error(exc)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    result = outcome.result
    report = report_for(result, pod_attempt=config.attempt)
    report.metrics = metrics.report()
    report.checkpointed = outcome.resumed or _saved(metrics)
    write_termination_message(config.termination_log, report)
    status = result.status
    log.line(
        "info" if status.code == "ok" else "warning",
        "attempt_end",
        f"run {result.identity.run_id} attempt {result.identity.attempt}: "
        f"{status.code} {status.message or ''}".rstrip(),
        status=status.code,
    )
    return exit_code_for(result)


def _both(
    *handlers: Callable[[OrchestratorEvent], None],
) -> Callable[[OrchestratorEvent], None]:
    def handle(event: OrchestratorEvent) -> None:
        for handler in handlers:
            handler(event)

    return handle


def _report(
    config: RunnerConfig, status: str, message: str, metrics: RunnerMetrics, log: RunnerLog
) -> None:
    message = _masked(config, message)
    log.line("error", "attempt_end", f"{status}: {message}", status=status)
    report = TerminationReport(
        run_id=config.run_id,
        pod_attempt=config.attempt,
        status=status,
        message=message,
        metrics=metrics.report(),
        checkpointed=_saved(metrics),
    )
    write_termination_message(config.termination_log, report)


def _masked(config: RunnerConfig, message: str) -> str:
    """``message`` with the store URL the pod got from the TeamRun's Secret masked, should
    anything quote it: the termination message goes into the TeamRun's status. (The store's
    errors already show nothing of it; this is the belt to that brace.)"""
    store = config.spec.store
    env = None
    if store is not None:
        env = (
            store.redis.url_env
            if store.redis
            else store.postgres.dsn_env
            if store.postgres
            else None
        )
    secret = os.environ.get(env, "") if env else ""
    return mask_secret(message, secret, min_length=4) if secret.strip() else message


def _saved(metrics: RunnerMetrics) -> bool:
    """Whether a save of this attempt completed: later attempts must find a checkpoint."""
    return int(metrics.report().get("saves", 0)) > 0


def main() -> None:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(__doc__)
        print(
            f"Inputs (environment): {RUN_SPEC_ENV}, {RUN_SPEC_GZIP_ENV} or {RUN_SPEC_FILE_ENV},"
            f" {RUN_ID_ENV}, {ATTEMPT_ENV}, {TERMINATION_LOG_ENV}; store and model credentials"
            " as the run spec names them (oma.pod_contract)."
        )
        raise SystemExit(0)
    try:
        config = RunnerConfig.from_env()
    except RunnerConfigError as exc:
        print(f"oma-runner: {exc}", file=sys.stderr, flush=True)
        report = TerminationReport(status="invalid", message=str(exc))
        write_termination_message(termination_log_path(), report)
        raise SystemExit(Exit.PERMANENT) from None
    metrics = RunnerMetrics()
    log = RunnerLog(
        config.log_format,
        {
            "runId": config.run_id,
            "attempt": config.attempt,
            "pod": config.pod,
            "namespace": config.namespace,
            "teamRun": config.teamrun,
        },
    )
    stop_serving = serve(config.metrics_port)
    try:
        code = asyncio.run(run(config, metrics, log))
    finally:
        stop_serving()
    raise SystemExit(code)


if __name__ == "__main__":
    main()
