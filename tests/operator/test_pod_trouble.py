"""A runner pod that cannot start is named while its attempt waits (pure rules): which waiting
reasons and scheduling failures count, and what the condition and Event say."""

from __future__ import annotations

from typing import Any

from oma_operator.runs.rules.pod_trouble import PodTrouble, pod_trouble, trouble_message


def _pod(**status: Any) -> Any:
    return {
        "metadata": {"name": "run-a1", "namespace": "ns"},
        "status": {"phase": "Pending", **status},
    }


def _waiting(reason: str, message: str | None = None) -> Any:
    waiting = {"reason": reason, **({"message": message} if message else {})}
    return _pod(containerStatuses=[{"name": "runner", "state": {"waiting": waiting}}])


def test_a_missing_secret_or_image_is_trouble_naming_the_cause() -> None:
    secret = _waiting("CreateContainerConfigError", 'secret "nope" not found')
    assert pod_trouble(secret) == PodTrouble(
        "CreateContainerConfigError", 'secret "nope" not found'
    )
    image = _waiting("ErrImageNeverPull", 'Container image "oma:gone" is not present')
    assert pod_trouble(image) == PodTrouble(
        "ErrImageNeverPull", 'Container image "oma:gone" is not present'
    )
    for reason in ("ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "InvalidImageName"):
        found = pod_trouble(_waiting(reason))
        assert found is not None and found.reason == reason
        assert found.cause == f"container runner: {reason}"  # no message: the container named


def test_a_pod_no_node_takes_is_trouble() -> None:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient memory.",
    }
    found = pod_trouble(_pod(conditions=[scheduled]))
    assert found == PodTrouble("Unschedulable", "0/1 nodes are available: 1 Insufficient memory.")


def test_a_pod_on_its_way_is_not_trouble() -> None:
    assert pod_trouble(_pod()) is None
    assert pod_trouble(_waiting("ContainerCreating")) is None
    assert pod_trouble(_waiting("PodInitializing")) is None
    running = _pod(phase="Running", containerStatuses=[{"name": "r", "state": {"running": {}}}])
    assert pod_trouble(running) is None
    pending = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    assert pod_trouble(_pod(conditions=[pending])) is None


def test_the_message_says_what_and_until_when() -> None:
    trouble = PodTrouble("CreateContainerConfigError", 'secret "nope" not found')
    said = trouble_message("run-a1", 1, trouble, 600)
    assert said == (
        'attempt 1: pod run-a1 cannot start: CreateContainerConfigError: secret "nope" not found; '
        "the attempt fails if the pod has not started 600s after it was created"
    )
    assert trouble_message("run-a1", 1, trouble, None).endswith("not found")


def test_the_reasons_the_kubelet_alternates_between_are_one_cause() -> None:
    from oma_operator.runs.rules.pod_trouble import same_cause

    assert same_cause("ErrImagePull", "ImagePullBackOff")
    assert same_cause("CrashLoopBackOff", "RunContainerError")
    assert same_cause("Unschedulable", "Unschedulable")
    assert not same_cause("ImagePullBackOff", "CreateContainerConfigError")
    assert not same_cause(None, "ErrImagePull")


def test_an_attempt_s_end_or_a_hold_clears_pod_stuck() -> None:
    from typing import cast

    from oma_operator.resources.bodies import TeamRunStatus
    from oma_operator.runs.rules.decisions import Decision, attempt_record
    from oma_operator.runs.rules.holds import held
    from oma_operator.runs.rules.outcomes import Outcome
    from oma_operator.runs.rules.status import after_attempt

    stuck = cast(
        TeamRunStatus,
        {"conditions": [{"type": "PodStuck", "status": "True", "reason": "ImagePullBackOff"}]},
    )
    record = attempt_record(1, Outcome("crash", "StartTimeout", "x"), "r-a1", "t")
    ended = after_attempt(stuck, Decision("failed", {}, "FailuresExhausted", "m"), record, 1, None)
    for status in (ended, held(stuck, "cancel", 1), held(stuck, "suspend", 1)):
        (found,) = [c for c in status["conditions"] if c["type"] == "PodStuck"]
        assert (found["status"], found["reason"]) == ("False", "AttemptEnded")
    calm = after_attempt({}, Decision("failed", {}, "FailuresExhausted", "m"), record, 1, None)
    assert "PodStuck" not in [c["type"] for c in calm["conditions"]]  # never set: not added
