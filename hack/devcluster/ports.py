"""Free loopback ports, and a clear error when a chosen one is taken."""

from __future__ import annotations

import socket

from devcluster.errors import PortInUseError

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def check_free(port: int, what: str) -> None:
    """Raise ``PortInUseError`` naming ``what`` if ``port`` cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError as exc:
            raise PortInUseError(
                f"port {port} on {LOOPBACK} (for {what}) is taken: {exc.strerror}; "
                "stop whatever listens there or let devcluster pick free ports"
            ) from exc
