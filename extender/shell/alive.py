"""The kubelet's liveness probe of the extender: ``python -m extender.shell.alive NAME`` asks ``/healthz``
on the abstract unix socket ``NAME`` (``serve --liveness-socket NAME``) and exits 0 on a 200.

An exec probe through a socket only this pod's network namespace reaches: an HTTP probe needs a new
connection to a port any pod can flood (issue 29: connection churn made 30% of fresh-connection
probes fail, 5-7 in a row, and three failed liveness probes restart the container). Imports nothing
of the extender: a probe every 10 s should cost a few milliseconds, not the package's start-up.
"""

from __future__ import annotations

import socket
import sys

TIMEOUT_SECONDS = 2.0  # within the chart's livenessProbe.timeoutSeconds


def alive(name: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """ "" when ``/healthz`` on the abstract socket ``name`` answers 200 within ``timeout``; else why not."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect("\0" + name)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: liveness\r\nConnection: close\r\n\r\n")
            answer = b""
            while len(answer) < 12 and (chunk := sock.recv(64)):
                answer += chunk
    except OSError as error:
        return f"{name}: {type(error).__name__}: {error}"
    return "" if answer.startswith(b"HTTP/1.1 200") else f"{name}: answered {answer[:40]!r}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m extender.shell.alive SOCKET-NAME", file=sys.stderr)
        return 2
    failure = alive(argv[0])
    if failure:
        print(failure, file=sys.stderr)
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
