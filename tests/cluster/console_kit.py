"""The console under test: ``oma console`` as its users run it (a child process, each with its
own credentials), and a real headless Chromium (Debian's ``chromium``, driven by Playwright)
to use its pages.

Without a ``chromium`` the browser tests skip on a dev machine and fail where the suites are
required (``OMA_REQUIRE_CLUSTER=1``, as ``hack/test`` sets it; it installs the package).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

SCREENSHOTS = os.environ.get("OMA_CONSOLE_SCREENSHOTS")  # docs/images: refresh the docs' pictures


@dataclass(frozen=True)
class Console:
    url: str  # http://127.0.0.1:PORT
    launch: str  # the one-time link (local mode; "" with --sign-in)


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        why = "no chromium (Debian's package, which hack/test installs) for the browser tests"
        if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return found


@contextlib.asynccontextmanager
async def console(*args: str) -> AsyncIterator[Console]:
    """``oma console ARGS --no-browser`` on a free loopback port, stopped at the end."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "oma",
        "console",
        "--no-browser",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line.startswith("oma console: "), line + (await proc.stdout.read(4000)).decode()
        shown = next(word for word in line.split() if word.startswith("http://"))
        link = shown if "/launch?code=" in shown else ""
        # Its output is read on, so that a full pipe never stops it; printed when it ends.
        rest = asyncio.create_task(proc.stdout.read())
        yield Console(shown.split("/launch")[0], link)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        with contextlib.suppress(NameError, asyncio.CancelledError):
            said = (await rest).decode(errors="replace").splitlines()
            said = [line for line in said if not line.startswith("(a one-time link")]
            if any(line.strip() for line in said):
                print("oma console said:", *said, sep="\n")


@contextlib.asynccontextmanager
async def browser() -> AsyncIterator[Browser]:
    """A headless Chromium."""
    path = chromium_path()
    async with async_playwright() as playwright:
        # --no-sandbox: the tests run as root in a container, where Chromium's sandbox cannot
        # start; the pages are the console's own, on loopback.
        chromium = await playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            await chromium.close()


async def screenshot(page: Page, name: str, tmp: Path) -> None:
    """A picture of the page for the docs (``OMA_CONSOLE_SCREENSHOTS``), else the test's tmp."""
    folder = Path(SCREENSHOTS) if SCREENSHOTS else tmp
    folder.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(folder / f"console-{name}.png"), full_page=True)
