"""The operator benchmarks' helpers count what they claim (audit log, /proc), and with the local
control plane's binaries present, every operator benchmark's ``--quick`` run finishes and prints
its tables. No assertion here is about time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench import operatorlib

ROOT = Path(__file__).resolve().parents[2]


def _event(user: str, verb: str, resource: str, sub: str = "", code: int = 200) -> dict[str, Any]:
    ref = {"resource": resource, **({"subresource": sub} if sub else {})}
    return {
        "user": {"username": user},
        "verb": verb,
        "objectRef": ref,
        "responseStatus": {"code": code},
    }


def test_audit_counts_split_requests_by_user_verb_and_resource(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [
        _event("oma-operator", "patch", "teamruns", "status"),
        _event("oma-operator", "patch", "teamruns", "status"),
        _event("oma-operator", "create", "pods", code=409),
        _event("admin", "get", "pods"),
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in events) + "{torn line")
    parsed = operatorlib.audit_events(log)
    assert len(parsed) == 4
    counts = operatorlib.audit_counts(parsed, "oma-operator")
    assert counts == {"patch teamruns/status": 2, "create pods": 1}
    codes = operatorlib.status_codes(parsed, "oma-operator")
    assert codes["create pods -> 409"] == 1
    assert operatorlib.audit_events(log, offset=log.stat().st_size) == []


def test_proc_stats_read_this_process() -> None:
    stats = operatorlib.proc_stats(os.getpid())
    assert stats is not None
    assert stats.cpu_seconds >= 0 and stats.peak_rss_mib >= stats.rss_mib > 0
    assert operatorlib.proc_stats(2**22 + 12345) is None


def test_percentiles_and_rows() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert operatorlib.percentile(samples, 0.5) == 51.0
    assert operatorlib.percentile(samples, 0.99) == 99.0
    assert operatorlib.stats_row("x", samples).startswith("| x | 100 | 51.000 s | 99.000 s |")
    assert operatorlib.stats_row("none", []) == "| none | 0 | - | - | - |"


def test_teamrun_bodies_pass_the_operator_model() -> None:
    from oma_operator.resources.models import TeamRunSpec

    body = operatorlib.teamrun(
        "r",
        [{"text": "done"}],
        tools=["echo"],
        env={"A": "1"},
        retry={"maxDisruptions": 40, "startTimeoutSeconds": 3600},
    )
    spec = TeamRunSpec.model_validate(body["spec"])
    assert spec.retry_policy.max_disruptions == 40


def _cluster_binaries() -> bool:
    from devcluster.binaries import find_binary
    from devcluster.errors import MissingBinaryError

    try:
        for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
            find_binary(name)
    except MissingBinaryError:
        return False
    return True


@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("script", "marker"),
    [
        ("operator_reaction.py", "next attempt's pod created"),
        ("operator_reaction.py --real-node", "(baseline: a bare pod created → Running)"),
        # requests, CPU and runs a minute per run, each against issue 47's target
        ("operator_scale.py", "- runs a minute one operator sustains by these figures: **"),
        # the limit holds: the watch never shows more than 5 Running (the report says BROKEN)
        ("operator_scale.py --limit 5", "concurrency limit 5: at most **"),
        # every tarpit held a connection (the operator called it) and the decisions were timed
        ("tenant_isolation.py", "under load: shown in the ApprovalDecision | 3 |"),
    ],
)
def test_quick_runs_print_their_tables(script: str, marker: str) -> None:
    from devcluster.sandbox import real_node_possible

    script, *options = script.split()
    if "--real-node" in options and real_node_possible() is not None:
        if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"CI requires a real node: {real_node_possible()}")
        pytest.skip(str(real_node_possible()))
    if not _cluster_binaries():
        if os.environ.get("OMA_REQUIRE_CLUSTER") == "1":
            pytest.fail("kube binaries not built: run hack/k8s/ensure-binaries (CI requires them)")
        pytest.skip("kube binaries not built (hack/k8s/ensure-binaries)")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", *options],
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert marker in done.stdout
    assert "BROKEN" not in done.stdout, done.stdout[-2000:]
    assert "# machine:" in done.stdout and "# command:" in done.stdout
    # the report is markdown, as docs/performance.md pastes it: a verdict, the requests table
    assert "\n- target: " in done.stdout
    assert "\n| verb resource | per " in done.stdout
    if script == "operator_scale.py":
        for line in ("- operator CPU: **", "- runs a minute measured here: **"):
            assert line in done.stdout, done.stdout[-2000:]
        assert "- requests per run, runs never queued: **" in done.stdout, done.stdout[-2000:]
