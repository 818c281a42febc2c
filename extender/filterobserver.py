"""A decided filter call as the extender tells of it: its metrics, the enforced pods that wait, its log
line and the Event on a pod no node fits. Nothing here changes a decision."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Protocol

from extender.answer import FilterDecision, Outcome
from extender.config import Config
from extender.metrics import Metrics
from extender.objects import Pod
from extender.policy import Mode
from extender.quantity import quote
from extender.verbs import FilterResult
from extender.waiting import WaitingPods

log = logging.getLogger("extender.server")

# The label value of every namespace the config does not name: "_" is in no namespace's name.
OTHER_NAMESPACES = "_other"


class EventRecorder(Protocol):
    def no_fit(self, pod: Pod, decision: FilterDecision, needs: Sequence[tuple[str, int]]) -> None: ...


class FilterObserver:
    """What a filter call's result is told to: the metrics, the waiting pods, the log, the Events."""

    def __init__(self, config: Config, metrics: Metrics, waiting: WaitingPods, events: EventRecorder | None) -> None:
        self.config = config
        self.metrics = metrics
        self.waiting = waiting
        self.events = events

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
        if self.events is not None and result.shown:
            # Only on pods the watch shows: a made-up pod must not make the extender post
            # Events into any namespace under its own identity.
            needs = zip(self.config.resource_names, (demand.hugepage_bytes, *demand.more_bytes), strict=False)
            self.events.no_fit(pod, decision, [(name, need) for name, need in needs if need > 0])

    def namespace_label(self, namespace: str) -> str:
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
