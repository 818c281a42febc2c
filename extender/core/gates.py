"""Pods that wait behind the extender's scheduling gate until a node they may use has room.

kube-scheduler keeps a pod whose ``spec.schedulingGates`` is not empty out of its queue: the
``SchedulingGates`` PreEnqueue plugin answers UnschedulableAndUnresolvable while any gate is left,
and registers one event only, the pod's gates removed (pinned v1.37.2,
pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go, ``PreEnqueue`` and
``EventsToRegister``). A gated pod thus costs the scheduler nothing while it waits, whatever binds,
node updates or nudges happen, where a pod the extender turned away is sent back through the queue
on each of them (docs/performance.md, "A backlog of waiting pods").

The chart's marker policy gives the pods it routes to the enforce entry the gate ``GATE`` at
creation (a gate can only be added then); the extender lifts it (``extender/shell/kube/gatelift.py``) once
its own filter would admit the pod on some node the pod may use (``ExtenderVerbs.lift``), in the
order the scheduler's queue would take them: priority, then arrival. The lift holds the pod's need on
that node until the pod is filtered (its own hold released then) or the hold times out, so one slot
freed lifts one pod, not the whole backlog. Without the extender no gate is lifted: enforce stays
closed. The filter is still the decision: a lifted pod is placed only where the filter admits it.

Memory: one entry per gated pod the watch shows (its names, the gate's index, priority, need and
reach, and whether its WaitingForRoom Event was posted); time is passed in, never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import msgspec

from extender.core.objects import Pod
from extender.core.podrequest import PodDemand
from extender.core.reach import PodReach, pod_reach
from extender.core.waiting import Waiting

GATE = "hugepage-extender.io/room"
# A lift sent and not yet shown by the watch is not sent again before this (the API write failed,
# or the watch is behind): one write per pod while the first may still land.
RESEND_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class GatedPod:
    """A pod behind the gate, as the lift needs it."""

    uid: str
    namespace: str
    name: str
    gate_index: int  # where ``GATE`` sits in spec.schedulingGates: the lift's patch tests and removes that entry
    priority: int
    created: str  # metadata.creationTimestamp, RFC 3339 in UTC: ordered as text
    demand: PodDemand
    reach: PodReach
    kind: bytes  # pods of one namespace, need and reach fit the same nodes: one verdict per round serves them all

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.name}"


def gate_index(pod: Pod) -> int | None:
    """Where the extender's gate sits in the pod's scheduling gates; None when it has none of ours."""
    for index, gate in enumerate(pod.spec.scheduling_gates or ()):
        if gate.name == GATE:
            return index
    return None


def gated_pod(pod: Pod, demand: PodDemand) -> GatedPod | None:
    """The pod as the gate keeps it, when it waits behind the extender's gate (unbound, not ended)."""
    index = gate_index(pod)
    if index is None or pod.spec.node_name or pod.is_terminal or not pod.metadata.uid:
        return None
    meta = pod.metadata
    reach = pod_reach(pod)
    kind = msgspec.msgpack.encode((meta.namespace, demand, reach.selector, reach.terms, reach.tolerations))
    created = meta.creation_timestamp or ""
    return GatedPod(meta.uid, meta.namespace, meta.name, index, pod.spec.priority or 0, created, demand, reach, kind)


class GatedPods:
    """The gated pods the watch shows, taken in the order the scheduler's queue would take them."""

    def __init__(self) -> None:
        self._pods: dict[str, tuple[int, GatedPod]] = {}  # uid -> (arrival, pod)
        self._since: dict[str, float] = {}  # uid -> when the watch first showed it gated
        self._arrivals = 0
        self._sent: dict[str, float] = {}  # uid -> when its lift was sent
        self.arrived = False  # a pod came behind the gate since the last round
        # Its WaitingForRoom Event: once per pod while it waits behind the gate. Found with no room, a pod
        # queues (first found, first told) until the Events' budget lets it be told; told, it never is again.
        self._untold: dict[str, None] = {}
        self._told: set[str] = set()
        self.untold_gone = 0  # pods that left the gate, or were lifted, before they could be told

    def __len__(self) -> int:
        return len(self._pods)

    def uids(self) -> Iterator[str]:
        return iter(self._pods)

    def seen(self, uid: str, pod: GatedPod | None, now: float) -> None:
        """A watch event: the pod behind the gate, or ``None`` (lifted, bound, ended, deleted)."""
        if pod is None:
            self._pods.pop(uid, None)
            self._sent.pop(uid, None)
            self._since.pop(uid, None)
            self._told.discard(uid)
            self._forget_untold(uid)
            return
        known = self._pods.get(uid)
        if known is None:
            self._arrivals += 1
            self.arrived = True
            self._since[uid] = now
        self._pods[uid] = (known[0] if known else self._arrivals, pod)

    def replace(self, pods: Iterable[GatedPod], now: float) -> None:
        """A fresh list: the pods behind the gate now (arrival kept for those already known)."""
        known, self._pods = self._pods, {}
        for pod in pods:
            entry = known.get(pod.uid)
            if entry is None:
                self._arrivals += 1
                self.arrived = True
                self._since[pod.uid] = now
            self._pods[pod.uid] = (entry[0] if entry else self._arrivals, pod)
        self._sent = {uid: at for uid, at in self._sent.items() if uid in self._pods}
        self._since = {uid: at for uid, at in self._since.items() if uid in self._pods}
        self._told &= self._pods.keys()
        for uid in [uid for uid in self._untold if uid not in self._pods]:
            self._forget_untold(uid)

    def summary(self, now: float) -> Waiting:
        """The pods behind the gate, and how long the first of them has waited: pods Pending for hugepages."""
        if not self._since:
            return Waiting(0, 0.0)
        return Waiting(len(self._since), max(0.0, now - min(self._since.values())))

    def in_order(self, now: float) -> Iterator[GatedPod]:
        """The pods to consider lifting, highest priority first, then first created (then first seen),
        as kube-scheduler's queue sorts (plugins/queuesort/priority_sort.go); not those whose lift was
        sent within ``RESEND_SECONDS``. O(n log n) per round: rounds run when room frees or pods arrive."""
        ordered = sorted(self._pods.values(), key=lambda entry: (-entry[1].priority, entry[1].created, entry[0]))
        for _, pod in ordered:
            sent = self._sent.get(pod.uid)
            if sent is None or now - sent >= RESEND_SECONDS:
                yield pod

    def sent(self, uid: str, now: float) -> None:
        self._sent[uid] = now
        self._forget_untold(uid)  # lifted: it no longer waits for room

    def no_room(self, pods: Iterable[GatedPod]) -> None:
        """Pods a round found no node they may use has room for: each not told yet queues for its Event."""
        for pod in pods:
            if pod.uid not in self._told:
                self._untold.setdefault(pod.uid, None)

    def next_untold(self) -> GatedPod | None:
        """The first pod found with no room and not told yet (still behind the gate, not lifted). O(1)."""
        uid = next(iter(self._untold), None)
        return None if uid is None else self._pods[uid][1]

    def told(self, uid: str) -> None:
        """Its Event posted: not again while it stays behind the gate."""
        self._untold.pop(uid, None)
        self._told.add(uid)

    def _forget_untold(self, uid: str) -> None:
        if uid in self._untold:  # queued: its Event will never be posted
            del self._untold[uid]
            self.untold_gone += 1
