"""Counters a replay keeps per ladder step, and the arithmetic that summarises them."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

# The scorecard's cells (extender.core.podoutcome.CELLS) as the replay's report names them.
_TALLY_OF_CELL = {
    "predicted_failed": "predicted_and_failed",
    "predicted_ran": "predicted_but_placed",
    "failed_unpredicted": "missed_failure",
    "ran_as_predicted": "predicted_placed",
}


@dataclass(slots=True)
class ShadowTally:
    """Shadow's would-be rejection of the chosen node against what the node then did, per pod, with a
    false alarm and a miss on one node in one burst counted as a hit and a pod placed as predicted."""

    predicted_and_failed: int = 0  # true positive
    predicted_but_placed: int = 0  # false positive
    missed_failure: int = 0  # false negative
    predicted_placed: int = 0  # true negative

    def count(self, cell: str) -> None:
        """One pod in a cell of shadow's scorecard (``replay.shadowgrade``, paired per node and burst)."""
        name = _TALLY_OF_CELL[cell]  # nothing else comes: every replayed pod lands, none is deleted
        setattr(self, name, getattr(self, name) + 1)

    @property
    def observed(self) -> int:
        return self.predicted_and_failed + self.predicted_but_placed + self.missed_failure + self.predicted_placed

    @property
    def precision(self) -> float | None:
        """Of the chosen nodes shadow would have rejected, the share that did fail the pod."""
        return ratio(self.predicted_and_failed, self.predicted_and_failed + self.predicted_but_placed)

    @property
    def recall(self) -> float | None:
        """Of the pods that failed on their node, the share shadow saw coming."""
        return ratio(self.predicted_and_failed, self.predicted_and_failed + self.missed_failure)


@dataclass(slots=True)
class OutcomeTally:
    """What became of the pods requested in one step (or one namespace)."""

    attempts: int = 0
    placed: int = 0
    failed_native_cpu: int = 0  # the in-tree CPU filter left no node
    failed_decision: int = 0  # the extender's filter left no node: a fast failure
    failed_node: int = 0  # the node's real pool could not hold the pod: "Failed to place sandbox"
    false_failures: int = 0  # failed at the decision although some node had room

    @property
    def failed(self) -> int:
        return self.failed_native_cpu + self.failed_decision + self.failed_node


@dataclass(slots=True)
class StepTally(OutcomeTally):
    outcomes: Counter[str] = field(default_factory=Counter)  # filter outcomes of failed decisions
    widened: int = 0  # decisions where the widening strategy acted
    picks: int = 0
    cpu_dominant: int = 0  # picks where the CPU term, not the hugepage term, set the node's load
    shadow: ShadowTally = field(default_factory=ShadowTally)
    decision_seconds: list[float] = field(default_factory=list)  # wall clock, filter + prioritize
    seconds_to_failure: list[float] = field(default_factory=list)  # simulated, request to failure
    utilisation: list[float] = field(default_factory=list)  # pod pages / usable pages, per sample
    imbalance: list[float] = field(default_factory=list)  # CV of per-node used fraction, per sample
    cpu_utilisation: list[float] = field(default_factory=list)  # requested / allocatable CPU, per sample


def ratio(part: int | float, whole: int | float) -> float | None:
    return part / whole if whole else None


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100): always one of the observed values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def coefficient_of_variation(values: list[float]) -> float:
    """Population standard deviation over mean; 0 for an empty or all-zero list."""
    if not values:
        return 0.0
    average = sum(values) / len(values)
    if average == 0:
        return 0.0
    variance = sum((v - average) ** 2 for v in values) / len(values)
    return math.sqrt(variance) / average


def merge(tallies: list[StepTally]) -> StepTally:
    """One tally for a whole run, from its steps."""
    total = StepTally()
    for step in tallies:
        total.attempts += step.attempts
        total.placed += step.placed
        total.failed_native_cpu += step.failed_native_cpu
        total.failed_decision += step.failed_decision
        total.failed_node += step.failed_node
        total.false_failures += step.false_failures
        total.outcomes.update(step.outcomes)
        total.widened += step.widened
        total.picks += step.picks
        total.cpu_dominant += step.cpu_dominant
        s, t = step.shadow, total.shadow
        t.predicted_and_failed += s.predicted_and_failed
        t.predicted_but_placed += s.predicted_but_placed
        t.missed_failure += s.missed_failure
        t.predicted_placed += s.predicted_placed
        total.decision_seconds += step.decision_seconds
        total.seconds_to_failure += step.seconds_to_failure
        total.utilisation += step.utilisation
        total.imbalance += step.imbalance
        total.cpu_utilisation += step.cpu_utilisation
    return total
