"""One variant through one scenario, over simulated time, with the extender's real code.

Three parties, kept apart on purpose:

* the **extender**: a real ``ClusterState`` fed only what a real extender
  would learn (nodes with their outside usage annotation, pods once the node
  reports them, its own in-flight holds), and the real ``filter_nodes`` /
  ``prioritize_nodes``, called in the order and with the arguments of
  ``server.Extender.filter`` / ``prioritize`` / ``bind``;
* the **scheduler**: in-tree CPU fit on every node (it sees CPU requests and
  assumes its own picks, but no hugepages), the extender's filter, the
  extender's priority, and a blind tie-break (random or least CPU);
* the **nodes** (``TrueNodes``): the real pools. A pod is admitted only if the
  pool holds it when it arrives, after the placement delay; otherwise it fails
  there ("Failed to place sandbox").
"""

from __future__ import annotations

import hashlib
import heapq
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto

from extender.core.answer import Reasons
from extender.core.capacity import UNKNOWN_ACCOUNT, fits, hugepages_for
from extender.core.config import Config
from extender.core.objects import (
    Container,
    Node,
    NodeMeta,
    NodeStatus,
    ObjectMeta,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy
from extender.core.scoring import cpu_load, hugepage_load
from extender.state.cluster import ClusterState
from extender.state.nodeinputs import RESERVED_ANNOTATION_PREFIX
from extender.state.verbs import ExtenderVerbs
from replay.model import (
    PAGE_SIZE_BYTES,
    RESOURCE_NAME,
    Blind,
    InFlight,
    Ladder,
    NodeGroup,
    PodKind,
    Scenario,
    Trace,
    Variant,
)
from replay.shadowgrade import ShadowGrades
from replay.tally import OutcomeTally, StepTally, coefficient_of_variation

# New clients of a ladder step start spread over this many seconds: a burst,
# as when a batch run raises its concurrency, but not all in one instant.
STEP_RAMP_SECONDS = 1.0


# -- the cluster as it is -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    pool_pages: int
    outside_pages: int  # used outside pod requests; the node reports it (annotation)
    cpu_millis: int


def build_nodes(groups: Sequence[NodeGroup], seed: int) -> list[NodeSpec]:
    """Node names and outside usage, the same for every variant of one seed."""
    rng = random.Random(f"{seed}/nodes")
    nodes = []
    for group in groups:
        low = hugepages_for(group.outside_min_bytes, PAGE_SIZE_BYTES)
        high = hugepages_for(group.outside_max_bytes, PAGE_SIZE_BYTES)
        pool = group.pool_bytes // PAGE_SIZE_BYTES
        for index in range(group.count):
            outside = min(pool, rng.randint(low, high))
            nodes.append(NodeSpec(f"{group.prefix}-{index:04d}", pool, outside, group.cpu_millis))
    return nodes


def node_object(spec: NodeSpec) -> Node:
    """The Node as the API server holds it: allocatable pool and CPU, outside usage annotated."""
    allocatable: dict[str, str | int | float] = {"cpu": f"{spec.cpu_millis}m"}
    annotations = {}
    if spec.pool_pages:
        allocatable[RESOURCE_NAME] = str(spec.pool_pages * PAGE_SIZE_BYTES)
        annotations[RESERVED_ANNOTATION_PREFIX + RESOURCE_NAME] = str(spec.outside_pages * PAGE_SIZE_BYTES)
    return Node(
        metadata=NodeMeta(name=spec.name, annotations=annotations or None),
        status=NodeStatus(allocatable=allocatable),
    )


class TrueNodes:
    """The real pools and the scheduler's CPU bookkeeping; the replay's ground truth."""

    def __init__(self, specs: Sequence[NodeSpec]) -> None:
        self.specs = {s.name: s for s in specs}
        self.used_pages: defaultdict[str, int] = defaultdict(int)  # pods running on the node
        self.arriving_pages: defaultdict[str, int] = defaultdict(int)  # pods on their way to the node
        self.assumed_cpu: defaultdict[str, int] = defaultdict(int)  # the scheduler's cache: bound + assumed

    def free_pages(self, name: str) -> int:
        spec = self.specs[name]
        return spec.pool_pages - spec.outside_pages - self.used_pages[name]

    def cpu_fits(self, name: str, cpu_millis: int) -> bool:
        """NodeResourcesFit for CPU: requests of bound and assumed pods plus this one within allocatable."""
        return self.assumed_cpu[name] + cpu_millis <= self.specs[name].cpu_millis

    def has_room(self, need_pages: int, cpu_millis: int) -> bool:
        """Could an all-knowing scheduler place the pod now, given everything already sent to nodes?"""
        return any(
            self.free_pages(name) - self.arriving_pages[name] >= need_pages and self.cpu_fits(name, cpu_millis)
            for name in self.specs
        )

    def least_cpu_preference(self, name: str, cpu_millis: int) -> float:
        """LeastAllocated on CPU: the share of the node's CPU left after the pod; higher is better."""
        allocatable = self.specs[name].cpu_millis
        return (allocatable - self.assumed_cpu[name] - cpu_millis) / allocatable if allocatable else 0.0

    def utilisation(self) -> tuple[float, float, float]:
        """Pod pages over usable pages, CV of per-node used fraction, and CPU requested over allocatable."""
        pooled = [s for s in self.specs.values() if s.pool_pages]
        usable = sum(s.pool_pages - s.outside_pages for s in pooled)
        used = sum(self.used_pages[s.name] for s in pooled)
        fractions = [(s.outside_pages + self.used_pages[s.name]) / s.pool_pages for s in pooled]
        cpu_total = sum(s.cpu_millis for s in self.specs.values())
        cpu_used = sum(self.assumed_cpu.values())
        return (
            used / usable if usable else 0.0,
            coefficient_of_variation(fractions),
            cpu_used / cpu_total if cpu_total else 0.0,
        )


# -- the workload -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One pod to request: what it asks for and how the world will treat it."""

    uid: str
    namespace: str
    memory_bytes: int
    cpu_millis: int
    lifetime_seconds: float
    delay_seconds: float  # pick to node admission
    client: int | None  # the ladder client that asks; None for a trace arrival


def _jittered(rng: random.Random, mean: float) -> float:
    return mean * rng.uniform(0.5, 1.5)


class Client:
    """A closed-loop client of the ladder: its pods are the same in every variant of one seed."""

    def __init__(self, index: int, mix: Sequence[PodKind], delay_seconds: float, seed: int) -> None:
        self.index = index
        self._mix = mix
        self._weights = [k.weight for k in mix]
        self._delay = delay_seconds
        self._rng = random.Random(f"{seed}/client/{index}")
        self._issued = 0

    def next_plan(self) -> PodPlan:
        # A fixed number of draws per pod, so the n-th pod never depends on timing.
        kind = self._rng.choices(self._mix, self._weights)[0]
        lifetime = _jittered(self._rng, kind.lifetime_seconds)
        delay = _jittered(self._rng, self._delay)
        uid = f"c{self.index}-{self._issued}"
        self._issued += 1
        return PodPlan(uid, kind.namespace, kind.memory_bytes, kind.cpu_millis, lifetime, delay, self.index)


def trace_plans(trace: Trace, delay_seconds: float, seed: int) -> list[tuple[float, PodPlan]]:
    rng = random.Random(f"{seed}/trace")
    return [
        (
            a.time_seconds,
            PodPlan(
                f"t{i}",
                a.namespace,
                a.hugepage_bytes,
                a.cpu_millis,
                a.lifetime_seconds,
                _jittered(rng, delay_seconds),
                None,
            ),
        )
        for i, a in enumerate(trace.arrivals)
    ]


def pod_object(plan: PodPlan, node: str | None = None) -> Pod:
    """The Pod as the API server holds it: a VM-backed pod asks for memory, not hugepages."""
    requests: dict[str, str | int | float] = {"memory": str(plan.memory_bytes), "cpu": f"{plan.cpu_millis}m"}
    return Pod(
        metadata=ObjectMeta(name=plan.uid, namespace=plan.namespace, uid=plan.uid),
        spec=PodSpec(node_name=node, containers=[Container(name="vm", resources=ResourceRequirements(requests))]),
        status=PodStatus(phase="Running" if node else "Pending"),
    )


# -- the run ------------------------------------------------------------------


class EventKind(Enum):
    REQUEST = auto()  # a trace arrival: request this plan
    WAKE = auto()  # a ladder client asks for its next pod
    BOUND = auto()  # the scheduler's bind shows in the extender's cache: the pod's hold ends
    LAND = auto()  # a placement reaches its node
    DEPART = auto()  # a running pod ends
    STEP = auto()  # a ladder step begins
    SAMPLE = auto()  # sample utilisation


@dataclass(slots=True)
class Flight:
    """A pod after its node was picked."""

    plan: PodPlan
    node: str
    need_pages: int
    step: int
    requested_at: float
    shadow_predicts_failure: bool | None  # None: the pod's namespace is not in shadow mode


Payload = PodPlan | Flight | int | None


@dataclass(slots=True)
class VariantRun:
    """A variant's tallies, per step and per namespace, and its placements in order."""

    variant: Variant
    steps: list[StepTally]
    namespaces: dict[str, OutcomeTally]
    placements: list[str] = field(default_factory=list)  # "uid node outcome", in the order they resolved
    wall_seconds: float = 0.0

    @property
    def placements_digest(self) -> str:
        return hashlib.sha256("\n".join(self.placements).encode()).hexdigest()


def step_count(scenario: Scenario) -> int:
    workload = scenario.workload
    return len(workload.levels) if isinstance(workload, Ladder) else workload.windows


def step_seconds(scenario: Scenario) -> float:
    """Length of one step: a ladder step, or one window of a trace."""
    workload = scenario.workload
    if isinstance(workload, Ladder):
        return workload.step_seconds
    last = max((a.time_seconds for a in workload.arrivals), default=0.0)
    return max(last, 1.0) * 1.000001 / workload.windows  # the last arrival falls inside the last window


class Replay:
    """The event loop for one variant. Use ``run_variant``."""

    def __init__(
        self, scenario: Scenario, variant: Variant, *, seed: int, blind: Blind, tick: Callable[[], None]
    ) -> None:
        self.scenario = scenario
        self.variant = variant
        self.blind = blind
        self.tick = tick
        self.now = 0.0
        self.config: Config = variant.config(scenario.timing.hold_timeout_seconds)
        self.reasons = Reasons.for_resource(RESOURCE_NAME)
        specs = build_nodes(scenario.nodes, seed)
        self.truth = TrueNodes(specs)
        self.state = ClusterState(self.config, clock=lambda: self.now)
        self.state.replace([node_object(s) for s in specs], [])
        self.node_names = [s.name for s in specs]
        # Separate streams, so shadow and off draw the same tie-breaks.
        self.sample_rng = random.Random(f"{seed}/best-of-k")
        # The server's own verbs over the simulated cluster's state.
        self.verbs = ExtenderVerbs(
            self.config, self.state, rng=self.sample_rng, hold_in_flight=variant.inflight is not InFlight.NONE
        )
        self.tie_rng = random.Random(f"{seed}/tie-break")
        self.step_length = step_seconds(scenario)
        self.steps = [StepTally() for _ in range(step_count(scenario))]
        self.end = self.step_length * len(self.steps)
        self.shadow = ShadowGrades(self.steps, lambda: self.now, horizon_seconds=2 * self.end + 3600.0)
        self.namespaces: defaultdict[str, OutcomeTally] = defaultdict(OutcomeTally)
        self.placements: list[str] = []
        self.events: list[tuple[float, int, EventKind, Payload]] = []
        self.sequence = 0
        self.clients: list[Client] = []
        self.idle_clients: set[int] = set()
        self.seed = seed

    # -- events ---------------------------------------------------------------

    def push(self, at: float, kind: EventKind, payload: Payload = None) -> None:
        self.sequence += 1  # ties resolve in the order events were made
        heapq.heappush(self.events, (at, self.sequence, kind, payload))

    def run(self) -> VariantRun:
        started = time.perf_counter()
        self.schedule_workload()
        self.push(0.0, EventKind.SAMPLE)
        while self.events:
            at, _, kind, payload = heapq.heappop(self.events)
            # Past the end only pending placements still resolve; nothing new starts.
            if at >= self.end and kind is not EventKind.LAND:
                continue
            self.now = at
            self.dispatch(kind, payload)
        self.now += self.shadow.card.pair_seconds  # the last bursts close: what they held is counted
        self.shadow.tick()
        self.tick()
        run = VariantRun(self.variant, self.steps, dict(sorted(self.namespaces.items())), self.placements)
        run.wall_seconds = time.perf_counter() - started
        return run

    def dispatch(self, kind: EventKind, payload: Payload) -> None:
        if kind is EventKind.REQUEST and isinstance(payload, PodPlan):
            self.request(payload)
        elif kind is EventKind.WAKE and isinstance(payload, int):
            self.wake(payload)
        elif kind is EventKind.LAND and isinstance(payload, Flight):
            self.land(payload)
        elif kind is EventKind.BOUND and isinstance(payload, Flight):
            self.bound(payload)
        elif kind is EventKind.DEPART and isinstance(payload, Flight):
            self.depart(payload)
        elif kind is EventKind.STEP and isinstance(payload, int):
            self.start_step(payload)
        elif kind is EventKind.SAMPLE:
            self.sample()

    def schedule_workload(self) -> None:
        workload = self.scenario.workload
        if isinstance(workload, Ladder):
            for index in range(len(workload.levels)):
                self.push(index * workload.step_seconds, EventKind.STEP, index)
        else:
            for at, plan in trace_plans(workload, self.scenario.timing.placement_delay_seconds, self.seed):
                self.push(at, EventKind.REQUEST, plan)

    def step_at(self, at: float) -> int:
        return min(int(at // self.step_length), len(self.steps) - 1)

    # -- the ladder's clients -------------------------------------------------

    def level(self) -> int:
        workload = self.scenario.workload
        return workload.levels[self.step_at(self.now)] if isinstance(workload, Ladder) else 0

    def start_step(self, index: int) -> None:
        if index:
            self.tick()
        level = self.level()
        delay = self.scenario.timing.placement_delay_seconds
        while len(self.clients) < level:
            client = Client(len(self.clients), self.scenario.mix, delay, self.seed)
            self.clients.append(client)
            self.idle_clients.add(client.index)
        starting = sorted(c for c in self.idle_clients if c < level)
        for position, client_index in enumerate(starting):
            self.idle_clients.discard(client_index)
            self.push(self.now + STEP_RAMP_SECONDS * position / len(starting), EventKind.WAKE, client_index)

    def wake(self, index: int) -> None:
        if index >= self.level():
            self.idle_clients.add(index)  # the ladder stepped down; this client rests
            return
        self.request(self.clients[index].next_plan())

    def retry(self, plan: PodPlan, at: float) -> None:
        if plan.client is not None:
            self.push(at + self.scenario.timing.retry_backoff_seconds, EventKind.WAKE, plan.client)

    # -- a pod's life ---------------------------------------------------------

    def request(self, plan: PodPlan) -> None:
        """The scheduler's cycle for one pod: in-tree CPU fit, extender filter, scores, pick."""
        pod = pod_object(plan)
        demand = self.state.demand_of(pod)
        need_pages = hugepages_for(demand.bytes_of(RESOURCE_NAME), PAGE_SIZE_BYTES)
        step_index = self.step_at(self.now)
        step = self.steps[step_index]
        namespace = self.namespaces[plan.namespace]
        step.attempts += 1
        namespace.attempts += 1

        candidates = [n for n in self.node_names if self.truth.cpu_fits(n, demand.cpu_millis)]
        if not candidates:
            step.failed_native_cpu += 1
            namespace.failed_native_cpu += 1
            self.resolve(plan, "-", "no-cpu")
            self.retry(plan, self.now)
            return

        policy = self.config.policy_for(plan.namespace)
        started = time.perf_counter()
        decision = self.verbs.filter(plan.uid, plan.namespace, demand, candidates).decision
        passed = decision.passed
        # kube-scheduler calls prioritize only when more than one node is left.
        scores = (
            list(self.verbs.prioritize(plan.uid, plan.namespace, demand, passed))
            if len(passed) > 1
            else [(n, 0) for n in passed]
        )
        step.decision_seconds.append(time.perf_counter() - started)
        step.widened += decision.widened

        if not passed:
            step.failed_decision += 1
            namespace.failed_decision += 1
            step.outcomes[decision.outcome.value] += 1
            if self.truth.has_room(need_pages, demand.cpu_millis):
                step.false_failures += 1
                namespace.false_failures += 1
            step.seconds_to_failure.append(0.0)
            self.resolve(plan, "-", "rejected")
            self.retry(plan, self.now)
            return

        node = self.pick(scores, demand.cpu_millis)
        self.observe_pick(step, plan.uid, node, demand, policy)
        flight = Flight(plan, node, need_pages, step_index, self.now, self.shadow_prediction(node, demand, policy))
        if flight.shadow_predicts_failure is not None:
            self.shadow.judged(plan.uid, step_index, node, would_reject=flight.shadow_predicts_failure)
        # serve --enable-bind: the bind names the node, checked and held as the server does it (the replay
        # binds in its filter's step, so no other bind can have taken the room between).
        if self.variant.inflight is InFlight.BIND:
            self.verbs.bind_start(plan.uid, plan.namespace, "", node)
        self.truth.assumed_cpu[node] += demand.cpu_millis
        self.truth.arriving_pages[node] += need_pages
        # The bind lands in the API (and the extender's watch) long before the node runs the pod.
        self.push(self.now + min(self.scenario.timing.bind_delay_seconds, plan.delay_seconds), EventKind.BOUND, flight)
        self.push(self.now + plan.delay_seconds, EventKind.LAND, flight)

    def bound(self, flight: Flight) -> None:
        """The pod shows up bound: counted on its node by its request, its hold over."""
        self.state.apply_pod(pod_object(flight.plan, flight.node))

    def pick(self, scores: list[tuple[str, int]], cpu_millis: int) -> str:
        """Highest extender score; then the blind scheduler's preference; then a random draw."""
        least_cpu = self.blind is Blind.LEAST_CPU

        def rank(entry: tuple[str, int]) -> tuple[int, float, float]:
            name, score = entry
            preference = self.truth.least_cpu_preference(name, cpu_millis) if least_cpu else 0.0
            return score, preference, self.tie_rng.random()

        return max(scores, key=rank)[0]

    def observe_pick(self, step: StepTally, uid: str, node: str, demand: PodDemand, policy: Policy) -> None:
        # Which term of max(cpuLoad, memLoad) set the chosen node's load, as prioritize
        # scored it (without the pod's own hold): the evidence for whether CPU over-commit
        # ever decides a placement.
        account = self.state.books[RESOURCE_NAME].accounts_without(uid).get(node, UNKNOWN_ACCOUNT)
        step.picks += 1
        need = demand.of_one(RESOURCE_NAME)
        if cpu_load(account, need, policy.overcommit_ratio) > hugepage_load(account, need, policy.alpha):
            step.cpu_dominant += 1

    def shadow_prediction(self, node: str, demand: PodDemand, policy: Policy) -> bool | None:
        """Would shadow have rejected the chosen node? The same ``fits`` its counter uses."""
        if policy.mode is not Mode.SHADOW:
            return None
        account = self.state.books[RESOURCE_NAME].accounts.get(node, UNKNOWN_ACCOUNT)
        return not fits(account, demand.bytes_of(RESOURCE_NAME)).admits

    def land(self, flight: Flight) -> None:
        """The node admits the pod if its real pool holds it now; the extender hears either way."""
        plan, node = flight.plan, flight.node
        step = self.steps[flight.step]
        namespace = self.namespaces[plan.namespace]
        self.truth.arriving_pages[node] -= flight.need_pages
        failed = self.truth.free_pages(node) < flight.need_pages
        if flight.shadow_predicts_failure is not None:
            self.shadow.landed(plan.uid, failed=failed)
        if failed:
            self.truth.assumed_cpu[node] -= plan.cpu_millis
            self.state.remove_pod(plan.uid)  # the pod failed: its hold goes too
            step.failed_node += 1
            namespace.failed_node += 1
            step.seconds_to_failure.append(self.now - flight.requested_at)
            self.resolve(plan, node, "node-failed")
            self.retry(plan, self.now)
            return
        self.truth.used_pages[node] += flight.need_pages  # the extender counts it since it was bound
        step.placed += 1
        namespace.placed += 1
        self.resolve(plan, node, "placed")
        self.push(self.now + plan.lifetime_seconds, EventKind.DEPART, flight)

    def depart(self, flight: Flight) -> None:
        plan, node = flight.plan, flight.node
        self.truth.used_pages[node] -= flight.need_pages
        self.truth.assumed_cpu[node] -= plan.cpu_millis
        self.state.remove_pod(plan.uid)
        if plan.client is not None:
            self.push(self.now, EventKind.WAKE, plan.client)

    def resolve(self, plan: PodPlan, node: str, outcome: str) -> None:
        self.placements.append(f"{plan.uid} {node} {outcome}")

    def sample(self) -> None:
        step = self.steps[self.step_at(self.now)]
        utilisation, imbalance, cpu = self.truth.utilisation()
        step.utilisation.append(utilisation)
        step.imbalance.append(imbalance)
        step.cpu_utilisation.append(cpu)
        self.push(self.now + self.scenario.timing.sample_interval_seconds, EventKind.SAMPLE)


def run_variant(
    scenario: Scenario,
    variant: Variant,
    *,
    seed: int,
    blind: Blind = Blind.LEAST_CPU,
    tick: Callable[[], None] = lambda: None,
) -> VariantRun:
    """Replay ``scenario`` against ``variant``; ``tick`` is called once per step done."""
    return Replay(scenario, variant, seed=seed, blind=blind, tick=tick).run()
