"""``oma-operator``: run the kopf operator for one namespace (or all, with --all-namespaces)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import kopf

from oma.pod_contract import LOG_FORMATS
from oma_operator import handlers, login, masking, runtime  # noqa: F401 (importing registers handlers)
from oma_operator.election.elector import LEADER, Elector, default_identity
from oma_operator.election.liveness import serve_standby_liveness
from oma_operator.election.rules import Timing, TimingError
from oma_operator.install.uninstall import stop_operator
from oma_operator.k8s.client import Kube
from oma_operator.runs.metrics import serve
from oma_operator.runs.retention import FINISHED
from oma_operator.runs.run_queue import RUN_QUEUE
from oma_operator.settings import VERBOSITIES, Settings, SettingsError

T = TypeVar("T")
LOG_LEVELS = ("debug", "info", "warning")
CREATOR_POLICIES = ("installed", "absent")
DEFAULT_METRICS_PORT = 8000  # 8080 is the chart's liveness port
DEFAULT_LEASE = "oma-operator"
TRUE = ("1", "true", "yes", "on")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535)")
    return port


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """An argparse type refusing anything but ``choices``: argparse checks ``choices`` only on
    the command line, so a default taken from the environment would pass unchecked."""

    def check(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not one of {', '.join(choices)} (check the flag, or the "
                "environment variable it defaults to)"
            )
        return text

    return check


def main() -> None:
    parser = argparse.ArgumentParser(prog="oma-operator", description=__doc__)
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", action="append", help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--liveness",
        default=None,
        help="serve a liveness endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    # String defaults go through ``type`` too, so a bad environment value gets a clear error.
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=os.environ.get("OMA_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
        help="serve Prometheus metrics on this port at /metrics; 0 turns them off "
        f"(env OMA_METRICS_PORT, default {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--metrics-address",
        default=os.environ.get("OMA_METRICS_ADDRESS", "127.0.0.1"),
        help="the address the metrics endpoint listens on (env OMA_METRICS_ADDRESS; default "
        "loopback: the chart sets 0.0.0.0 for its pod to be scraped)",
    )
    parser.add_argument(
        "--runner-metrics-port",
        type=_port,
        default=os.environ.get("OMA_RUNNER_METRICS_PORT", "0"),
        help="have runner pods serve their metrics on this port (named container port "
        "'metrics'); 0, the default, leaves them without (env OMA_RUNNER_METRICS_PORT)",
    )
    parser.add_argument(
        "--stop-deployment",
        metavar="NAME",
        help="do not run: scale the operator Deployment NAME in --namespace to 0, wait until its "
        "pods are gone, release the runner pods it tracked, exit (the chart's pre-delete hook)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=90.0,
        help="seconds --stop-deployment waits for the pods (default 90)",
    )
    parser.add_argument(
        "--events",
        choices=VERBOSITIES,
        type=_one_of(VERBOSITIES),
        default=os.environ.get("OMA_EVENTS", "notable"),
        help="notable: post the Events that tell what a TeamRun's status does not (warnings, "
        "resumed attempts, ends other than success, holds, retries); all: also Queued, "
        "AttemptStarted and AttemptSucceeded, one API request each (env OMA_EVENTS, default "
        "notable)",
    )
    parser.add_argument(
        "--creator-policy",
        choices=CREATOR_POLICIES,
        type=_one_of(CREATOR_POLICIES),
        default=os.environ.get("OMA_CREATOR_POLICY", "absent"),
        help="installed: the cluster runs the chart's creator policy, so a TeamRun's "
        "oma.dev/created-by annotation was written by the API server and separation of duties "
        "can exclude its creator; absent (the default): the annotation is not believed and "
        "TeamRuns asking for separationOfDuties end Failed (CreatorUnknown) "
        "(env OMA_CREATOR_POLICY; the chart sets it from approvals.creatorPolicy)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        type=_one_of(LOG_FORMATS),
        default=os.environ.get("OMA_LOG_FORMAT", "plain"),
        help="plain: one line per event, prefixed with [namespace/name] when about an object; "
        "json: one JSON object per line, the object under 'object'. Runner pods log in the same "
        "format unless their TeamRun sets OMA_LOG_FORMAT (env OMA_LOG_FORMAT, default plain)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=_one_of(LOG_LEVELS),
        default=os.environ.get("OMA_LOG_LEVEL", "info"),
        help="debug adds every API request and kopf's own details (env OMA_LOG_LEVEL, "
        "default info)",
    )
    election = parser.add_argument_group(
        "leader election",
        "several operator processes (the chart's operator.replicas) share one Lease: the one "
        "holding it acts, the others stand by and take over when it is lost (docs/operations.md)",
    )
    election.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("OMA_LEADER_ELECTION", "false").lower() in TRUE,
        help="act only while holding the Lease (env OMA_LEADER_ELECTION=true; default off: "
        "one local operator needs none; the chart turns it on)",
    )
    election.add_argument(
        "--leader-election-lease",
        metavar="NAME",
        default=os.environ.get("OMA_LEADER_ELECTION_LEASE", DEFAULT_LEASE),
        help=f"the Lease's name (env OMA_LEADER_ELECTION_LEASE, default {DEFAULT_LEASE}; the "
        "chart uses its operator's name)",
    )
    election.add_argument(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        default=os.environ.get("OMA_LEADER_ELECTION_NAMESPACE"),
        help="the Lease's namespace (env OMA_LEADER_ELECTION_NAMESPACE; default: the one "
        "--namespace, else the service account's or the kubeconfig context's namespace)",
    )
    election.add_argument(
        "--leader-election-identity",
        metavar="ID",
        default=os.environ.get("OMA_LEADER_ELECTION_IDENTITY") or default_identity(),
        help="this process's name in the Lease (env OMA_LEADER_ELECTION_IDENTITY; default the "
        "pod's name from POD_ID, else host name and process id); unique per process",
    )
    defaults = Timing()
    for flag, env, default, what in (
        ("--lease-duration", "OMA_LEASE_DURATION_SECONDS", defaults.lease_seconds,
         "how long after a standby last saw the Lease change it takes it over"),
        ("--lease-renew-deadline", "OMA_LEASE_RENEW_DEADLINE_SECONDS", defaults.renew_deadline,
         "how long the leader keeps acting without renewing before it stops"),
        ("--lease-retry-period", "OMA_LEASE_RETRY_PERIOD_SECONDS", defaults.retry_period,
         "how often the leader renews and a standby looks"),
    ):  # fmt: skip
        election.add_argument(
            flag,
            type=_seconds,
            default=os.environ.get(env, f"{default:g}"),
            help=f"{what} (env {env}, default {default:g} s)",
        )
    args = parser.parse_args()
    configure_logging(args.log_format, args.log_level)
    if args.stop_deployment:  # the uninstall hook: no settings needed, none that could refuse
        if not args.namespace or len(args.namespace) != 1:
            parser.error("--stop-deployment needs exactly one --namespace (the Deployment's)")
        stop = stop_operator(args.namespace[0], args.stop_deployment, args.stop_timeout)
        raise SystemExit(asyncio.run(_connected(stop)))
    try:
        settings = Settings.read(
            os.environ,
            namespaces=() if args.all_namespaces else tuple(args.namespace or ()),
            events=args.events,
            creator_recorded=args.creator_policy == "installed",
            log_format=args.log_format,
            runner_metrics_port=args.runner_metrics_port,
        )
    except SettingsError as exc:
        raise SystemExit(f"oma-operator: {exc}") from None
    timing: Timing | None = None
    if args.leader_election:
        try:
            timing = Timing(args.lease_duration, args.lease_renew_deadline, args.lease_retry_period)
        except TimingError as exc:
            parser.error(str(exc))
    runtime.configure(settings)
    RUN_QUEUE.configure(settings.limits)
    FINISHED.default_ttl = settings.finished_ttl_seconds
    FINISHED.delete_store_records = settings.delete_store_records
    serve(args.metrics_port, args.metrics_address)
    if timing is None:  # the one operator: it acts from the start
        LEADER.gauge.set(1)
        asyncio.run(_connected(_operator(args)))
    else:
        asyncio.run(_connected(_elected(args, timing)))


def _operator(args: argparse.Namespace) -> Coroutine[Any, Any, None]:
    return kopf.operator(
        standalone=True,
        clusterwide=bool(args.all_namespaces),
        namespaces=args.namespace or [],
        liveness_endpoint=args.liveness,
    )


async def _elected(args: argparse.Namespace, timing: Timing) -> None:
    """Stand by until this process holds the Lease, then run kopf while renewing it. A
    standby serves the liveness endpoint and nothing else; a SIGTERM ends it at once. A leader
    stopped by SIGTERM stops kopf (its cleanup runs while the lease is still renewed), then
    releases the lease; a leader that cannot renew exits at once (``Elector.lose``)."""
    kube = await Kube.connect()  # the elector's own connection pool (election.elector)
    namespace = args.leader_election_namespace or (
        args.namespace[0] if args.namespace and len(args.namespace) == 1 else kube.namespace
    )
    elector = Elector(
        kube,
        namespace=namespace,
        name=args.leader_election_lease,
        identity=args.leader_election_identity,
        timing=timing,
    )
    loop = asyncio.get_running_loop()
    acquired = asyncio.create_task(elector.acquire(), name="leader-election")
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, acquired.cancel)
    liveness = await serve_standby_liveness(args.liveness) if args.liveness else None
    try:
        try:
            await acquired
        except asyncio.CancelledError:
            logging.getLogger(__name__).info("standby stopping: it never led")
            return
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)  # kopf installs its own
            if liveness is not None:
                await liveness.cleanup()  # kopf serves it from now on
        keeper = asyncio.create_task(elector.keep(), name="lease-renewal")
        try:
            await _operator(args)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
            await elector.release()
    finally:
        await elector.aclose()


def configure_logging(log_format: str, level: str) -> None:
    """kopf's formatters (they know which object a line is about), at ``level``; HTTP requests
    (httpx logs each one at INFO) only at debug."""
    kopf.configure(
        debug=level == "debug",
        quiet=level == "warning",
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.FULL,
        log_prefix=log_format != "json",
        log_refkey="object",
    )
    logging.getLogger("httpx").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    if level != "debug":  # a line per watch event of every run said nothing (its CPU: 3 %)
        logging.getLogger("kopf.objects").addFilter(_quiet_watch_handlers)
    masking.install_log_masking()  # every record: Secret values the operator read masked


WATCH_HANDLERS = ("runner_pod_changed", "teamrun_event", "decision_event")
_ROUTINE_LINES = frozenset(f"Handler {name!r} succeeded." for name in WATCH_HANDLERS)


def _quiet_watch_handlers(record: logging.LogRecord) -> bool:
    """kopf logs "Handler 'x' succeeded." at INFO after every watch event it hands to a
    handler: several lines per run that tell nothing (what happened to a run is in its status,
    its Events and the operator's own lines). They are kept at ``--log-level debug``."""
    return not (record.levelno == logging.INFO and record.getMessage() in _ROUTINE_LINES)


async def _connected(work: Coroutine[Any, Any, T]) -> T:
    """``work`` with the API client connected first, closed after."""
    try:
        await runtime.connect()
        return await work
    finally:
        work.close()  # never awaited if the connection failed: no "never awaited" warning
        await runtime.close()


if __name__ == "__main__":
    main()
