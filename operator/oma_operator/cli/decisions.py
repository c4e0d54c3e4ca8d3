"""``oma approve NAME`` / ``oma reject NAME`` / ``oma resolve NAME``: decide an
``ApprovalDecision`` resource (``resolve`` settles an uncertain tool call: retry, done, failed).

Registered into the ``oma`` command line through the ``oma.cli`` entry point (the engine must
not import Kubernetes code). The decision is a merge patch of ``spec.decision`` and
``spec.reviewer`` (and ``spec.reason`` with ``--reason``); the reviewer is who the API server
says you are (a SelfSubjectReview), because the reviewer policy admits no other name.

Before patching it prints everything the reviewer decides on: the whole summary and the exact
content, checked against the request hash (a resource whose content does not hash to it is
refused). A resource that holds no exact content (too large, or published by an older operator)
is decided only with ``--summary-only``. At a terminal it asks for confirmation (``--yes``
skips the question). Everything it prints shows control, bidi and invisible characters escaped
(``oma.visible``): the content's, and the API's and the resource's words in its errors.

Exit codes: 0 decided; 1 the cluster refused or there is nothing to decide (no such
ApprovalDecision, already decided, RBAC or the reviewer policy forbids it: the API's message is
printed); 2 cannot talk to the cluster (no or unreadable kubeconfig, cluster unreachable,
credentials not accepted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer

from oma.approval.words import ResourceDecision, resource_fields
from oma.errors import MissingExtraError
from oma.extras import needs_extra
from oma.visible import visible, visible_json
from oma_operator.approvals.rules.decision_view import ContentMismatch, verified_content, view
from oma_operator.resources.bodies import DecisionBody, DecisionStatus

if TYPE_CHECKING:
    from oma_operator.k8s.client import Kube

EXIT_REFUSED, EXIT_NO_CLUSTER, EXIT_NOT_RECORDED = 1, 2, 3
RECORD_WAIT_SECONDS = 60.0  # how long oma approve waits for the operator to record a decision
Verdict = ResourceDecision
Outcome = Literal["retry", "done", "failed"]


class DecisionRefused(Exception):
    """A one-line reason and the exit code it maps to."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED) -> None:
        self.exit_code = exit_code
        super().__init__(message)


@dataclass(frozen=True)
class Checks:
    """``yes``: no question at a terminal; ``summary_only``: decide without exact content."""

    yes: bool = False
    summary_only: bool = False
    wait_seconds: float = RECORD_WAIT_SECONDS  # 0: do not wait for the operator to record it


@dataclass(frozen=True)
class Target:
    name: str
    namespace: str | None  # None: the context's
    kubeconfig: str | None  # None: $KUBECONFIG (files merged), else ~/.kube/config
    context: str | None = None  # None: the current context
    impersonate: str | None = None  # --as: act as this user (needs RBAC to impersonate)


NamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="Namespace (default: the kubeconfig context's, else default)."
    ),
]
KubeconfigOption = Annotated[
    str | None,
    typer.Option(
        help="Kubeconfig file, or several joined with ':' as in $KUBECONFIG (default: "
        "$KUBECONFIG, else ~/.kube/config)."
    ),
]
ContextOption = Annotated[
    str | None, typer.Option("--context", help="Kubeconfig context (default: the current one).")
]
AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Act as this user (Kubernetes impersonation, as kubectl --as): the decision is "
        "theirs, and your RBAC must allow impersonating them.",
    ),
]
ReasonOption = Annotated[
    str | None, typer.Option(help="Why (stored in spec.reason, at most 4096 characters).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask for confirmation at a terminal.")
]
SummaryOnlyOption = Annotated[
    bool,
    typer.Option(
        "--summary-only",
        help="Decide a resource that holds no exact content (too large for it) on its summary "
        "alone, having read the content elsewhere (oma approvals show).",
    ),
]
WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        help="Seconds to wait for the operator to record the decision in the run's store "
        "(0: do not wait; the decision is then written, not known to be recorded).",
    ),
]
NameArgument = Annotated[str, typer.Argument(help="ApprovalDecision name (kubectl get ad).")]


def register(app: typer.Typer) -> None:
    """Entry point ``oma.cli``: add ``approve`` and ``reject`` to the ``oma`` app."""

    @app.command()
    def approve(
        name: NameArgument,
        namespace: NamespaceOption = None,
        kubeconfig: KubeconfigOption = None,
        context: ContextOption = None,
        impersonate: AsOption = None,
        reason: ReasonOption = None,
        as_json: JsonOption = False,
        yes: YesOption = False,
        summary_only: SummaryOnlyOption = False,
        wait: WaitOption = RECORD_WAIT_SECONDS,
    ) -> None:
        """Approve an ApprovalDecision as your current Kubernetes user."""
        where = Target(name, namespace, kubeconfig, context, impersonate)
        _command("Approved", where, reason, as_json, Checks(yes, summary_only, wait))

    @app.command()
    def reject(
        name: NameArgument,
        namespace: NamespaceOption = None,
        kubeconfig: KubeconfigOption = None,
        context: ContextOption = None,
        impersonate: AsOption = None,
        reason: ReasonOption = None,
        as_json: JsonOption = False,
        yes: YesOption = False,
        summary_only: SummaryOnlyOption = False,
        wait: WaitOption = RECORD_WAIT_SECONDS,
    ) -> None:
        """Reject an ApprovalDecision as your current Kubernetes user."""
        where = Target(name, namespace, kubeconfig, context, impersonate)
        _command("Rejected", where, reason, as_json, Checks(yes, summary_only, wait))

    @app.command()
    def resolve(
        name: NameArgument,
        outcome: Annotated[
            Outcome,
            typer.Argument(help="retry: run it again; done: it happened; failed: it did not."),
        ],
        result: Annotated[
            str | None,
            typer.Option(help="With done: what the call did (the model is told this)."),
        ] = None,
        namespace: NamespaceOption = None,
        kubeconfig: KubeconfigOption = None,
        context: ContextOption = None,
        impersonate: AsOption = None,
        reason: ReasonOption = None,
        as_json: JsonOption = False,
        yes: YesOption = False,
        summary_only: SummaryOnlyOption = False,
        wait: WaitOption = RECORD_WAIT_SECONDS,
    ) -> None:
        """Settle an uncertain tool call (scope uncertain_tool_call) as your Kubernetes user."""
        verdict, resolution = resource_fields(outcome)
        settle = {"resolution": resolution} | ({"result": result} if result is not None else {})
        checks = Checks(yes, summary_only, wait)
        where = Target(name, namespace, kubeconfig, context, impersonate)
        _command(verdict, where, reason, as_json, checks, settle)


def _command(
    verdict: Verdict,
    target: Target,
    reason: str | None,
    as_json: bool,
    checks: Checks,
    settle: dict[str, str] | None = None,
) -> None:
    try:
        ask = not checks.yes and not as_json and sys.stdin.isatty()
        show = None if as_json else _asking(verdict) if ask else _show
        result = asyncio.run(
            decide(target, verdict, reason, show=show, settle=settle, checks=checks)
        )
    except DecisionRefused as exc:
        refuse(exc, as_json)
    if as_json:
        typer.echo(visible_json(json.dumps(result, ensure_ascii=False, indent=2)))
    else:
        settled = f" ({result['resolution']})" if result.get("resolution") else ""
        typer.echo(visible(f"{verdict.lower()}{settled} by {result['reviewer']}"))
        if not result.get("recorded"):
            note = "note: written; not waited for the operator to record it (--wait 0)"
            typer.echo(note, err=True)


async def decide(
    target: Target,
    verdict: Verdict,
    reason: str | None,
    show: Callable[[DecisionBody, Any | None], None] | None = None,
    settle: dict[str, str] | None = None,
    checks: Checks = Checks(),
) -> dict[str, Any]:
    """``decide_with`` on a client for ``target``'s kubeconfig, closed at the end."""
    kube = await connect(target)
    async with api_session(kube):
        namespace = target.namespace or kube.namespace
        return await decide_with(
            kube, namespace, target.name, verdict, reason, show=show, settle=settle, checks=checks
        )


async def decide_with(
    kube: Kube,
    namespace: str,
    name: str,
    verdict: Verdict,
    reason: str | None,
    show: Callable[[DecisionBody, Any | None], None] | None = None,
    settle: dict[str, str] | None = None,
    checks: Checks = Checks(),
) -> dict[str, Any]:
    """Check the decision is pending and its content is what its hash binds, show it
    (``show(decision, content)``, which may refuse by raising), patch it as the user ``kube``
    acts for; return the decided resource as a small dict. Raises ``DecisionRefused`` for
    every expected failure but the API's own refusals (``api_errors`` turns those into it).
    ``settle`` adds ``resolution`` (and ``result``) for an uncertain tool call."""
    # Imported here, not at the top: every `oma` invocation loads this plugin to register it.
    with operator_extra():
        from oma_operator.k8s.errors import KubeConflict

    user = await kube.self_subject_review()
    reviewer = user.get("username")
    if not reviewer:
        raise DecisionRefused("the API server did not say who you are (no username)")
    decision = await kube.get_decision(namespace, name)
    if decision is None:
        raise DecisionRefused(f"approvaldecision {name} not found in namespace {namespace}")
    _ensure_pending(decision)
    if decision["metadata"].get("deletionTimestamp"):
        raise DecisionRefused(
            f"approvaldecision {name} is being deleted: a decision on it would not "
            "count; the operator publishes the request again, decide that one"
        )
    content = _checked_content(decision, checks)
    if show is not None:
        show(decision, content)
    spec: dict[str, Any] = {"decision": verdict, "reviewer": reviewer}
    if reason is not None:
        spec["reason"] = reason
    if settle:
        if (decision.get("spec") or {}).get("scope") != "uncertain_tool_call":
            raise DecisionRefused(
                f"approvaldecision {name} is not an uncertain tool call: use "
                "oma approve or oma reject"
            )
        spec |= settle
    version = decision["metadata"]["resourceVersion"]
    try:
        decided = await kube.patch_decision_spec(namespace, name, spec, version)
    except KubeConflict as exc:
        # Someone wrote in between: report what they did rather than overwrite it.
        latest = await kube.get_decision(namespace, name)
        if latest is not None:
            _ensure_pending(latest)
        raise DecisionRefused(f"approvaldecision {name} changed meanwhile: try again") from exc
    result = _result(decided, namespace)
    if checks.wait_seconds > 0:
        await _await_recorded(kube, decided, checks.wait_seconds)
        result["recorded"] = True
    return result


async def _await_recorded(kube: Kube, decided: DecisionBody, seconds: float) -> None:
    """Return once the operator has recorded this very decision in the run's store (its status
    says so); raise ``DecisionRefused`` (exit 3) when it says it did not, or stays silent.
    "Approved" is never printed for a decision that nothing acted on."""
    meta, spec = decided["metadata"], decided.get("spec") or {}
    deadline = asyncio.get_running_loop().time() + seconds
    status: DecisionStatus = {}
    while True:
        current = await kube.get_decision(meta["namespace"], meta["name"])
        if current is None or current["metadata"].get("uid") != meta["uid"]:
            raise DecisionRefused(
                f"approvaldecision {meta['name']} was deleted after your decision was written, "
                "before the operator recorded it: it does not count; decide the request the "
                "operator publishes again",
                EXIT_NOT_RECORDED,
            )
        status = current.get("status") or {}
        message = str(status.get("message") or "")
        ours = status.get("reviewer") == spec.get("reviewer")
        if status.get("recorded") and status.get("decision") == spec.get("decision") and ours:
            return
        if (
            "not recorded" in message
            or message.startswith("ignored")
            or (status.get("recorded") and status.get("reviewer") != spec.get("reviewer"))
        ):
            raise DecisionRefused(
                f"your decision on approvaldecision {meta['name']} was written but not "
                f"recorded: {message or 'the request was decided otherwise first'}",
                EXIT_NOT_RECORDED,
            )
        if asyncio.get_running_loop().time() > deadline:
            raise DecisionRefused(
                f"your decision on approvaldecision {meta['name']} was written, but the "
                f"operator did not record it within {seconds:.0f} s (is it running?): see "
                f"kubectl get approvaldecision {meta['name']} -o yaml",
                EXIT_NOT_RECORDED,
            )
        await asyncio.sleep(0.5)


def refuse(exc: DecisionRefused, as_json: bool) -> NoReturn:
    """A refused command: its one-line error (and JSON with ``--json``), and its exit code."""
    typer.echo(visible(f"error: {exc}"), err=True)  # it may quote the resource or the API
    if as_json:  # ASCII JSON: every other character is an escape
        typer.echo(json.dumps({"error": str(exc), "exitCode": exc.exit_code}))
    raise typer.Exit(exc.exit_code) from None


@contextlib.contextmanager
def operator_extra() -> Iterator[None]:
    """Around the imports of the Kubernetes client, made on use: registering these commands
    needs no extra, running one without ``oma[operator]`` is refused in one line (exit 2)."""
    try:
        with needs_extra("this command", "operator"):
            yield
    except MissingExtraError as exc:
        raise DecisionRefused(str(exc), EXIT_NO_CLUSTER) from exc


@contextlib.asynccontextmanager
async def api_session(kube: Kube) -> AsyncIterator[None]:
    """Work with ``kube`` (``api_errors``), closed at the end."""
    try:
        async with api_errors(kube):
            yield
    finally:
        await kube.aclose()


@contextlib.asynccontextmanager
async def api_errors(kube: Kube) -> AsyncIterator[None]:
    """The API's refusals become ``DecisionRefused`` (exit 1; 2 when the credentials are not
    accepted), an unreachable cluster too (exit 2)."""
    with operator_extra():
        import httpx

        from oma_operator.k8s.errors import KubeError, KubeUnauthorized

    try:
        yield
    except KubeError as exc:
        code = EXIT_NO_CLUSTER if isinstance(exc, KubeUnauthorized) else EXIT_REFUSED
        raise DecisionRefused(str(exc), code) from exc
    except httpx.TransportError as exc:
        raise DecisionRefused(
            f"cannot reach the cluster at {kube.server}: {exc or type(exc).__name__}",
            EXIT_NO_CLUSTER,
        ) from exc


async def connect(target: Target) -> Kube:
    """The API client for ``target``'s kubeconfig and context (``DecisionRefused`` with exit 2
    when there is none, or it cannot be used)."""
    with operator_extra():
        from oma_operator.k8s.client import SA_DIR, Kube

    _require_credentials(target.kubeconfig, SA_DIR)
    try:
        return await Kube.connect(
            kubeconfig=target.kubeconfig, context=target.context, impersonate=target.impersonate
        )
    except (OSError, KeyError, TypeError, ValueError) as exc:
        where = target.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        detail = f"missing entry {exc}" if isinstance(exc, KeyError) else str(exc) or "incomplete"
        context = f" (context {target.context})" if target.context else ""
        raise DecisionRefused(
            f"cannot use kubeconfig {where}{context}: {detail} (set KUBECONFIG, or pass "
            "--kubeconfig and --context)",
            EXIT_NO_CLUSTER,
        ) from exc


def _require_credentials(kubeconfig: str | None, account: Path) -> None:
    """One clear line when there is nothing to connect with (before kr8s says less)."""
    listed = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    paths = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    if not any(p.is_file() for p in paths) and not (account / "token").is_file():
        raise DecisionRefused(
            f"no kubeconfig at {listed} (set KUBECONFIG or use --kubeconfig)", EXIT_NO_CLUSTER
        )


def _ensure_pending(decision: DecisionBody) -> None:
    spec = decision.get("spec") or {}
    current = spec.get("decision", "Pending")
    if current != "Pending":
        by = spec.get("reviewer") or "an unknown reviewer"
        raise DecisionRefused(
            f"approvaldecision {decision['metadata']['name']} is already {current} by {by}"
        )


def _checked_content(decision: DecisionBody, checks: Checks) -> Any | None:
    name, spec = decision["metadata"]["name"], decision.get("spec") or {}
    try:
        content = verified_content(spec)
    except ContentMismatch as exc:
        raise DecisionRefused(f"approvaldecision {name}: {exc}; not deciding") from exc
    if content is None and not checks.summary_only:
        raise DecisionRefused(
            f"approvaldecision {name} holds no exact content (it is too large for the resource, "
            f"or an older operator published it): read it with oma approvals show "
            f"{spec.get('requestId')} --store URL, then decide with --summary-only, or decide "
            "in the store with oma approvals"
        )
    return content


def _show(decision: DecisionBody, content: Any | None) -> None:
    """Everything the decision binds to (approvals.rules.decision_view.view)."""
    for line in view(decision, content):
        typer.echo(line)


def _asking(verdict: Verdict) -> Callable[[DecisionBody, Any | None], None]:
    def show_and_ask(decision: DecisionBody, content: Any | None) -> None:
        _show(decision, content)
        word = "Approve" if verdict == "Approved" else "Reject"
        if not typer.confirm(f"{word} this?", default=False):
            raise DecisionRefused("not decided: you answered no")

    return show_and_ask


def _result(decided: DecisionBody, namespace: str) -> dict[str, Any]:
    spec = decided.get("spec") or {}
    keys = (
        *("teamRun", "requestId", "requestHash", "scope", "decision", "reviewer", "reason"),
        *("resolution", "result"),
    )
    return {
        "name": decided["metadata"]["name"],
        "namespace": namespace,
        **{key: spec.get(key) for key in keys},
        "summary": spec.get("summary", ""),
    }
