"""Pod and container status in the shape the kubelet reports it."""

from __future__ import annotations

import datetime as dt
import signal
from dataclasses import dataclass, field
from typing import Any

from devcluster.kube import JSON

_STATES = ("waiting", "running", "terminated")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exit_code(returncode: int) -> int:
    """Shell-style exit code: killed by signal N becomes 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_exit(sig: signal.Signals) -> int:
    return 128 + int(sig)


@dataclass
class ContainerState:
    """What the agent knows about one container; ``status()`` renders it."""

    name: str
    image: str
    state: JSON = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: JSON = field(default_factory=dict)
    restart_count: int = 0
    pid: int | None = None

    def waiting(self, reason: str, message: str = "") -> None:
        self.state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}

    def running(self, pid: int) -> None:
        self.pid = pid
        self.state = {"running": {"startedAt": now()}}

    def terminated(self, code: int, message: str, reason: str | None = None) -> None:
        started = self.state.get("running", {}).get("startedAt")
        term: JSON = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "finishedAt": now(),
            "containerID": self.container_id,
        }
        if started:
            term["startedAt"] = started
        if message:
            term["message"] = message
        self.state = {"terminated": term}

    def restarting(self) -> None:
        """Keep the terminated state as ``lastState`` before a restart."""
        self.last_state = self.state
        self.restart_count += 1

    @property
    def container_id(self) -> str:
        return f"devcluster://{self.pid or 0}"

    @property
    def is_running(self) -> bool:
        return "running" in self.state

    @property
    def exit_code(self) -> int | None:
        term = self.state.get("terminated")
        return None if term is None else int(term["exitCode"])

    def status(self) -> JSON:
        # Strategic merge keeps old keys: null out the states that no longer apply.
        state: dict[str, Any] = {k: self.state.get(k) for k in _STATES}
        last: dict[str, Any] = {k: self.last_state.get(k) for k in _STATES}
        return {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "containerID": self.container_id,
            "ready": self.is_running,
            "started": self.is_running,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": last,
        }


@dataclass
class Conditions:
    """Pod conditions with transition times that move only on change."""

    items: dict[str, JSON] = field(default_factory=dict)

    def set(self, kind: str, value: bool, reason: str = "", message: str = "") -> None:
        status = "True" if value else "False"
        old = self.items.get(kind)
        cond: JSON = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": old["lastTransitionTime"]
            if old and old["status"] == status
            else now(),
        }
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        self.items[kind] = cond

    def render(self) -> list[JSON]:
        return list(self.items.values())
