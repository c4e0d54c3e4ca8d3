"""Which existing pod is the operator's own pod of an attempt (``pods.made_for``): a pod that
holds the attempt's name but was made by someone else must not pass for it."""

from __future__ import annotations

import copy

from oma_operator.resources.bodies import PodBody, TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs.rules.pods import (
    UID_ANNOTATION,
    labelled_attempt,
    made_for,
    not_made_for,
    runner_pod,
)
from oma_operator.settings import RunnerPodSettings

TEAMRUN: TeamRunBody = {"metadata": {"name": "pay", "namespace": "ns", "uid": "uid-1"}, "spec": {}}
SPEC = TeamRunSpec.model_validate(
    {
        "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
        "tasks": [{"title": "t", "description": "d"}],
        "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
    }
)


def test_the_pod_the_operator_makes_is_its_own() -> None:
    pod = runner_pod(TEAMRUN, SPEC, 2, RunnerPodSettings(image="img"))
    assert made_for(pod, TEAMRUN, 2)
    assert not made_for(pod, TEAMRUN, 1)  # another attempt's


def test_a_pod_holding_the_name_without_the_operators_marks_is_not() -> None:
    ours = runner_pod(TEAMRUN, SPEC, 1, RunnerPodSettings(image="img"))
    squatter: PodBody = {"metadata": {"name": ours["metadata"]["name"]}, "spec": ours["spec"]}
    assert not made_for(squatter, TEAMRUN, 1)
    no_owner = copy.deepcopy(ours)
    no_owner["metadata"].pop("ownerReferences")
    assert not made_for(no_owner, TEAMRUN, 1)
    older_teamrun = copy.deepcopy(ours)  # made for an earlier TeamRun of the same name
    older_teamrun["metadata"]["ownerReferences"][0]["uid"] = "uid-0"
    assert not made_for(older_teamrun, TEAMRUN, 1)
    not_controller = copy.deepcopy(ours)
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not made_for(not_controller, TEAMRUN, 1)
    other_run = copy.deepcopy(ours)
    other_run["metadata"]["labels"]["oma.dev/teamrun"] = "other"
    assert not made_for(other_run, TEAMRUN, 1)


def test_a_pod_made_by_a_job_is_not_the_runner_whatever_its_labels_say() -> None:
    """A Job's pod template may carry the oma labels, the outcome finalizer and even the uid
    annotation: its controller is the Job, so its end is nobody's attempt's end."""
    jobs = copy.deepcopy(runner_pod(TEAMRUN, SPEC, 1, RunnerPodSettings(image="img")))
    jobs["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-1", "controller": True}
    ]
    why = not_made_for(jobs, TEAMRUN, 1)
    assert why is not None and "Job j" in why and "uid-1" in why


def test_a_pod_re_pointed_at_a_new_teamrun_of_the_same_name_keeps_its_own_uid() -> None:
    """An orphaned pod of a deleted TeamRun whose owner reference someone set to the new
    TeamRun of the same name (owner references stay open to anyone who may patch pods): the
    uid annotation, which only the operator may write, still names the old one."""
    old = runner_pod(
        {**TEAMRUN, "metadata": {**TEAMRUN["metadata"], "uid": "uid-0"}},
        SPEC,
        1,
        RunnerPodSettings(image="i"),
    )
    assert old["metadata"]["annotations"][UID_ANNOTATION] == "uid-0"
    old["metadata"]["ownerReferences"][0]["uid"] = "uid-1"
    why = not_made_for(old, TEAMRUN, 1)
    assert why is not None and "uid-0" in why
    orphaned = runner_pod({**TEAMRUN, "metadata": {**TEAMRUN["metadata"], "uid": "uid-0"}}, SPEC, 1)
    orphaned["metadata"]["ownerReferences"] = []  # what kubectl delete --cascade=orphan leaves
    assert "nobody" in str(not_made_for(orphaned, TEAMRUN, 1))


def test_only_labels_that_name_a_run_and_an_attempt_make_a_runner_pod() -> None:
    def labelled(labels: dict[str, str]) -> bool:
        return labelled_attempt({"metadata": {"labels": labels}})

    assert labelled({"oma.dev/teamrun": "pay", "oma.dev/attempt": "2"})
    assert labelled({"oma.dev/teamrun": "pay"})  # attempt 1 by default
    assert not labelled({"oma.dev/teamrun": ""})  # names no TeamRun: nothing to read
    assert not labelled({"oma.dev/teamrun": "pay", "oma.dev/attempt": "x"})
    assert not labelled({"oma.dev/teamrun": "pay", "oma.dev/attempt": "0"})
    assert not labelled({"oma.dev/teamrun": "pay", "oma.dev/attempt": "-1"})
