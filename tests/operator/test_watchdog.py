"""Stuck runner pods: never started (start timeout) or on a lost node (grace period)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from oma_operator.resources.bodies import PodBody, PodStatus, TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs.rules.pod_secrets import SecretRef, missing_secrets, secret_refs
from oma_operator.runs.rules.pods import runner_pod
from oma_operator.runs.rules.watchdog import (
    NODE_LOSS_GRACE_ANNOTATION,
    START_TIMEOUT_ANNOTATION,
    deadline,
)
from oma_operator.settings import RunnerPodSettings

CREATED = "2026-12-01T10:00:00Z"
NOT_READY_SINCE = "2026-12-01T10:05:00Z"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
ANNOTATIONS = {START_TIMEOUT_ANNOTATION: "600", NODE_LOSS_GRACE_ANNOTATION: "45"}
RUNNING = {"running": {"startedAt": "2026-12-01T10:00:05Z"}}


def _pod(
    phase: str,
    *,
    containers: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    **status: Any,
) -> PodBody:
    return {
        "metadata": {
            "name": "r-a1",
            "creationTimestamp": CREATED,
            "annotations": ANNOTATIONS if annotations is None else annotations,
        },
        "spec": {"nodeName": "node-1"},
        # ``status`` adds PodStatus keys (reason) that mypy cannot check in a ** item
        "status": cast(
            PodStatus,
            {
                "phase": phase,
                "containerStatuses": containers or [],
                "conditions": conditions or [],
                **status,
            },
        ),
    }


def _container(state: dict[str, Any], ready: bool) -> dict[str, Any]:
    return {"name": "runner", "ready": ready, "state": state}


def _ready(status: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "lastTransitionTime": NOT_READY_SINCE}


def test_a_pod_that_cannot_pull_its_image_times_out_with_the_kubelets_reason() -> None:
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "x"'}}
    found = deadline(_pod("Pending", containers=[_container(waiting, False)]))
    assert found is not None
    assert found.due == T0 + timedelta(seconds=600)
    assert (found.outcome.kind, found.outcome.reason) == ("crash", "StartTimeout")
    assert found.outcome.message == (
        'the runner did not start within 600s: ImagePullBackOff: Back-off pulling "x"'
    )


def test_an_unschedulable_pod_times_out_with_the_schedulers_reason() -> None:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory.",
    }
    found = deadline(_pod("Pending", conditions=[scheduled]))
    assert found is not None and found.outcome.reason == "StartTimeout"
    assert found.outcome.message.endswith(
        "Unschedulable: 0/3 nodes are available: 3 Insufficient memory."
    )


def test_a_pending_pod_without_any_word_still_times_out() -> None:
    found = deadline(_pod("Pending"))
    assert found is not None and "still pending" in found.outcome.message


def test_a_pod_on_a_lost_node_is_given_up_after_the_grace_period() -> None:
    pod = _pod("Running", containers=[_container(RUNNING, True)], conditions=[_ready("False")])
    found = deadline(pod)
    assert found is not None
    assert found.due == T0 + timedelta(minutes=5, seconds=45)
    assert (found.outcome.kind, found.outcome.reason) == ("disruption", "NodeLost")
    assert "node node-1 stopped reporting" in found.outcome.message


@pytest.mark.parametrize(
    "status", [{"phase": "Unknown"}, {"phase": "Running", "reason": "NodeLost"}]
)
def test_pods_the_api_marks_unknown_or_node_lost_are_given_up(status: dict[str, Any]) -> None:
    pod = _pod(status.pop("phase"), containers=[_container(RUNNING, True)], **status)
    pod["status"]["conditions"] = [_ready("True")]
    found = deadline(pod)
    assert found is not None and found.outcome.reason == "NodeLost"
    assert found.due == T0 + timedelta(minutes=5, seconds=45)


@pytest.mark.parametrize(
    "pod",
    [
        # healthy and running
        _pod("Running", containers=[_container(RUNNING, True)], conditions=[_ready("True")]),
        # the kubelet itself says not ready (it reports the container too): not a lost node
        _pod("Running", containers=[_container(RUNNING, False)], conditions=[_ready("False")]),
        # the container ended; the outcome comes from the pod's phase, not from a deadline
        _pod(
            "Running",
            containers=[_container({"terminated": {"exitCode": 0}}, False)],
            conditions=[_ready("False")],
        ),
        # a started pod that is still Pending in the API is not waiting to start
        _pod("Pending", containers=[_container(RUNNING, True)]),
        # terminal pods are classified by outcomes.classify
        _pod("Failed"),
        _pod("Succeeded"),
        # no (or a broken) limit on the pod: nothing to enforce
        _pod("Pending", annotations={}),
        _pod("Pending", annotations={START_TIMEOUT_ANNOTATION: "soon"}),
        _pod(
            "Running",
            containers=[_container(RUNNING, True)],
            conditions=[_ready("False")],
            annotations={NODE_LOSS_GRACE_ANNOTATION: "-1"},
        ),
    ],
)
def test_pods_that_are_not_stuck_have_no_deadline(pod: PodBody) -> None:
    assert deadline(pod) is None


def test_runner_pods_carry_their_limits_from_the_retry_policy() -> None:
    spec = TeamRunSpec.model_validate(
        {
            "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
            "tasks": [{"title": "t", "description": "d"}],
            "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
            "retryPolicy": {"startTimeoutSeconds": 120, "nodeLossGraceSeconds": 5},
        }
    )
    body: TeamRunBody = {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}, "spec": {}}
    annotations = runner_pod(body, spec, 1, RunnerPodSettings(image="img"))["metadata"][
        "annotations"
    ]
    assert annotations[START_TIMEOUT_ANNOTATION] == "120"
    assert annotations[NODE_LOSS_GRACE_ANNOTATION] == "5"


def test_a_start_timeout_names_the_secrets_and_keys_the_runner_pod_lacks() -> None:
    """Under load the kubelet's CreateContainerConfigError says only "failed to sync secret
    cache": the operator reads the Secrets the pod needs and names what is missing."""
    spec = TeamRunSpec.model_validate(
        {
            "team": {
                "agents": [
                    {
                        "name": "a",
                        "model": {
                            "provider": "anthropic",
                            "name": "m",
                            "apiKeySecretRef": {"name": "no-such-secret", "key": "key"},
                        },
                    }
                ]
            },
            "tasks": [{"title": "t", "description": "d"}],
            "store": {"redis": {"urlSecretRef": {"name": "store", "key": "url"}}},
            "runner": {
                "env": [
                    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "store", "key": "x"}}},
                    {
                        "name": "Y",
                        "valueFrom": {
                            "secretKeyRef": {"name": "maybe", "key": "y", "optional": True}
                        },
                    },
                ]
            },
        }
    )
    body: TeamRunBody = {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}, "spec": {}}
    pod = runner_pod(body, spec, 1, RunnerPodSettings(image="img"))
    refs = secret_refs(pod)
    assert SecretRef("no-such-secret", "key") in refs
    assert SecretRef("store", "url") in refs and SecretRef("store", "x") in refs
    assert all(ref.name != "maybe" for ref in refs)  # optional: it does not stop the start
    keys = {"no-such-secret": None, "store": frozenset({"url"})}
    assert missing_secrets(refs, keys) == (
        "Secret store has no key x; Secret no-such-secret does not exist"
    )
    assert missing_secrets(refs, {"store": frozenset({"url", "x"})}) == ""  # others unknown


def test_secrets_read_whole_by_envfrom_or_a_volume_count_by_name() -> None:
    pod: PodBody = {
        "spec": {
            "containers": [{"envFrom": [{"secretRef": {"name": "bulk"}}]}],
            "volumes": [
                {"secret": {"secretName": "files"}},
                {"secret": {"secretName": "spare", "optional": True}},
            ],
        }
    }
    assert secret_refs(pod) == [SecretRef("bulk"), SecretRef("files")]
    keys: dict[str, frozenset[str] | None] = {"bulk": frozenset(), "files": None}
    assert missing_secrets(secret_refs(pod), keys) == "Secret files does not exist"
