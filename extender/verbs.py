"""The extender verbs without HTTP: what filter, prioritize and bind do to the cluster state.

The server wraps these with parsing, rendering and metrics; the replay calls
them directly, so a simulated cluster sees exactly what a live one does.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

from extender.cluster import ClusterState
from extender.config import Config
from extender.decision import FilterDecision, HostScores, Reasons, filter_nodes, prioritize_nodes, reads_columns
from extender.podrequest import PodDemand
from extender.policy import Mode, Policy

RECENT_DEMANDS = 10_000  # pods between filter and bind; far more than a scheduler has in flight


class ExtenderVerbs:
    def __init__(
        self,
        config: Config,
        state: ClusterState,
        *,
        rng: random.Random | None = None,
        hold_in_flight: bool = True,
    ) -> None:
        self.config = config
        self.state = state
        self.reasons = Reasons.for_resource(config.resource_name)
        self.hold_in_flight = hold_in_flight  # False only to measure what the holds are worth
        self.rng = rng or random.Random()  # best-of-K draws; seedable for tests and the replay
        # What filter learnt of each pod, for bind (whose arguments carry no pod spec).
        self._recent: OrderedDict[str, tuple[PodDemand, Policy]] = OrderedDict()

    def filter(
        self, uid: str, namespace: str, demand: PodDemand, candidates: Sequence[str]
    ) -> tuple[FilterDecision, bool]:
        """Decide, then hold an enforced pod's need on the few nodes admitted until it is seen bound.

        Returns the decision and whether a hold was placed."""
        policy = self.config.policy_for(namespace)
        self.state.expire_reservations()
        self.state.expire_reports()
        # A new attempt for this pod: its previous attempt's hold is over, and must not
        # count against the pod itself.
        self.state.release(uid)
        accounts, headroom, differs = self.state.view_for(policy)
        decision = filter_nodes(
            demand,
            candidates,
            accounts=accounts,
            policy=policy,
            reasons=self.reasons,
            rng=self.rng,
            headroom=headroom,
            # Read only when used: reading brings the columns up to date. They hold the defaults' view.
            columns=self.state.columns
            if policy.examines_every_candidate and reads_columns(candidates) and not differs
            else None,
        )
        held = False
        if demand.wants_hugepages:
            # Every mode: a pod placed in an off namespace still takes pages that
            # enforcing namespaces must see in flight once bind names its node.
            self._remember(uid, demand, policy)
            if self.hold_in_flight and policy.mode is Mode.ENFORCE:
                held = self.state.reserve(uid, decision.nodes_to_hold, demand, policy.reservation_timeout_seconds)
        return decision, held

    def prioritize(self, uid: str, namespace: str, demand: PodDemand, candidates: Sequence[str]) -> HostScores:
        """Scores as if the pod's own hold were not there: it is the pod being placed."""
        policy = self.config.policy_for(namespace)
        view, _, _ = self.state.view_for(policy)
        accounts = self.state.accounts_without(uid, view)
        # The columns hold no overlay, and are read only when used (reading brings them up to date).
        columns = self.state.columns if accounts is self.state.accounts and reads_columns(candidates) else None
        return prioritize_nodes(demand, candidates, accounts=accounts, policy=policy, columns=columns)

    def bind_started(self, uid: str, node: str) -> bool:
        """The bind verb names the node: the pod's hold narrows to it. False when filter never saw the pod."""
        recent = self._recent.get(uid)
        if recent is None or not self.hold_in_flight:
            return False
        demand, policy = recent
        return self.state.reserve(uid, node, demand, policy.reservation_timeout_seconds)

    def bind_failed(self, uid: str) -> None:
        self.state.release(uid)

    def _remember(self, uid: str, demand: PodDemand, policy: Policy) -> None:
        self._recent[uid] = (demand, policy)
        self._recent.move_to_end(uid)
        if len(self._recent) > RECENT_DEMANDS:
            self._recent.popitem(last=False)
