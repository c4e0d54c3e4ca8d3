"""The runner's inputs, all from its pod: the run spec, the run id, the attempt, paths."""

from __future__ import annotations

import base64
import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from oma import jsonutil
from oma.errors import OmaError
from oma.pod_contract import (
    ATTEMPT_ENV,
    EXPECT_CHECKPOINT_ENV,
    LOG_FORMAT_ENV,
    LOG_FORMATS,
    METRICS_PORT_ENV,
    NAMESPACE_ENV,
    POD_NAME_ENV,
    RUN_ID_ENV,
    RUN_SPEC_ENV,
    RUN_SPEC_FILE_ENV,
    RUN_SPEC_GZIP_ENV,
    TEAMRUN_NAME_ENV,
    TERMINATION_LOG,
    TERMINATION_LOG_ENV,
)
from oma.spec import RunSpec

# Set only by the local test node agent (hack/devcluster): it roots container paths there.
POD_ROOT_ENV = "DEVCLUSTER_POD_ROOT"


class RunnerConfigError(OmaError):
    code = "RUNNER_CONFIG"


@dataclass(frozen=True)
class RunnerConfig:
    spec: RunSpec
    run_id: str
    attempt: int
    termination_log: Path
    metrics_port: int | None = None
    expect_checkpoint: bool = False
    log_format: str = "plain"
    pod: str | None = None
    namespace: str | None = None
    teamrun: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RunnerConfig:
        env = dict(os.environ) if env is None else env
        root = env.get(POD_ROOT_ENV, "")
        text = env.get(RUN_SPEC_ENV)
        if text is None and RUN_SPEC_GZIP_ENV in env:
            text = _gunzip(env[RUN_SPEC_GZIP_ENV])
        if text is None and RUN_SPEC_FILE_ENV in env:
            text = _read(root + env[RUN_SPEC_FILE_ENV])
        if text is None:
            raise RunnerConfigError(
                f"no run spec: set {RUN_SPEC_ENV} (JSON), {RUN_SPEC_GZIP_ENV} or "
                f"{RUN_SPEC_FILE_ENV}"
            )
        try:
            spec = RunSpec.model_validate(jsonutil.loads(text))
        except (ValueError, ValidationError) as exc:
            raise RunnerConfigError(f"invalid run spec: {' '.join(str(exc).split())}") from exc
        if spec.store is None or spec.store.memory is not None:
            raise RunnerConfigError(
                "a runner needs a durable store (redis, postgres or file) in the run spec"
            )
        run_id = env.get(RUN_ID_ENV) or spec.run_id
        if not run_id:
            raise RunnerConfigError(f"no run id: set {RUN_ID_ENV} or runId in the spec")
        if spec.run_id and spec.run_id != run_id:
            raise RunnerConfigError(
                f"{RUN_ID_ENV}={run_id!r} and the spec's runId {spec.run_id!r} differ: give one"
            )
        try:
            attempt = int(env.get(ATTEMPT_ENV, "1"))
        except ValueError as exc:
            raise RunnerConfigError(f"{ATTEMPT_ENV} is not a number: {env[ATTEMPT_ENV]!r}") from exc
        log_format = env.get(LOG_FORMAT_ENV, "").strip() or "plain"
        if log_format not in LOG_FORMATS:
            raise RunnerConfigError(
                f"{LOG_FORMAT_ENV}={log_format!r}: use one of {', '.join(LOG_FORMATS)}"
            )
        return cls(
            spec=spec,
            run_id=run_id,
            attempt=attempt,
            termination_log=termination_log_path(env),
            metrics_port=_metrics_port(env.get(METRICS_PORT_ENV, "")),
            expect_checkpoint=env.get(EXPECT_CHECKPOINT_ENV, "") == "1",
            log_format=log_format,
            pod=env.get(POD_NAME_ENV) or None,
            namespace=env.get(NAMESPACE_ENV) or None,
            teamrun=env.get(TEAMRUN_NAME_ENV) or None,
        )


def _metrics_port(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise RunnerConfigError(f"{METRICS_PORT_ENV} is not a port number (0-65535): {text!r}")
    return port or None


def termination_log_path(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    log = env.get(TERMINATION_LOG_ENV, TERMINATION_LOG)
    return Path(env.get(POD_ROOT_ENV, "") + log)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RunnerConfigError(f"cannot read run spec file {path}: {exc.strerror}") from exc


def _gunzip(text: str) -> str:
    try:
        return gzip.decompress(base64.b64decode(text, validate=True)).decode("utf-8")
    except (ValueError, OSError, EOFError) as exc:
        raise RunnerConfigError(
            f"{RUN_SPEC_GZIP_ENV} is not base64 of gzipped UTF-8 JSON: {exc}"
        ) from exc
