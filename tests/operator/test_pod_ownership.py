"""Which existing pod is the operator's own pod of an attempt (``pods.made_for``): a pod that
holds the attempt's name but was made by someone else must not pass for it."""

from __future__ import annotations

import copy

from oma_operator.models import TeamRunSpec
from oma_operator.pods import made_for, runner_pod

TEAMRUN = {"metadata": {"name": "pay", "namespace": "ns", "uid": "uid-1"}, "spec": {}}
SPEC = TeamRunSpec.model_validate(
    {
        "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
        "tasks": [{"title": "t", "description": "d"}],
        "store": {"redis": {"urlSecretRef": {"name": "s", "key": "url"}}},
    }
)


def test_the_pod_the_operator_makes_is_its_own() -> None:
    pod = runner_pod(TEAMRUN, SPEC, 2, "img")
    assert made_for(pod, TEAMRUN, 2)
    assert not made_for(pod, TEAMRUN, 1)  # another attempt's


def test_a_pod_holding_the_name_without_the_operators_marks_is_not() -> None:
    ours = runner_pod(TEAMRUN, SPEC, 1, "img")
    squatter = {"metadata": {"name": ours["metadata"]["name"]}, "spec": ours["spec"]}
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
