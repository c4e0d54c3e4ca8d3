"""``oma suspend|resume|cancel NAME``: set a TeamRun's ``spec.suspend`` or ``spec.cancel``
(``oma_operator.runs.rules.holds``). Registered into the ``oma`` command line through the
``oma.cli`` entry point, as ``oma retry`` is.

Each is one merge patch of the spec, conditioned on the TeamRun as read (a change in between
is reported, not overwritten); the operator does the rest: the runner drains at its next
durable boundary, then the run is ``Suspended`` or ends ``Cancelled``; ``resume`` queues the
next attempt, which resumes from the checkpoint. The same as ``kubectl patch teamrun NAME
--type merge -p '{"spec":{"suspend":true}}'``.

Exit codes: 0 requested; 1 refused (no such TeamRun, finished, nothing to do, changed
meanwhile, RBAC); 2 cannot talk to the cluster.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Literal

import typer

from oma_operator.cli.decisions import (
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
from oma_operator.cli.runs import TeamRunArgument
from oma_operator.resources.phases import FINAL_PHASES

if TYPE_CHECKING:
    from oma_operator.k8s.client import Kube

Request = Literal["suspend", "resume", "cancel"]
PATCHES: dict[Request, dict[str, bool]] = {
    "suspend": {"suspend": True},
    "resume": {"suspend": False},
    "cancel": {"cancel": True},
}
SAID: dict[Request, str] = {
    "suspend": "it drains at its next durable boundary, then is Suspended ('oma resume' goes on)",
    "resume": "its next attempt resumes from the checkpoint when a slot is free",
    "cancel": "it drains at its next durable boundary, then ends Cancelled (checkpoint kept)",
}


def register(app: typer.Typer) -> None:
    """Entry point ``oma.cli``: add ``suspend``, ``resume`` and ``cancel`` to the app."""

    def command(request: Request, summary: str) -> None:
        def run(
            name: TeamRunArgument,
            namespace: NamespaceOption = None,
            kubeconfig: KubeconfigOption = None,
            context: ContextOption = None,
            impersonate: AsOption = None,
            as_json: JsonOption = False,
        ) -> None:
            target = Target(name, namespace, kubeconfig, context, impersonate)
            try:
                result = asyncio.run(request_hold(target, request))
            except DecisionRefused as exc:
                refuse(exc, as_json)
            if as_json:
                typer.echo(json.dumps(result, indent=2))
                return
            typer.echo(f"{request} of teamrun {result['teamRun']} requested: {SAID[request]}")

        run.__doc__ = summary
        app.command(request)(run)

    command("suspend", "Suspend a TeamRun at its next durable boundary (spec.suspend).")
    command("resume", "Resume a suspended TeamRun from its checkpoint (clears spec.suspend).")
    command("cancel", "Cancel a TeamRun at its next durable boundary; it ends Cancelled.")


async def request_hold(target: Target, request: Request) -> dict[str, Any]:
    kube = await connect(target)
    async with api_session(kube):
        return await hold_with(kube, target.namespace or kube.namespace, target.name, request)


async def hold_with(kube: Kube, namespace: str, name: str, request: Request) -> dict[str, Any]:
    """Set (or clear) ``spec.suspend``, or set ``spec.cancel``, on the TeamRun as read."""
    with operator_extra():
        from oma_operator.k8s.errors import KubeConflict

    teamrun = await kube.get_teamrun(namespace, name)
    if teamrun is None:
        raise DecisionRefused(f"teamrun {name} not found in namespace {namespace}")
    phase = (teamrun.get("status") or {}).get("phase") or "new"
    spec = teamrun.get("spec") or {}
    if phase in FINAL_PHASES:
        raise DecisionRefused(f"teamrun {name} is {phase}: it has finished")
    if spec.get("cancel") is True:
        raise DecisionRefused(f"teamrun {name} is being cancelled already")
    if request == "resume" and spec.get("suspend") is not True:
        raise DecisionRefused(f"teamrun {name} is not suspended (phase {phase})")
    if request == "suspend" and spec.get("suspend") is True:
        raise DecisionRefused(f"teamrun {name} is suspended already (phase {phase})")
    version = teamrun["metadata"]["resourceVersion"]
    try:
        await kube.patch_teamrun_spec(namespace, name, PATCHES[request], version)
    except KubeConflict as exc:
        raise DecisionRefused(f"teamrun {name} changed meanwhile: try again") from exc
    return {"teamRun": name, "namespace": namespace, "request": request, "phase": phase}
