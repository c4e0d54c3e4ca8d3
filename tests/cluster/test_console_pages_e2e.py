"""The console's pages in a real headless Chromium, against the API server: content a model or
a tenant wrote is shown inert and visible, the page runs no inline script (its CSP, as the
browser enforces it), and a new request appears in an open inbox by itself."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Error as PlaywrightError

from devcluster import KubeClient
from oma.approval.requests import create_approval_request
from tests.cluster.approval_kit import (
    DECISIONS,
    grant,
    grant_reviewers,
    published_decision,
    tool_request,
)
from tests.cluster.conftest import ClusterHandle
from tests.cluster.console_kit import browser, console, screenshot
from tests.cluster.operator_kit import TEAMRUNS, crds_installed, create_admitted, teamrun

pytestmark = pytest.mark.cluster
__all__ = ["crds_installed"]

# The outermost elements whose right edge is past the screen's, for a failure's message.
WIDER_THAN_THE_SCREEN = """Array.from(document.querySelectorAll('body *'))
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => !(e.parentElement && e.parentElement.getBoundingClientRect().right >
                 window.innerWidth + 1))
  .map(e => e.tagName + '#' + e.id + '.' + e.className + ': ' + e.outerHTML.slice(0, 300))"""
HOSTILE = "<script>window.__pwned = 1</script>\x1b[2Kpaid\u202eevil"


@pytest.mark.timeout(120)
async def test_hostile_content_is_inert_and_visible_and_inline_script_is_blocked(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None, tmp_path: Path
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    request = tool_request(memo=HOSTILE)
    published = await published_decision(kube, namespace, request)
    name = published["metadata"]["name"]
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with console("--kubeconfig", kubeconfig, "-n", namespace) as site, browser() as chromium:
        page = await chromium.new_page()
        said: list[str] = []
        page.on("console", lambda message: said.append(message.text))
        await page.goto(site.launch)
        await page.click(f"text={namespace}/{name}")
        await page.wait_for_selector("#content")
        path = page.locator("td:first-child", has_text=re.compile(r"^/input/memo$"))
        memo = page.locator("#content tr").filter(has=path)
        shown = await memo.locator("td").nth(1).inner_text()
        assert shown == '"<script>window.__pwned = 1</script>\\x1b[2Kpaid\\u202eevil"'
        assert "escaped" in str(await memo.get_attribute("class"))  # highlighted, with a legend
        assert await page.evaluate("window.__pwned") is None
        scripts = await page.evaluate(
            "Array.from(document.scripts).map(s => s.getAttribute('src'))"
        )
        assert scripts == ["/static/console.js"]
        hashes = [
            await page.inner_text(f"#{which} code") for which in ("request-hash", "recomputed-hash")
        ]
        assert hashes == [request.request_hash, request.request_hash]
        assert "matches" in await page.inner_text("#recomputed-hash")
        await screenshot(page, "decision-hostile", tmp_path)
        # What an injected inline script meets: the browser refuses it and says so.
        with pytest.raises(PlaywrightError, match="Content Security Policy"):
            await page.add_script_tag(content="window.__pwned = 2")
        assert await page.evaluate("window.__pwned") is None
        assert any("Content Security Policy" in text for text in said), said


@pytest.mark.timeout(120)
async def test_a_new_request_appears_in_an_open_inbox_without_a_reload(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None, tmp_path: Path
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with console("--kubeconfig", kubeconfig, "-n", namespace) as site, browser() as chromium:
        context = await chromium.new_context()
        page = await context.new_page()
        await page.goto(site.launch)
        await page.wait_for_selector("#inbox-rows tr.empty")
        # The stream's first push (the list as of now) says the page is live.
        await page.wait_for_function("() => Number(document.body.dataset.inboxUpdates || 0) >= 1")
        published = await published_decision(kube, namespace, tool_request(amount=12))
        started = time.monotonic()
        name = published["metadata"]["name"]
        await page.wait_for_selector(f'#inbox-rows tr[data-request="{namespace}/{name}"]')
        latency = time.monotonic() - started
        print(f"\nnew request shown in the open inbox {latency:.2f} s after it was created")
        navigations = await page.evaluate("performance.getEntriesByType('navigation').length")
        assert navigations == 1  # pushed into the page, not reloaded
        await screenshot(page, "inbox", tmp_path)
        # Signing out in another tab ends this page's stream: it says so and stops updating.
        other = await context.new_page()
        await other.goto(f"{site.url}/inbox")
        await other.click("text=Sign out")
        await page.wait_for_function("() => document.body.dataset.inboxClosed === '1'")
        assert await page.is_visible("#inbox-closed")


@pytest.mark.timeout(60)
async def test_without_the_launch_link_nothing_is_shown_and_the_link_works_once(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    await grant_reviewers(kube, namespace, "alice")
    await published_decision(kube, namespace, tool_request())
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with console("--kubeconfig", kubeconfig, "-n", namespace) as site, browser() as chromium:
        stranger = await chromium.new_page()
        response = await stranger.goto(f"{site.url}/inbox")
        assert response is not None and response.status == 401
        assert "tr" not in await stranger.inner_html("main")
        first = await chromium.new_context()
        page = await first.new_page()
        await page.goto(site.launch)
        assert page.url.endswith("/inbox")
        assert await page.inner_text("#who") == "alice"
        late = await (await chromium.new_context()).new_page()
        again = await late.goto(site.launch)
        assert again is not None and again.status == 401  # spent
        headers = await again.all_headers()
        assert "script-src 'self'" in headers["content-security-policy"]


@pytest.mark.timeout(120)
async def test_a_request_republished_after_the_page_showed_it_is_refused_and_not_decided(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """The resource under the page's name is replaced by one with other content (what the
    operator does when the stored request changed): the decision is refused, none is made."""
    await grant_reviewers(kube, namespace, "alice")
    shown = await published_decision(kube, namespace, tool_request(amount=7))
    name = shown["metadata"]["name"]
    path = f"{DECISIONS.format(ns=namespace)}/{name}"
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with console("--kubeconfig", kubeconfig, "-n", namespace) as site, browser() as chromium:
        page = await chromium.new_page()
        await page.goto(site.launch)
        await page.goto(f"{site.url}/decisions/{namespace}/{name}")
        await page.wait_for_selector("#approve")
        await kube.delete(path)
        other = tool_request(amount=7000)
        await published_decision(kube, namespace, other, resource_name=name)
        await page.click("#approve")
        error = await page.inner_text("#error")
        assert "changed after the page showed it" in error, error
        assert "nothing was decided" in error
        now = await kube.get(path)
        assert (
            now["spec"]["decision"] == "Pending"
            and now["spec"]["requestHash"] == other.request_hash
        )
        # The page now shows the request as it is, to be read again.
        assert other.request_hash in await page.inner_text("#request-hash")


@pytest.mark.timeout(60)
async def test_an_action_without_the_sessions_csrf_token_is_refused_and_decides_nothing(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """What a page on another site could post with the reviewer's cookie (were it sent): no
    CSRF token, or another one, decides nothing."""
    await grant_reviewers(kube, namespace, "alice")
    shown = await published_decision(kube, namespace, tool_request(amount=3))
    name = shown["metadata"]["name"]
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with (
        console("--kubeconfig", kubeconfig, "-n", namespace) as site,
        httpx.AsyncClient(base_url=site.url) as client,
    ):
        signed_in = await client.get(site.launch.removeprefix(site.url), follow_redirects=True)
        assert signed_in.status_code == 200 and "alice" in signed_in.text
        form = {
            "action": "approve",
            "uid": shown["metadata"]["uid"],
            "hash": shown["spec"]["requestHash"],
        }
        for token in (None, "guessed"):
            sent = form | ({"csrf": token} if token else {})
            refused = await client.post(f"/decisions/{namespace}/{name}", data=sent)
            assert refused.status_code == 403, refused.text
            assert "the form is not this session&#39;s" in refused.text
        decision = await kube.get(f"{DECISIONS.format(ns=namespace)}/{name}")
        assert decision["spec"]["decision"] == "Pending"
        async with httpx.AsyncClient(base_url=site.url) as stranger:
            posted = await stranger.post(f"/decisions/{namespace}/{name}", data=form)
            assert posted.status_code == 401  # no session: no page, nothing done
        # A page under another name that resolves to this port (DNS rebinding) gets nothing.
        rebound = await client.get("/inbox", headers={"Host": "attacker.example"})
        assert rebound.status_code == 400
        huge = await client.post(f"/decisions/{namespace}/{name}", content=b"x" * 300_000)
        assert huge.status_code == 413


@pytest.mark.timeout(120)
async def test_a_runs_attempts_are_shown_and_a_keyboard_suspends_it_on_a_narrow_screen(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None, tmp_path: Path
) -> None:
    secret = {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["store"]}
    rules = [
        {"apiGroups": ["oma.dev"], "resources": ["teamruns"], "verbs": ["get", "list", "patch"]},
        # Whoever changes a TeamRun must be able to read the Secrets it hands its pod (the
        # teamrun-references policy, in force when another suite installed it).
        secret | {"verbs": ["get"]},
    ]
    await grant(kube, namespace, "runners", rules, ("alice",))
    await create_admitted(kube, namespace, teamrun("nightly", [{"text": "done"}]))
    evicted = {
        "attempt": 1,
        "outcome": "disruption",
        "reason": "Evicted",
        "message": "node drained \x1b[31m<b>now</b>",
        "pod": "nightly-a1",
        "endedAt": "2026-12-07T10:00:00Z",
    }
    status = {"phase": "Running", "attempt": 2, "taskSummary": "0/1 done", "attempts": [evicted]}
    await kube.patch(f"{TEAMRUNS.format(ns=namespace)}/nightly/status", {"status": status})
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with console("--kubeconfig", kubeconfig, "-n", namespace) as site, browser() as chromium:
        page = await chromium.new_page(viewport={"width": 375, "height": 800})
        await page.goto(site.launch)
        await page.click("text=Runs")
        row = page.locator("#runs tr", has_text=f"{namespace}/nightly")
        assert "Running" in await row.inner_text() and "0/1 done" in await row.inner_text()
        await row.locator("a").click()
        attempts = await page.inner_text("#attempts")
        assert "Evicted" in attempts and "node drained \\x1b[31m<b>now</b>" in attempts
        await page.wait_for_load_state("load")  # the stylesheet too: measured as it is shown
        wide = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        # Nothing wider than the screen: tables scroll inside themselves, words wrap.
        assert wide <= 0, await page.evaluate(WIDER_THAN_THE_SCREEN)
        await screenshot(page, "run", tmp_path)
        await page.focus("button[value=suspend]")
        await page.keyboard.press("Enter")
        await page.wait_for_selector("#done, #error")
        said = await page.inner_text("#done, #error")
        assert said == "suspend requested", said
    body = await kube.get(f"{TEAMRUNS.format(ns=namespace)}/nightly")
    assert body["spec"]["suspend"] is True


@pytest.mark.timeout(120)
async def test_an_uncertain_call_is_settled_as_done_with_its_result(
    cluster: ClusterHandle, kube: KubeClient, namespace: str, crds_installed: None
) -> None:
    """A call a crash left uncertain: the page offers run it again / it was done / it failed,
    and "it was done" records the result the model is told (no operator here: --wait 0)."""
    await grant_reviewers(kube, namespace, "alice")
    uncertain = create_approval_request(
        run_id="pay-1",
        scope="uncertain_tool_call",
        boundary="t-1:c1",
        content={
            "kind": "uncertain_tool_call",
            "toolName": "wire",
            "rawInput": {"amount": 5},
            "input": {"amount": 5},
            "agentName": "clerk",
            "taskId": "t-1",
            "toolCallId": "c1",
            "consequential": True,
            "startedAt": "2026-12-07T10:00:00.000Z",
            "startedAttempt": 1,
        },
    )
    shown = await published_decision(kube, namespace, uncertain)
    name = shown["metadata"]["name"]
    kubeconfig = str(cluster.mint_kubeconfig("alice"))
    async with (
        console("--kubeconfig", kubeconfig, "-n", namespace, "--wait", "0") as site,
        browser() as chromium,
    ):
        page = await chromium.new_page()
        await page.goto(site.launch)
        await page.goto(f"{site.url}/decisions/{namespace}/{name}")
        buttons = await page.locator("#decide button").all_inner_texts()
        assert buttons == ["Run it again", "It was done", "It failed"]
        await page.fill("#result", "wired, ref 77")
        await page.fill("#reason", "bank says it went through")
        await page.click("button[value=done]")
        said = await page.inner_text("#done")
        assert said.startswith("Rejected (Done) by alice: written; not waited"), said
    spec = (await kube.get(f"{DECISIONS.format(ns=namespace)}/{name}"))["spec"]
    assert (spec["decision"], spec["resolution"], spec["result"]) == (
        "Rejected",
        "Done",
        "wired, ref 77",
    )
    assert spec["reviewer"] == "alice" and spec["reason"] == "bank says it went through"
