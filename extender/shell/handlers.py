"""The verbs and pages over HTTP: parse, decide, render. No placement logic lives here.

Data flows one way: request body -> ``wire.parse_*`` -> ``verbs`` (the decisions) ->
``wire.render_*`` -> response. The routes, with each verb's errors mapped to answers, are
``server``'s; the ports' limits ``limits``'; their start and drain ``lifecycle``'s.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from extender.core.answer import HostScores
from extender.core.binding import Binder, BindError
from extender.core.budget import KEPT, BufferLedger, Holding
from extender.core.config import Config
from extender.core.diagnostics import MAX_STATE_NODES, NodeReport, holds_per_node, state_document
from extender.core.gates import GatedPod, GatedPods
from extender.core.leadership import EVERY_REPLICA, LiftTurn
from extender.core.nudge import NudgePacer
from extender.core.podoutcome import CELLS
from extender.core.policy import Mode, Policy
from extender.core.quantity import quote
from extender.core.waiting import Waiting, WaitingPods
from extender.core.writes import PER_MINUTE, WriteBudget
from extender.shell.bodies import BODY_TIMEOUT_SECONDS, read_body
from extender.shell.bodies import done as done_with_body
from extender.shell.filterobserver import OTHER_NAMESPACES, EventRecorder, FilterObserver
from extender.shell.metrics import Metrics
from extender.shell.responses import JSON, answer
from extender.shell.scrape import MetricsPage
from extender.shell.wire import (
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
from extender.state.cluster import ClusterState
from extender.state.gatelift import lift_round
from extender.state.records import PodRecord
from extender.state.reports import ReportState
from extender.state.scorecard import Scorecard
from extender.state.verbs import BindResult, ExtenderVerbs

log = logging.getLogger("extender.shell.server")

# The Error of a window retry: the scheduler's FailedScheduling event and its log carry it.
WINDOW_RETRY_MESSAGE = (
    "hugepage-extender: no node sent fits the pod's hugepages, nodes not sent would: the scheduler retries"
    " with its next nodes (percentageOfNodesToScore below 100)"
)


def unready_message(reason: str) -> str:
    return f"hugepage-extender: {reason}; retry"


NOT_SYNCED = unready_message("cluster state not synced yet")


class Lifter(Protocol):
    """Removes the extender's scheduling gate from a pod (``kube/gatelift.py``)."""

    def lift(self, pod: GatedPod) -> None: ...


class Nudger(Protocol):
    """Makes the scheduler look again at the pods it keeps for the extender (``kube/nudge.py``)."""

    async def nudge(self) -> bool: ...


RELEASE_TICK_SECONDS = 0.25  # how often the timer ends what is past its time and considers a nudge
# How soon pods that came behind the gate, or the rest of a round cut short by its bounds, are lifted: a
# round takes at most ROUND_SECONDS (extender.state.gatelift) of every tick, a fifth of the event loop.
LIFT_TICK_SECONDS = 0.1


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
        gated: GatedPods | None = None,
        lifter: Lifter | None = None,
        lift_turn: Callable[[], LiftTurn] | None = None,
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
        self.observer = FilterObserver(config, metrics, self.waiting, events)
        self.nudger = nudger
        self.gated = gated  # pods behind the extender's scheduling gate, lifted by ``lifter`` (extender.core.gates)
        self.lifter = lifter
        # Whether this replica lifts now (``extender.core.leadership``: the scheduler beside it holds the Lease).
        self.lift_turn = lift_turn or (lambda: EVERY_REPLICA)
        self._turn: LiftTurn | None = None  # as of the last tick: a change is logged and sets the metric
        self._gate_budget = WriteBudget(PER_MINUTE["gate"])
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
        self.lift_clock: Callable[[], float] = time.monotonic  # bounds a round of lifts in time (ROUND_SECONDS)
        self.scorecard = Scorecard(
            settle_seconds=config.shadow_settle_seconds,
            window_seconds=config.shadow_window_seconds,
            clock=time.monotonic,
            row_of=self.observer.namespace_label,
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
        self.observer.observe(pod, result, len(args.node_names))
        if result.window_retry:
            self.observer.window_retry(pod, result, len(args.node_names))
            # Nodes the scheduler did not send would hold the pod: an Error sends it to the backoff
            # queue and its next attempt to the next window (extender/core/window.py).
            return answer(render_filter_error(WINDOW_RETRY_MESSAGE))
        return answer(render_filter(args, result.decision))

    async def prioritize(self, request: web.Request) -> web.StreamResponse:
        args = parse_extender_args(await self._body(request))
        if self.state.unready_reason() is not None:
            # Prioritize errors are ignored by the scheduler; neutral scores say the same.
            return answer(render_priorities(HostScores.neutral(args.node_names)))
        return answer(render_priorities(self.verbs.prioritize_pod(args.pod, args.node_names)))

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
                self._counted(self.scorecard.forget(args.pod_uid))  # not bound there: judged afresh at its next bind
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
        document = state_document(
            ready=self.state.ready,
            namespace=namespace,
            policy=self.config.policy_for(namespace),
            exempt=namespace in self.config.placement.exempt_namespaces,
            placement=self.config.placement,
            holds_by_size={
                size: holds_per_node(book.holds(), nodes, exclude_uid=query.get("excludePod", ""))
                for size, book in self.state.books.items()
            },
            node_reports=self._node_reports(nodes, self.config.policy_for(namespace)),
            gate_lifter=None if self.gated is None else self._gate_lifter(),
        )
        return web.json_response(document, headers={"Cache-Control": "no-store"})

    def _gate_lifter(self) -> tuple[bool, str]:
        turn = self.lift_turn()
        return turn.lifts, turn.why

    async def debug_shadow(self, request: web.Request) -> web.Response:
        """Shadow's scorecard (``extender.state.scorecard``), for ``kubectl hugepages shadow``: per namespace
        the cells over the window and since the start, precision and recall, the last pods of each cell
        (names of pods of shadow namespaces, their nodes, what shadow said and what happened). Beside
        /debug/state: the verbs' port, its TLS and client certificates."""
        self._counted(self.scorecard.tick())
        namespace = request.query.get("namespace", "")
        document = self.scorecard.document(self.observer.namespace_label(namespace) if namespace else None)
        return web.json_response(document, headers={"Cache-Control": "no-store"})

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
        """The node agents' records the extender holds, as the namespace's max age judges them: the bytes
        held outside pods of every size a record states them for."""
        reports: dict[str, NodeReport] = {}
        for name in self.state.reported_nodes() if nodes is None else nodes:
            for book in self.state.books.values():
                view = book.report_view(name, policy.node_report_max_age_seconds)
                if view.report is None or view.report.outside_pages is None:
                    continue
                before = reports.get(name, NodeReport(0, None, stale=False))
                reports[name] = NodeReport(
                    before.outside_pods_bytes + view.report.outside_pages * book.page_size,
                    view.age_seconds,
                    stale=before.stale or view.state is ReportState.STALE,
                )
        return reports

    def waiting_summary(self) -> Waiting:
        """The enforced pods Pending for hugepages: those the filter turned away that the watch still shows
        waiting, and those behind the extender's scheduling gate (never filtered while gated)."""
        now = time.monotonic()
        turned_away = self.waiting.summary(now, lambda uid: self.state.owner_of(uid) is not None)
        if self.gated is None:
            return turned_away
        gated = self.gated.summary(now)
        return Waiting(turned_away.count + gated.count, max(turned_away.oldest_seconds, gated.oldest_seconds))

    def release_due(self, now: float) -> bool:
        """End what is past its time; whether to nudge the scheduler now (``extender.core.nudge``)."""
        expired = self.verbs.expire()
        self.observer.post_shown(self.state.owner_of)  # no-fit Events of pods filtered before the watch showed them
        self._counted(self.scorecard.tick())  # pods Ready for the settle time ran
        if expired.unverified:
            self.metrics.holds_refused.inc(expired.unverified)
        gated = self.gated

        def waiting() -> Iterable[str]:
            uids = self.waiting.uids()
            return itertools.chain(uids, gated.uids()) if gated is not None else uids

        freed = self.state.take_freed(waiting)
        if freed:
            self.pacer.room_freed()  # room some waiting pod could fit in: a nudge requeues every one of them
        self._lift_gates(now, freed)
        if not self.pacer.freed:
            return False  # most ticks: no walk over the waiting pods
        return self.pacer.due(now, waiting=self.waiting.any_of(lambda uid: self.state.owner_of(uid) is not None))

    def _lift_gates(self, now: float, freed: bool) -> None:
        """A round of lifts (``extender.state.gatelift``) when room freed or pods came behind the gate;
        then the Events of the pods found waiting."""
        gated, lifter = self.gated, self.lifter
        if gated is None or lifter is None or not self._lifts_now(gated):
            return
        if (freed or gated.arrived) and len(gated):
            self._lift_round(gated, lifter, now)
        self._tell_waiting(gated)

    def _lift_round(self, gated: GatedPods, lifter: Lifter, now: float) -> None:
        gated.arrived = False
        m = self.metrics

        def may_write() -> bool:
            if self._gate_budget.take(now):
                return True
            m.child(m.api_writes, "gate", "dropped").inc()
            return False

        done = lift_round(gated, self.verbs, now, may_write=may_write, clock=self.lift_clock)
        for pod, _node in done.lifted:
            lifter.lift(pod)
        gated.arrived = done.unfinished
        if self.events is not None:
            gated.no_room(done.no_room)

    def _tell_waiting(self, gated: GatedPods) -> None:
        """One WaitingForRoom Event per pod a round found without room (a gated pod has no FailedScheduling
        event to say why it is Pending), within the Events' budget across every pod (``core/writes.py``):
        those it leaves are told on a later tick; those lifted or gone first are counted dropped."""
        m = self.metrics
        if gated.untold_gone:
            m.child(m.api_writes, "event", "dropped").inc(gated.untold_gone)
            gated.untold_gone = 0
        events = self.events
        if events is None:
            return
        while (pod := gated.next_untold()) is not None and events.waiting_for_room(pod):
            gated.told(pod.uid)

    def _lifts_now(self, gated: GatedPods) -> bool:
        """Whether this replica lifts now; on becoming the lifter it runs a round at once (room freed
        meanwhile was taken by the ticks that did not lift)."""
        turn = self.lift_turn()
        if turn != self._turn:
            log.info("scheduling gates: %s lifting (%s)", "now" if turn.lifts else "not", turn.why)
            self.metrics.gate_lifter.set(1 if turn.lifts else 0)
            if turn.lifts:
                gated.arrived = True
            self._turn = turn
        return turn.lifts

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

    async def lift_timer(self, tick_seconds: float = LIFT_TICK_SECONDS) -> None:
        """Pods that came behind the gate are lifted within a tick, and a round its bounds cut short goes
        on at the next, not at the release timer's: a burst of pods that fit waits for no slower clock.
        A tick with nothing new is one attribute read. Runs until cancelled."""
        while True:
            await asyncio.sleep(tick_seconds)
            if self.gated is not None and self.gated.arrived:
                self._lift_gates(time.monotonic(), freed=False)

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


EXTENDER = web.AppKey("extender", Extender)
BUFFERS = web.AppKey("buffers", BufferLedger)
