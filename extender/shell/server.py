"""The HTTP server's apps: which route goes to which handler, on the verbs' port, the probe port and
the liveness socket. The handlers are ``handlers``'; each verb's call, with its errors mapped to
answers, ``verbcalls``'; the ports' limits ``limits``'; their start and drain ``lifecycle``'s.
"""

from __future__ import annotations

from aiohttp import web

from extender.shell.handlers import BUFFERS, EXTENDER, Extender
from extender.shell.verbcalls import BEGUN, Begun, verb_call


def create_app(extender: Extender) -> web.Application:
    max_bytes = extender.config.max_request_bytes
    app = web.Application(client_max_size=max_bytes)
    app[EXTENDER] = extender
    app[BUFFERS] = extender.buffers
    app[BEGUN] = begun = Begun()
    extender.metrics.watch_state(extender.state)
    # A lambda, not the bound method: a relist replaces the accounts dict.
    # Read at scrape time through the state: a relist replaces its accounts dict.
    extender.metrics.watch_pools(
        {name: (lambda book=book: book.accounts.values()) for name, book in extender.state.books.items()}  # type: ignore[misc]
    )
    extender.metrics.watch_waiting(extender.waiting_summary)
    for verb, handler in (("filter", extender.filter), ("prioritize", extender.prioritize), ("bind", extender.bind)):
        app.router.add_post(
            f"/{verb}", verb_call(verb, handler, extender.metrics, max_bytes, begun, done=extender.done_with)
        )
    app.router.add_get("/debug/state", extender.debug_state)  # read-only; the verbs' TLS and client certificates
    app.router.add_get("/debug/shadow", extender.debug_shadow)  # read-only, as /debug/state
    app.router.add_get("/healthz", extender.healthz)
    app.router.add_get("/readyz", extender.readyz)
    app.router.add_get("/metrics", extender.metrics_page)
    return app


def create_probe_app(extender: Extender) -> web.Application:
    """Health and metrics only, for a plain-HTTP port beside an mTLS one (kubelet probes
    and Prometheus present no client certificate). No handler reads a body."""
    app = web.Application()
    app[EXTENDER] = extender
    app[BUFFERS] = extender.buffers
    app.router.add_get("/healthz", extender.healthz)
    app.router.add_get("/readyz", extender.readyz)
    app.router.add_get("/metrics", extender.metrics_page)
    return app


def create_liveness_app(extender: Extender) -> web.Application:
    """``/healthz`` alone, for the kubelet's liveness probe through ``extender.shell.alive`` on an abstract
    unix socket (``--liveness-socket``): it lives in the pod's network namespace, so no other pod can
    open a connection to it, and a flood of connections to the ports cannot fail the probe that
    restarts the container (issue 29: 30% of fresh-connection probes failed, 5-7 in a row)."""
    app = web.Application()
    app[EXTENDER] = extender
    app[BUFFERS] = extender.buffers
    app.router.add_get("/healthz", extender.healthz)
    return app
