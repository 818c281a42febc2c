"""Ports, HTTP probes and polling on 127.0.0.1."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from e2e.controlplane.errors import ControlPlaneError

if TYPE_CHECKING:
    from e2e.controlplane.processes import ManagedProcess

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the usual bind-to-0 race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int, host: str = LOOPBACK) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_get(
    port: int, path: str, *, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes] | None:
    """GET ``path`` on 127.0.0.1 (HTTPS when ``context`` is given); None when nothing answers."""
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(LOOPBACK, port, context=context, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def unverified_ssl_context(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    # kube-scheduler serves a self-signed certificate made in memory at start.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


T = TypeVar("T")


def wait_until(what: str, check: Callable[[], T | None], *, timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; that value. AssertionError on timeout.

    For tests waiting on the cluster; the control plane's own start-up waits with ``wait_for_ready``.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def wait_for_ready(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    process: ManagedProcess | None = None,
    interval: float = 0.05,
) -> float:
    """Poll ``check`` until true; the seconds it took. Fails early when ``process`` exits."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if check():
            return time.monotonic() - started
        if process is not None and not process.running:
            raise ControlPlaneError(
                f"{process.name} exited with status {process.returncode} while waiting for {what}\n"
                + process.log_tail()
            )
        if time.monotonic() > deadline:
            tail = process.log_tail() if process is not None else ""
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(interval)
