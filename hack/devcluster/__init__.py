"""A local Kubernetes control plane from real binaries plus a process-running node agent.

``ControlPlane`` runs etcd, kube-apiserver and kube-controller-manager as child processes on
free loopback ports. ``NodeAgent`` stands in for the kubelet: it registers a Node and runs
each bound pod's container commands as local processes. ``DevCluster`` runs both in a
background thread for tests and for ``python -m devcluster up``.
"""

from devcluster.cluster import DevCluster
from devcluster.controlplane import ControlPlane
from devcluster.errors import DevClusterError, MissingBinaryError, PortInUseError, StartupError
from devcluster.kube import ApiError, KubeClient
from devcluster.kubeconfig import KubeConfig
from devcluster.nodeagent import NodeAgent

__all__ = [
    "ApiError",
    "ControlPlane",
    "DevCluster",
    "DevClusterError",
    "KubeClient",
    "KubeConfig",
    "MissingBinaryError",
    "NodeAgent",
    "PortInUseError",
    "StartupError",
]
