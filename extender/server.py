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
import re
import signal
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST

from extender.binding import Binder, BindError
from extender.bodies import BODY_TIMEOUT_SECONDS, ClientGone, NoRoom, read_body
from extender.bodies import done as done_with_body
from extender.budget import KEPT, BufferLedger, Holding
from extender.cluster import ClusterState, PodRecord
from extender.config import Config
from extender.connections import (
    GuardedRunner,
    connections_within_open_files,
    cut_overdue_answers,
    keep_large_buffers_apart,
    raise_open_files_limit,
    trim_after_bursts,
)
from extender.decision import FilterDecision, HostScores, Outcome
from extender.diagnostics import MAX_STATE_NODES, NodeReport, holds_per_node, state_report
from extender.metrics import Metrics
from extender.nudge import NudgePacer
from extender.objects import Pod
from extender.podoutcome import CELLS
from extender.policy import Mode, Policy
from extender.quantity import QuantityError, quote
from extender.reports import ReportState
from extender.scorecard import Scorecard
from extender.scrape import MetricsPage
from extender.verbs import BindResult, ExtenderVerbs, FilterResult
from extender.waiting import WaitingPods
from extender.wire import (
    WireError,
    drop_recent_candidates,
    parse_binding_args,
    parse_extender_args,
    recent_candidate_bytes,
    render_binding,
    render_error,
    render_filter,
    render_filter_error,
    render_priorities,
)

log = logging.getLogger("extender.server")

JSON = "application/json"
# The Error of a window retry: the scheduler's FailedScheduling event and its log carry it.
WINDOW_RETRY_MESSAGE = (
    "hugepage-extender: no node sent fits the pod's hugepages, nodes not sent would: the scheduler retries"
    " with its next nodes (percentageOfNodesToScore below 100)"
)
# The label value of every namespace the config does not name: "_" is in no namespace's name.
OTHER_NAMESPACES = "_other"
CLIENT_GONE = 499  # counted, never sent: the client left before its body arrived (nginx's code)
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
# What is left of the shutdown budget for aiohttp's own close of each port, once begun requests
# had their time: it waits up to twice its timeout per connection (the handler, then its cancel).
CLOSE_SECONDS = 0.1
ANSWER_SLICE_BYTES = 256 * 1024
# asyncio accepts up to its listen backlog of connections in one turn of the event loop (aiohttp's
# default 128): a flood of connections to the probe port, which every pod reaches, made each turn
# take up to two seconds, and every answer (the liveness one too) waited. On the probe port a turn
# accepts at most this many, and the kernel queues as many: past them a client's connection waits
# for its SYN's retry, which a flood's clients and, at worst, a readiness probe do.
PROBE_BACKLOG = 16


def unready_message(reason: str) -> str:
    return f"hugepage-extender: {reason}; retry"


NOT_SYNCED = unready_message("cluster state not synced yet")


class _Answer(web.Response):
    """A JSON answer that lets go of its body once sent: aiohttp keeps a keep-alive
    connection's last response until the connection's next request (a full-Nodes answer
    echoes megabytes)."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body=body, content_type=JSON)

    async def write_eof(self, data: bytes = b"") -> None:
        await super().write_eof(data)
        self.body = None


class _SlicedAnswer(web.StreamResponse):
    """A large JSON answer sent in slices, each after the client took the one before, and let
    go of once sent. In one write the transport kept a copy of whatever the client had not taken
    yet: a client that never reads held twice a 34 MiB answer."""

    def __init__(self, body: bytes) -> None:
        super().__init__(headers={"Content-Type": JSON})
        self.content_length = len(body)
        self._answer = body

    async def write_eof(self, data: bytes = b"") -> None:
        answer, self._answer = self._answer, b""
        try:
            for start in range(0, len(answer), ANSWER_SLICE_BYTES):
                # Copies, not views: a failed write's traceback keeps a slice, and a view its whole answer.
                await self.write(answer[start : start + ANSWER_SLICE_BYTES])  # waits while the client lags
        finally:
            del answer  # the same for this frame
        await super().write_eof(data)


def _answer(body: bytes) -> web.StreamResponse:
    """The answer to a verb: one write when small (most: a few hundred bytes), in slices when large."""
    return _Answer(body) if len(body) <= ANSWER_SLICE_BYTES else _SlicedAnswer(body)


class EventRecorder(Protocol):
    def no_fit(self, pod: Pod, decision: FilterDecision, needs: Sequence[tuple[str, int]]) -> None: ...


class Nudger(Protocol):
    """Makes the scheduler look again at the pods it keeps for the extender (``kube/nudge.py``)."""

    async def nudge(self) -> bool: ...


RELEASE_TICK_SECONDS = 0.25  # how often the timer ends what is past its time and considers a nudge


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
        verify_holds: bool = False,
        nudger: Nudger | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.metrics = metrics
        self.binder = binder
        self.events = events
        self.verbs = ExtenderVerbs(config, state, rng=rng, verify_holds=verify_holds)
        self.body_timeout_seconds = BODY_TIMEOUT_SECONDS
        # Bytes held for clients across both ports: bodies being read and decided, answers not yet
        # taken, the candidate lists the wire keeps (``_count_kept_lists``).
        self.buffers = BufferLedger(config.max_buffered_bytes)
        self._kept_lists: Holding | None = None
        self.draining = False  # SIGTERM: readiness fails first, begun requests are still answered
        self.waiting = WaitingPods()  # enforced pods no node could take, for the Pending alert
        self.nudger = nudger
        self.pacer = NudgePacer()
        self.scrapes = MetricsPage(metrics)
        # Series at 0 for the namespaces in shadow: increase() in the alert then counts their first
        # would-be rejection too (a series first seen at 1 counts as no increase).
        for namespace, policy in config.placement.namespaces.items():
            if policy.mode is Mode.SHADOW:
                metrics.child(metrics.shadow_rejected_pods, namespace)
        if config.placement.defaults.mode is Mode.SHADOW:
            metrics.child(metrics.shadow_rejected_pods, OTHER_NAMESPACES)
        shadow_rows = tuple(n for n, p in config.placement.namespaces.items() if p.mode is Mode.SHADOW)
        self.scorecard = Scorecard(
            settle_seconds=config.shadow_settle_seconds,
            window_seconds=config.shadow_window_seconds,
            clock=time.monotonic,
            row_of=self._namespace_label,
            rows=shadow_rows,
        )
        for row in shadow_rows:  # at 0, as above: the alert's increase() counts the first predicted failure
            for cell in CELLS:
                metrics.child(metrics.shadow_outcomes, row, cell)

    async def _body(self, request: web.Request) -> bytes:
        return await read_body(request, self.buffers, self._count_cut, self.body_timeout_seconds)

    def _count_cut(self, reason: str) -> None:
        self.metrics.child(self.metrics.connections_cut, reason).inc()

    def done_with(self, request: web.Request) -> None:
        """A verb is done: its body is let go of, and what the wire keeps for the next requests is
        counted again."""
        done_with_body(request, self.buffers)
        self._count_kept_lists()

    def _count_kept_lists(self) -> None:
        """The candidate lists the wire keeps for the next requests count against the budget, and
        are the first to go when it needs room: the newest is kept whatever its size, and one of
        100,000 long names held about 100 MiB after its request."""
        size = recent_candidate_bytes()
        kept = self._kept_lists
        if kept is None:
            if not size:
                return
            kept = self._kept_lists = self.buffers.open(KEPT, self._drop_kept_lists, time.monotonic())
        self.buffers.grow(kept, size - kept.size, time.monotonic())

    def _drop_kept_lists(self, reason: str) -> None:
        drop_recent_candidates()
        if self._kept_lists is not None:
            self.buffers.close(self._kept_lists)  # let go of at once: nothing to unwind
            self._kept_lists = None

    async def filter(self, request: web.Request) -> web.StreamResponse:
        args = parse_extender_args(await self._body(request))
        unready = self.state.unready_reason()
        if unready is not None:
            # The scheduling attempt fails and the pod is retried: better than a placement
            # from a picture that misses every pod bound since the watch stopped.
            log.warning("filter while not ready (%s): answering with an error", unready)
            return web.Response(body=render_filter_error(unready_message(unready)), content_type=JSON)
        pod = args.pod
        result = self.verbs.filter_pod(pod, args.node_names)
        self._observe(pod, result, len(args.node_names))
        if result.window_retry:
            self._window_retry(pod, result, len(args.node_names))
            # Nodes the scheduler did not send would hold the pod: an Error sends it to the backoff
            # queue and its next attempt to the next window (extender/window.py).
            return _answer(render_filter_error(WINDOW_RETRY_MESSAGE))
        return _answer(render_filter(args, result.decision))

    async def prioritize(self, request: web.Request) -> web.StreamResponse:
        args = parse_extender_args(await self._body(request))
        if self.state.unready_reason() is not None:
            # Prioritize errors are ignored by the scheduler; neutral scores say the same.
            return _answer(render_priorities(HostScores.neutral(args.node_names)))
        return _answer(render_priorities(self.verbs.prioritize_pod(args.pod, args.node_names)))

    async def bind(self, request: web.Request) -> web.Response:
        args = parse_binding_args(await self._body(request))
        if self.binder is None:
            message = "bind verb is not enabled (serve --enable-bind)"
            return web.Response(status=404, body=render_error(message), content_type=JSON)
        where = f"{quote(args.pod_namespace)}/{quote(args.pod_name)} to {quote(args.node)}"
        # Checked and held in one call before the API call, no await between (a reservation: two binds
        # never both take a node's last room), since the scheduler filters the next pod meanwhile.
        start = self.verbs.bind_start(args.pod_uid, args.pod_namespace, args.pod_name, args.node)
        if start.refusal is None:
            # Shadow's verdict on the chosen node, at bind time: the room the pod will find there.
            prediction = self.verbs.shadow_verdict(args.pod_uid, args.node, "bind")
            if prediction is not None:
                self._counted(
                    self.scorecard.judged(args.pod_uid, args.pod_namespace, args.pod_name, args.node, prediction)
                )
        if start.refusal is not None:
            self.metrics.child(self.metrics.binds, start.result).inc()
            log.warning("bind %s refused: %s", where, start.refusal)
            return web.Response(body=render_binding(start.refusal), content_type=JSON)
        try:
            await self.binder.bind(args)
        except BindError as error:
            # A Binding that may have been made keeps its room held: released here, its room would look
            # free to the next pod while the watch has not yet shown this one bound (an API server
            # killed mid-burst over-committed a pool so). It ends as every hold does: the watch shows
            # the pod bound, its next bind narrows it, or holdTimeoutSeconds.
            if start.held and error.known:
                self.verbs.bind_failed(args.pod_uid)
            if error.known:
                self.scorecard.forget(args.pod_uid)  # not bound there: its next bind is judged afresh
            self.metrics.child(self.metrics.binds, BindResult.ERROR).inc()
            log.warning("bind %s failed: %s", where, error)
            return web.Response(body=render_binding(str(error)), content_type=JSON)
        if start.held:
            self.metrics.child(self.metrics.holds_placed, "bind").inc()
        self.metrics.child(self.metrics.binds, BindResult.BOUND).inc()
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
        self.state.expire_holds()
        report = state_report(
            resource_name=self.config.resource_name,
            ready=self.state.ready,
            namespace=namespace,
            policy=self.config.policy_for(namespace),
            exempt=namespace in self.config.placement.exempt_namespaces,
            placement=self.config.placement,
            holds=holds_per_node(self.state.holds(), nodes, exclude_uid=query.get("excludePod", "")),
            node_reports=self._node_reports(nodes, self.config.policy_for(namespace)),
            more_holds={
                size.resource_name: holds_per_node(size.holds(), nodes, exclude_uid=query.get("excludePod", ""))
                for size in self.state.sizes[1:]
            },
        )
        return web.json_response(report, headers={"Cache-Control": "no-store"})

    async def debug_shadow(self, request: web.Request) -> web.Response:
        """Shadow's scorecard (``extender.scorecard``), for ``kubectl hugepages shadow``: per namespace
        the cells over the window and since the start, precision and recall, the last pods of each cell
        (names of pods of shadow namespaces, their nodes, what shadow said and what happened). Beside
        /debug/state: the verbs' port, its TLS and client certificates."""
        self._counted(self.scorecard.tick())
        namespace = request.query.get("namespace", "")
        report = self.scorecard.report(self._namespace_label(namespace) if namespace else None)
        return web.json_response(report, headers={"Cache-Control": "no-store"})

    def pod_seen(self, record: PodRecord, deleted: bool) -> None:
        """A watch event, before the state applies it: a shadow pod first shown bound that no bind judged
        is judged now (the accounts do not count it yet), and a followed pod's status may decide it."""
        if record.signal is None:
            return
        uid = record.uid
        node = record.usage.node if record.usage is not None else None
        if node and not deleted and not self.scorecard.is_followed(uid) and not self.state.is_bound(uid):
            prediction = self.verbs.shadow_verdict(uid, node, "watch")
            if prediction is not None:
                namespace, _, name = record.pod.partition("/")
                self._counted(self.scorecard.judged(uid, namespace, name, node, prediction))
        self._counted(self.scorecard.seen(uid, record.signal, deleted=deleted))

    def _counted(self, ended: list[tuple[str, str]]) -> None:
        for row, cell in ended:
            self.metrics.child(self.metrics.shadow_outcomes, row, cell).inc()

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

    def release_due(self, now: float) -> bool:
        """End what is past its time; whether to nudge the scheduler now (``extender.nudge``)."""
        refused = self.verbs.refused_holds
        self.verbs.expire()
        self._counted(self.scorecard.tick())  # pods Ready for the settle time ran
        self._count_refused(refused)  # holds dropped as unverified
        if self.state.take_freed(lambda: self.state.least_waiting_need(self.waiting.uids())):
            self.pacer.room_freed()  # room some waiting pod could fit in: a nudge requeues every one of them
        if not self.pacer.freed:
            return False  # most ticks: no walk over the waiting pods
        return self.pacer.due(now, waiting=self.waiting.any_of(lambda uid: self.state.owner_of(uid) is not None))

    def _count_refused(self, before: int) -> None:
        if self.verbs.refused_holds != before:
            self.metrics.holds_refused.inc(self.verbs.refused_holds - before)

    async def release_timer(self, tick_seconds: float = RELEASE_TICK_SECONDS) -> None:
        """Holds and records end on time, not at the next filter call; room freed while an enforced
        pod waits nudges the scheduler (docs/design.md, "Requeue"). Runs until cancelled."""
        while True:
            await asyncio.sleep(tick_seconds)
            now = time.monotonic()
            if not self.release_due(now) or self.nudger is None:
                continue
            if await self.nudger.nudge():
                self.pacer.sent(now)
                self.metrics.child(self.metrics.nudges, "sent").inc()
                self.metrics.child(self.metrics.api_writes, "nudge", "written").inc()
            else:
                self.pacer.failed(now)
                self.metrics.child(self.metrics.nudges, "failed").inc()
                self.metrics.child(self.metrics.api_writes, "nudge", "failed").inc()

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.draining:
            raise web.HTTPServiceUnavailable(text="shutting down")
        unready = self.state.unready_reason()
        if unready is not None:
            raise web.HTTPServiceUnavailable(text=unready)
        return web.Response(text="ok")

    async def metrics_page(self, request: web.Request) -> web.Response:
        body = await self.scrapes.body()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _window_retry(self, pod: Pod, result: FilterResult, candidates: int) -> None:
        """A window retry's metric and log line (the line's repeats are counted: logs.RepeatLimiter)."""
        decision = result.decision
        self.metrics.window_retries.inc()
        log.info(
            "no candidate fits pod %s/%s, nodes not sent would: answering an error so the scheduler"
            " tries its next nodes (retry %d in a row): candidates=%d insufficient=%d exceeds_pool=%d",
            quote(pod.metadata.namespace),
            quote(pod.metadata.name),
            result.window_retry,
            candidates,
            decision.insufficient,
            decision.exceeds_pool,
        )

    def _observe(self, pod: Pod, result: FilterResult, candidates: int) -> None:
        """A filter call's metrics, waiting pods, log line and Event."""
        decision, demand, policy = result.decision, result.demand, result.policy
        m = self.metrics
        if result.refused:
            m.holds_refused.inc(result.refused)
        if result.held:
            m.child(m.holds_placed, "filter").inc()
        if policy.mode is Mode.ENFORCE and demand.wants_hugepages:
            if decision.passed:
                self.waiting.placed(pod.metadata.uid)
            elif result.shown:  # a UID only a request names is no pod that waits
                self.waiting.unplaced(pod.metadata.uid, time.monotonic())
        outcome = decision.outcome
        if outcome is Outcome.PASSTHROUGH:
            return
        self._count_by_size(result)
        if decision.widened:
            m.child(m.widenings, policy.widening.value).inc()
        rejected = decision.insufficient + decision.exceeds_pool
        if outcome is Outcome.SHADOW and decision.examined and rejected >= decision.examined:
            m.child(m.shadow_rejected_pods, self._namespace_label(pod.metadata.namespace)).inc()
        if decision.passed or outcome is Outcome.SHADOW or result.window_retry:
            return  # a window retry: its own line (_window_retry), no Event (the scheduler's carries the Error)
        log.info(
            "no node fits pod %s/%s: outcome=%s candidates=%d examined=%d insufficient=%d exceeds_pool=%d",
            quote(pod.metadata.namespace),
            quote(pod.metadata.name),
            outcome.value,
            candidates,
            decision.examined,
            decision.insufficient,
            decision.exceeds_pool,
        )
        if self.events is not None and result.shown:
            # Only on pods the watch shows: a made-up pod must not make the extender post
            # Events into any namespace under its own identity.
            needs = zip(self.config.resource_names, (demand.hugepage_bytes, *demand.more_bytes), strict=False)
            self.events.no_fit(pod, decision, [(name, need) for name, need in needs if need > 0])

    def _namespace_label(self, namespace: str) -> str:
        """A namespace the config names, the rest as one: a label's values are bounded by the config,
        not by the namespaces requests name (300,000 made-up ones took RSS 267 MiB up)."""
        return namespace if namespace in self.config.placement.namespaces else OTHER_NAMESPACES

    def _count_by_size(self, result: FilterResult) -> None:
        """A decided filter call's outcome, under each page size the pod asks, and its rejected nodes, under
        the size each one's verdict comes from."""
        m, mode, outcome = self.metrics, result.policy.mode.value, result.decision.outcome.value
        names = self.config.resource_names
        for size in result.sizes:
            m.child(m.filter_outcomes, mode, outcome, names[size]).inc()
        for size, insufficient, exceeds_pool in result.rejected_by_size():
            if insufficient:
                m.child(m.fit_rejections, mode, "insufficient", names[size]).inc(insufficient)
            if exceeds_pool:
                m.child(m.fit_rejections, mode, "exceeds_pool", names[size]).inc(exceeds_pool)


class Begun:
    """Verb requests begun and not yet answered (their bodies may still be arriving).

    aiohttp's own shutdown stops reading from every connection at once, which drops a
    request whose body is still arriving: the server waits for these itself first."""

    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    def enter(self) -> None:
        self.count += 1
        self._none.clear()

    def leave(self) -> None:
        self.count -= 1
        if not self.count:
            self._none.set()

    async def none_left(self) -> None:
        await self._none.wait()


BEGUN = web.AppKey("begun", Begun)


def _verb(
    verb: str, handler: Handler, metrics: Metrics, max_bytes: int, begun: Begun, *, done: Callable[[web.Request], None]
) -> Handler:
    """One verb's handler, with its metrics and the mapping of errors to clear answers; ``done`` once
    it has its answer (or error), before the answer is sent.

    A wrapper per route rather than an aiohttp middleware: the scheduler waits on
    every call, and a middleware chain costs each request more (about 15 us here).
    """

    async def answer(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500  # also what a cancelled request counts as
        begun.enter()
        try:
            try:
                response = await handler(request)
            except (WireError, QuantityError) as error:
                log.warning("bad %s request from %s: %s", verb, request.remote, error)
                response = web.Response(status=400, body=render_error(str(error)), content_type=JSON)
            except ClientGone:
                log.info("%s request from %s: the client left before its body arrived", verb, request.remote)
                status = CLIENT_GONE
                return web.Response(status=400, body=render_error("incomplete body"), content_type=JSON)
            except web.HTTPRequestEntityTooLarge:
                log.warning("bad %s request from %s: body over %d bytes", verb, request.remote, max_bytes)
                message = f"request body over maxRequestBytes ({max_bytes} bytes)"
                response = web.Response(status=413, body=render_error(message), content_type=JSON)
            except NoRoom:
                log.warning(
                    "%s request from %s refused: no room for its body now (maxBufferedBytes)", verb, request.remote
                )
                message = "the extender has no room for this request's body now (maxBufferedBytes): retry"
                response = web.Response(status=503, body=render_error(message), content_type=JSON)
            except (web.HTTPException, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("%s request failed", verb)
                response = web.Response(status=500, body=render_error("internal error"), content_type=JSON)
            status = response.status
            if not request.content.at_eof():
                # The body was refused unread (too large, wrongly encoded): say the connection
                # closes, so the client does not send its next request on it.
                response.force_close()
            return response
        except web.HTTPException as error:
            status = error.status
            raise
        finally:
            done(request)
            begun.leave()
            metrics.child(metrics.requests, verb, str(status)).inc()
            metrics.child(metrics.latency, verb).observe(time.perf_counter() - started)

    return answer


EXTENDER = web.AppKey("extender", Extender)
BUFFERS = web.AppKey("buffers", BufferLedger)


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
    """``/healthz`` alone, for the kubelet's liveness probe through ``extender.alive`` on an abstract
    unix socket (``--liveness-socket``): it lives in the pod's network namespace, so no other pod can
    open a connection to it, and a flood of connections to the ports cannot fail the probe that
    restarts the container (issue 29: 30% of fresh-connection probes failed, 5-7 in a row)."""
    app = web.Application()
    app[EXTENDER] = extender
    app[BUFFERS] = extender.buffers
    app.router.add_get("/healthz", extender.healthz)
    return app


LIVENESS_CONNECTIONS = 8  # the kubelet's probe opens one at a time


class _BadHttpIsOneLine(logging.Filter):
    """aiohttp logs a request it cannot parse (a bad request line, an oversized header)
    as an ERROR with a traceback, after answering it 400: a client's mistake, so one
    WARNING line naming it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "bad HTTP request: %s", (" ".join(str(error.message).split())[:200],)
        return True


logging.getLogger("aiohttp.server").addFilter(_BadHttpIsOneLine())


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's errors, each under a message that does not change with the objects it names.

    asyncio formats the objects into the message (``Exception in callback
    BaseSelectorEventLoop._start_serving(<... at 0x7f...>)``, a timer's deadline), so each
    record was unlike the last and none was counted as a repeat (``logs.RepeatLimiter``):
    when file descriptors ran out, every failed accept() scheduled a retry that failed again."""
    message = str(context.get("message") or "unhandled exception in the event loop")
    head = re.sub(r"\(<.*|<.*", "", message.splitlines()[0]).strip() or "event loop error"
    error = context.get("exception")
    logging.getLogger("asyncio").error(
        head.replace("%", "%%"), exc_info=error if isinstance(error, BaseException) else None
    )


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


async def _started(runner: GuardedRunner, site: Callable[..., web.BaseSite], *args: Any, **kwargs: Any) -> web.BaseSite:
    await runner.setup()
    started = site(runner, *args, **kwargs)
    await started.start()
    return started


async def serve_until_stopped(
    apps: list[tuple[web.Application, str, int, ssl.SSLContext | None]],
    *,
    shutdown_timeout: float,
    drain_seconds: float = 0.0,
    on_start: Callable[[], None] | None = None,
    on_stop: Callable[[], None] | None = None,
    keepalive_timeout: float = KEEPALIVE_TIMEOUT_SECONDS,
    background: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = (),
    liveness: tuple[web.Application, str] | None = None,
) -> None:
    """Serve every (app, host, port, tls) until SIGTERM or SIGINT, then drain gracefully.

    On the signal ``on_stop`` runs first (readiness fails), new requests are still
    served for ``drain_seconds`` while the endpoints drop this pod, then the ports
    close and requests already begun (their bodies still arriving, too) are answered
    until ``drain_seconds + shutdown_timeout`` after the signal, the budget the chart
    checks against the grace period: what is still under way then is cut. ``background``
    tasks (certificate reloads) run meanwhile and are cancelled at the end. ``liveness``: an app
    served on the abstract unix socket of that name too (``create_liveness_app``).
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    keep_large_buffers_apart()
    raise_open_files_limit()
    wanted = apps[0][0][EXTENDER].config.max_connections
    loop.set_exception_handler(_loop_error)
    runners: list[GuardedRunner] = []
    sites: list[web.BaseSite] = []
    tasks = [asyncio.create_task(job()) for job in background]
    try:
        for index, (app, host, port, tls) in enumerate(apps):
            # aiohttp's own close waits up to twice this per connection: what is left of the
            # budget once begun requests had theirs.
            # The verbs: aiohttp's default backlog.
            cap, backlog = connections_within_open_files(wanted, PROBE_BACKLOG if index else 128, len(apps))
            runner = app_runner(
                app,
                shutdown_timeout=CLOSE_SECONDS,
                keepalive_timeout=keepalive_timeout,
                max_connections=cap,
                port_name="probe" if index else "verbs",
            )
            runners.append(runner)  # cleaned up whatever happens next
            sites.append(await _started(runner, web.TCPSite, host, port, ssl_context=tls, backlog=backlog))
        if liveness is not None:
            app, name = liveness
            runner = app_runner(
                app, shutdown_timeout=CLOSE_SECONDS, max_connections=LIVENESS_CONNECTIONS, port_name="liveness"
            )
            # Abstract (a leading NUL): no file, and only this network namespace reaches it.
            runners.append(runner)
            sites.append(await _started(runner, web.UnixSite, "\0" + name))
        ledger = apps[0][0][BUFFERS]
        tasks.append(asyncio.create_task(cut_overdue_answers(ledger, ANSWER_TIMEOUT_SECONDS)))
        tasks.append(asyncio.create_task(trim_after_bursts([r.guarded for r in runners], ledger)))
        if on_start is not None:
            on_start()
        await stop.wait()
        deadline = loop.time() + drain_seconds + shutdown_timeout
        if on_stop is not None:
            on_stop()
        log.info(
            "stopping: not ready; serving %.0f s more, then answering begun requests for up to %.0f s",
            drain_seconds,
            shutdown_timeout,
        )
        if drain_seconds > 0:
            await asyncio.sleep(drain_seconds)
        for listening in sites:
            await listening.stop()  # no new connections
        begun = [app[BEGUN] for app, *_ in apps if BEGUN in app]
        # aiohttp's close of each port takes up to twice CLOSE_SECONDS: leave that out of the wait.
        closing = 2 * CLOSE_SECONDS * len(runners) + CLOSE_SECONDS
        try:
            async with asyncio.timeout_at(max(loop.time(), deadline - closing)):
                for requests in begun:
                    await requests.none_left()
        except TimeoutError:
            log.warning(
                "stopping: %d requests still unanswered after %.1f s; closing them",
                sum(b.count for b in begun),
                shutdown_timeout,
            )
    finally:
        for task in tasks:
            task.cancel()
        for runner in reversed(runners):
            await runner.cleanup()


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
        {size.resource_name: (lambda size=size: size.accounts.values()) for size in extender.state.sizes}  # type: ignore[misc]
    )
    extender.metrics.watch_waiting(
        lambda: extender.waiting.summary(time.monotonic(), lambda uid: extender.state.owner_of(uid) is not None)
    )
    for verb, handler in (("filter", extender.filter), ("prioritize", extender.prioritize), ("bind", extender.bind)):
        app.router.add_post(
            f"/{verb}", _verb(verb, handler, extender.metrics, max_bytes, begun, done=extender.done_with)
        )
    app.router.add_get("/debug/state", extender.debug_state)  # read-only; the verbs' TLS and client certificates
    app.router.add_get("/debug/shadow", extender.debug_shadow)  # read-only, as /debug/state
    app.router.add_get("/healthz", extender.healthz)
    app.router.add_get("/readyz", extender.readyz)
    app.router.add_get("/metrics", extender.metrics_page)
    return app
