"""The limits of each port: aiohttp's on a request's head, the keep-alive and answer timeouts,
the cap on connections and the budget of bytes held for clients (``connections``), in one runner
per port (docs/reliability.md, "Memory under load")."""

from __future__ import annotations

from aiohttp import web

from extender.shell.connections import GuardedRunner
from extender.shell.handlers import BUFFERS, EXTENDER

# Above Go's http.Transport IdleConnTimeout (90 s), so the scheduler, not the server, closes
# an idle connection (no POST lost to a close racing its reuse); also bounds a connection
# that never sends a request (aiohttp starts the timer when the connection is made).
KEEPALIVE_TIMEOUT_SECONDS = 100.0
# An answer not taken in this time is cut: the scheduler gave up on it after its httpTimeout (5 s).
ANSWER_TIMEOUT_SECONDS = 10.0
# A header block is at most 32 lines of 4 KiB (aiohttp's defaults, 128 of 8 KiB, let one connection
# hold about 2 MiB while its header block arrives); the request line keeps 8 KiB (/debug/state's
# node list). The scheduler, the kubelet and Prometheus send a handful of short lines.
MAX_HEADERS = 32
MAX_FIELD_SIZE = 4096
MAX_LINE_SIZE = 8190
# asyncio accepts up to its listen backlog of connections in one turn of the event loop (aiohttp's
# default 128): a flood of connections to the probe port, which every pod reaches, made each turn
# take up to two seconds, and every answer (the liveness one too) waited. On the probe port a turn
# accepts at most this many, and the kernel queues as many: past them a client's connection waits
# for its SYN's retry, which a flood's clients and, at worst, a readiness probe do.
PROBE_BACKLOG = 16
LIVENESS_CONNECTIONS = 8  # the kubelet's probe opens one at a time


def app_runner(
    app: web.Application,
    *,
    shutdown_timeout: float = 10.0,
    keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
    max_connections: int | None = None,
    port_name: str = "verbs",
) -> GuardedRunner:
    """The runner of one port: aiohttp's limits on a request's head, this extender's cap on
    connections, and the process's budget of bytes held for clients (``app[BUFFERS]``)."""
    extender = app[EXTENDER]
    metrics = extender.metrics

    def cut(reason: str) -> None:
        metrics.child(metrics.connections_cut, reason).inc()

    return GuardedRunner(
        app,
        port_name=port_name,
        max_connections=extender.config.max_connections if max_connections is None else max_connections,
        ledger=app[BUFFERS],
        on_cut=cut,
        access_log=None,
        shutdown_timeout=shutdown_timeout,
        keepalive_timeout=keepalive_timeout,
        # No lingering read of a refused body (413, bad encoding): the connection closes.
        lingering_time=0,
        auto_decompress=False,  # read_body decompresses, bounded
        max_line_size=MAX_LINE_SIZE,
        max_field_size=MAX_FIELD_SIZE,
        max_headers=MAX_HEADERS,
    )
