"""A decided filter call as the extender tells of it: its metrics, the enforced pods that wait, its log
line and the Event on a pod no node fits. Nothing here changes a decision."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Protocol

from extender.core.answer import FilterDecision, Outcome
from extender.core.config import Config
from extender.core.gates import GatedPod
from extender.core.objects import ObjectMeta, Pod
from extender.core.policy import Mode
from extender.core.quantity import quote
from extender.core.waiting import WaitingPods
from extender.shell.metrics import Metrics
from extender.state.verbs import UNVERIFIED_HOLD_SECONDS, FilterResult

log = logging.getLogger("extender.shell.server")

# The label value of every namespace the config does not name: "_" is in no namespace's name.
OTHER_NAMESPACES = "_other"

# No-fit Events kept for pods the watch has not shown yet (the scheduler may filter a pod before the
# extender's watch delivers it, and a pod no node can ever hold may not be tried again for minutes):
# posted once the watch shows the pod under the same UID, dropped after UNVERIFIED_HOLD_SECONDS, as
# a hold of such a pod is. Made-up pods fill this at most: the oldest goes first.
UNSHOWN_EVENTS = 64
MAX_NAMES_LENGTH = 63 + 253 + 36  # a namespace, a pod name and a UID at most (only these are kept)

Needs = Mapping[str, int]  # the bytes of each size the pod asks, by resource name


class EventRecorder(Protocol):
    def no_fit(self, pod: Pod, decision: FilterDecision, needs: Needs) -> None: ...

    def waiting_for_room(self, pod: GatedPod) -> bool:
        """Whether the gated pod's WaitingForRoom Event is posted (False: not now, the budget is spent)."""
        ...


class FilterObserver:
    """What a filter call's result is told to: the metrics, the waiting pods, the log, the Events."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        waiting: WaitingPods,
        events: EventRecorder | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.waiting = waiting
        self.events = events
        self._clock = clock
        # uid -> (namespace/name, the pod's names, its decision, its needs, when to drop it)
        self._unshown: OrderedDict[str, tuple[str, Pod, FilterDecision, Needs, float]] = OrderedDict()

    def window_retry(self, pod: Pod, result: FilterResult, candidates: int) -> None:
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

    def observe(self, pod: Pod, result: FilterResult, candidates: int) -> None:
        """A filter call's metrics, waiting pods, log line and Event."""
        decision, policy = result.decision, result.policy
        m = self.metrics
        self._count_holds(result)
        self._follow_waiting(pod, result)
        outcome = decision.outcome
        if outcome is Outcome.PASSTHROUGH:
            return
        self._count_by_size(result)
        if decision.widened:
            m.child(m.widenings, policy.widening.value).inc()
        rejected = decision.insufficient + decision.exceeds_pool
        if outcome is Outcome.SHADOW and decision.examined and rejected >= decision.examined:
            m.child(m.shadow_rejected_pods, self.namespace_label(pod.metadata.namespace)).inc()
        if decision.passed or outcome is Outcome.SHADOW or result.window_retry:
            return  # a window retry: its own line (window_retry), no Event (the scheduler's carries the Error)
        self._no_fit(pod, result, candidates)

    def _count_holds(self, result: FilterResult) -> None:
        m = self.metrics
        if result.refused:
            m.holds_refused.inc(result.refused)
        if result.held:
            m.child(m.holds_placed, "filter").inc()

    def _follow_waiting(self, pod: Pod, result: FilterResult) -> None:
        if result.policy.mode is Mode.ENFORCE and result.demand.wants_hugepages:
            if result.decision.passed:
                self.waiting.placed(pod.metadata.uid)
            elif result.shown:  # a UID only a request names is no pod that waits
                self.waiting.unplaced(pod.metadata.uid, time.monotonic())

    def _no_fit(self, pod: Pod, result: FilterResult, candidates: int) -> None:
        """The log line and the Event of a pod no candidate fits."""
        decision, demand = result.decision, result.demand
        log.info(
            "no node fits pod %s/%s: outcome=%s candidates=%d examined=%d insufficient=%d exceeds_pool=%d",
            quote(pod.metadata.namespace),
            quote(pod.metadata.name),
            decision.outcome.value,
            candidates,
            decision.examined,
            decision.insufficient,
            decision.exceeds_pool,
        )
        if self.events is None:
            return
        needs = {name: need for name, need in demand.bytes_by_size.items() if need > 0}
        if result.shown:
            self.events.no_fit(pod, decision, needs)
            return
        # Only on pods the watch shows: a made-up pod must not make the extender post Events into
        # any namespace under its own identity. The watch may show this one a moment later.
        meta = pod.metadata
        if len(meta.uid) + len(meta.namespace) + len(meta.name) > MAX_NAMES_LENGTH:
            return  # no pod the apiserver admits: it will never be shown
        names = Pod(metadata=ObjectMeta(name=meta.name, namespace=meta.namespace, uid=meta.uid))
        until = self._clock() + UNVERIFIED_HOLD_SECONDS
        self._unshown[meta.uid] = (f"{meta.namespace}/{meta.name}", names, decision, needs, until)
        self._unshown.move_to_end(meta.uid)
        while len(self._unshown) > UNSHOWN_EVENTS:
            self._unshown.popitem(last=False)

    def post_shown(self, owner_of: Callable[[str], str | None]) -> None:
        """Post the kept no-fit Events of pods the watch now shows (``owner_of``: the state's
        namespace/name of a waiting pod's UID); drop those past their time. O(kept), run on the timer."""
        if self.events is None or not self._unshown:
            return
        now = self._clock()
        for uid, (owner, pod, decision, needs, until) in list(self._unshown.items()):
            if owner_of(uid) == owner:
                self.events.no_fit(pod, decision, needs)
            elif now < until:
                continue
            del self._unshown[uid]

    def namespace_label(self, namespace: str) -> str:
        """A namespace the config names, the rest as one: a label's values are bounded by the config,
        not by the namespaces requests name (300,000 made-up ones took RSS 267 MiB up)."""
        return namespace if namespace in self.config.placement.namespaces else OTHER_NAMESPACES

    def _count_by_size(self, result: FilterResult) -> None:
        """A decided filter call's outcome, under each page size the pod asks, and its rejected nodes, under
        the size each one's verdict comes from."""
        m, mode, outcome = self.metrics, result.policy.mode.value, result.decision.outcome.value
        for size in result.sizes:
            m.child(m.filter_outcomes, mode, outcome, size).inc()
        for size, insufficient, exceeds_pool in result.rejected_by_size():
            if insufficient:
                m.child(m.fit_rejections, mode, "insufficient", size).inc(insufficient)
            if exceeds_pool:
                m.child(m.fit_rejections, mode, "exceeds_pool", size).inc(exceeds_pool)
