"""What each widening costs on a large, nearly full cluster (the RFC's scale question).

Builds a real ``ClusterState`` of ``node_count`` nodes in which only a given
fraction can hold an 8 GiB VM, then times the real filter (and prioritize,
when the filter leaves more than one node) for each sampling strategy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from extender.cluster import ClusterState
from extender.config import Config
from extender.decision import Reasons, filter_nodes, prioritize_nodes
from extender.podrequest import PodDemand
from extender.policy import Mode, Policy, Widening
from extender.replay.model import GIB, PAGE_SIZE_BYTES, RESOURCE_NAME, ScaleSettings
from extender.replay.simulate import NodeSpec, node_object
from extender.replay.tally import percentile

NEED_BYTES = 8 * GIB
POOL_BYTES = 64 * GIB
# A full node keeps 4 GiB free: less than the need, so the filter rejects it,
# but not zero, so it takes the "insufficient" path rather than the short cut.
FULL_NODE_FREE_BYTES = 4 * GIB

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
    state = ClusterState(Config(resource_name=RESOURCE_NAME, page_size_bytes=PAGE_SIZE_BYTES))
    state.replace([node_object(s) for s in specs], [])
    return state


def time_strategy(state: ClusterState, policy: Policy, repetitions: int, seed: int) -> tuple[list[float], int, int]:
    """Per-decision seconds, nodes examined in all, and decisions that left no node."""
    demand = PodDemand(hugepage_bytes=NEED_BYTES, cpu_millis=1000)
    names = sorted(state.accounts)
    reasons = Reasons.for_resource(RESOURCE_NAME)
    rng = random.Random(f"{seed}/scale-draws")
    seconds: list[float] = []
    examined = empty = 0
    for _ in range(repetitions):
        started = time.perf_counter()
        decision = filter_nodes(demand, names, accounts=state.accounts, policy=policy, reasons=reasons, rng=rng)
        if len(decision.passed) > 1:
            prioritize_nodes(demand, decision.passed, accounts=state.accounts, policy=policy)
        seconds.append(time.perf_counter() - started)
        examined += decision.examined
        empty += not decision.passed
    return seconds, examined, empty


def measure_widening_cost(settings: ScaleSettings, seed: int, tick: Callable[[], None] = lambda: None) -> list[ScaleRow]:
    rows = []
    for fraction in settings.fitting_fractions:
        fitting = round(settings.node_count * fraction)
        state = nearly_full_cluster(settings.node_count, fitting, seed)
        for label, policy in STRATEGIES:
            seconds, examined, empty = time_strategy(state, policy, settings.repetitions, seed)
            rows.append(
                ScaleRow(
                    strategy=label,
                    fitting_fraction=fraction,
                    fitting_nodes=fitting,
                    examined_mean=examined / settings.repetitions,
                    no_node_share=empty / settings.repetitions,
                    p50_seconds=percentile(seconds, 50) or 0.0,
                    p99_seconds=percentile(seconds, 99) or 0.0,
                )
            )
        tick()
    return rows
