"""The scheduler's window: when to answer an Error instead of turning every candidate away.

kube-scheduler with an adaptive (or low) ``percentageOfNodesToScore`` stops filtering once it has
found enough feasible nodes (``numFeasibleNodesToFind``), so the extender sees a window of the
cluster, and the next attempt starts after it (``nextStartNodeIndex``). An answer that turns every
candidate away leaves the pod waiting for a cluster event or the 5-minute flush, even when nodes
the scheduler did not send would hold it; an Error answer sends it to the backoff queue (1 s, then
doubling to 10 s) and its next attempt to the next window (docs/design.md, "The scheduler's window",
with the source lines). An Error is safe only where the scheduler's extender entry is not
ignorable (an ignorable one would place the pod unchecked): the enforce entry, which the chart's
admission policy selects with ``ENFORCE_MARKER``.

A window retry is answered only when all of these hold; otherwise the answer is the rejection:

- the scheduler stopped short: it sent exactly ``numFeasibleNodesToFind`` candidates
  (``feasible_nodes_to_find``, computed as the pinned scheduler computes it from the nodes it filters
  and the profile's ``percentageOfNodesToScore``, the config key the chart sets from the scheduler's),
  and that is fewer than the nodes it filters. Fewer candidates mean it filtered every node: nothing
  it could still send is left;
- some node the pod may use (extender/core/reach.py: its node selector, required node affinity,
  tolerations) would hold it: a pod no such node can hold is turned away at once (no error loop);
- this pod has had fewer window retries in a row than windows cover the nodes
  (``ceil(nodes / candidates)``): a node with room that other in-tree filters exclude (a full CPU,
  anti-affinity) is never sent, and its room must not keep the pod erring. After the last retry the
  pod is turned away for ``REST_SECONDS``; then a new run may start.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from extender.core.capacity import headroom_bytes, numa_headroom_bytes
from extender.core.objects import Pod
from extender.core.reference import SizeView

# The marker extended resource of the enforce entry (decision 0005; the chart's
# "hugepage-extender.marker.enforce"): a pod carrying it was sent through the entry that is not
# ignorable.
ENFORCE_MARKER = "hugepage-extender.io/enforce"
# pkg/scheduler/schedule_one.go (k8s.io/kubernetes v1.37.2), minFeasibleNodesToFind and
# minFeasibleNodesPercentageToFind.
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5
REMEMBERED_PODS = 10_000  # pods with a run of retries; far more than wait at once
# After a run's last retry, the pod is turned away for this long (kube-scheduler's flush of
# unschedulable pods, backend/queue/scheduling_queue.go:65): events that requeue it meanwhile
# start no new run, so a pod whose room lies only on nodes the in-tree filters exclude costs
# at most one run of retries per flush.
REST_SECONDS = 300.0
_NOT_OVER = -1.0


def through_enforce_entry(pod: Pod) -> bool:
    """Whether the pod carries the enforce entry's marker (requests or limits of any container)."""
    spec = pod.spec
    for container in (*spec.containers, *(spec.init_containers or ())):
        resources = container.resources
        if resources is not None and any(
            ENFORCE_MARKER in (quantities or {}) for quantities in (resources.requests, resources.limits)
        ):
            return True
    return False


def feasible_nodes_to_find(nodes: int, percentage: int) -> int:
    """How many feasible nodes kube-scheduler stops at, of ``nodes`` filtered, with the profile's
    ``percentageOfNodesToScore`` (0: adaptive). ``Scheduler.numFeasibleNodesToFind`` in
    pkg/scheduler/schedule_one.go (k8s.io/kubernetes v1.37.2), integer arithmetic as there."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    if percentage == 0:
        percentage = max(50 - nodes // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_FEASIBLE_NODES)


def stopped_short(candidates: int, nodes: int, percentage: int) -> bool:
    """Whether the scheduler stopped filtering before its last node: it found exactly
    ``numFeasibleNodesToFind`` feasible nodes, fewer than the ``nodes`` it filters
    (``findNodesThatPassFilters`` in schedule_one.go stops there; fewer found means it filtered all).
    A scan that found exactly that many at its last node reads as stopped short: its retry is the
    one run the bound below allows."""
    found = feasible_nodes_to_find(nodes, percentage)
    return candidates == found < nodes


def windows_to_cover(candidates: int, nodes: int) -> int:
    """Attempts whose windows (each at least ``candidates`` nodes) cover ``nodes`` once."""
    return -(-nodes // max(candidates, 1))


def room_anywhere(views: Sequence[SizeView], *, numa: bool, may_use: Callable[[str], bool]) -> bool:
    """Whether any node the pod may use (``may_use``, extender/core/reach.py) holds it now: each size's need
    (``views``, one per size the pod asks, as the filter read them) in that size's pool. The nodes
    with room in the first size come from its headroom (one comparison each) when the view has it,
    else from its accounts; only those are asked whether the pod may use them, and whether every
    other size (and a NUMA node, for a pod pinned to one) holds it too. O(nodes), only for a pod
    every candidate turned away whose scan stopped short."""
    if not views:
        return False
    first = views[0]
    need, headroom = first.need, first.headroom
    roomy = (name for name, room in headroom.items() if room >= need) if headroom is not None else first.accounts
    return any(all(_holds(view, name, numa=numa) for view in views) and may_use(name) for name in roomy)


def _holds(view: SizeView, name: str, *, numa: bool) -> bool:
    account = view.accounts.get(name)
    if account is None:
        return False
    room = headroom_bytes(account)
    if numa:
        room = min(room, numa_headroom_bytes(account))
    return room >= view.need


class WindowRetries:
    """Per pod (UID), the window retries answered in a row: at most ``REMEMBERED_PODS`` pods, the
    oldest forgotten first (a forgotten pod starts a new run, still bounded)."""

    def __init__(self, remembered: int = REMEMBERED_PODS, rest_seconds: float = REST_SECONDS) -> None:
        self._runs: OrderedDict[str, tuple[int, float]] = OrderedDict()  # uid -> (retries, run over at)
        self._remembered = remembered
        self._rest_seconds = rest_seconds

    def retry(
        self, uid: str, *, candidates: int, nodes: int, percentage: int, now: float, room: Callable[[], bool]
    ) -> int:
        """For a pod whose every candidate was turned away: the number of this retry (1, 2, ...),
        or 0 to turn it away. ``nodes``: the nodes the scheduler filters for the pod; ``percentage``:
        its ``percentageOfNodesToScore``. ``room`` (whether a node the pod may use would hold it) is
        asked last, and only when the rest allows a retry: it may cost a pass over the nodes."""
        done, over_at = self._runs.pop(uid, (0, _NOT_OVER))
        if over_at != _NOT_OVER and now - over_at < self._rest_seconds:
            self._remember(uid, done, over_at)  # resting: turned away until the rest is over
            return 0
        if over_at != _NOT_OVER:
            done = 0  # rested: a new run
        if not stopped_short(candidates, nodes, percentage) or not room():
            return 0
        if done >= windows_to_cover(candidates, nodes):
            self._remember(uid, done, now)  # the run is over: rest
            return 0
        self._remember(uid, done + 1, _NOT_OVER)
        return done + 1

    def placed(self, uid: str) -> None:
        """The pod was admitted somewhere: its run is over."""
        self._runs.pop(uid, None)

    def _remember(self, uid: str, done: int, over_at: float) -> None:
        self._runs[uid] = (done, over_at)
        if len(self._runs) > self._remembered:
            self._runs.popitem(last=False)

    def __len__(self) -> int:
        return len(self._runs)
