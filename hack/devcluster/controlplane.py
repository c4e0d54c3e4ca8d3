"""etcd + kube-apiserver + kube-controller-manager as child processes on loopback ports."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devcluster.binaries import find_binary
from devcluster.errors import StartupError
from devcluster.kubeconfig import load_kubeconfig, write_kubeconfig
from devcluster.pki import CertificateAuthority, service_account_keys
from devcluster.ports import LOOPBACK, check_free, free_ports
from devcluster.procs import ChildProcess
from devcluster.sandbox import HOST_IP

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class Ports:
    """Loopback ports; 0 means pick a free one."""

    apiserver: int = 0
    etcd_client: int = 0
    etcd_peer: int = 0
    controller_manager: int = 0
    scheduler: int = 0

    def resolve(self) -> Ports:
        wanted = [
            self.apiserver,
            self.etcd_client,
            self.etcd_peer,
            self.controller_manager,
            self.scheduler,
        ]
        names = ["kube-apiserver", "etcd client", "etcd peer", "kube-controller-manager", "sched"]
        for port, name in zip(wanted, names, strict=True):
            if port:
                check_free(port, name)
        free = iter(free_ports(wanted.count(0)))
        return Ports(*[p or next(free) for p in wanted])


@dataclass
class ControlPlaneOptions:
    ports: Ports = field(default_factory=Ports)
    node_monitor_grace: str = "20s"
    startup_timeout: float = 90.0
    extra_apiserver_args: tuple[str, ...] = ()
    # Serve real nodes (devcluster.realnode, inside devcluster.sandbox): the API server also
    # listens on the sandbox's host address (pods reach it there and, through a DNAT rule of
    # the sandbox's own network namespace, at the kubernetes Service IP), may call kubelets,
    # and a kube-scheduler binds pods.
    real_node: bool = False


class ControlPlane:
    """Start with ``await start()``, stop with ``await stop()`` (idempotent)."""

    def __init__(self, workdir: Path | None = None, options: ControlPlaneOptions | None = None):
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="devcluster-"))
        self.options = options or ControlPlaneOptions()
        self.ports = self.options.ports
        self.children: list[ChildProcess] = []
        self.ca: CertificateAuthority | None = None
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.start_seconds = 0.0

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    async def start(self) -> None:
        begin = time.monotonic()
        bins = {n: find_binary(n) for n in ("etcd", "kube-apiserver", "kube-controller-manager")}
        self.ports = self.options.ports.resolve()
        pki = self.workdir / "pki"
        self.ca = ca = CertificateAuthority(pki)
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ip_addresses=(LOOPBACK, SERVICE_IP, *((HOST_IP,) if self.options.real_node else ())),
        )
        sa = service_account_keys(pki)
        self.mint_kubeconfig("admin", ("system:masters",), self.admin_kubeconfig)
        try:
            await self._start_etcd(bins["etcd"])
            await self._start_apiserver(
                bins["kube-apiserver"], serving.cert, serving.key, sa.cert, sa.key
            )
            await self._start_controller_manager(bins["kube-controller-manager"], sa.key)
            if self.options.real_node:
                await self._start_scheduler(find_binary("kube-scheduler"))
                await self._route_service_ip()
        except BaseException:
            await self.stop()
            raise
        self.start_seconds = time.monotonic() - begin

    def mint_kubeconfig(
        self, user: str, groups: tuple[str, ...] = (), path: Path | None = None
    ) -> Path:
        """A kubeconfig for ``user`` (cert CN) in ``groups`` (cert O), signed by the CA."""
        if self.ca is None:
            raise StartupError("the control plane is not started")
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
        pair = self.ca.issue(f"user-{safe}", user, organizations=groups, client=True)
        return write_kubeconfig(
            path or self.workdir / "users" / f"{safe}.kubeconfig",
            server=self.server,
            ca_pem=self.ca.cert_pem,
            user=user,
            cert_pem=pair.cert.read_bytes(),
            key_pem=pair.key.read_bytes(),
        )

    async def stop(self) -> None:
        for child in reversed(self.children):
            await child.stop(grace=5.0)
        self.children.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        child = await ChildProcess.spawn(name, argv, self.workdir / "logs" / f"{name}.log")
        self.children.append(child)
        return child

    async def _start_etcd(self, binary: Path) -> None:
        client = f"http://{LOOPBACK}:{self.ports.etcd_client}"
        peer = f"http://{LOOPBACK}:{self.ports.etcd_peer}"
        child = await self._spawn(
            "etcd",
            [
                str(binary),
                "--name=devcluster",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=devcluster={peer}",
                "--log-level=warn",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=1073741824",
            ],
        )
        await self._wait_ready(child, f"{client}/health", tls=False)

    async def _start_apiserver(
        self, binary: Path, cert: Path, key: Path, sa_pub: Path, sa_key: Path
    ) -> None:
        assert self.ca is not None
        node_args: list[str] = []
        if self.options.real_node:
            kubelet_client = self.ca.issue(
                "apiserver-kubelet-client",
                "kube-apiserver",
                organizations=("system:masters",),
                client=True,
            )
            node_args = [
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
        bind = "0.0.0.0" if self.options.real_node else LOOPBACK
        child = await self._spawn(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers=http://{LOOPBACK}:{self.ports.etcd_client}",
                f"--bind-address={bind}",
                f"--advertise-address={HOST_IP if self.options.real_node else LOOPBACK}",
                f"--secure-port={self.ports.apiserver}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={cert}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={self.ca.pair.cert}",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # No node can reach a loopback endpoint; keep the kubernetes Endpoints unmanaged.
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--profiling=false",
                *node_args,
                *self.options.extra_apiserver_args,
            ],
        )
        await self._wait_ready(child, f"{self.server}/readyz", tls=True)

    async def _start_controller_manager(self, binary: Path, sa_key: Path) -> None:
        assert self.ca is not None
        kubeconfig = str(self.admin_kubeconfig)
        child = await self._spawn(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={self.ports.controller_manager}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--leader-elect=false",
                "--controllers=*",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={self.ca.pair.cert}",
                f"--cluster-signing-cert-file={self.ca.pair.cert}",
                f"--cluster-signing-key-file={self.ca.pair.key}",
                # Each controller acts as its own service account, as on a real cluster: the
                # admission policies see a Job's pods made by the job controller, not an admin.
                "--use-service-account-credentials=true",
                "--node-monitor-period=2s",
                f"--node-monitor-grace-period={self.options.node_monitor_grace}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        )
        await self._wait_ready(
            child,
            f"https://{LOOPBACK}:{self.ports.controller_manager}/healthz",
            tls=True,
            verify=False,
        )
        # Healthy is not yet usable: until the service-account controller has made the default
        # namespace's `default` account, every pod created there is refused ("serviceaccount
        # default not found"). Up means a pod can be applied.
        await self._wait_ready(
            child, f"{self.server}/api/v1/namespaces/default/serviceaccounts/default", tls=True
        )

    async def _start_scheduler(self, binary: Path) -> None:
        kubeconfig = str(self.admin_kubeconfig)
        child = await self._spawn(
            "kube-scheduler",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={self.ports.scheduler}",
                "--leader-elect=false",
            ],
        )
        await self._wait_ready(
            child, f"https://{LOOPBACK}:{self.ports.scheduler}/healthz", tls=True, verify=False
        )

    async def _route_service_ip(self) -> None:
        """No kube-proxy: one DNAT rule (in the sandbox's network namespace) takes pods'
        traffic for the kubernetes Service to the API server."""
        rule = ["-d", f"{SERVICE_IP}/32", "-p", "tcp", "--dport", "443", "-j", "DNAT"]
        rule += ["--to-destination", f"{HOST_IP}:{self.ports.apiserver}"]
        for chain in ("PREROUTING", "OUTPUT"):
            proc = await asyncio.create_subprocess_exec(
                "iptables", "-t", "nat", "-A", chain, *rule, stderr=asyncio.subprocess.PIPE
            )
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise StartupError(f"iptables DNAT for {SERVICE_IP}: {err.decode().strip()}")

    async def _wait_ready(
        self, child: ChildProcess, url: str, *, tls: bool, verify: bool = True
    ) -> None:
        deadline = time.monotonic() + self.options.startup_timeout
        verify_ctx: ssl.SSLContext | bool = False
        if tls:
            cfg = load_kubeconfig(self.admin_kubeconfig)
            verify_ctx = cfg.ssl_context() if verify else _client_only(cfg.cert_pem, cfg.key_pem)
        last = ""
        async with httpx.AsyncClient(verify=verify_ctx, timeout=5.0) as http:
            while time.monotonic() < deadline:
                if child.returncode is not None:
                    raise StartupError(
                        f"{child.name} exited with code {child.returncode} while starting; "
                        f"last log lines ({child.log_path}):\n{child.tail()}"
                    )
                try:
                    resp = await http.get(url)
                    if resp.status_code == 200:
                        return
                    last = f"{resp.status_code} {resp.text[:500]}"
                except httpx.HTTPError as exc:
                    last = repr(exc)
                await asyncio.sleep(0.25)
        raise StartupError(
            f"{child.name} not ready at {url} after {self.options.startup_timeout:.0f}s "
            f"(last answer: {last}); log {child.log_path}:\n{child.tail()}"
        )


def _client_only(cert_pem: bytes | None, key_pem: bytes | None) -> ssl.SSLContext:
    """Present the admin cert but skip server verification (a self-signed health port)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert_pem and key_pem:
        with tempfile.TemporaryDirectory() as tmp:
            c, k = Path(tmp) / "c", Path(tmp) / "k"
            c.write_bytes(cert_pem)
            k.write_bytes(key_pem)
            ctx.load_cert_chain(c, k)
    return ctx
