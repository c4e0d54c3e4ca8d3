"""The pure operator modules: pod outcome classification, retry decisions, pod manifests."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from oma.checkpoint.retention import HistoryPolicy
from oma.pod_contract import TerminationReport, model_key_env
from oma.spec import RunSpec
from oma_operator.resources.bodies import PodBody
from oma_operator.resources.models import RetryPolicy, TeamRunSpec, to_run_spec, work_fields
from oma_operator.runs.rules.decisions import decide
from oma_operator.runs.rules.outcomes import SUCCESS_NOT_CONFIRMED, Outcome, classify, confirmed
from oma_operator.runs.rules.pods import FINALIZER, runner_pod
from oma_operator.settings import RunnerPodSettings
from tests.operator.pod_fixtures import BODY, SPEC, runner_pod_in


@pytest.mark.parametrize(
    ("pod", "kind", "reason"),
    [
        (runner_pod_in("Pending"), "running", "Pending"),
        (runner_pod_in("Running"), "running", "Running"),
        (runner_pod_in("Running", deleting=True), "running", "Terminating"),
        (runner_pod_in("Succeeded", exit_code=0, reason="Completed"), "succeeded", "Completed"),
        (runner_pod_in("Failed", exit_code=10), "suspended", "AwaitingApproval"),
        (runner_pod_in("Failed", exit_code=11), "disruption", "Drained"),
        (
            runner_pod_in("Failed", exit_code=11, disruption="EvictionByEvictionAPI"),
            "disruption",
            "EvictionByEvictionAPI",
        ),
        (runner_pod_in("Failed", exit_code=12), "fenced", "Fenced"),
        (runner_pod_in("Failed", exit_code=2), "permanent", "PermanentFailure"),
        (runner_pod_in("Failed", exit_code=137, reason="OOMKilled"), "oom", "OOMKilled"),
        (
            runner_pod_in(
                "Failed", exit_code=137, pod_reason="Evicted", disruption="TerminationByKubelet"
            ),
            "disruption",
            "Evicted",
        ),
        (
            runner_pod_in("Failed", exit_code=137, disruption="PreemptionByScheduler"),
            "disruption",
            "PreemptionByScheduler",
        ),
        (
            runner_pod_in("Failed", exit_code=143, disruption="DeletionByTaintManager"),
            "disruption",
            "DeletionByTaintManager",
        ),
        # Deleted by a person, killed after the grace period: taken away, not a crash.
        (runner_pod_in("Failed", exit_code=137, deleting=True), "disruption", "PodDeleted"),
        (runner_pod_in("Failed", exit_code=2, deleting=True), "permanent", "PermanentFailure"),
        (runner_pod_in("Failed", exit_code=1), "crash", "Error"),
        (runner_pod_in("Failed", exit_code=139, reason="Error"), "crash", "Error"),
        (runner_pod_in("Failed"), "crash", "Error"),
    ],
)
def test_classify(pod: PodBody, kind: str, reason: str) -> None:
    outcome = classify(pod)
    assert (outcome.kind, outcome.reason) == (kind, reason)
    assert outcome.terminal == (kind != "running")


def _report(status: str) -> str:
    return TerminationReport(run_id="r", attempt=1, status=status, message="waits").to_text()


@pytest.mark.parametrize(
    ("phase", "exit_code", "status", "kind", "reason"),
    [
        # a runner waiting for approval exits 0: its pod shows Completed, not Error
        ("Succeeded", 0, "suspended", "suspended", "AwaitingApproval"),
        # a runner from before said it by exit 10 (Failed)
        ("Failed", 10, "suspended", "suspended", "AwaitingApproval"),
        ("Succeeded", 0, "ok", "succeeded", "Completed"),
        # a report that is not one (garbage the container left) is no suspension
        ("Succeeded", 0, None, "succeeded", "Completed"),
    ],
)
def test_a_suspended_runner_s_pod_completes_and_is_read_by_its_report(
    phase: str, exit_code: int, status: str | None, kind: str, reason: str
) -> None:
    message = _report(status) if status is not None else '{"status": "suspended"'
    pod = runner_pod_in(phase, exit_code=exit_code, reason="Completed", message=message)
    outcome = classify(pod)
    assert (outcome.kind, outcome.reason) == (kind, reason)


LOST = "The container could not be located when the pod was terminated"


def test_a_kubelet_eviction_for_local_storage_is_a_disruption_with_the_kubelets_message() -> None:
    """As a real kubelet reports it: no DisruptionTarget condition, the container's state
    unknown (exit 137) and the runner's own termination message lost."""
    pod = runner_pod_in(
        "Failed", exit_code=137, reason="ContainerStatusUnknown", pod_reason="Evicted", message=LOST
    )
    pod["status"]["message"] = "Pod ephemeral local storage usage exceeds the total limit of 10Mi."
    outcome = classify(pod)
    assert (outcome.kind, outcome.reason) == ("disruption", "Evicted")
    assert outcome.message.startswith("Pod ephemeral local storage usage exceeds")
    assert outcome.report is None  # no runner report: the checkpoint read decides what was saved


def test_a_container_the_kubelet_lost_is_a_disruption_not_a_crash() -> None:
    pod = runner_pod_in("Failed", exit_code=137, reason="ContainerStatusUnknown", message=LOST)
    outcome = classify(pod)
    assert (outcome.kind, outcome.reason, outcome.exit_code) == ("disruption", "ContainerLost", 137)
    assert outcome.message == LOST


POLICY = RetryPolicy(max_disruptions=2, max_failures=1, max_oom_kills=1, backoff_seconds=10)


@pytest.mark.parametrize(
    ("kind", "counters", "action", "delay"),
    [
        ("succeeded", {}, "succeeded", 0),
        ("suspended", {}, "awaiting_approval", 0),
        ("fenced", {"attempt": 1}, "fenced", 0),  # attempt 1 is newer than the one that ended
        ("permanent", {}, "failed", 0),
        ("disruption", {"disruptions": 1}, "next_attempt", 0),
        ("disruption", {"disruptions": 2}, "failed", 0),
        ("oom", {}, "next_attempt", 0),
        ("oom", {"oomKills": 1}, "failed", 0),
        ("crash", {}, "next_attempt", 10),
        ("crash", {"failures": 1}, "failed", 0),
    ],
)
def test_decide(kind: str, counters: dict[str, int], action: str, delay: int) -> None:
    decision = decide(Outcome(kind, "r"), counters, POLICY)  # type: ignore[arg-type]
    assert decision.action == action and decision.delay_seconds == delay
    if action == "failed" and kind in ("disruption", "oom", "crash"):
        assert decision.reason.endswith("Exhausted")


def test_crash_backoff_doubles() -> None:
    policy = RetryPolicy(max_failures=5, backoff_seconds=3)
    delays = [
        decide(Outcome("crash", "Error"), {"failures": n}, policy).delay_seconds for n in range(4)
    ]
    assert delays == [3, 6, 12, 24]


def test_the_runner_pod_manifest() -> None:
    pod = runner_pod(
        BODY, TeamRunSpec.model_validate(SPEC), 3, RunnerPodSettings(image="registry/oma:1")
    )
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "pay-a3" and meta["finalizers"] == [FINALIZER]
    assert meta["labels"] == {
        "oma.dev/teamrun": "pay",
        "oma.dev/attempt": "3",
        "oma.dev/run-id": "pay-1",
    }
    (owner,) = meta["ownerReferences"]
    assert owner["uid"] == "u-1" and owner["controller"] is True
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    assert spec["terminationGracePeriodSeconds"] == 45
    (container,) = spec["containers"]
    assert container["image"] == "registry/oma:1" and container["command"] == ["oma-runner"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e for e in container["env"]}
    assert env["OMA_ATTEMPT"]["value"] == "3" and env["OMA_RUN_ID"]["value"] == "pay-1"
    assert env["OMA_STORE_URL"]["valueFrom"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    assert env[model_key_env("clerk")]["valueFrom"]["secretKeyRef"]["key"] == "anthropic"
    assert env["X"]["value"] == "1"
    run_spec = RunSpec.model_validate(json.loads(env["OMA_RUN_SPEC"]["value"]))
    assert run_spec.agents[0].model.api_key_env == "OMA_MODEL_KEY_CLERK"
    assert run_spec.store is not None and run_spec.store.postgres is not None
    assert run_spec.store.postgres.dsn_env == "OMA_STORE_URL"


def test_to_run_spec_validates_as_the_engine_spec() -> None:
    spec = TeamRunSpec.model_validate({**SPEC, "mode": "team", "tasks": None, "goal": "g"})
    run = RunSpec.model_validate(to_run_spec(spec, "ns"))
    assert run.mode == "team" and run.goal == "g" and run.run_id is None  # OMA_RUN_ID has it


def test_fork_from_and_history_reach_the_runner_as_the_engine_reads_them() -> None:
    patch = [{"op": "replace", "path": "/inFlightTasks/0/turns", "value": 2}]
    store = {**SPEC["store"], "history": {"keep": 50, "maxAgeSeconds": 3600}}
    spec = TeamRunSpec.model_validate(
        {**SPEC, "store": store, "forkFrom": {"runId": "ns.parent", "seq": 12, "patch": patch}}
    )
    run = RunSpec.model_validate(to_run_spec(spec, "ns"))
    assert run.fork_from is not None and (run.fork_from.run_id, run.fork_from.seq) == (
        "ns.parent",
        12,
    )
    assert run.fork_from.patch == patch
    assert run.store is not None and run.store.history.policy() == HistoryPolicy(50, 3600)
    assert "forkFrom" in work_fields()  # frozen once the run started, like the rest of its work
    with pytest.raises(ValidationError):
        TeamRunSpec.model_validate({**SPEC, "forkFrom": {"runId": "p", "seq": 0}})


def test_store_events_reach_the_runner_and_stay_off_unless_asked() -> None:
    store = {**SPEC["store"], "events": {"enabled": True, "enforceLineage": True}}
    run = RunSpec.model_validate(
        to_run_spec(TeamRunSpec.model_validate({**SPEC, "store": store}), "ns")
    )
    assert run.store is not None and run.store.events.enabled and run.store.events.enforce_lineage
    plain = to_run_spec(TeamRunSpec.model_validate(SPEC), "ns")
    assert "events" not in plain["store"]  # an older runner image reads the spec unchanged
    with pytest.raises(ValidationError, match=r"store\.events needs the verbatim content"):
        RunSpec.model_validate(
            to_run_spec(
                TeamRunSpec.model_validate({**SPEC, "store": {**store, "redact": True}}), "ns"
            )
        )


@pytest.mark.parametrize("name", ["teamrun.yaml", "teamrun-postgres.yaml", "teamrun-demo.yaml"])
def test_the_examples_are_valid_teamruns(name: str) -> None:
    from pathlib import Path

    import yaml

    body = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "examples" / "kubernetes" / name).read_text()
    )
    spec = TeamRunSpec.model_validate(body["spec"])
    RunSpec.model_validate(to_run_spec(spec, "ns"))
    assert body["kind"] == "TeamRun" and body["apiVersion"] == "oma.dev/v1alpha1"


def test_examples_kubernetes_holds_only_kubernetes_objects_and_examples_only_run_specs() -> None:
    """``kubectl apply -f examples/kubernetes/`` applies every file there; ``oma run`` takes
    the specs beside it."""
    from pathlib import Path

    import yaml

    examples = Path(__file__).resolve().parents[2] / "examples"
    manifests = sorted((examples / "kubernetes").glob("*.yaml"))
    assert [p.name for p in manifests] == [
        "teamrun-demo.yaml",
        "teamrun-postgres.yaml",
        "teamrun.yaml",
    ]
    for path in manifests:
        for body in yaml.safe_load_all(path.read_text()):
            assert body["apiVersion"] and body["kind"], path
    for path in sorted(examples.glob("*.yaml")):
        RunSpec.model_validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize(
    ("progress", "believed"),
    [
        ({"taskSummary": "3/3", "lastCheckpointAt": "t"}, True),
        ({"taskSummary": "0/1", "lastCheckpointAt": "t"}, False),  # the forged "succeeded"
        ({"taskSummary": "2/3", "lastCheckpointAt": "t"}, False),
        ({"lastCheckpointAt": "t"}, False),  # a checkpoint with no task planned yet
        ({}, False),  # no checkpoint, or the store could not be read
        ({"taskSummary": "0/0", "lastCheckpointAt": "t"}, False),
    ],
)
def test_a_success_counts_only_when_the_store_shows_every_task_completed(
    progress: dict[str, str], believed: bool
) -> None:
    """A pod's status is not proof of work done (anyone who could write it could say
    "succeeded"): a success the checkpoint does not show is a disruption, so the next attempt
    resumes from the checkpoint and nothing passes unrun."""
    said = classify(runner_pod_in("Succeeded", exit_code=0, reason="Completed"))
    seen = confirmed(said, progress)
    if believed:
        assert seen is said
        return
    assert (seen.kind, seen.reason, seen.exit_code) == ("disruption", SUCCESS_NOT_CONFIRMED, 0)
    assert "reported success" in seen.message and seen.report is None
    decision = decide(seen, {"attempt": 1}, RetryPolicy(), 1)
    assert (decision.action, decision.reason) == ("next_attempt", SUCCESS_NOT_CONFIRMED)


def test_only_a_success_is_checked_against_the_store() -> None:
    for exit_code in (10, 11, 2):
        said = classify(runner_pod_in("Failed", exit_code=exit_code))
        assert confirmed(said, {}) is said


def test_a_success_the_store_cannot_be_read_for_stands_marked_unconfirmed() -> None:
    """Neither confirmed nor denied: a store the operator cannot reach while the runners can
    (a Secret fixed after the operator read it) must not start attempt after attempt."""
    said = classify(runner_pod_in("Succeeded", exit_code=0, reason="Completed"))
    seen = confirmed(said, {}, "the store did not answer in time")
    assert (seen.kind, seen.reason, seen.message) == (
        "succeeded",
        "CompletedUnconfirmed",
        said.message,
    )
    assert decide(seen, {"attempt": 1}, RetryPolicy(), 1).action == "succeeded"


def test_a_teamrun_agents_mcp_servers_reach_the_runner_as_written() -> None:
    servers = [
        {
            "name": "crm",
            "url": "http://crm.team.svc:8000/mcp",
            "headersFromEnv": {"Authorization": "CRM_TOKEN"},
            "tools": ["find"],
            "idempotent": {"find": True},
        },
        {"name": "files", "command": ["python", "-m", "tools"], "env": {"ROOT": "/data"}},
    ]
    agents = [{**SPEC["team"]["agents"][0], "mcpServers": servers}]
    spec = TeamRunSpec.model_validate({**SPEC, "team": {"agents": agents}})
    run = RunSpec.model_validate(to_run_spec(spec, "ns"))
    assert [
        s.model_dump(by_alias=True, exclude_defaults=True) for s in run.agents[0].mcp_servers
    ] == servers


def test_a_teamrun_header_from_a_contract_variable_is_refused_with_the_spec() -> None:
    server = {"name": "crm", "url": "http://h/mcp", "headersFromEnv": {"X": "OMA_STORE_URL"}}
    agents = [{**SPEC["team"]["agents"][0], "mcpServers": [server]}]
    with pytest.raises(ValueError, match="runner pod contract"):
        TeamRunSpec.model_validate({**SPEC, "team": {"agents": agents}})


def test_a_runner_s_report_is_said_in_words_never_as_its_json() -> None:
    """Status messages, attempt records and Events carry the report's message, not the JSON
    termination message the runner wrote."""
    from oma_operator.runs.rules.decisions import attempt_record

    words = "Durable approval decision pending."
    report = TerminationReport(status="suspended", message=words, pending_approvals=["apr_1"])
    suspended = Outcome("suspended", "AwaitingApproval", report.to_text(), 10)
    assert suspended.message.startswith("{")  # what the pod holds
    decision = decide(suspended, {}, POLICY)
    assert decision.message == words
    assert attempt_record(1, suspended, "run-a1", "now")["message"] == words
    failed = TerminationReport(status="error", message="task t1 failed: the model refused")
    permanent = decide(Outcome("permanent", "PermanentFailure", failed.to_text(), 2), {}, POLICY)
    assert permanent.message == "task t1 failed: the model refused"
    bare = Outcome("permanent", "PermanentFailure", TerminationReport(status="error").to_text())
    assert bare.said == "the runner ended with status error"
    done = Outcome("succeeded", "Completed", TerminationReport(status="ok").to_text(), 0)
    assert done.said == "the run completed"
    plain = Outcome("crash", "Error", "exec format error")  # the kubelet's words: as they are
    assert decide(plain, {"failures": 9}, POLICY).message.endswith("Error exec format error")
