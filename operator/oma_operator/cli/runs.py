"""``oma retry NAME``: take a ``Failed`` TeamRun up again (``oma_operator.runs.retries``).
Registered into the ``oma`` command line through the ``oma.cli`` entry point, as ``oma approve`` is.

It sets the TeamRun's ``oma.dev/retry`` annotation to the time of the request, conditioned on
the TeamRun as read (a change in between is reported, not overwritten); the operator then
records the retry in ``status.retries``, resets the failure budget and starts the next attempt
from the checkpoint, under the concurrency limits. Only a ``Failed`` run is retried: a running
one needs nothing, a ``Succeeded`` one is done, a ``Rejected`` one was ended by a reviewer. The
command waits (``--wait``) until the operator has handled the request: it says "retried" only
for a retry the operator queued, and prints the operator's reason for one it refused (a spec
changed since approvals it has not acted on yet were given).

Exit codes: 0 retried (or requested, with ``--wait 0``); 1 refused (no such TeamRun, not
Failed, changed meanwhile, RBAC); 2 cannot talk to the cluster; 3 requested, but the operator
refused it or did not handle it in time.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from oma.timeutil import now_iso
from oma_operator.cli.decisions import (
    EXIT_NOT_RECORDED,
    AsOption,
    ContextOption,
    DecisionRefused,
    JsonOption,
    KubeconfigOption,
    NamespaceOption,
    Target,
    api_session,
    connect,
    operator_extra,
    refuse,
)
from oma_operator.resources.bodies import Condition
from oma_operator.resources.models import RETRY_ANNOTATION

if TYPE_CHECKING:
    from oma_operator.k8s.client import Kube

TeamRunArgument = Annotated[str, typer.Argument(help="TeamRun name (kubectl get teamruns).")]
HANDLED_WAIT_SECONDS = 60.0  # how long oma retry waits for the operator to handle the request
RetryWaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        help="Seconds to wait for the operator to queue or refuse the retry (0: do not wait; "
        "the request is then written, not known to be acted on).",
    ),
]


def register(app: typer.Typer) -> None:
    """Entry point ``oma.cli``: add ``retry`` to the ``oma`` app."""

    @app.command()
    def retry(
        name: TeamRunArgument,
        namespace: NamespaceOption = None,
        kubeconfig: KubeconfigOption = None,
        context: ContextOption = None,
        impersonate: AsOption = None,
        as_json: JsonOption = False,
        wait: RetryWaitOption = HANDLED_WAIT_SECONDS,
    ) -> None:
        """Retry a Failed TeamRun: its next attempt resumes from the checkpoint, with the
        failure budget reset (status.retries records each retry, and why one was refused)."""
        target = Target(name, namespace, kubeconfig, context, impersonate)
        try:
            result = asyncio.run(request_retry(target, wait))
        except DecisionRefused as exc:
            refuse(exc, as_json)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        done = "retried" if result["retried"] else "requested (--wait 0: not waited for)"
        typer.echo(
            f"teamrun {result['teamRun']} {done}: attempt {result['failedAttempt']} "
            f"failed ({result['reason']}); attempt {result['failedAttempt'] + 1} resumes from "
            "the checkpoint"
        )


async def request_retry(
    target: Target, wait_seconds: float = HANDLED_WAIT_SECONDS
) -> dict[str, Any]:
    kube = await connect(target)
    async with api_session(kube):
        namespace = target.namespace or kube.namespace
        return await retry_with(kube, namespace, target.name, wait_seconds)


async def retry_with(
    kube: Kube, namespace: str, name: str, wait_seconds: float = HANDLED_WAIT_SECONDS
) -> dict[str, Any]:
    """Request a retry of the Failed TeamRun as read and (``wait_seconds``) wait for the
    operator to handle it."""
    with operator_extra():
        from oma_operator.k8s.errors import KubeConflict

    teamrun = await kube.get_teamrun(namespace, name)
    if teamrun is None:
        raise DecisionRefused(f"teamrun {name} not found in namespace {namespace}")
    status = teamrun.get("status") or {}
    phase = status.get("phase") or "new"
    if phase != "Failed":
        why = {
            "Succeeded": "it succeeded",
            "Rejected": "a reviewer rejected it",
        }.get(phase, "it has not failed")
        raise DecisionRefused(
            f"teamrun {name} is {phase}: only a Failed run can be retried ({why})"
        )
    conditions: list[Condition] = status.get("conditions") or []
    failed: Condition = next((c for c in conditions if c.get("type") == "Failed"), Condition())
    requested = now_iso()
    version = teamrun["metadata"]["resourceVersion"]
    try:
        await kube.annotate_teamrun(namespace, name, {RETRY_ANNOTATION: requested}, version)
    except KubeConflict as exc:
        raise DecisionRefused(f"teamrun {name} changed meanwhile: try again") from exc
    if wait_seconds > 0:
        target = Target(name, namespace, None)
        await _await_handled(kube, target, teamrun["metadata"]["uid"], requested, wait_seconds)
    return {
        "teamRun": name,
        "namespace": namespace,
        "requested": requested,
        "retried": wait_seconds > 0,
        "failedAttempt": int(status.get("attempt") or 0),
        "reason": failed.get("reason") or "Failed",
    }


async def _await_handled(
    kube: Kube, target: Target, uid: str, requested: str, seconds: float
) -> None:
    """Return once the operator has queued the retry ``requested``; raise ``DecisionRefused``
    (exit 3) when it refused it, or said nothing within ``seconds``."""
    assert target.namespace is not None
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        teamrun = await kube.get_teamrun(target.namespace, target.name)
        if teamrun is None or teamrun["metadata"].get("uid") != uid:
            raise DecisionRefused(
                f"teamrun {target.name} was deleted after the retry was requested",
                EXIT_NOT_RECORDED,
            )
        retries = (teamrun.get("status") or {}).get("retries") or []
        record = next((r for r in retries if r.get("requested") == requested), None)
        if record is not None and record.get("refusedAt"):
            raise DecisionRefused(
                f"retry of teamrun {target.name} refused by the operator: {record.get('message')}",
                EXIT_NOT_RECORDED,
            )
        if record is not None:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise DecisionRefused(
                f"retry of teamrun {target.name} requested, but the operator did not act on it "
                f"within {seconds:.0f} s (is it running?): see kubectl get teamrun "
                f"{target.name} -o yaml",
                EXIT_NOT_RECORDED,
            )
        await asyncio.sleep(0.5)
