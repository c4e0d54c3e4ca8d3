"""One request: everything it binds (the exact content, its hash recomputed from what is shown,
the task, the agent, the attempt), what changed since the previous request about the same
thing, and the decision, made as the signed-in user.

A decision is made only on the request the page showed: the form carries the resource's uid and
request hash as rendered, and a resource that differs when the decision is made (republished
after its content changed in the store, replaced, decided meanwhile) is refused with the reason
on the page. The API server then decides whether this user may decide it at all.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from oma.approval.models import REASON_LIMIT
from oma.approval.words import DecisionWord, ResourceDecision, resource_fields
from oma_operator.cli.decisions import Checks, DecisionRefused, api_errors, decide_with
from oma_operator.console import reads
from oma_operator.console.guard import named
from oma_operator.console.pages.signin import acting_form, opened
from oma_operator.console.rules.decision_page import decision_page
from oma_operator.console.sessions import Session
from oma_operator.console.state import state_of
from oma_operator.resources.bodies import DecisionBody

VERDICTS: dict[str, ResourceDecision] = {"approve": "Approved", "reject": "Rejected"}
OUTCOMES = ("retry", "done", "failed")  # an uncertain call's resolutions (oma resolve)


async def _render(
    request: Request, session: Session, namespace: str, name: str, status: int = 200, **said: Any
) -> Response:
    console = state_of(request)
    kube = session.kube
    try:
        async with api_errors(kube):
            decision = await kube.get_decision(namespace, name)
            if decision is None:
                return console.page(
                    "message.html",
                    status_code=404,
                    session=session,
                    title="No such request",
                    text=f"approvaldecision {name} not found in namespace {namespace}",
                )
            teamrun = None
            siblings: list[DecisionBody] = []
            team = str((decision.get("spec") or {}).get("teamRun") or "")
            if named({"namespace": namespace, "name": team}):  # the resource's word: checked
                teamrun = await kube.get_teamrun(namespace, team)
                siblings = await reads.decisions_of_run(kube, namespace, team)
    except DecisionRefused as exc:
        return console.page(
            "message.html", status_code=403, session=session, title="Refused", text=str(exc)
        )
    page = decision_page(decision, teamrun, siblings)
    return console.page("decision.html", status_code=status, session=session, d=page, **said)


async def show(request: Request) -> Response:
    page = opened(request)
    if isinstance(page, Response):
        return page
    return await _render(request, *page)


async def decide(request: Request) -> Response:
    page = opened(request)
    if isinstance(page, Response):
        return page
    session, namespace, name = page
    console = state_of(request)
    form, refused = await acting_form(request, session)
    if refused is not None:
        return await _render(request, session, namespace, name, 403, error=refused)
    action = str(form.get("action") or "")
    reason = str(form.get("reason") or "").strip() or None
    if reason is not None and len(reason) > REASON_LIMIT:
        return await _render(
            request,
            session,
            namespace,
            name,
            400,
            error=f"refused: the reason is over {REASON_LIMIT} characters",
        )
    settle: dict[str, str] | None = None
    verdict: ResourceDecision
    if action in VERDICTS:
        verdict = VERDICTS[action]
    elif action in OUTCOMES:
        verdict, resolution = resource_fields(cast(DecisionWord, action))
        settle = {"resolution": resolution}
        result = str(form.get("result") or "").strip()
        if action == "done" and result:
            settle["result"] = result
    else:
        return await _render(request, session, namespace, name, 400, error="no such decision")
    shown_uid, shown_hash = str(form.get("uid") or ""), str(form.get("hash") or "")

    def as_shown(decision: DecisionBody, _content: Any) -> None:
        spec = decision.get("spec") or {}
        if decision["metadata"].get("uid") != shown_uid or spec.get("requestHash") != shown_hash:
            raise DecisionRefused(
                "this request changed after the page showed it (its content, or the resource "
                "the operator published for it): nothing was decided; read it again below"
            )
        if (decision.get("status") or {}).get("verified") is not True:
            raise DecisionRefused(
                "the operator has not verified this resource (it did not publish it, or not "
                "yet): a decision on it would count for nothing; nothing was decided"
            )

    try:
        async with api_errors(session.kube):
            done = await decide_with(
                session.kube,
                namespace,
                name,
                verdict,
                reason,
                show=as_shown,
                settle=settle,
                checks=Checks(wait_seconds=console.settings.record_wait_seconds),
            )
    except DecisionRefused as exc:
        return await _render(request, session, namespace, name, 409, error=f"refused: {exc}")
    settled = f" ({done['resolution']})" if done.get("resolution") else ""
    said = f"{done['decision']}{settled} by {done['reviewer']}"
    if done.get("recorded"):
        said += ", recorded by the operator"
    else:
        said += ": written; not waited for the operator to record it (--wait 0)"
    return await _render(request, session, namespace, name, done=said)
