"""The extender verbs without HTTP: what filter, prioritize and bind do to the cluster state.

The server wraps these with parsing, rendering and metrics; the replay calls
them directly, so a simulated cluster sees exactly what a live one does.

Who may hold pages, and bind (docs/reliability.md): a filter call names its pod
by UID, namespace and name, and anyone who reaches the port can write those.
So a hold belongs to the pod that placed it (``namespace/name``): a call naming
the same UID with another pod neither replaces nor cancels it, and a UID the
watch shows as another pod's holds nothing. With ``verify_holds`` (a live
cluster), a pod the watch has not shown yet (the scheduler may be a few
milliseconds ahead of this extender's watch) holds pages only against other
such pods: a pod the watch shows decides as if those holds were not there, so
made-up pods can never keep a real pod off a pool. Such a hold is dropped when
the watch has not shown its pod within ``UNVERIFIED_HOLD_SECONDS`` (its UID then
never holds again), and at most ``MAX_UNVERIFIED_HOLDS`` exist at once. Bind
binds only a pod this extender filtered, to a node that filter admitted.

A bind is a reservation (``bind_start``): the node must still hold the pod given every account
and hold but the pod's own, judged as its filter judges (every size it asks, NUMA where its
policy pins it), and the check and the hold it places happen in one call with no await between,
so two binds can never both take a node's last room. Filters admit without holding (``sampleSize:
0``, or more than ``HOLD_LIMIT`` nodes), so two pods can be admitted to the same last room a few
milliseconds apart; the second bind is refused. The scheduler treats an extender's bind error as an
error of the binding cycle (kube-scheduler v1.37.2 ``pkg/scheduler/schedule_one.go``: ``bind`` returns
``fwk.AsStatus(err)`` at 1106-1108, ``handleBindingCycleError`` at 507-537 forgets the assumed pod and
calls ``handleSchedulingFailure``, which at 1152-1234 puts the pod back in the queue, Pending, with a
``FailedScheduling`` event carrying the message; ``backend/queue/scheduling_queue.go`` 1032-1038 and
1097-1100: with no rejecting plugin it is retried after its backoff), and the next attempt's filter
sees the room as it is.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from extender.core.answer import FilterDecision, HostScores, Reasons
from extender.core.config import Config
from extender.core.decision import filter_sizes, prioritize_sizes
from extender.core.filtercall import FilterCall, admitted_for_bind, may_retry_window, owns
from extender.core.gates import GatedPod
from extender.core.holds import HOLD_LIMIT
from extender.core.objects import Pod
from extender.core.podoutcome import Prediction
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy
from extender.core.reach import UNCONSTRAINED, PodReach, pod_reach
from extender.core.reference import SizeView, size_verdict
from extender.core.window import WindowRetries, room_anywhere, through_enforce_entry
from extender.state.cluster import ClusterState

RECENT_PODS = 10_000  # pods between filter and bind; far more than a scheduler has in flight
UNVERIFIED_HOLD_SECONDS = 5.0  # how long a hold may wait for the watch to show its pod
REFUSED_UIDS = 10_000  # UIDs whose pod never showed up: they hold nothing again
MAX_UNVERIFIED_HOLDS = 64  # holds of pods the watch has not shown yet; a real scheduler is rarely ahead by one


class _Filtered(msgspec.Struct, frozen=True, gc=False):
    """What filter learnt of a pod, for bind (whose arguments carry no pod spec)."""

    owner: str  # namespace/name
    demand: PodDemand
    policy: Policy
    admitted: tuple[str, ...] | None  # None: more than HOLD_LIMIT, any node this extender knows


class BindResult(StrEnum):
    """What the bind verb did: the ``result`` label of ``hugepage_extender_binds_total``."""

    BOUND = "bound"
    REFUSED = "refused"  # not a pod this extender filtered, or not to a node its filter admitted
    NO_ROOM = "no_room"  # the node no longer holds the pod: another bind took the room since its filter
    ERROR = "error"  # the Binding API call failed


@dataclass(frozen=True, slots=True)
class BindStart:
    """What bind decided before its API call: a refusal (its message, and why), or a go; and whether
    the pod's need is now held on the node (to release if the API call fails)."""

    refusal: str | None = None
    result: BindResult = BindResult.BOUND
    held: bool = False


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What a filter call decided and did: the answer, the pod's need and policy as the call read
    them (once), whether it placed a hold, and how many holds it refused or dropped."""

    decision: FilterDecision
    demand: PodDemand
    policy: Policy
    held: bool = False
    refused: int = 0  # holds refused or dropped as not their pod's own during this call
    shown: bool = False  # the watch shows this pod under its UID (a made-up pod gets no Event)
    window_retry: int = 0  # answer an Error: nodes not sent would hold the pod (extender/core/window.py); its number
    sizes: tuple[str, ...] = ()  # the sizes decided on (resource names), in the decision's order

    @classmethod
    def of(
        cls, call: FilterCall, decision: FilterDecision, *, held: bool, refused: int, shown: bool, window_retry: int
    ) -> FilterResult:
        """The result of ``call``: its decision with the need, policy and sizes the call read."""
        return cls(decision, call.demand, call.policy, held, refused, shown, window_retry, call.sizes)

    def rejected_by_size(self) -> Iterator[tuple[str, int, int]]:
        """(size, insufficient, exceeds_pool): the rejected nodes by the size their verdict comes from (the
        first size no pod leaving could make room in, else the first without room: the reason sent)."""
        decision = self.decision
        if not decision.by_size:  # at most one size decided on: every rejection is its own
            yield from ((size, decision.insufficient, decision.exceeds_pool) for size in self.sizes)
            return
        for size, (insufficient, exceeds_pool) in zip(self.sizes, decision.by_size, strict=True):
            yield size, insufficient, exceeds_pool


@dataclass(frozen=True, slots=True)
class Expired:
    """What ``ExtenderVerbs.expire`` ended that the metrics count: holds dropped because the watch had not
    shown their pod in time (``UNVERIFIED_HOLD_SECONDS``)."""

    unverified: int = 0


class ExtenderVerbs:
    def __init__(
        self,
        config: Config,
        state: ClusterState,
        *,
        rng: random.Random | None = None,
        hold_in_flight: bool = True,
        verify_holds: bool = False,
    ) -> None:
        self.config = config
        self.state = state
        self.size_reasons = {name: Reasons.for_resource(name) for name in config.resource_names}
        self.hold_in_flight = hold_in_flight  # False only to measure what the holds are worth
        self.verify_holds = verify_holds  # a live cluster: holds need their pod shown by the watch
        self.rng = rng or random.Random()  # best-of-K draws; seedable for tests and the replay
        self._recent: OrderedDict[str, _Filtered] = OrderedDict()
        self._unverified: deque[tuple[float, str]] = deque()  # (deadline, uid), soonest first
        self._unverified_uids: dict[str, None] = {}
        self._refused: OrderedDict[str, None] = OrderedDict()
        self.refused_holds = 0  # for metrics and tests: holds refused or dropped as not the pod's own
        self.window_retries = WindowRetries()

    def filter_pod(self, pod: Pod, candidates: Sequence[str]) -> FilterResult:
        """``filter`` for a pod as the scheduler sends it: its namespace's policy looked up once."""
        meta = pod.metadata
        policy = self.config.policy_for(meta.namespace)
        demand = self.state.demand_for(pod, policy)
        enforce_entry = through_enforce_entry(pod)
        return self.filter(
            meta.uid,
            meta.namespace,
            demand,
            candidates,
            name=meta.name,
            policy=policy,
            enforce_entry=enforce_entry,
            reach=pod_reach(pod) if enforce_entry else UNCONSTRAINED,
        )

    def filter(
        self,
        uid: str,
        namespace: str,
        demand: PodDemand,
        candidates: Sequence[str],
        *,
        name: str = "",
        policy: Policy | None = None,
        enforce_entry: bool = False,
        reach: PodReach = UNCONSTRAINED,
    ) -> FilterResult:
        """Decide, then hold an enforced pod's need on the few nodes admitted until it is seen bound.

        ``enforce_entry``: the call came through the scheduler's enforce entry (not ignorable), so
        an Error answer makes the scheduler try its next window (``window_retry``) when a node the
        pod may use (``reach``: its node selector, required affinity, tolerations) would hold it.
        The steps, in order: ``claim``, ``size_views``, the decision, ``window_retry``, ``remember``, ``hold``."""
        call = FilterCall(
            uid,
            namespace,
            f"{namespace}/{name}",
            demand,
            candidates,
            policy if policy is not None else self.config.policy_for(namespace),
            enforce_entry,
            reach,
            demand.sizes_needed,
        )
        refused_before = self.refused_holds  # the result counts what this call refused, expiry's drops too
        own = self.claim(call)
        views = self.size_views(call)
        decision = filter_sizes(demand, candidates, views=views, policy=call.policy, rng=self.rng)
        if not (own and uid):
            self.refused_holds += bool(uid)  # a UID another pod owns: neither remembered for bind nor held
            return self._result(call, decision, refused_before)
        window_retry = self.window_retry(call, decision, views)
        if window_retry:
            return self._result(call, decision, refused_before, window_retry=window_retry)  # no node admitted
        # Every mode: a pod placed in an off namespace still takes pages that
        # enforcing namespaces must see in flight once bind names its node.
        self.remember(call, decision)
        return self._result(call, decision, refused_before, held=self.hold(call, decision))

    # -- filter's steps, in order; each is tested alone (tests/test_filter_steps.py) --------------

    def claim(self, call: FilterCall) -> bool:
        """End what is past its time, then whether the pod owns the UID it names (``filtercall.owns``).
        If so, this is a new attempt for it: its previous attempt's hold is over, and must not count
        against the pod itself."""
        self.expire()
        remembered = self._recent.get(call.uid)
        own = owns(self.state.owner_of(call.uid), None if remembered is None else remembered.owner, call.owner)
        if own:
            self.state.release(call.uid)
        return own

    def size_views(self, call: FilterCall) -> list[SizeView]:
        """What the decision reads of each size the pod asks, in the decision's order."""
        return [self._size_view(size, call.demand, call.uid, call.owner, call.policy) for size in call.sizes]

    def window_retry(self, call: FilterCall, decision: FilterDecision, views: Sequence[SizeView]) -> int:
        """The number of this window retry for the pod (answer an Error: extender/core/window.py), 0
        for none. A pod admitted somewhere ends its run of retries."""
        if decision.passed:
            self.window_retries.placed(call.uid)
            return 0
        if not may_retry_window(decision, call.policy, call.enforce_entry):
            return 0
        numa = call.policy.numa_aligned and call.demand.guaranteed
        state, reach = self.state, call.reach

        def may_use(name: str) -> bool:
            node = state.reach_of(name)
            return node is not None and reach.may_use(name, node)

        return self.window_retries.retry(
            call.uid,
            candidates=len(call.candidates),
            nodes=reach.scanned(state.nodes()),
            percentage=self.config.percentage_of_nodes_to_score,
            now=state.now(),
            room=lambda: room_anywhere(views, numa=numa, may_use=may_use),
        )

    def remember(self, call: FilterCall, decision: FilterDecision) -> None:
        """What bind will check the pod against (``bind_refusal``, ``room_at_bind``): its owner, need,
        policy and the nodes admitted (``filtercall.admitted_for_bind``)."""
        admitted = admitted_for_bind(decision.passed, HOLD_LIMIT)
        self._remember(call.uid, _Filtered(call.owner, call.demand, call.policy, admitted))

    def hold(self, call: FilterCall, decision: FilterDecision) -> bool:
        """Hold an enforced pod's need on the nodes its filter admitted; whether it was held. A pod the
        watch has not shown (yet) is held only while few such are (``MAX_UNVERIFIED_HOLDS``)."""
        uid, demand, policy = call.uid, call.demand, call.policy
        if not (demand.wants_hugepages and self.hold_in_flight and policy.mode is Mode.ENFORCE and self._may_hold(uid)):
            return False
        not_shown = self.verify_holds and self.state.owner_of(uid) is None and not self.state.is_bound(uid)
        if not_shown and uid not in self._unverified_uids:
            if len(self._unverified_uids) >= MAX_UNVERIFIED_HOLDS:
                self.refused_holds += 1
                return False
            self._unverified_uids[uid] = None
            self._unverified.append((self.state.now() + UNVERIFIED_HOLD_SECONDS, uid))
        return self.state.hold(uid, decision.nodes_to_hold, demand, policy.hold_timeout_seconds)

    def _result(
        self,
        call: FilterCall,
        decision: FilterDecision,
        refused_before: int,
        *,
        held: bool = False,
        window_retry: int = 0,
    ) -> FilterResult:
        """The call's result, read when the call is over: whether the watch shows the pod under its UID,
        and the holds refused or dropped since ``refused_before``."""
        shown = self.state.owner_of(call.uid) == call.owner
        refused = self.refused_holds - refused_before
        return FilterResult.of(call, decision, held=held, refused=refused, shown=shown, window_retry=window_retry)

    def _size_view(self, size: str, demand: PodDemand, uid: str, owner: str, policy: Policy) -> SizeView:
        """What the filter reads of one size's accounts for this pod."""
        state = self.state.books[size]
        # The namespace's view: its own nodeReportMaxAgeSeconds may judge records differently.
        accounts, view_headroom, differs = state.view_for(policy)
        headroom: Mapping[str, int] | None = view_headroom
        if self._unverified_uids and self.state.owner_of(uid) == owner:
            # A pod the watch shows: holds of pods it has not shown (yet) are not in its way.
            unshown = [
                u for u in self._unverified_uids if self.state.owner_of(u) is None and not self.state.is_bound(u)
            ]
            without = state.accounts_without_holds(unshown, accounts)
            if without is not accounts:
                accounts, headroom, differs = without, None, True
        # The columns are brought up to date only when a decision reads them. They hold the defaults' view.
        need = demand.bytes_of(size)
        return SizeView(need, accounts, self.size_reasons[size], headroom, None if differs else state.columns)

    def prioritize_pod(self, pod: Pod, candidates: Sequence[str]) -> HostScores:
        """``prioritize`` for a pod as the scheduler sends it: its namespace's policy looked up once."""
        policy = self.config.policy_for(pod.metadata.namespace)
        demand = self.state.demand_for(pod, policy)
        return self.prioritize(pod.metadata.uid, pod.metadata.namespace, demand, candidates, policy=policy)

    def prioritize(
        self,
        uid: str,
        namespace: str,
        demand: PodDemand,
        candidates: Sequence[str],
        *,
        policy: Policy | None = None,
    ) -> HostScores:
        """Scores as if the pod's own hold were not there: it is the pod being placed."""
        if policy is None:
            policy = self.config.policy_for(namespace)
        views = []
        for size in demand.sizes_needed:
            state = self.state.books[size]
            view, _, _ = state.view_for(policy)
            accounts = state.accounts_without(uid, view)
            # The columns hold no overlay (they are brought up to date only when read).
            columns = state.columns if accounts is state.accounts else None
            views.append(SizeView(demand.bytes_of(size), accounts, self.size_reasons[size], columns=columns))
        return prioritize_sizes(demand, candidates, views=views, policy=policy)

    def bind_refusal(self, uid: str, namespace: str, name: str, node: str) -> str | None:
        """Why this extender will not bind the pod to the node; None when it will.

        Only a pod this extender filtered (the same UID, namespace and name), to a
        node that filter admitted. The messages name nothing from the request."""
        filtered = self._recent.get(uid)
        if filtered is None:
            return "not bound: this extender has not filtered a pod with this UID"
        if filtered.owner != f"{namespace}/{name}":
            return "not bound: the pod's namespace and name differ from the pod filtered under this UID"
        admitted = filtered.admitted
        if (node not in admitted) if admitted is not None else (node not in self.state.nodes()):
            return "not bound: the node is not one this extender's filter admitted for the pod"
        return None

    def bind_start(self, uid: str, namespace: str, name: str, node: str) -> BindStart:
        """Everything bind does before its API call, at once (no await may come between the check
        and the hold: that is what makes the bind a reservation). Refused when ``bind_refusal`` says
        so, or when the node no longer holds an enforced pod (``room_at_bind``); then the pod's holds
        are released, since its bind is over and the scheduler retries it with a new filter. Else the
        pod's hold narrows to the node."""
        refusal = self.bind_refusal(uid, namespace, name, node)
        if refusal is not None:
            return BindStart(refusal, BindResult.REFUSED)
        short = self.room_at_bind(uid, node)
        if short is not None:
            self.state.release(uid)
            return BindStart(short, BindResult.NO_ROOM)
        # A Binding is made for it now: its hold counts against every pod, shown or not, until the watch
        # shows it bound (or the Binding fails: a made-up pod's fails at once, and its hold goes with it).
        self._unverified_uids.pop(uid, None)
        return BindStart(held=self._narrow(uid, node))

    def room_at_bind(self, uid: str, node: str) -> str | None:
        """Why ``node`` no longer holds the filtered pod ``uid``, None when it does: its filter's
        verdict (``reference.size_verdict``, the capacity helper ``fits`` over every size the pod
        asks, one NUMA node where its policy pins it) with every account and hold counted but the
        pod's own, and the holds a pod the watch shows never sees (those of pods it has not shown)
        left out as its filter leaves them. Only enforce refuses: shadow and off change no decision."""
        filtered = self._recent[uid]
        if filtered.policy.mode is not Mode.ENFORCE or not filtered.demand.wants_hugepages:
            return None
        why = self._verdict_at(uid, filtered, node)
        if why is None:
            return None
        return f"not bound: {why}: the node's room went to other pods since the filter admitted it"

    def shadow_verdict(self, uid: str, node: str, judged_by: str) -> Prediction | None:
        """What shadow says of ``node`` for the filtered pod ``uid`` now (its room as ``room_at_bind``
        reads it): the verdict the scorecard follows. None for a pod of no shadow namespace, one asking
        no hugepages, or one this extender has not filtered."""
        filtered = self._recent.get(uid)
        if filtered is None or filtered.policy.mode is not Mode.SHADOW or not filtered.demand.wants_hugepages:
            return None
        why = self._verdict_at(uid, filtered, node)
        return Prediction(would_reject=why is not None, why=why or "room for it", judged_by=judged_by)

    def _verdict_at(self, uid: str, filtered: _Filtered, node: str) -> str | None:
        """Why ``node`` would turn the filtered pod away now, None when it holds it."""
        demand, policy = filtered.demand, filtered.policy
        views = []
        for size in demand.sizes_needed:
            view = self._size_view(size, demand, uid, filtered.owner, policy)
            without_own = self.state.books[size].accounts_without(uid, view.accounts)
            views.append(SizeView(view.need, without_own, view.reasons))
        verdict, view = size_verdict(views, node, numa=policy.numa_aligned and demand.guaranteed)
        return None if verdict.admits else view.reasons.of(verdict)

    def _narrow(self, uid: str, node: str) -> bool:
        """The bind names the node: the pod's hold narrows to it (a UID refused as unverified too: the
        Binding decides whether the pod is real). False when nothing is held."""
        filtered = self._recent.get(uid)
        if filtered is None or not self.hold_in_flight or not filtered.demand.wants_hugepages:
            return False
        return self.state.hold(uid, node, filtered.demand, filtered.policy.hold_timeout_seconds)

    def bind_failed(self, uid: str) -> None:
        self.state.release(uid)

    def lift(self, pod: GatedPod, usable: Sequence[str]) -> str | None:
        """The node a gated pod's filter would admit now among ``usable`` (the nodes it may use), its need
        held there until the pod is filtered or the hold times out (so the next pods see that room taken);
        None when no node would hold it, "" when the pod has nothing to wait for (not enforced, no hugepages).
        The filter's own decision, read as the pod's filter reads it."""
        policy = self.config.policy_for(pod.namespace)
        demand = pod.demand
        if policy.mode is not Mode.ENFORCE or not demand.wants_hugepages:
            return ""  # nothing for the extender to wait for: lifted at once, nothing held
        if not usable or self.state.owner_of(pod.uid) != pod.owner:
            return None
        sizes = demand.sizes_needed
        views = [self._size_view(size, demand, pod.uid, pod.owner, policy) for size in sizes]
        decision = filter_sizes(demand, usable, views=views, policy=policy, rng=self.rng)
        if not decision.passed:
            return None
        node = decision.passed[0]
        self.state.hold(pod.uid, node, demand, policy.hold_timeout_seconds)
        return node

    def expire(self) -> Expired:
        """End what is past its time: holds past ``holdTimeoutSeconds``, holds whose pod the watch
        has not shown in time, records older than their max age. O(1) when nothing is due; run on
        every filter call and on the server's timer, so room frees on time while no pod is filtered."""
        self.state.expire_holds()
        self.state.expire_reports()
        return Expired(unverified=self._drop_unverified())

    # -- who may hold --------------------------------------------------------------

    def _may_hold(self, uid: str) -> bool:
        return not (self.verify_holds and uid in self._refused and self.state.owner_of(uid) is None)

    def _drop_unverified(self) -> int:
        """Holds whose pod the watch has not shown in time are dropped (how many); O(1) per hold."""
        now = self.state.now()
        dropped = 0
        pending = self._unverified
        while pending and pending[0][0] <= now:
            _, uid = pending.popleft()
            if uid not in self._unverified_uids:
                continue  # its bind made a Binding for it (bind_start): its hold stays until the watch shows it
            del self._unverified_uids[uid]
            if self.state.owner_of(uid) is not None or self.state.is_bound(uid):
                continue
            self.state.release(uid)
            self.refused_holds += 1
            dropped += 1
            self._refused[uid] = None
            if len(self._refused) > REFUSED_UIDS:
                self._refused.popitem(last=False)
        return dropped

    def _remember(self, uid: str, filtered: _Filtered) -> None:
        """At most RECENT_PODS pods, each with at most HOLD_LIMIT names: bounded memory.

        An answer admitting more (every candidate, K = 0) is remembered as "a node this
        extender knows": a caller that can call filter could have named that node alone."""
        self._recent.pop(uid, None)
        self._recent[uid] = filtered
        if len(self._recent) > RECENT_PODS:
            self._recent.popitem(last=False)
