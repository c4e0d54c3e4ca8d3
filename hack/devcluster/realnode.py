"""A real node: containerd and a kubelet (with runc and the CNI bridge plugin) in the sandbox.

Each node has its own containerd (its image store cached between runs), its own kubelet port,
node address, pod subnet and bridge, and its own cgroup root. The settings below are the ones
``docs/local-cluster.md`` explains; each answers an error a kubelet gives on this kind of machine
(cgroup v1, no CAP_SYS_RESOURCE, kernel tunables that must not be written VM-wide).

Fault mechanisms are the real ones: ``partition`` stops the kubelet (SIGSTOP: its containers
keep running, the node stops reporting), ``heal`` continues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devcluster import images
from devcluster.binaries import cache_root, find_binary
from devcluster.errors import StartupError
from devcluster.kube import ApiError, KubeClient
from devcluster.kubeconfig import write_kubeconfig
from devcluster.pki import CertificateAuthority
from devcluster.procs import ChildProcess
from devcluster.sandbox import CGROUP_FS, HOST_LINK, HOST_PREFIX, cgroup_controllers

KUBELET_PORT_BASE = 10250
HEALTHZ_PORT_BASE = 10350


@dataclass
class NodeSettings:
    name: str
    index: int
    labels: dict[str, str] = field(default_factory=dict)
    memory_limit_bytes: int = 4 << 30

    @property
    def ip(self) -> str:
        return f"10.200.1.{self.index + 1}"

    @property
    def pod_subnet(self) -> str:
        return f"10.244.{self.index}.0/24"


def _write_cgroup(path: Path, name: str, value: str) -> None:
    target = path / name
    if target.exists():
        target.write_text(value)


def make_cgroup_root(tag: str, memory_limit: int) -> str:
    """The node's cgroup root, made in every v1 hierarchy (the kubelet names one path for all);
    the sandbox removes it when it ends."""
    for controller in cgroup_controllers():
        parent = CGROUP_FS / controller
        path = parent / tag
        path.mkdir(exist_ok=True)
        if controller == "cpuset":  # a new cpuset is empty until told which cpus and mems
            for name in ("cpuset.cpus", "cpuset.mems"):
                _write_cgroup(path, name, (parent / name).read_text().strip())
        if controller == "memory":
            _write_cgroup(path, "memory.limit_in_bytes", str(memory_limit))
    return f"/{tag}"


class RealNode:
    """One containerd + kubelet pair. ``start`` returns once the Node is Ready."""

    def __init__(
        self,
        settings: NodeSettings,
        workdir: Path,
        ca: CertificateAuthority,
        server: str,
        sandbox: str,
    ) -> None:
        self.settings = settings
        self.name = settings.name
        self.dir = workdir / "nodes" / settings.name
        self.ca = ca
        self.server = server
        self.tag = f"{sandbox}-{settings.name}"
        self.cache = cache_root() / "realnode" / f"node-{settings.index}"  # see _claim_cache
        self._cache_lock: int | None = None
        self.children: list[ChildProcess] = []
        self.kubelet: ChildProcess | None = None
        # A unix socket path has at most ~104 bytes: not under a workdir of any length, but in
        # the sandbox's own /run/containerd (a private mount, see sandbox.PRIVATE_PATHS).
        self.socket = Path("/run/containerd") / f"{self.tag}.sock"
        self.kubelet_root = Path("/run/containerd") / f"{self.tag}-kubelet"  # its sockets too

    @property
    def ctr(self) -> tuple[str, ...]:
        return ("ctr", "--address", str(self.socket), "--namespace", "k8s.io")

    async def start(self, client: KubeClient, extra_images: list[images.ImageSource]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._claim_cache()
        await _run("ip", "addr", "add", f"{self.settings.ip}/{HOST_PREFIX}", "dev", HOST_LINK)
        await self._start_containerd()
        image_cache = cache_root() / "realnode" / "archives"
        wanted = [
            await asyncio.to_thread(images.pause_image, image_cache),
            await asyncio.to_thread(images.busybox_image, image_cache),
            *extra_images,
        ]
        stamps = self.cache / "imported.json"
        await asyncio.to_thread(images.ensure_imported, self.ctr, stamps, wanted)
        await self._forget_old_containers()
        await self._start_kubelet()
        await self._wait_ready(client)

    async def stop(self) -> None:
        """Stop the kubelet, then every container (their shims outlive containerd), then
        containerd; the node's address and bridge go too, so a later node can reuse its index."""
        if self.kubelet is not None and self.kubelet.returncode is None:
            self.kubelet.signal(signal.SIGCONT)
            await self.kubelet.stop(grace=5.0)
        if self.socket.exists():
            await self._kill_all_tasks()
        for child in reversed(self.children):
            await child.stop(grace=5.0)
        self.children.clear()
        with contextlib.suppress(StartupError):
            await _run("ip", "addr", "del", f"{self.settings.ip}/{HOST_PREFIX}", "dev", HOST_LINK)
        with contextlib.suppress(StartupError):
            await _run("ip", "link", "del", f"omakbr{self.settings.index}")
        self._release_cache()

    def _claim_cache(self) -> None:
        """A containerd image store of the cache that no other node holds (another cluster's on
        this machine included: containerd locks its database), preferring this node's index."""
        base = cache_root() / "realnode"
        base.mkdir(parents=True, exist_ok=True)
        order = [self.settings.index, *(i for i in range(64) if i != self.settings.index)]
        for slot in order:
            fd = os.open(base / f"node-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.cache, self._cache_lock = base / f"node-{slot}", fd
            return
        raise StartupError(f"every real-node cache slot under {base} is in use")

    def _release_cache(self) -> None:
        if self._cache_lock is not None:
            os.close(self._cache_lock)  # closing the descriptor drops the lock
            self._cache_lock = None

    async def kill_container(self, namespace: str, pod: str, container: str) -> int:
        """SIGKILL the running container ``container`` of a pod, through containerd (what an
        out-of-band crash looks like to the kubelet: exit 137, reason Error). The number of
        tasks killed (0 when none was running)."""
        selector = ",".join(
            f'labels."io.kubernetes.{key}"=={value}'
            for key, value in (
                ("pod.namespace", namespace),
                ("pod.name", pod),
                ("container.name", container),
            )
        )
        ids = (await _run(*self.ctr, "containers", "ls", "-q", selector)).split()
        killed = 0
        for container_id in ids:
            with contextlib.suppress(StartupError):  # not running (an earlier restart)
                await _run(*self.ctr, "tasks", "kill", "--signal", "SIGKILL", container_id)
                killed += 1
        return killed

    async def _kill_all_tasks(self) -> None:
        listed = await _run(*self.ctr, "tasks", "ls", "-q")
        for task in listed.split():
            with contextlib.suppress(StartupError):
                await _run(*self.ctr, "tasks", "kill", "--all", "--signal", "SIGKILL", task)

    def partition(self) -> None:
        """The node goes silent: its kubelet stops, its containers go on."""
        assert self.kubelet is not None
        self.kubelet.signal(signal.SIGSTOP)

    def heal(self) -> None:
        assert self.kubelet is not None
        self.kubelet.signal(signal.SIGCONT)

    def fill_logs(self, namespace: str, pod: str, uid: str, megabytes: int) -> Path:
        """Grow the pod's container logs on this node's disk by ``megabytes`` (the kubelet
        counts them in the pod's ephemeral storage: over a limit, it evicts the pod)."""
        logs = self.dir / "pod-logs" / f"{namespace}_{pod}_{uid}"
        found = sorted(logs.glob("*/*.log"))
        if not found:
            raise StartupError(f"no container log of pod {namespace}/{pod} under {logs}")
        line = b'{"filler": "' + b"x" * 1000 + b'"}\n'
        with found[0].open("ab") as log:
            for _ in range(megabytes * 1024):
                log.write(line)
        return found[0]

    def termination_report(self, pod_uid: str, container: str) -> dict[str, object] | None:
        """What the container wrote to its termination-message file (the kubelet's copy on the
        node), also when the node cannot report it: None if it wrote nothing yet."""
        found = sorted((self.kubelet_root / "pods" / pod_uid / "containers" / container).glob("*"))
        for path in reversed(found):
            text = path.read_text().strip() if path.is_file() else ""
            if text:
                parsed: dict[str, object] = json.loads(text)
                return parsed
        return None

    async def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        log = self.dir.parent.parent / "logs" / f"{self.name}-{name}.log"
        child = await ChildProcess.spawn(name, argv, log)
        self.children.append(child)
        return child

    async def _start_containerd(self) -> None:
        root = self.cache / "containerd"
        # Private to the sandbox: rootfs and netns mounts live there, so no working directory
        # holds a mount point when the cluster's owner removes it.
        state = Path("/run/containerd") / f"{self.tag}-state"
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-omak.conflist").write_text(json.dumps(self._cni_config()))
        config = CONTAINERD_CONFIG.format(
            root=root,
            state=state,
            socket=self.socket,
            pause=images.PAUSE_IMAGE,
            cni_bin=_cni_bin_dir(),
            cni_conf=cni / "net.d",
        )
        path = self.dir / "containerd.toml"
        path.write_text(config)
        for stale in (self.socket, Path(f"{self.socket}.ttrpc")):  # a node of this name before
            stale.unlink(missing_ok=True)
        child = await self._spawn("containerd", ["containerd", "--config", str(path)])
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if child.returncode is not None or time.monotonic() > deadline:
                raise StartupError(f"containerd did not start; {child.log_path}:\n{child.tail()}")
            await asyncio.sleep(0.1)
        await _run(*self.ctr, "version")

    def _cni_config(self) -> dict[str, object]:
        index = self.settings.index
        return {
            "cniVersion": "1.0.0",
            "name": f"omak-{index}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": f"omakbr{index}",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.settings.pod_subnet}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni" / "ipam"),
                    },
                },
                {"type": "loopback"},
            ],
        }

    async def _forget_old_containers(self) -> None:
        """The image cache outlives a run; the pods of an earlier run must not."""
        ids = (await _run(*self.ctr, "containers", "ls", "-q")).split()
        if ids:
            await _run(*self.ctr, "containers", "rm", *ids)

    async def _start_kubelet(self) -> None:
        pair = self.ca.issue(
            f"node-{self.name}",
            f"system:node:{self.name}",
            organizations=("system:nodes",),
            client=True,
        )
        kubeconfig = write_kubeconfig(
            self.dir / "kubelet.kubeconfig",
            server=self.server,
            ca_pem=self.ca.cert_pem,
            user=f"system:node:{self.name}",
            cert_pem=pair.cert.read_bytes(),
            key_pem=pair.key.read_bytes(),
        )
        index = self.settings.index
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": make_cgroup_root(self.tag, self.settings.memory_limit_bytes),
            "protectKernelDefaults": True,  # the sandbox fakes the three it checks
            "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE: a negative score fails in runc
            "address": self.settings.ip,
            "port": KUBELET_PORT_BASE + index,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": HEALTHZ_PORT_BASE + index,
            "readOnlyPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.ca.pair.cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "failSwapOn": False,
            "podLogsDir": str(self.dir / "pod-logs"),
            "imageGCHighThresholdPercent": 100,  # nothing can be pulled back here
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%"},
            "evictionPressureTransitionPeriod": "5s",
            "nodeStatusUpdateFrequency": "2s",
            "nodeLeaseDurationSeconds": 8,
            "serializeImagePulls": False,
            "maxPods": 110,
        }
        path = self.dir / "kubelet-config.yaml"
        path.write_text(yaml.safe_dump(config))
        labels = ",".join(f"{k}={v}" for k, v in self.settings.labels.items())
        argv = [
            str(find_binary("kubelet")),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--cert-dir={self.dir / 'kubelet-pki'}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.settings.ip}",
            "--v=1",
        ]
        if labels:
            argv.append(f"--node-labels={labels}")
        self.kubelet = await self._spawn("kubelet", argv)

    async def _wait_ready(self, client: KubeClient) -> None:
        assert self.kubelet is not None
        timeout = 60.0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubelet.returncode is not None:
                raise StartupError(
                    f"the kubelet of {self.name} exited ({self.kubelet.returncode}); "
                    f"{self.kubelet.log_path}:\n{self.kubelet.tail(30)}"
                )
            try:
                node = await client.get(f"/api/v1/nodes/{self.name}")
            except ApiError:
                node = {}
            for cond in (node.get("status") or {}).get("conditions") or []:
                if cond["type"] == "Ready" and cond["status"] == "True":
                    return
            await asyncio.sleep(0.25)
        raise StartupError(
            f"node {self.name} not Ready after {timeout:.0f}s; "
            f"{self.kubelet.log_path}:\n{self.kubelet.tail(30)}"
        )


def _cni_bin_dir() -> str:
    for candidate in ("/usr/lib/cni", "/opt/cni/bin"):
        if (Path(candidate) / "bridge").is_file():
            return candidate
    raise StartupError("no CNI bridge plugin (Debian package containernetworking-plugins)")


async def _run(*argv: str) -> str:
    if shutil.which(argv[0]) is None:
        raise StartupError(f"{argv[0]} is not installed")
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise StartupError(f"{' '.join(argv)} failed: {err.decode().strip()}")
    return out.decode()


# containerd 1.6 (Debian). restrict_oom_score_adj: no CAP_SYS_RESOURCE here;
# netns_mounts_under_state_dir: pod network namespaces stay in this node's state.
CONTAINERD_CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
"""
