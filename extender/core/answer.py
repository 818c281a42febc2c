"""The filter's and prioritize's answers: one value each, and the filter's built in one place.

Both decision paths (``reference``, node by node; ``columnar``, over numpy columns) classify
the nodes they reject into ``Rejections`` and hand them, with the nodes they kept, to
``filter_answer``: the outcome, the counts and the nodes outside a best-of-K sample are
decided there alone, so the two paths cannot answer differently for the same verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from extender.core.capacity import Fit
from extender.core.holds import HOLD_LIMIT
from extender.core.policy import Mode


class Outcome(StrEnum):
    """How a filter call ended; the ``outcome`` label of the filter metric."""

    PASSTHROUGH = "passthrough"  # not the extender's business: no need, mode off, exempt
    SHADOW = "shadow"  # every node passed; rejections only counted
    FIT = "fit"  # at least one node admitted
    NO_HUGEPAGE_CAPACITY = "no_hugepage_capacity"  # pools exist but are full: scale up / wait
    NO_COMPATIBLE_NODE = "no_compatible_node"  # no candidate, or every pool too small
    NO_FIT_IN_SAMPLE = "no_fit_in_sample"  # the best-of-K sample held none; others unexamined


@dataclass(frozen=True, slots=True)
class Reasons:
    """Constant reason strings, one per cause, so the scheduler's event aggregates
    ("0/12 nodes are available: 9 Insufficient hugepages-2Mi ...") and no
    per-node capacity leaks to whoever reads events in the namespace."""

    insufficient: str
    exceeds_pool: str
    not_sampled: str
    no_pool: str = ""
    held_outside: str = ""
    numa: str = ""

    @classmethod
    def for_resource(cls, resource_name: str) -> Reasons:
        return cls(
            insufficient=f"Insufficient {resource_name} (pool in use or held by placements in flight)",
            exceeds_pool=f"Pod's {resource_name} request exceeds the node's whole pool",
            not_sampled="Not examined: outside the best-of-K sample",
            no_pool=f"Node has no {resource_name} pool",
            held_outside=f"Pod's {resource_name} request exceeds what pages held outside pods leave of the pool",
            numa=f"No single NUMA node has the {resource_name} the pod needs free",
        )

    def of(self, verdict: Fit) -> str:
        # Identity tests: an Enum's hash is a Python-level call, and this runs per rejected node.
        if verdict is Fit.NO_POOL:
            return self.no_pool
        if verdict is Fit.EXCEEDS_POOL:
            return self.exceeds_pool
        if verdict is Fit.HELD_OUTSIDE:
            return self.held_outside
        if verdict is Fit.NUMA_INSUFFICIENT:
            return self.numa
        return self.insufficient


class RejectedByReason(Mapping[str, str]):
    """Rejected nodes grouped by their constant reason, as the columns find them: a boolean
    mask over the candidates per reason.

    The names were read in place (``NameList``: printable ASCII, no quote, no backslash)
    and each is given once, so ``wire`` writes the JSON object with one string join per
    reason, and the names are selected only when written or read: no dict of 4,500
    entries is built and encoded for a K = 0 answer on a full cluster. Read as a
    mapping, it builds that dict on first use. With ``at`` (positions into ``names``),
    the masks are over those positions: the rejected of a scan that kept
    some, whose names are seldom read (kube-scheduler reads them only when none pass).
    """

    __slots__ = ("_at", "_dict", "_masks", "_names")

    def __init__(
        self,
        names: npt.NDArray[np.object_],
        masks: Sequence[tuple[str, npt.NDArray[np.bool_]]],
        at: npt.NDArray[np.intp] | None = None,
    ) -> None:
        self._names = names
        self._at = at
        self._masks = tuple((reason, mask) for reason, mask in masks if mask.any())
        self._dict: dict[str, str] | None = None

    @property
    def groups(self) -> Iterator[tuple[str, list[str]]]:
        """Each reason with the names it rejects, in the candidates' order."""
        names, at = self._names, self._at
        if at is None:
            return ((reason, names[mask].tolist()) for reason, mask in self._masks)
        return ((reason, names[at[mask]].tolist()) for reason, mask in self._masks)

    def _mapping(self) -> dict[str, str]:
        if self._dict is None:
            self._dict = {name: reason for reason, names in self.groups for name in names}
        return self._dict

    def __getitem__(self, name: str) -> str:
        return self._mapping()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return sum(int(np.count_nonzero(mask)) for _, mask in self._masks)

    def __repr__(self) -> str:
        return f"RejectedByReason({dict(self)!r})"


# Per page size, in the views' order: the rejected nodes (short of room, never) whose verdict comes from it.
SizeCounts = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Rejections:
    """The nodes a decision rejected, each classified once: short of room now (``failed``: it may
    free up) or never (``unresolvable``: no pool, or the pool too small), with their counts.

    In shadow the counts are per candidate given (the maps are not sent, and stay empty);
    otherwise per node named, as the maps hold them (a name given twice is one node)."""

    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]
    insufficient: int
    exceeds_pool: int
    by_size: SizeCounts = ()  # empty over one size: every verdict is its own


NO_REJECTIONS = Rejections({}, {}, 0, 0)


@dataclass(frozen=True, slots=True)
class FilterDecision:
    passed: Sequence[str]  # the candidates themselves when every one passes
    # Rejected nodes by cause (both go to the scheduler as FailedAndUnresolvableNodes: wire.render_filter).
    failed: Mapping[str, str] = field(default_factory=dict)  # short of room now: it may free up
    unresolvable: Mapping[str, str] = field(default_factory=dict)  # never: no pool, or the pool is too small
    outcome: Outcome = Outcome.PASSTHROUGH
    insufficient: int = 0  # nodes found without room (rejected, or would be in shadow)
    exceeds_pool: int = 0  # nodes that can never hold it: no pool, pool (less pages held outside) too small
    examined: int = 0
    widened: bool = False
    # A decision over several sizes (filter_sizes): per size, in the views' order, the rejected nodes
    # (insufficient, exceeds_pool) whose verdict comes from that size; empty over one size (all its own).
    by_size: SizeCounts = ()

    @property
    def chosen(self) -> str | None:
        """The node the pod will go to, when the answer leaves exactly one."""
        return self.passed[0] if len(self.passed) == 1 else None

    @property
    def nodes_to_hold(self) -> Sequence[str]:
        """Where to hold the pod's need until it shows up bound: every admitted node,
        when there are few (best-of-K), since the scheduler may pick any of them and
        filters the next pod before this one's bind. Beyond ``HOLD_LIMIT`` nodes the
        hold would cost more than it protects; the bind verb then names the node."""
        return self.passed if len(self.passed) <= HOLD_LIMIT else []


@dataclass(frozen=True, slots=True)
class Examined:
    """What a decision looked at: how many candidates (each given one counted), whether every one
    (else a best-of-K sample stopped early), and whether the widening strategy had to act."""

    count: int
    exhausted: bool
    widened: bool = False


def passed_through(candidates: Sequence[str]) -> FilterDecision:
    """The answer when the pod is not the extender's business (the policy is off, or it needs no
    pages): every candidate passes, nothing is examined."""
    return FilterDecision(passed=candidates)


def filter_answer(
    candidates: Sequence[str],
    kept: Sequence[str],
    rejections: Rejections,
    *,
    mode: Mode,
    examined: Examined,
    not_sampled: str,
) -> FilterDecision:
    """The filter's answer from the nodes a decision kept and the rejections it classified.

    Shadow passes every candidate and only counts. Otherwise the outcome says why nothing passed:
    a sample that stopped early (its unexamined candidates reported with ``not_sampled``, not
    dropped, so the scheduler's event counts them), pools without room now, or none that ever could."""
    if mode is Mode.SHADOW:
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=rejections.insufficient,
            exceeds_pool=rejections.exceeds_pool,
            examined=len(candidates),
            by_size=rejections.by_size,
        )
    failed = rejections.failed
    if kept:
        outcome = Outcome.FIT
    elif not examined.exhausted:
        outcome = Outcome.NO_FIT_IN_SAMPLE
        seen = {*failed, *rejections.unresolvable}
        failed = {**failed, **{name: not_sampled for name in candidates if name not in seen}}
    elif rejections.insufficient:
        outcome = Outcome.NO_HUGEPAGE_CAPACITY
    else:
        outcome = Outcome.NO_COMPATIBLE_NODE
    return FilterDecision(
        passed=kept,
        failed=failed,
        unresolvable=rejections.unresolvable,
        outcome=outcome,
        insufficient=rejections.insufficient,
        exceeds_pool=rejections.exceeds_pool,
        examined=examined.count,
        widened=examined.widened,
        by_size=rejections.by_size,
    )


@dataclass(frozen=True, slots=True)
class HostScores:
    """A 0..10 score for each candidate, in the candidates' order."""

    names: Sequence[str]
    scores: npt.NDArray[np.int64]

    @classmethod
    def neutral(cls, names: Sequence[str]) -> HostScores:
        return cls(names, np.zeros(len(names), np.int64))

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return zip(self.names, self.scores.tolist(), strict=True)
