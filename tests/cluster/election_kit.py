"""What the leader election tests share: the Lease's name and reading its holder, the 15 s
bound issue 46 names, and a pair of operator processes with election on."""

from __future__ import annotations

from pathlib import Path

from devcluster import KubeClient
from oma_operator.election.rules import Timing
from tests.cluster.conftest import ClusterHandle
from tests.cluster.operator_process import OperatorProcess

LEASE = "oma-operator"
TAKE_OVER_LIMIT = 15.0  # issue 46: the standby acts within 15 s of the leader's loss
TIMING = Timing()  # the defaults the chart uses: 10 s lease, 7 s renew deadline, 2 s retry


def leases(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


async def holder(kube: KubeClient, namespace: str) -> str:
    try:
        lease = await kube.get(f"{leases(namespace)}/{LEASE}")
    except Exception:  # not created yet
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def said(log: Path, text: str) -> bool:
    return log.is_file() and text in log.read_text()


class Pair:
    """Two operator processes, ``a`` and ``b``, with leader election, each its own log."""

    def __init__(self, cluster: ClusterHandle, namespace: str, folder: Path) -> None:
        self.logs = {name: folder / f"operator-{name}.log" for name in "ab"}
        self.processes = {
            name: OperatorProcess(
                cluster.kubeconfig,
                namespace,
                self.logs[name],
                "--leader-election",
                "--metrics-port",
                "0",
                OMA_LEADER_ELECTION_IDENTITY=f"op-{name}",
                OMA_CREATOR_POLICY="installed",
            )
            for name in "ab"
        }

    def other(self, name: str) -> str:
        return "b" if name == "a" else "a"

    def leading(self, name: str) -> bool:
        return said(self.logs[name], "leading: took lease")
