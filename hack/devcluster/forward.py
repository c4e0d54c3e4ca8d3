"""Ports between the host's loopback and the sandbox's network namespace, both ways.

The real node's cluster lives in a network namespace of its own, so its API server is not on
the host's loopback, and its pods do not reach servers there. ``forward_into(pid, port)``
listens on the host's ``127.0.0.1:port`` and connects each client to ``127.0.0.1:port`` inside
the namespace of process ``pid``; ``expose_to(pid, address, port)`` listens on ``address:port``
inside it (the sandbox's host address, which pods route to) and connects each client to the
host's ``127.0.0.1:port``. A thread that entered the namespace (``setns`` changes only the
calling thread) opens the socket that lives there, and two threads copy bytes. Nothing on the
host changes but sockets of ours.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
import time

CLONE_NEWNET = 0x40000000
IP_FREEBIND = 15  # <linux/in.h>: bind an address the namespace does not have (yet)
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


def _serve(client: socket.socket, pid: int | None, port: int) -> None:
    """Connect ``client`` to ``127.0.0.1:port``: in the namespace of ``pid``, or (None) in this
    thread's, which is the host's for threads the accepting thread starts."""
    try:
        if pid is not None:
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


def _accept(listener: socket.socket, pid: int | None, port: int, name: str) -> None:
    def accept() -> None:
        with contextlib.suppress(OSError):  # closed: done
            while True:
                client, _ = listener.accept()
                threading.Thread(target=_serve, args=(client, pid, port), daemon=True).start()

    threading.Thread(target=accept, name=name, daemon=True).start()


def forward_into(pid: int, port: int) -> socket.socket:
    """Start forwarding host ``127.0.0.1:port`` into the namespace of ``pid``; closing the
    returned listening socket stops accepting."""
    listener = socket.create_server(("127.0.0.1", port))
    _accept(listener, pid, port, "devcluster-forward")
    return listener


def _netns_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def expose_to(pid: int, address: str, port: int, timeout: float = 10) -> socket.socket:
    """Let the namespace of ``pid`` reach the host's ``127.0.0.1:port`` at ``address:port``;
    closing the returned listening socket stops accepting. ``pid`` may still be entering its
    namespace (``unshare`` right after it started): it is waited for, never bound on the host.
    The address need not exist yet (``IP_FREEBIND``): the sandbox adds it as it sets up."""
    deadline = time.monotonic() + timeout
    while _netns_of(pid) == _netns_of(os.getpid()):
        if time.monotonic() > deadline:
            raise OSError(f"process {pid} did not enter a network namespace of its own")
        time.sleep(0.01)
    made: list[socket.socket | OSError] = []

    def listen() -> None:  # in a thread of its own: only it enters the namespace
        try:
            _enter_netns(pid)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
            sock.bind((address, port))
            sock.listen()
            made.append(sock)
        except OSError as exc:
            made.append(exc)

    thread = threading.Thread(target=listen, name="devcluster-expose-listen")
    thread.start()
    thread.join()
    (result,) = made
    if isinstance(result, OSError):
        raise result
    _accept(result, None, port, "devcluster-expose")  # accepted here: connects on the host
    return result
