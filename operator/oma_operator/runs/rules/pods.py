"""The runner pod of one attempt, as a manifest (pure: no I/O).

One bare Pod per attempt, ``<teamrun>-a<N>``, owned by the TeamRun, ``restartPolicy: Never``,
restricted security, no service-account token, and a tracking finalizer that the operator
removes once it recorded the pod's outcome.
"""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from oma.pod_contract import (
    ATTEMPT_ENV,
    EXPECT_CHECKPOINT_ENV,
    LOG_FORMAT_ENV,
    METRICS_PORT_ENV,
    NAMESPACE_ENV,
    POD_NAME_ENV,
    RUN_ID_ENV,
    RUN_SPEC_ENV,
    RUN_SPEC_GZIP_ENV,
    SCRATCH_DIR_ENV,
    STORE_URL_ENV,
    TEAMRUN_NAME_ENV,
    TERMINATION_LOG,
    TERMINATION_LOG_ENV,
    model_key_env,
)
from oma_operator.resources.bodies import PodBody, TeamRunBody, TeamRunStatus
from oma_operator.resources.models import GROUP, VERSION, TeamRunSpec, to_run_spec
from oma_operator.resources.pod_extras import SCRATCH_PATH
from oma_operator.resources.specs import run_id_of
from oma_operator.runs.rules.watchdog import NODE_LOSS_GRACE_ANNOTATION, START_TIMEOUT_ANNOTATION
from oma_operator.settings import RunnerPodSettings

FINALIZER = "oma.dev/outcome"
LABEL_TEAMRUN, LABEL_ATTEMPT, LABEL_RUN_ID = "oma.dev/teamrun", "oma.dev/attempt", "oma.dev/run-id"
# The uid of the TeamRun the operator made the pod for. Owner references stay open to anyone
# who may patch pods (the garbage collector edits them); oma.dev/ annotations of a runner pod
# are the operator's alone (the runner-pods policy), so a pod re-pointed at another TeamRun
# of the same name (deleted with --cascade=orphan and created again) still names its own.
UID_ANNOTATION = "oma.dev/teamrun-uid"
RUNNER_COMMAND = ["oma-runner"]  # the image's runner entrypoint
SPEC_INLINE_LIMIT = 64 * 1024  # bytes of spec JSON passed as is; more is gzipped


def pod_name(teamrun: str, attempt: int) -> str:
    return f"{teamrun}-a{attempt}"


def made_for(pod: PodBody, teamrun: TeamRunBody, attempt: int) -> bool:
    """Whether ``pod`` is the one ``runner_pod`` makes for this TeamRun (by uid) and attempt."""
    return not_made_for(pod, teamrun, attempt) is None


def not_made_for(pod: PodBody, teamrun: TeamRunBody, attempt: int) -> str | None:
    """Why ``pod`` is not the one ``runner_pod`` made for this TeamRun and attempt (None: it
    is). Its labels, its controller reference and its uid annotation must all name them: a
    pod made by someone else (a Job's, a forged one) has another controller, and a pod of an
    earlier TeamRun of the same name keeps that one's uid. (Only the operator may make such
    pods or change these where the runner-pods admission policy is installed.)"""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    owner = teamrun["metadata"]
    if labels.get(LABEL_TEAMRUN) != owner["name"] or labels.get(LABEL_ATTEMPT) != str(attempt):
        return f"its labels do not name attempt {attempt} of TeamRun {owner['name']}"
    controllers = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if not any(r.get("kind") == "TeamRun" and r.get("uid") == owner["uid"] for r in controllers):
        found = ", ".join(f"{r.get('kind')} {r.get('name')} ({r.get('uid')})" for r in controllers)
        return f"its controller is {found or 'nobody'}, not this TeamRun (uid {owner['uid']})"
    made = annotations.get(UID_ANNOTATION)
    if made is not None and made != owner["uid"]:
        return f"it was made for another TeamRun of this name (uid {made})"
    return None


def labelled_attempt(pod: PodBody) -> bool:
    """Whether a pod's oma labels name a run's attempt at all: a TeamRun name and a positive
    attempt number. (A pod labelled ``oma.dev/teamrun: ""`` names no TeamRun to read.)"""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    attempt = str(labels.get(LABEL_ATTEMPT, "1"))
    return bool(labels.get(LABEL_TEAMRUN)) and attempt.isdigit() and int(attempt) > 0


def attempt_of(pod: PodBody) -> tuple[str, str, int]:
    """A runner pod's namespace, TeamRun name and attempt number, from its labels."""
    meta = pod["metadata"]
    return (
        meta["namespace"],
        meta["labels"][LABEL_TEAMRUN],
        int(meta["labels"].get(LABEL_ATTEMPT, "1")),
    )


DEFAULTS = RunnerPodSettings()


def runner_pod(
    body: TeamRunBody,
    spec: TeamRunSpec,
    attempt: int,
    settings: RunnerPodSettings = DEFAULTS,
) -> PodBody:
    """The pod of ``attempt``: the TeamRun's runner fields over what the operator gives every
    runner pod (``settings``), and the pod contract's variables, which no TeamRun sets."""
    meta = body["metadata"]
    log_format, otlp_endpoint = settings.log_format, settings.otlp_endpoint
    metrics_port, service_account = settings.metrics_port, settings.service_account
    name, run_id = meta["name"], run_id_of(body)
    # The operator's log format first, then the TeamRun's own variables (which may set
    # another format for this run): for a name set twice the last one wins, and the contract's
    # are the operator's (the CRD also refuses them in spec.runner.env).
    env: list[dict[str, Any]] = (
        [{"name": LOG_FORMAT_ENV, "value": log_format}] if log_format != "plain" else []
    )
    if otlp_endpoint:  # before the TeamRun's own env: a TeamRun's value of it wins
        env.append({"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": otlp_endpoint})
    env += [
        e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in spec.runner.env or []
    ]
    env += [
        _spec_env(json.dumps(to_run_spec(spec, meta["namespace"]))),
        {"name": RUN_ID_ENV, "value": run_id},
        {"name": ATTEMPT_ENV, "value": str(attempt)},
        {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": TEAMRUN_NAME_ENV, "value": name},
        {"name": TERMINATION_LOG_ENV, "value": TERMINATION_LOG},
        _secret_env(
            STORE_URL_ENV,
            spec.store.redis.url_secret_ref
            if spec.store.redis
            else spec.store.postgres.dsn_secret_ref
            if spec.store.postgres
            else None,
        ),
    ]
    if metrics_port:
        env.append({"name": METRICS_PORT_ENV, "value": str(metrics_port)})
    if checkpoint_expected(body.get("status") or {}):
        env.append({"name": EXPECT_CHECKPOINT_ENV, "value": "1"})
    agents = [*spec.team.agents, *([spec.coordinator] if spec.coordinator else [])]
    for agent in agents:
        ref = agent.model.api_key_secret_ref
        if ref is not None:
            env.append(_secret_env(model_key_env(agent.name), ref))
    container: dict[str, Any] = {
        "name": "runner",
        "image": spec.runner.image or settings.image,
        "command": RUNNER_COMMAND,
        "env": env,
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if spec.runner.resources:
        container["resources"] = spec.runner.resources
    policy = spec.retry_policy
    # The TeamRun's annotations and labels first: the operator's own win (and the CRD refuses
    # keys under oma.dev/ anyway).
    annotations: dict[str, str] = {
        **(spec.runner.annotations or {}),
        START_TIMEOUT_ANNOTATION: str(policy.start_timeout_seconds),
        NODE_LOSS_GRACE_ANNOTATION: str(policy.node_loss_grace_seconds),
        UID_ANNOTATION: meta["uid"],
    }
    if metrics_port:
        container["ports"] = [{"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"}]
        annotations |= {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(metrics_port),
            "prometheus.io/path": "/metrics",
        }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": spec.runner.termination_grace_period_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "runAsGroup": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
    }
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if spec.runner.node_selector:
        pod_spec["nodeSelector"] = spec.runner.node_selector
    if spec.runner.tolerations:
        pod_spec["tolerations"] = spec.runner.tolerations
    if spec.runner.priority_class_name:
        pod_spec["priorityClassName"] = spec.runner.priority_class_name
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    scratch = spec.runner.scratch
    if scratch is not None:
        empty_dir: dict[str, Any] = {"sizeLimit": scratch.size_limit}
        if scratch.medium:
            empty_dir["medium"] = scratch.medium
        pod_spec["volumes"] = [{"name": "scratch", "emptyDir": empty_dir}]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": SCRATCH_PATH}]
        env.append({"name": SCRATCH_DIR_ENV, "value": SCRATCH_PATH})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, attempt),
            "namespace": meta["namespace"],
            "labels": {
                **(spec.runner.labels or {}),
                LABEL_TEAMRUN: name,
                LABEL_ATTEMPT: str(attempt),
                LABEL_RUN_ID: _label_value(run_id),
            },
            "annotations": annotations,
            "finalizers": [FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "TeamRun",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def _secret_env(name: str, ref: Any) -> dict[str, Any]:
    assert ref is not None  # the CRD requires exactly one store with its secret reference
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def _label_value(text: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:63]
    return cleaned.strip("-_.") or "run"


def _spec_env(text: str) -> dict[str, Any]:
    """The run spec as it fits: Linux refuses one environment string over 128 KiB, and large
    specs (long scripts, many tasks) compress well."""
    if len(text.encode()) <= SPEC_INLINE_LIMIT:
        return {"name": RUN_SPEC_ENV, "value": text}
    packed = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode("ascii")
    return {"name": RUN_SPEC_GZIP_ENV, "value": packed}


def checkpoint_expected(status: TeamRunStatus) -> bool:
    """Whether an earlier attempt saved a checkpoint (seen in the store, or reported by the
    runner): the next one must resume from it and refuses to start over without it."""
    return bool(status.get("checkpointSaved") or status.get("lastCheckpointAt"))
