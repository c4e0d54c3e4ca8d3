"""A host port that leads into the sandbox's network namespace.

The real node's cluster lives in a network namespace of its own, so its API server is not on
the host's loopback. ``forward_into(pid, port)`` listens on the host's ``127.0.0.1:port`` and
connects each client to ``127.0.0.1:port`` inside the namespace of process ``pid``: a thread
that entered that namespace (``setns`` changes only the calling thread) opens the inner socket,
and two threads copy bytes. Nothing on the host changes but one listening socket of ours.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _enter_netns(pid: int) -> None:
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into the network namespace of {pid}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def _serve(client: socket.socket, pid: int, port: int) -> None:
    try:
        _enter_netns(pid)  # this thread only; it ends with the connection
        inner = socket.create_connection(("127.0.0.1", port), timeout=10)
        inner.settimeout(None)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pump, args=(inner, client), daemon=True)
    back.start()
    _pump(client, inner)
    back.join()
    inner.close()
    client.close()


def forward_into(pid: int, port: int) -> socket.socket:
    """Start forwarding host ``127.0.0.1:port`` into the namespace of ``pid``; closing the
    returned listening socket stops accepting."""
    listener = socket.create_server(("127.0.0.1", port))

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed: done
            while True:
                client, _ = listener.accept()
                threading.Thread(target=_serve, args=(client, pid, port), daemon=True).start()

    threading.Thread(target=accept, name="devcluster-forward", daemon=True).start()
    return listener
