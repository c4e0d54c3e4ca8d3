"""``oma approve`` / ``oma reject`` as a subprocess against the real API server: the reviewer is
the caller's own identity (the reviewer policy admits it), decisions are final, and every
refusal is one line with the documented exit code."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import KubeClient
from devcluster.kube import ApiError
from devcluster.kubeconfig import load_kubeconfig
from oma.approval.canonical import canonical_json
from oma.approval.models import ApprovalRequest
from oma.approval.requests import create_approval_request
from tests.cluster.approval_kit import (
    DECISIONS,
    admission_policies,
    gated,
    grant_reviewers,
    pending_decision,
    published_decision,
    tool_request,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import SideEffects
from tests.cluster.helpers import oma as oma_waiting
from tests.cluster.helpers import oma_command, tool_package
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    teamrun,
)

__all__ = ["admission_policies", "crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
DECIDING = ("approve", "reject", "resolve")


async def oma(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``oma`` as a reviewer runs it, not waiting for an operator to record the decision
    (most tests here publish a resource with no operator to record it; those that run one
    call ``oma_waiting``)."""
    more = ("--wait", "0") if args and args[0] in DECIDING else ()
    return await oma_waiting(kubeconfig, *args, *more)


async def _decision(
    kube: KubeClient, namespace: str, request: ApprovalRequest | None = None
) -> tuple[str, dict[str, Any]]:
    """A pending ApprovalDecision as the operator publishes it (no TeamRun needed)."""
    created = await published_decision(kube, namespace, request or tool_request())
    return created["metadata"]["name"], created


def _uncertain_request() -> ApprovalRequest:
    return create_approval_request(
        run_id="pay-1",
        scope="uncertain_tool_call",
        boundary="t-1:c1",
        content={
            "kind": "uncertain_tool_call",
            "toolName": "tally",
            "rawInput": {"item": "pay"},
            "input": {"item": "pay"},
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
            "startedAt": "2026-12-01T10:00:00.000Z",
            "startedAttempt": 1,
        },
    )


async def _spec(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    body = await kube.get(f"{DECISIONS.format(ns=namespace)}/{name}")
    return dict(body["spec"])


@pytest.mark.timeout(120)
async def test_approve_as_alice_then_a_second_decision_is_refused(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    name, created = await _decision(kube, namespace)
    alice = cluster.mint_kubeconfig("alice")
    done = await oma(alice, "approve", name, "-n", namespace)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        f"{namespace}/{name}: tool_call in TeamRun pay (request {created['spec']['requestId']})"
    )
    assert "  Tool call ledger_append by agent clerk in task t-1 (call c1)." in lines
    assert "  Exact content (checked against the hash):" in lines
    assert '        "amount": 7,' in lines and '        "entry": "charge"' in lines
    assert lines[-2] == f"  Content hash: {created['spec']['requestHash']}"
    assert lines[-1] == "approved by alice"
    spec = await _spec(kube, namespace, name)
    assert (spec["decision"], spec["reviewer"]) == ("Approved", "alice")
    assert "reason" not in spec

    again = await oma(alice, "reject", name, "-n", namespace)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.strip() == (f"error: approvaldecision {name} is already Approved by alice")
    assert (await _spec(kube, namespace, name))["decision"] == "Approved"


@pytest.mark.timeout(120)
async def test_approve_refuses_content_that_does_not_hash_to_the_request(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    """The summary says 7 and the hash binds 7, but the resource's content says 7000: nobody
    can tell which one the decision would bind, so oma approve decides nothing."""
    await grant_reviewers(kube, namespace, "alice")
    lying = canonical_json(tool_request(amount=7000).content)
    created = await published_decision(kube, namespace, tool_request(), content=lying)
    name = created["metadata"]["name"]
    done = await oma(cluster.mint_kubeconfig("alice"), "approve", name, "-n", namespace)
    assert done.returncode == 1 and done.stdout == ""
    assert f"approvaldecision {name}: spec.content hashes to" in done.stderr
    assert "not deciding" in done.stderr
    assert (await _spec(kube, namespace, name))["decision"] == "Pending"


@pytest.mark.timeout(120)
async def test_without_exact_content_approve_needs_summary_only(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    request = tool_request()
    created = await published_decision(kube, namespace, request, content=None)
    name = created["metadata"]["name"]
    alice = cluster.mint_kubeconfig("alice")
    refused = await oma(alice, "approve", name, "-n", namespace)
    assert refused.returncode == 1
    assert "holds no exact content" in refused.stderr
    assert f"oma approvals show {request.id} --store URL" in refused.stderr
    assert (await _spec(kube, namespace, name))["decision"] == "Pending"
    done = await oma(alice, "approve", name, "-n", namespace, "--summary-only")
    assert done.returncode == 0, done.stderr
    assert "Exact content" not in done.stdout and done.stdout.endswith("approved by alice\n")


def _at_a_terminal(kubeconfig: Path, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``oma`` with a pseudo-terminal as stdin (so it asks), answering ``answer``."""
    import pty

    controller, terminal = pty.openpty()
    try:
        os.write(controller, answer.encode() + b"\n")
        return subprocess.run(
            [oma_command(), *args, "--wait", "0"],
            stdin=terminal,
            capture_output=True,
            text=True,
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            timeout=60,
            check=False,
        )
    finally:
        os.close(controller)
        os.close(terminal)


@pytest.mark.timeout(120)
async def test_at_a_terminal_approve_shows_everything_then_asks(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    name, created = await _decision(kube, namespace)
    alice = cluster.mint_kubeconfig("alice")
    declined = await asyncio.to_thread(_at_a_terminal, alice, "n", "approve", name, "-n", namespace)
    assert declined.returncode == 1, declined
    assert f"Content hash: {created['spec']['requestHash']}" in declined.stdout
    assert "Approve this? [y/N]" in declined.stdout
    assert "not decided: you answered no" in declined.stderr
    assert (await _spec(kube, namespace, name))["decision"] == "Pending"
    accepted = await asyncio.to_thread(_at_a_terminal, alice, "y", "approve", name, "-n", namespace)
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.endswith("approved by alice\n")
    assert (await _spec(kube, namespace, name))["decision"] == "Approved"
    # --yes decides without asking, at a terminal too.
    other, _ = await _decision(kube, namespace)
    unasked = await asyncio.to_thread(
        _at_a_terminal, alice, "n", "reject", other, "-n", namespace, "--yes"
    )
    assert unasked.returncode == 0 and "[y/N]" not in unasked.stdout, unasked
    assert (await _spec(kube, namespace, other))["decision"] == "Rejected"


@pytest.mark.timeout(120)
async def test_reject_with_reason_and_json_output(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "carol")
    name, created = await _decision(kube, namespace)
    done = await oma(
        cluster.mint_kubeconfig("carol"),
        "reject",
        name,
        "--namespace",
        namespace,
        "--reason",
        "amount not in the budget",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["name"] == name and result["namespace"] == namespace
    assert (result["decision"], result["reviewer"]) == ("Rejected", "carol")
    assert result["reason"] == "amount not in the budget"
    assert result["requestHash"] == created["spec"]["requestHash"]
    assert result["scope"] == "tool_call" and result["teamRun"] == "pay"
    spec = await _spec(kube, namespace, name)
    assert (spec["decision"], spec["reviewer"], spec["reason"]) == (
        "Rejected",
        "carol",
        "amount not in the budget",
    )


@pytest.mark.timeout(120)
async def test_namespace_comes_from_the_kubeconfig_context(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    admission_policies: None,
    tmp_path: Path,
) -> None:
    await grant_reviewers(kube, namespace, "dana")
    name, _ = await _decision(kube, namespace)
    config = yaml.safe_load(cluster.mint_kubeconfig("dana").read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "dana.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    done = await oma(kubeconfig, "approve", name)
    assert done.returncode == 0, done.stderr
    assert (await _spec(kube, namespace, name))["reviewer"] == "dana"


@pytest.mark.timeout(120)
async def test_unknown_name_is_refused(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    done = await oma(cluster.mint_kubeconfig("alice"), "approve", "nope", "-n", namespace)
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: approvaldecision nope not found in namespace {namespace}"
    with_json = await oma(
        cluster.mint_kubeconfig("alice"), "approve", "nope", "-n", namespace, "--json"
    )
    assert with_json.returncode == 1
    assert json.loads(with_json.stdout)["exitCode"] == 1


@pytest.mark.timeout(120)
async def test_a_user_without_rbac_gets_the_api_message(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    name, _ = await _decision(kube, namespace)
    done = await oma(cluster.mint_kubeconfig("mallory"), "approve", name, "-n", namespace)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "error: Kubernetes API answered 403:" in done.stderr
    assert 'User "mallory" cannot get resource "approvaldecisions"' in done.stderr
    assert (await _spec(kube, namespace, name))["decision"] == "Pending"


async def test_no_cluster_exits_2(tmp_path: Path) -> None:
    missing = await oma(tmp_path / "absent.kubeconfig", "approve", "x")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"error: no kubeconfig at {tmp_path / 'absent.kubeconfig'} "
        "(set KUBECONFIG or use --kubeconfig)"
    )
    unreachable = tmp_path / "closed.kubeconfig"
    unreachable.write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    closed = await oma(unreachable, "reject", "x", "-n", "n")
    assert closed.returncode == 2
    assert closed.stderr.startswith("error: cannot reach the cluster at https://127.0.0.1:9")


@pytest.mark.timeout(240)
async def test_a_suspended_teamrun_resumes_after_oma_approve(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
) -> None:
    await grant_reviewers(kube, namespace, "erin")
    await kube.create(TEAMRUNS.format(ns=namespace), gated("cli-gate", effects, "charged"))
    decision = await pending_decision(kube, namespace, "cli-gate")
    assert await effects.ledger() == []
    done = await oma_waiting(
        cluster.mint_kubeconfig("erin"), "approve", decision["metadata"]["name"], "-n", namespace
    )
    assert done.returncode == 0, done.stderr  # it waited: the operator recorded it
    assert '"amount": 7' in done.stdout and done.stdout.endswith("approved by erin\n")
    assert "not waited" not in done.stderr
    final = await finished(kube, namespace, "cli-gate", 150)
    assert final["phase"] == "Succeeded" and final["attempt"] == 2
    assert await effects.ledger() == ["charge"]
    recorded = await kube.get(f"{DECISIONS.format(ns=namespace)}/{decision['metadata']['name']}")
    assert (recorded["status"]["decision"], recorded["status"]["reviewer"]) == ("Approved", "erin")


@pytest.mark.timeout(120)
async def test_resolve_settles_an_uncertain_tool_call_and_the_api_server_keeps_it_coherent(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    alice = cluster.mint_kubeconfig("alice")
    name, _ = await _decision(kube, namespace, _uncertain_request())
    path = f"{DECISIONS.format(ns=namespace)}/{name}"
    for wrong, why in [
        ({"decision": "Approved", "resolution": "Done"}, "Retry goes with Approved"),
        ({"decision": "Rejected", "resolution": "Retry"}, "Retry goes with Approved"),
        ({"decision": "Rejected", "resolution": "Failed", "result": "x"}, "only recorded with"),
    ]:
        with pytest.raises(ApiError) as refused:
            await kube.patch(path, {"spec": {**wrong, "reviewer": "admin"}})
        assert refused.value.status == 422 and why in str(refused.value), wrong

    done = await oma(alice, "resolve", name, "done", "--result", "tally shows 1", "-n", namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "rejected (Done) by alice"
    spec = await _spec(kube, namespace, name)
    assert (spec["decision"], spec["resolution"], spec["result"]) == (
        "Rejected",
        "Done",
        "tally shows 1",
    )
    async with KubeClient(load_kubeconfig(alice)) as as_alice:
        for rewrite in ({"result": "changed"}, {"resolution": "Failed"}):
            with pytest.raises(ApiError) as final:
                await as_alice.patch(path, {"spec": rewrite})
            assert final.value.status == 422 and "final once the decision" in str(final.value)

    # On an ordinary request, a resolution is refused by the CLI and by the API server.
    other, _ = await _decision(kube, namespace)
    refused_cli = await oma(alice, "resolve", other, "retry", "-n", namespace)
    assert refused_cli.returncode == 1 and "is not an uncertain tool call" in refused_cli.stderr
    with pytest.raises(ApiError) as not_uncertain:
        await kube.patch(
            f"{DECISIONS.format(ns=namespace)}/{other}",
            {"spec": {"decision": "Approved", "reviewer": "admin", "resolution": "Retry"}},
        )
    assert "only for scope uncertain_tool_call" in str(not_uncertain.value)
    assert (await _spec(kube, namespace, other))["decision"] == "Pending"


PAY_TOOL = """
import os

from pydantic import BaseModel

from oma.tools import define_tool, records


class PayInput(BaseModel):
    amount: int


async def _pay(args, ctx):
    # The bank has no idempotency key: every run of this tool moves money (a tally record).
    bank = records.RecordLocation.from_env("TALLY", "bank.jsonl")
    await records.append(bank, {"call": ctx.tool_call_id, "amount": args.amount})
    if os.environ.get("OMA_ATTEMPT") == "1":
        # Dead after the effect, before its result is saved. Not SIGKILL to itself: a runner
        # that is its container's PID 1 does not receive signals it has no handler for.
        os._exit(137)
    return f"paid {args.amount}"


pay = define_tool("pay", "Pay.", PayInput, _pay, idempotent=False)
"""


@pytest.mark.timeout(240)
async def test_an_uncertain_call_on_kubernetes_is_recorded_as_done_and_not_repeated(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    redis_secret: str,
    admission_policies: None,
    effects: SideEffects,
    tmp_path: Path,
) -> None:
    """The runner dies between a non-idempotent call's effect and its commit; the next attempt
    asks instead of paying again; the reviewer records it as done with `oma resolve`."""
    await grant_reviewers(kube, namespace, "alice")
    site = tool_package(tmp_path / "site", "oma_pay_tool", PAY_TOOL, {"pay": "oma_pay_tool:pay"})

    async def bank() -> list[tuple[str, int]]:
        return [(str(r["call"]), int(r["amount"])) for r in await effects.tally()]

    script: list[dict[str, Any]] = [
        {"tool_calls": [{"id": "p1", "name": "pay", "input": {"amount": 42}}]},
        {"text": "paid"},
    ]
    body = teamrun("unsure", script, effects)
    body["spec"]["team"]["agents"][0]["tools"] = ["pay"]
    body["spec"]["retryPolicy"] = {"backoffSeconds": 1, "maxFailures": 2}
    await cluster.add_tools(body, site)
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    try:
        decision = await pending_decision(kube, namespace, "unsure")
    except AssertionError as missing:
        status = (await kube.get(f"{TEAMRUNS.format(ns=namespace)}/unsure")).get("status")
        raise AssertionError(f"{missing}; the TeamRun: {status}") from missing
    spec = decision["spec"]
    assert spec["scope"] == "uncertain_tool_call" and spec["decision"] == "Pending"
    assert "Uncertain tool call pay" in spec["summary"] and "attempt 1" in spec["summary"]
    assert await bank() == [("p1", 42)]  # paid once, before the crash

    alice = cluster.mint_kubeconfig("alice")
    name = decision["metadata"]["name"]
    found = "bank statement shows p1 42"
    done = await oma(alice, "resolve", name, "done", "--result", found, "-n", namespace)
    assert done.returncode == 0, done.stderr
    status = await finished(kube, namespace, "unsure", 150)
    assert status["phase"] == "Succeeded", status
    assert [a["outcome"] for a in status["attempts"]] == ["crash", "suspended", "succeeded"]
    assert await bank() == [("p1", 42)]  # not paid again
    recorded = await kube.get(f"{DECISIONS.format(ns=namespace)}/{name}")
    assert recorded["status"]["recorded"] is True
    assert (recorded["status"]["decision"], recorded["status"]["resolution"]) == (
        "Rejected",
        "Done",
    )


PLUGIN = """#!{python}
# An exec credential plugin (as EKS, GKE and AKS kubeconfigs use one): prints the user's
# credentials as an ExecCredential and notes that it ran.
import json, pathlib
pathlib.Path({ran!r}).write_text("ran")
print(json.dumps({{
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {{"clientCertificateData": {cert!r}, "clientKeyData": {key!r}}},
}}))
"""


@pytest.mark.timeout(120)
async def test_approve_with_an_exec_plugin_two_kubeconfig_files_and_a_chosen_context(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    admission_policies: None,
    tmp_path: Path,
) -> None:
    """kubectl's ways of finding credentials: ``$KUBECONFIG`` naming two files (clusters and
    users in one, contexts in the other), a context that is not the current one, and a user
    whose credentials come from an exec plugin."""
    import base64

    await grant_reviewers(kube, namespace, "erin")
    name, _ = await _decision(kube, namespace)
    minted = yaml.safe_load(cluster.mint_kubeconfig("erin").read_text())
    user = minted["users"][0]["user"]
    cert, key = (
        base64.b64decode(user[f"client-{part}-data"]).decode() for part in ("certificate", "key")
    )
    ran = tmp_path / "plugin-ran"
    plugin = tmp_path / "credential-plugin"
    plugin.write_text(PLUGIN.format(python=sys.executable, ran=str(ran), cert=cert, key=key))
    plugin.chmod(0o755)
    cluster_entry = minted["clusters"][0]
    first = tmp_path / "clusters-and-users.kubeconfig"
    first.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster_entry],
                "users": [
                    {
                        "name": "erin-exec",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": str(plugin),
                                "interactiveMode": "Never",
                            }
                        },
                    },
                    {"name": "nobody", "user": {"token": "not-a-token"}},
                ],
            }
        )
    )
    second = tmp_path / "contexts.kubeconfig"
    second.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "wrong",
                "contexts": [
                    {
                        "name": "wrong",
                        "context": {"cluster": cluster_entry["name"], "user": "nobody"},
                    },
                    {
                        "name": "exec",
                        "context": {
                            "cluster": cluster_entry["name"],
                            "user": "erin-exec",
                            "namespace": namespace,
                        },
                    },
                ],
            }
        )
    )
    env = {**os.environ, "KUBECONFIG": f"{first}{os.pathsep}{second}"}
    wrong = await asyncio.to_thread(
        subprocess.run, [oma_command(), "approve", name, "--yes"], capture_output=True, text=True,
        env=env, timeout=60, check=False,
    )  # fmt: skip
    assert wrong.returncode != 0 and not ran.exists()  # the current context: no plugin, refused
    done = await asyncio.to_thread(
        subprocess.run,
        [oma_command(), "approve", name, "--context", "exec", "--yes", "--wait", "0"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "approved by erin" and ran.exists()
    assert (await _spec(kube, namespace, name))["reviewer"] == "erin"


@pytest.mark.timeout(120)
async def test_approve_as_another_user_through_impersonation(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, admission_policies: None
) -> None:
    """``--as`` (kubectl's impersonation): the API server takes the caller for that user, so
    the decision is theirs; a caller without the right to impersonate is refused."""
    await grant_reviewers(kube, namespace, "frank")
    name, _ = await _decision(kube, namespace)
    refused = await oma(cluster.mint_kubeconfig("mallory"), "approve", name, "-n", namespace,
                        "--as", "frank", "--yes")  # fmt: skip
    assert refused.returncode == 1 and "cannot impersonate" in refused.stderr, refused.stderr
    done = await oma(cluster.kubeconfig, "approve", name, "-n", namespace, "--as", "frank", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "approved by frank"
    assert (await _spec(kube, namespace, name))["reviewer"] == "frank"
