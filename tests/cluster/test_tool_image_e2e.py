"""Your own tools in a runner image, as the docs tell a user to ship them: the example package
(``examples/tool-package``, an ``oma.tools`` entry point) built into an image ``FROM`` the
runner image by ``hack/build-image --tools``, and a TeamRun on the real node that uses them."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from devcluster import KubeClient
from oma.checkpoint import Checkpoint
from tests.cluster.conftest import REPO, ClusterHandle
from tests.cluster.e2e_env import Endpoint, SideEffects, teamrun_store
from tests.cluster.operator_kit import (
    TEAMRUNS,
    crds_installed,
    finished,
    operator,
    redis_secret,
    teamrun,
)

__all__ = ["crds_installed", "operator", "redis_secret"]
pytestmark = pytest.mark.cluster
IMAGE = "localhost/oma-example-tools:test"


def _build() -> str:
    """The documented build; its output when it fails."""
    done = subprocess.run(
        [str(REPO / "hack" / "build-image"), "--tools", "examples/tool-package"],
        cwd=REPO,
        env={**os.environ, "OMA_TOOLS_IMAGE": IMAGE},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.timeout(600)
async def test_a_teamrun_uses_tools_from_an_image_built_from_the_runner_image(
    cluster: ClusterHandle,
    kube: KubeClient,
    namespace: str,
    operator: Path,
    e2e_redis: Endpoint,
    redis_secret: str,
    effects: SideEffects,
) -> None:
    if not cluster.real_node:
        pytest.skip("needs the real node: the node agent runs no images")
    built = await asyncio.to_thread(_build)
    assert f"built {IMAGE}" in built
    assert cluster.local is not None
    await cluster.call(cluster.local.running.import_image(IMAGE))
    script: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"id": "s1", "name": "shout", "input": {"text": "hello team"}},
                {"id": "w1", "name": "word_count", "input": {"text": "one two three"}},
            ]
        },
        {"text": "done"},
    ]
    body = teamrun("own-tools", script, effects)
    body["spec"]["team"]["agents"][0]["tools"] = ["shout", "word_count"]
    body["spec"]["runner"]["image"] = IMAGE
    await kube.create(TEAMRUNS.format(ns=namespace), body)
    final = await finished(kube, namespace, "own-tools", 240)
    # The stock image has neither tool: the run starting at all shows the image was used.
    assert final["phase"] == "Succeeded", final
    store = teamrun_store(e2e_redis, body, namespace)
    try:
        snapshot = await Checkpoint(store, run_id=body["spec"]["runId"]).load_latest()
    finally:
        await store.aclose()
    assert snapshot is not None
    saved = snapshot.model_dump_json(by_alias=True)
    assert "HELLO TEAM" in saved and "3 words" in saved  # what the package's tools returned
