"""What each widening costs on a large, nearly full cluster (the RFC's scale question).

Builds a real ``ClusterState`` of ``node_count`` nodes in which only a given
fraction can hold an 8 GiB VM, then times the real filter with its in-flight
hold (and prioritize, when the filter leaves more than one node) for each
sampling strategy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from extender.core.answer import FilterDecision
from extender.core.config import Config
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy, PolicyTable, Widening
from extender.state.cluster import ClusterState
from extender.state.verbs import ExtenderVerbs
from replay.model import GIB, PAGE_SIZE_BYTES, RESOURCE_NAME, ScaleSettings
from replay.simulate import NodeSpec, node_object
from replay.tally import percentile

NEED_BYTES = 8 * GIB
POOL_BYTES = 64 * GIB
# A full node keeps 4 GiB free: less than the need, so the filter rejects it,
# but not zero, so it takes the "insufficient" path rather than the short cut.
FULL_NODE_FREE_BYTES = 4 * GIB
PROBE_UID = "scale-probe"

STRATEGIES: tuple[tuple[str, Policy], ...] = (
    ("shadow (every node checked, none removed)", Policy(mode=Mode.SHADOW)),
    ("enforce none K=3", Policy(mode=Mode.ENFORCE, widening=Widening.NONE)),
    ("enforce resample K=3", Policy(mode=Mode.ENFORCE, widening=Widening.RESAMPLE)),
    ("enforce fullscan K=3", Policy(mode=Mode.ENFORCE, widening=Widening.FULLSCAN)),
    ("enforce drawUntilK K=3", Policy(mode=Mode.ENFORCE, widening=Widening.DRAW_UNTIL_K)),
    ("enforce K=0 (all nodes)", Policy(mode=Mode.ENFORCE, sample_size=0)),
)


@dataclass(frozen=True, slots=True)
class ScaleRow:
    strategy: str
    fitting_fraction: float
    fitting_nodes: int
    examined_mean: float  # nodes whose fit was computed, per decision
    no_node_share: float  # decisions that left no node
    p50_seconds: float
    p99_seconds: float


def nearly_full_cluster(node_count: int, fitting: int, seed: int) -> ClusterState:
    """``node_count`` nodes with 64 GiB pools; all but ``fitting`` of them hold only 4 GiB free."""
    rng = random.Random(f"{seed}/scale/{node_count}/{fitting}")
    roomy = set(rng.sample(range(node_count), fitting))
    pool_pages = POOL_BYTES // PAGE_SIZE_BYTES
    full_outside = (POOL_BYTES - FULL_NODE_FREE_BYTES) // PAGE_SIZE_BYTES
    specs = [
        NodeSpec(f"node-{i:05d}", pool_pages, 0 if i in roomy else full_outside, 32_000) for i in range(node_count)
    ]
    state = ClusterState(Config(resource_names=(RESOURCE_NAME,)))
    state.replace([node_object(s) for s in specs], [])
    return state


@dataclass(slots=True)
class _Observed:
    seconds: list[float] = field(default_factory=list)
    examined: int = 0
    no_node: int = 0


def timed_decision(
    state: ClusterState, names: list[str], policy: Policy, rng: random.Random
) -> tuple[float, FilterDecision]:
    """One decision as the scheduler would ask for it: filter (with the hold an enforcing filter
    makes, as server.py does), then prioritize if several nodes pass. The hold is released
    afterwards, untimed, so every decision sees the same cluster."""
    demand = PodDemand({RESOURCE_NAME: NEED_BYTES}, cpu_millis=1000)
    config = Config(resource_names=(RESOURCE_NAME,), placement=PolicyTable(defaults=policy))
    verbs = ExtenderVerbs(config, state, rng=rng)
    started = time.perf_counter()
    decision = verbs.filter(PROBE_UID, "scale", demand, names).decision
    if len(decision.passed) > 1:
        verbs.prioritize(PROBE_UID, "scale", demand, decision.passed)
    seconds = time.perf_counter() - started
    state.release(PROBE_UID)
    return seconds, decision


def measure_widening_cost(
    settings: ScaleSettings, seed: int, tick: Callable[[], None] = lambda: None
) -> list[ScaleRow]:
    rows = []
    for fraction in settings.fitting_fractions:
        fitting = round(settings.node_count * fraction)
        state = nearly_full_cluster(settings.node_count, fitting, seed)
        names = sorted(state.nodes())
        rngs = [random.Random(f"{seed}/scale-draws/{label}") for label, _ in STRATEGIES]
        observed = [_Observed() for _ in STRATEGIES]
        # Round robin over the strategies: a burst of other load on the machine
        # then slows every strategy alike instead of skewing one row.
        for _ in range(settings.repetitions):
            for (_, policy), rng, seen in zip(STRATEGIES, rngs, observed, strict=True):
                seconds, decision = timed_decision(state, names, policy, rng)
                seen.seconds.append(seconds)
                seen.examined += decision.examined
                seen.no_node += not decision.passed
        rows += [
            ScaleRow(
                strategy=label,
                fitting_fraction=fraction,
                fitting_nodes=fitting,
                examined_mean=seen.examined / settings.repetitions,
                no_node_share=seen.no_node / settings.repetitions,
                p50_seconds=percentile(seen.seconds, 50) or 0.0,
                p99_seconds=percentile(seen.seconds, 99) or 0.0,
            )
            for (label, _), seen in zip(STRATEGIES, observed, strict=True)
        ]
        tick()
    return rows
