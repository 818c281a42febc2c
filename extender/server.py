"""The HTTP edge: parse, decide, render. No placement logic lives here.

Data flows one way: request body -> ``wire.parse_*`` -> ``decision.*`` ->
``wire.render_*`` -> response. Each verb's handler is wrapped once: known errors
become clear 4xx answers (with an honest log line), anything else a logged
500, and every call is counted and timed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import ssl
import time
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from extender.cluster import ClusterState, ReportState
from extender.config import Config
from extender.decision import FilterDecision, HostScores, Outcome
from extender.diagnostics import MAX_STATE_NODES, NodeReport, holds_per_node, state_report
from extender.errors import ExtenderError
from extender.metrics import Metrics
from extender.objects import Pod
from extender.podrequest import PodDemand
from extender.policy import Mode, Policy
from extender.quantity import QuantityError
from extender.verbs import ExtenderVerbs
from extender.waiting import WaitingPods
from extender.wire import (
    BindingArgs,
    WireError,
    parse_binding_args,
    parse_extender_args,
    render_binding,
    render_error,
    render_filter,
    render_filter_error,
    render_priorities,
)

log = logging.getLogger("extender.server")

JSON = "application/json"
NOT_SYNCED = "hugepage-extender: cluster state not synced yet; retry"


class BindError(ExtenderError):
    """The Binding could not be created; the message goes back to the scheduler."""


class Binder(Protocol):
    async def bind(self, args: BindingArgs) -> None: ...


class EventRecorder(Protocol):
    def no_fit(self, pod: Pod, decision: FilterDecision, need_bytes: int) -> None: ...


class Extender:
    """The verbs over HTTP, with metrics, events and the optional binder."""

    def __init__(
        self,
        config: Config,
        state: ClusterState,
        metrics: Metrics,
        *,
        rng: random.Random | None = None,
        binder: Binder | None = None,
        events: EventRecorder | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.metrics = metrics
        self.binder = binder
        self.events = events
        self.verbs = ExtenderVerbs(config, state, rng=rng)
        self.waiting = WaitingPods()  # enforced pods no node could take, for the Pending alert
        # Series at 0 for the namespaces configured in shadow: increase() in the alert then
        # counts their first would-be rejection too (a series first seen at 1 counts as no increase).
        for namespace, policy in config.placement.namespaces.items():
            if policy.mode is Mode.SHADOW:
                metrics.child(metrics.shadow_rejected_pods, namespace)

    async def filter(self, request: web.Request) -> web.Response:
        args = parse_extender_args(await request.read())
        if not self.state.ready:
            log.warning("filter before the cluster state is synced: answering with an error")
            return web.Response(body=render_filter_error(NOT_SYNCED), content_type=JSON)
        pod = args.pod
        demand = self.state.demand_of(pod)
        decision, held = self.verbs.filter(pod.metadata.uid, pod.metadata.namespace, demand, args.node_names)
        if held:
            self.metrics.child(self.metrics.reservations, "filter").inc()
        policy = self.config.policy_for(pod.metadata.namespace)
        self._observe(pod, policy, decision, demand, len(args.node_names))
        if policy.mode is Mode.ENFORCE and demand.wants_hugepages:
            if decision.passed:
                self.waiting.placed(pod.metadata.uid)
            else:
                self.waiting.unplaced(pod.metadata.uid, time.monotonic())
        return web.Response(body=render_filter(args, decision), content_type=JSON)

    async def prioritize(self, request: web.Request) -> web.Response:
        args = parse_extender_args(await request.read())
        if not self.state.ready:
            # Prioritize errors are ignored by the scheduler; neutral scores say the same.
            return web.Response(body=render_priorities(HostScores.neutral(args.node_names)), content_type=JSON)
        pod = args.pod
        demand = self.state.demand_of(pod)
        scores = self.verbs.prioritize(pod.metadata.uid, pod.metadata.namespace, demand, args.node_names)
        return web.Response(body=render_priorities(scores), content_type=JSON)

    async def bind(self, request: web.Request) -> web.Response:
        args = parse_binding_args(await request.read())
        if self.binder is None:
            message = "bind verb is not enabled (serve --enable-bind)"
            return web.Response(status=404, body=render_error(message), content_type=JSON)
        # Narrowed before the API call: the scheduler filters the next pod while
        # this bind is still under way.
        held = self.verbs.bind_started(args.pod_uid, args.node)
        try:
            await self.binder.bind(args)
        except BindError as error:
            if held:
                self.verbs.bind_failed(args.pod_uid)
            self.metrics.child(self.metrics.binds, "error").inc()
            log.warning("bind %s/%s to %s failed: %s", args.pod_namespace, args.pod_name, args.node, error)
            return web.Response(body=render_binding(str(error)), content_type=JSON)
        if held:
            self.metrics.child(self.metrics.reservations, "bind").inc()
        self.metrics.child(self.metrics.binds, "bound").inc()
        return web.Response(body=render_binding(), content_type=JSON)

    async def debug_state(self, request: web.Request) -> web.Response:
        """What only the running extender knows, for ``explain --extender`` and ``kubectl hugepages``:
        per-node totals of placements in flight, a namespace's effective policy. Figures only: no
        objects, no pod names or UIDs (``excludePod`` is only compared), nothing from a Secret.
        On the verbs' port, so behind the same TLS and client certificates as the verbs."""
        query = request.query
        namespace = query.get("namespace", "")
        nodes = [n for n in query.get("nodes", "").split(",") if n] if "nodes" in query else None
        if nodes is not None and len(nodes) > MAX_STATE_NODES:
            raise web.HTTPBadRequest(text=f"at most {MAX_STATE_NODES} nodes per request")
        self.state.expire_reservations()
        report = state_report(
            resource_name=self.config.resource_name,
            ready=self.state.ready,
            namespace=namespace,
            policy=self.config.policy_for(namespace),
            exempt=namespace in self.config.placement.exempt_namespaces,
            placement=self.config.placement,
            holds=holds_per_node(self.state.reservations(), nodes, exclude_uid=query.get("excludePod", "")),
            node_reports=self._node_reports(nodes, self.config.policy_for(namespace)),
        )
        return web.json_response(report, headers={"Cache-Control": "no-store"})

    def _node_reports(self, nodes: list[str] | None, policy: Policy) -> dict[str, NodeReport]:
        """The node agents' records the extender holds, as the namespace's max age judges them."""
        reports: dict[str, NodeReport] = {}
        for name in self.state.reported_nodes() if nodes is None else nodes:
            view = self.state.report_view(name, policy.node_report_max_age_seconds)
            if view.report is None or view.report.outside_pages is None:
                continue
            reports[name] = NodeReport(
                view.report.outside_pages * self.config.page_size_bytes,
                view.age_seconds,
                stale=view.state is ReportState.STALE,
            )
        return reports

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, request: web.Request) -> web.Response:
        if not self.state.ready:
            raise web.HTTPServiceUnavailable(text="cluster state not synced")
        return web.Response(text="ok")

    async def metrics_page(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _observe(self, pod: Pod, policy: Policy, decision: FilterDecision, demand: PodDemand, candidates: int) -> None:
        outcome = decision.outcome
        mode = policy.mode
        if outcome is Outcome.PASSTHROUGH:
            return
        m = self.metrics
        m.child(m.filter_outcomes, mode.value, outcome.value).inc()
        if decision.insufficient:
            m.child(m.fit_rejections, mode.value, "insufficient").inc(decision.insufficient)
        if decision.exceeds_pool:
            m.child(m.fit_rejections, mode.value, "exceeds_pool").inc(decision.exceeds_pool)
        if decision.widened:
            m.child(m.widenings, policy.widening.value).inc()
        rejected = decision.insufficient + decision.exceeds_pool
        if outcome is Outcome.SHADOW and decision.examined and rejected >= decision.examined:
            m.child(m.shadow_rejected_pods, pod.metadata.namespace).inc()
        if decision.passed or outcome is Outcome.SHADOW:
            return
        log.info(
            "no node fits pod %s/%s: outcome=%s candidates=%d examined=%d insufficient=%d exceeds_pool=%d",
            pod.metadata.namespace,
            pod.metadata.name,
            outcome.value,
            candidates,
            decision.examined,
            decision.insufficient,
            decision.exceeds_pool,
        )
        if self.events is not None:
            self.events.no_fit(pod, decision, demand.hugepage_bytes)


def _verb(verb: str, handler: Handler, metrics: Metrics, max_bytes: int) -> Handler:
    """One verb's handler, with its metrics and the mapping of errors to clear answers.

    A wrapper per route rather than an aiohttp middleware: the scheduler waits on
    every call, and a middleware chain costs each request more (about 15 us here).
    """

    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # also what a cancelled request counts as
        try:
            try:
                response = await handler(request)
            except (WireError, QuantityError) as error:
                log.warning("bad %s request from %s: %s", verb, request.remote, error)
                response = web.Response(status=400, body=render_error(str(error)), content_type=JSON)
            except web.HTTPRequestEntityTooLarge:
                log.warning("bad %s request from %s: body over %d bytes", verb, request.remote, max_bytes)
                message = f"request body over maxRequestBytes ({max_bytes} bytes)"
                response = web.Response(status=413, body=render_error(message), content_type=JSON)
            except (web.HTTPException, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("%s request failed", verb)
                response = web.Response(status=500, body=render_error("internal error"), content_type=JSON)
            status = response.status
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            metrics.child(metrics.requests, verb, str(status)).inc()
            metrics.child(metrics.latency, verb).observe(time.perf_counter() - started)

    return answer


EXTENDER = web.AppKey("extender", Extender)


def create_probe_app(extender: Extender) -> web.Application:
    """Health and metrics only, for a plain-HTTP port beside an mTLS one (kubelet probes
    and Prometheus present no client certificate)."""
    app = web.Application()
    app.router.add_get("/healthz", extender.healthz)
    app.router.add_get("/readyz", extender.readyz)
    app.router.add_get("/metrics", extender.metrics_page)
    return app


async def serve_until_stopped(
    apps: list[tuple[web.Application, str, int, ssl.SSLContext | None]], *, shutdown_timeout: float
) -> None:
    """Serve every (app, host, port, tls) until SIGTERM or SIGINT, then drain gracefully."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    runners = []
    try:
        for app, host, port, tls in apps:
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port, ssl_context=tls).start()
        await stop.wait()
        log.info("stopping: draining requests for up to %.0f s", shutdown_timeout)
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


def create_app(extender: Extender) -> web.Application:
    max_bytes = extender.config.max_request_bytes
    app = web.Application(client_max_size=max_bytes)
    app[EXTENDER] = extender
    extender.metrics.watch_state(extender.state)
    # A lambda, not the bound method: a relist replaces the accounts dict.
    extender.metrics.watch_pools(extender.config.resource_name, lambda: extender.state.accounts.values())  # noqa: PLW0108
    extender.metrics.watch_waiting(lambda: extender.waiting.summary(time.monotonic()))
    for verb, handler in (("filter", extender.filter), ("prioritize", extender.prioritize), ("bind", extender.bind)):
        app.router.add_post(f"/{verb}", _verb(verb, handler, extender.metrics, max_bytes))
    app.router.add_get("/debug/state", extender.debug_state)  # read-only; the verbs' TLS and client certificates
    app.router.add_get("/healthz", extender.healthz)
    app.router.add_get("/readyz", extender.readyz)
    app.router.add_get("/metrics", extender.metrics_page)
    return app
