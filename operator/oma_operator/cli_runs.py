"""``oma retry NAME``: take a ``Failed`` TeamRun up again (``oma_operator.retries``). Registered
into the ``oma`` command line through the ``oma.cli`` entry point, as ``oma approve`` is.

It sets the TeamRun's ``oma.dev/retry`` annotation to the time of the request, conditioned on
the TeamRun as read (a change in between is reported, not overwritten); the operator then
records the retry in ``status.retries``, resets the failure budget and starts the next attempt
from the checkpoint, under the concurrency limits. Only a ``Failed`` run is retried: a running
one needs nothing, a ``Succeeded`` one is done, a ``Rejected`` one was ended by a reviewer.

Exit codes: 0 requested; 1 refused (no such TeamRun, not Failed, changed meanwhile, RBAC); 2
cannot talk to the cluster.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Annotated, Any

import typer

from oma.timeutil import now_iso
from oma_operator.cli_decisions import (
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
from oma_operator.models import RETRY_ANNOTATION

TeamRunArgument = Annotated[str, typer.Argument(help="TeamRun name (kubectl get teamruns).")]


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
    ) -> None:
        """Retry a Failed TeamRun: its next attempt resumes from the checkpoint, with the
        failure budget reset (status.retries records each retry)."""
        target = Target(name, namespace, kubeconfig, context, impersonate)
        try:
            result = asyncio.run(request_retry(target))
        except DecisionRefused as exc:
            refuse(exc, as_json)
        if as_json:
            typer.echo(json.dumps(result, indent=2))
            return
        typer.echo(
            f"retry of teamrun {result['teamRun']} requested (attempt {result['failedAttempt']} "
            f"failed: {result['reason']}); the operator starts attempt "
            f"{result['failedAttempt'] + 1} from the checkpoint"
        )


async def request_retry(target: Target) -> dict[str, Any]:
    with operator_extra():
        from oma_operator.client import KubeError

    kube = await connect(target)
    target = replace(target, namespace=target.namespace or kube.namespace)
    assert target.namespace is not None
    async with api_session(kube):
        teamrun = await kube.get_teamrun(target.namespace, target.name)
        if teamrun is None:
            raise DecisionRefused(
                f"teamrun {target.name} not found in namespace {target.namespace}"
            )
        status = teamrun.get("status") or {}
        phase = status.get("phase") or "new"
        if phase != "Failed":
            why = {
                "Succeeded": "it succeeded",
                "Rejected": "a reviewer rejected it",
            }.get(phase, "it has not failed")
            raise DecisionRefused(
                f"teamrun {target.name} is {phase}: only a Failed run can be retried ({why})"
            )
        conditions: list[dict[str, Any]] = status.get("conditions") or []
        failed: dict[str, Any] = next((c for c in conditions if c.get("type") == "Failed"), {})
        requested = now_iso()
        version = teamrun["metadata"]["resourceVersion"]
        try:
            await kube.annotate_teamrun(
                target.namespace, target.name, {RETRY_ANNOTATION: requested}, version
            )
        except KubeError as exc:
            if exc.status != 409:
                raise
            raise DecisionRefused(f"teamrun {target.name} changed meanwhile: try again") from exc
        return {
            "teamRun": target.name,
            "namespace": target.namespace,
            "requested": requested,
            "failedAttempt": int(status.get("attempt") or 0),
            "reason": failed.get("reason") or "Failed",
        }
