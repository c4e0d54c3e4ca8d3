"""``hack/demo`` as a user runs it: eviction mid-task, attempt 2 resumes, the approval is applied
with ``kubectl patch`` (the default), the run succeeds, and nothing it started outlives it (also
when interrupted)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from devcluster.binaries import CONTROL_PLANE_BINARIES, find_binary, find_tool
from devcluster.errors import MissingBinaryError

pytestmark = pytest.mark.cluster
DEMO = Path(__file__).resolve().parents[2] / "hack" / "demo"


@pytest.fixture
def demo_env(tmp_path: Path) -> dict[str, str]:
    """The demo's environment; its temp files go under ``tmp_path`` so leftovers are visible."""
    if os.environ.get("E2E_CLUSTER", "") == "existing":
        pytest.skip("hack/demo starts its own local control plane")
    missing = [name for name in ("kubectl", "helm") if find_tool(name) is None]
    try:
        for name in CONTROL_PLANE_BINARIES:
            find_binary(name)
    except MissingBinaryError as exc:
        missing.append(str(exc))
    if missing and os.environ.get("OMA_REQUIRE_CLUSTER") != "1":
        pytest.skip(f"missing: {missing}")
    if shutil.which("redis-server") is None and os.environ.get("OMA_REQUIRE_SERVERS") != "1":
        pytest.skip("redis-server is not installed")
    return {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}


def _leftovers(tmp_path: Path) -> list[str]:
    """Processes whose command line or environment mentions the demo's temp dir."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if str(tmp_path).encode() in seen and b"pytest" not in (proc / "cmdline").read_bytes():
            found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
    return found


def _assert_clean(tmp_path: Path) -> None:
    deadline = time.monotonic() + 10  # children get SIGKILL from the kernel as the demo exits
    while _leftovers(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leftovers(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("oma-demo-")] == []


@pytest.mark.timeout(240)
def test_demo_shows_resume_and_approval(demo_env: dict[str, str], tmp_path: Path) -> None:
    begin = time.monotonic()
    done = subprocess.run(
        [str(DEMO)], capture_output=True, text=True, env=demo_env, timeout=220, check=False
    )
    seconds = time.monotonic() - begin
    output = done.stdout
    assert done.returncode == 0, output[-4000:] + done.stderr[-3000:]
    summary = output[output.index("==> summary") :]
    assert re.search(r"attempt 1 +evicted mid-task: pod invoice-a1 EvictionByEvictionAPI", summary)
    assert re.search(
        r"attempt 2 +resumed: pod invoice-a2, same runId invoice-42, engine attempt 2", summary
    )
    assert re.search(r"attempt 3 +succeeded: pod invoice-a3", summary)
    assert re.search(
        r"approval +invoice-[0-9a-f]{16} Approved by alice with kubectl patch", summary
    )
    assert "Tool call ledger_append by agent clerk" in summary
    assert "recorded in the run's store ledger" in summary
    assert re.search(r"checkpoint +schema v4; run invoice-42 attempt 3; tasks 1/1", summary)
    assert "ledger holds 1 entry: 'pay invoice 42 to ACME Corp' (7)" in summary
    assert re.search(r"final phase +Succeeded", summary)
    assert output.rstrip().endswith("demo OK")
    # The steps show the commands a reader would type.
    assert "$ helm install oma " in output and "$ kubectl -n oma-demo apply -f -" in output
    # By default the reviewer decides with kubectl, as the identity the API server knows.
    approval = output[output.index("==> [7/8] approve the tool call as alice with kubectl patch") :]
    approval = approval[: approval.index("==> [8/8]")]
    assert re.search(
        r"\$ KUBECONFIG=alice.kubeconfig kubectl -n oma-demo get approvaldecision "
        r"(invoice-[0-9a-f]{16}) -o 'jsonpath=\{\.spec\.summary\}'\n"
        r"  Tool call ledger_append by agent clerk .*\n(  .*\n)*  Content hash: [0-9a-f]{64}\n",
        approval,
    ), approval
    whoami = "kubectl auth whoami -o 'jsonpath={.status.userInfo.username}'"
    assert f"$ KUBECONFIG=alice.kubeconfig {whoami}\n  alice\n" in approval
    patched = re.search(
        r"\$ KUBECONFIG=alice.kubeconfig kubectl -n oma-demo patch approvaldecision "
        r"(invoice-[0-9a-f]{16}) --type=merge "
        r"""-p '\{"spec": \{"decision": "Approved", "reviewer": "alice"\}\}'\n"""
        r"  approvaldecision.oma.dev/(invoice-[0-9a-f]{16}) patched\n",
        approval,
    )
    assert patched and patched[1] == patched[2], approval
    assert f"(or: oma approve {patched[1]} -n oma-demo: " in approval
    _assert_clean(tmp_path)
    print(f"hack/demo took {seconds:.1f}s")


@pytest.mark.timeout(120)
def test_ctrl_c_stops_everything(demo_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen([str(DEMO)], stdout=out, stderr=subprocess.STDOUT, env=demo_env)
    try:
        deadline = time.monotonic() + 90
        while "==> [4/8]" not in log.read_text() and time.monotonic() < deadline:
            assert demo.poll() is None, log.read_text()
            time.sleep(0.2)
        assert "==> [4/8]" in log.read_text(), log.read_text()
        assert _leftovers(tmp_path), "expected the demo's servers to be running"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130, log.read_text()
    finally:
        if demo.poll() is None:
            demo.kill()
    assert "demo interrupted" in log.read_text()
    _assert_clean(tmp_path)
