"""The operator end-to-end tests in ``E2E_CLUSTER=existing`` mode.

Against kind or any other cluster, a user runs the same suite with ``E2E_CLUSTER=existing`` and the
``OMA_E2E_*`` variables (``tests/cluster/e2e_env.py``). Here the "existing" cluster is this
session's devcluster, reached only through its kubeconfig: a child pytest gets nothing but those
variables, so this shows the suite takes the stores, the runner image and the side-effect lists
from them, runs unchanged, and skips what needs the node agent with a reason that says so.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import ClusterHandle
from tests.cluster.e2e_env import REAL_NODE_IMAGE, Endpoint
from tests.cluster.helpers import outcomes

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SUITE = "tests/cluster/test_operator_e2e.py"
PORTABLE = [
    "test_teamrun_succeeds",
    "test_eviction_mid_task_resumes_in_attempt_2[postgres]",
    "test_eviction_in_task_2_reruns_neither_task_1_nor_committed_calls",
    "test_a_crash_is_retried_after_the_backoff_and_the_retry_succeeds",
]
AGENT_ONLY = "test_kubelet_eviction_resumes_from_the_last_checkpoint"


@pytest.mark.timeout(600)
async def test_the_operator_suite_runs_unchanged_against_an_existing_cluster(
    cluster: ClusterHandle, e2e_redis: Endpoint, e2e_postgres: Endpoint, tmp_path: Path
) -> None:
    if cluster.local is None:
        pytest.skip(
            "E2E_CLUSTER=existing: this check drives existing-cluster mode from the local "
            "devcluster; here the whole suite already runs in that mode"
        )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OMA_E2E_", "OMA_LEDGER_", "OMA_TALLY_"))
    }
    env |= {
        "E2E_CLUSTER": "existing",
        "KUBECONFIG": str(cluster.kubeconfig),
        "OMA_E2E_REDIS_URL": e2e_redis.for_pods,
        "OMA_E2E_POSTGRES_DSN": e2e_postgres.for_pods,
        # The node agent runs any image name; a real node only images it has.
        "OMA_E2E_RUNNER_IMAGE": REAL_NODE_IMAGE if cluster.real_node else "localhost/oma:e2e-check",
    }
    junit = tmp_path / "junit.xml"
    selected = [f"{SUITE}::{name}" for name in [*PORTABLE, AGENT_ONLY]]
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}", *selected),
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await child.communicate())[0].decode(errors="replace")
    assert child.returncode == 0, output[-4000:]
    results = outcomes(junit)
    assert {name: results[name][0] for name in PORTABLE} == dict.fromkeys(PORTABLE, "passed")
    outcome, reason = results[AGENT_ONLY]
    assert outcome == "skipped" and "needs the local devcluster" in reason, reason
