"""What the console's pages show (pure): the inbox's rows, a decision page's binding to its
content and the previous request, the runs and their actions, and templates that escape."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from typer.testing import CliRunner

from oma.approval.requests import create_approval_request
from oma.tasks.loading import derived_task_id
from oma_operator.approvals.rules.resources import decision_manifest
from oma_operator.console.access import Identity
from oma_operator.console.command import register
from oma_operator.console.guard import named
from oma_operator.console.rules.content_diff import content_diff
from oma_operator.console.rules.decision_page import decision_page
from oma_operator.console.rules.inbox_rows import inbox_rows, waited
from oma_operator.console.rules.run_rows import actions, run_row, timeline
from oma_operator.console.sessions import MAX_PER_USER, Sessions
from oma_operator.console.state import templates
from oma_operator.k8s.client import Kube
from oma_operator.resources.bodies import DecisionBody, TeamRunBody

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
RUN: TeamRunBody = {
    "metadata": {"name": "pay", "namespace": "team-a", "uid": "u-1"},
    "spec": {"tasks": [{"title": "Record"}, {"title": "Wire"}]},
    "status": {"runId": "pay-1", "attempt": 2, "phase": "AwaitingApproval"},
}


def published(
    amount: int, call: str, created: str, decided: str = "Pending", task_index: int = 1
) -> DecisionBody:
    """A request as the operator publishes it (verified), for the task at ``task_index``."""
    task = derived_task_id("team-a/pay-1", task_index, ["Record", "Wire"][task_index])
    arguments = {"to": "acme", "amount": amount}
    request = create_approval_request(
        run_id="pay-1",
        scope="tool_call",
        boundary=f"{task}:{call}",
        content={
            "kind": "tool_call",
            "toolName": "wire",
            "rawInput": arguments,
            "input": arguments,
            "agentName": "clerk",
            "taskId": task,
            "toolCallId": call,
            "consequential": True,
        },
    )
    body = decision_manifest(RUN, request)
    body["metadata"] |= {"uid": f"uid-{call}", "creationTimestamp": created, "namespace": "team-a"}
    body["spec"]["decision"] = decided
    body["status"] = {"verified": True, "decision": decided}
    return body


def test_the_inbox_lists_verified_waiting_requests_newest_first() -> None:
    old = published(7, "c1", "2026-12-07T11:00:00Z")
    new = published(9, "c2", "2026-12-07T11:58:30Z")
    decided = published(5, "c3", "2026-12-07T11:59:00Z", decided="Approved")
    forged = published(1, "c4", "2026-12-07T11:59:30Z")
    forged["status"] = {"verified": False}
    rows = inbox_rows([old, decided, forged, new], NOW, {("team-a", "pay"): RUN})
    assert [r.name for r in rows] == [new["metadata"]["name"], old["metadata"]["name"]]
    assert (rows[0].waited, rows[1].waited) == ("1m", "1h0m")
    assert (rows[0].subject, rows[0].team_run, rows[0].task) == ("call of wire", "pay", "Wire")
    assert inbox_rows([new], NOW)[0].task == new["spec"]["boundary"].split(":")[0]  # no run
    assert waited("not a time", NOW) == "?" and waited("2026-12-05T10:00:00Z", NOW) == "2d2h"


def test_a_decision_page_binds_to_its_content_and_shows_what_changed_since_the_last() -> None:
    before = published(7, "c1", "2026-12-07T11:00:00Z", decided="Rejected")
    now = published(9, "c2", "2026-12-07T11:30:00Z")
    other_task = published(8, "c3", "2026-12-07T11:10:00Z", task_index=0)
    page = decision_page(now, RUN, [before, now, other_task])
    assert page.refused == "" and page.recomputed == page.request_hash
    assert (page.task, page.agent, page.attempt) == ("Wire", "clerk", 2)
    assert page.previous is not None and page.previous.name == before["metadata"]["name"]
    assert page.previous.decision == "Rejected"
    changed = {(c.path, c.before, c.after) for c in page.previous.changes}
    assert changed == {
        ("/input/amount", "7", "9"),
        ("/rawInput/amount", "7", "9"),
        ("/toolCallId", '"c1"', '"c2"'),
    }
    first = decision_page(before, RUN, [before, now])
    assert first.previous is None  # nothing earlier about that task


def test_a_resource_whose_content_is_not_what_its_hash_binds_is_shown_refused() -> None:
    body = published(7, "c1", "2026-12-07T11:00:00Z")
    body["spec"]["content"] = body["spec"]["content"].replace("7", "70")
    page = decision_page(body, RUN, [])
    assert page.view is None and "must not be decided" in page.refused
    unverified = published(7, "c1", "2026-12-07T11:00:00Z")
    unverified["status"] = {"verified": False, "message": "ignored: not published by the operator"}
    assert decision_page(unverified, RUN, []).refused.startswith("ignored")


def test_runs_show_their_attempts_latest_first_and_only_the_actions_that_apply() -> None:
    failed: TeamRunBody = {
        "metadata": {"name": "pay", "namespace": "team-a"},
        "spec": {},
        "status": {
            "phase": "Failed",
            "attempt": 2,
            "taskSummary": "1/2 done",
            "budgetSummary": "tokens 300/1000",
            "lastCheckpointAt": "2026-12-07T11:55:00Z",
            "attempts": [
                {"attempt": 1, "outcome": "disruption", "reason": "Evicted", "pod": "pay-a1"},
                {"attempt": 2, "outcome": "crash", "reason": "Error", "exitCode": 1},
            ],
        },
    }
    row = run_row(failed, NOW)
    assert (row.tasks, row.spend, row.checkpoint_age) == ("1/2 done", "tokens 300/1000", "5m")
    assert [(a.attempt, a.exit_code) for a in timeline(failed)] == [(2, "1"), (1, "")]
    can = actions(failed)
    assert (can.suspend, can.resume, can.cancel, can.retry) == (False, False, False, True)
    running: TeamRunBody = {"metadata": {"name": "r"}, "spec": {"suspend": True}, "status": {}}
    can = actions(running)
    assert (can.suspend, can.resume, can.cancel, can.retry) == (False, True, True, False)


def test_templates_escape_markup_and_show_hidden_characters() -> None:
    env = templates()
    hostile: dict[str, Any] = {
        "namespace": "ns",
        "name": "n",
        "team_run": "<b>x</b>",
        "task": "t",
        "subject": "tool call c1",
        "summary": "pay\x1b[2K\u202eevil",
        "waiting_since": "",
        "waited": "1m",
        "expires_at": "",
    }
    html = env.get_template("inbox_rows.html").render(rows=[type("Row", (), hostile)()])
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html
    assert "pay\\x1b[2K\\u202eevil" in html and "\x1b" not in html and "\u202e" not in html


def test_a_page_path_names_only_kubernetes_objects() -> None:
    assert named({"namespace": "team-a", "name": "pay-0a1b.c"}) == ("team-a", "pay-0a1b.c")
    for namespace, name in (
        ("team-a", ".."),
        ("..", "x"),
        ("Team", "x"),
        ("a", "b%2Fc"),
        ("", "x"),
    ):
        assert named({"namespace": namespace, "name": name}) is None


def test_a_key_that_is_a_digit_outside_ascii_is_ordered_as_a_name() -> None:
    changes = content_diff({"²": 1, "1": 1}, {"²": 2, "1": 2})
    assert [c.path for c in changes] == ["/1", "/²"]


async def test_sessions_are_bounded_per_user_and_end_with_their_streams() -> None:
    closed: list[Kube] = []

    async def close(kube: Kube) -> None:
        closed.append(kube)

    sessions = Sessions(idle_seconds=3600, close=close)
    alice, bob = Identity("alice", ()), Identity("bob", ())
    kubes = [await Kube.with_token("https://127.0.0.1:1", f"t{i}") for i in range(MAX_PER_USER + 1)]
    made = [await sessions.add(kube, alice, ()) for kube in kubes]
    bobs = await sessions.add(await Kube.with_token("https://127.0.0.1:1", "b"), bob, ())
    assert sessions.get(made[0].id) is None and made[0].ended.is_set()  # alice's oldest went
    assert closed == [kubes[0]]
    assert all(sessions.live(s) for s in [*made[1:], bobs])
    await sessions.drop(bobs.id)
    assert bobs.ended.is_set() and not sessions.live(bobs) and sessions.get(bobs.id) is None
    idle = Sessions(idle_seconds=0, close=close)
    gone = await idle.add(kubes[1], alice, ())
    await idle.sweep()
    assert gone.ended.is_set()
    await sessions.aclose()
    for kube in kubes:
        await kube.aclose()


def test_oma_console_refuses_a_namespace_that_is_not_a_name() -> None:
    cli = typer.Typer()
    register(cli)
    cli.command("version")(lambda: None)  # two commands: typer then names them on the line
    refused = CliRunner().invoke(cli, ["console", "--no-browser", "-n", "../team-b"])
    assert refused.exit_code == 2 and "not a namespace name: '../team-b'" in refused.output
