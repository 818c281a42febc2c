"""The filter and prioritize decisions: pure functions over node accounts.

Both verbs read the same ``NodeAccount`` values and the same ``capacity.fits``,
so a node the filter admits is never scored as if it could not hold the pod.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from extender.capacity import (
    NO_POOL_ACCOUNT,
    UNBOUNDED,
    Fit,
    NodeAccount,
    fits,
    headroom_bytes,
    numa_headroom_bytes,
)
from extender.columns import NodeColumns
from extender.namelist import NameList
from extender.podrequest import PodDemand
from extender.policy import Mode, Policy
from extender.sampling import Sample, best_of_k
from extender.scoring import node_load, priorities, priority

Accounts = Mapping[str, NodeAccount]
HOLD_LIMIT = 16  # most nodes a filter answer holds a pod's need on (see FilterDecision.nodes_to_hold)
VECTOR_THRESHOLD = 64  # below this many candidates the scalar loop is faster than numpy's setup


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
        return {
            Fit.NO_POOL: self.no_pool,
            Fit.EXCEEDS_POOL: self.exceeds_pool,
            Fit.HELD_OUTSIDE: self.held_outside,
            Fit.NUMA_INSUFFICIENT: self.numa,
        }.get(verdict, self.insufficient)


@dataclass(frozen=True, slots=True)
class FilterDecision:
    passed: Sequence[str]  # the candidates themselves when every one passes
    failed: dict[str, str] = field(default_factory=dict)  # resolvable: preemption may help
    unresolvable: dict[str, str] = field(default_factory=dict)  # the pool is too small
    outcome: Outcome = Outcome.PASSTHROUGH
    insufficient: int = 0  # nodes found without room (rejected, or would be in shadow)
    exceeds_pool: int = 0  # nodes that can never hold it: no pool, pool (less pages held outside) too small
    examined: int = 0
    widened: bool = False

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


def _account(accounts: Accounts, name: str) -> NodeAccount:
    # Nodes the extender does not know are treated like nodes without a pool.
    return accounts.get(name, NO_POOL_ACCOUNT)


class _HeadroomOf:
    """Headroom computed on demand from accounts, for callers without a precomputed table."""

    def __init__(self, accounts: Accounts) -> None:
        self._accounts = accounts

    def get(self, name: str, default: int) -> int:
        account = self._accounts.get(name)
        return default if account is None else headroom_bytes(account)


def filter_nodes(
    demand: PodDemand,
    candidates: Sequence[str],
    *,
    accounts: Accounts,
    policy: Policy,
    reasons: Reasons,
    rng: random.Random,
    headroom: Mapping[str, int] | None = None,
    columns: NodeColumns | None = None,
) -> FilterDecision:
    """Which candidates may receive the pod, under the pod's namespace policy.

    ``headroom`` (``capacity.headroom_bytes`` of every account, kept by the
    cluster state) makes admission one dict lookup and one comparison per node;
    without it each candidate's headroom is computed from its account. A policy
    that examines every candidate does so in one numpy comparison over
    ``columns`` (the same headroom, by slot) when there are many.
    """
    if policy.mode is Mode.OFF or not demand.wants_hugepages:
        return FilterDecision(passed=candidates)

    need = demand.hugepage_bytes
    room = headroom if headroom is not None else _HeadroomOf(accounts)
    room_of = room.get
    numa = policy.numa_aligned and demand.guaranteed
    if numa:
        # A pod pinned to one NUMA node (Guaranteed, single-numa-node nodes) also needs one node with
        # the pages free; nodes that report no NUMA figures are judged on the whole pool.
        whole_of = room_of

        def room_of(name: str, default: int) -> int:
            account = accounts.get(name)
            return (
                whole_of(name, default)
                if account is None
                else min(whole_of(name, default), numa_headroom_bytes(account))
            )

        columns = None
    if policy.examines_every_candidate:
        sample = _examine_every(need, candidates, room_of, columns)
    else:
        sample = best_of_k(
            candidates, policy.sample_size, policy.widening, lambda name: need <= room_of(name, UNBOUNDED), rng
        )
    if policy.mode is Mode.SHADOW:
        # Counted per candidate given (the verdicts are not sent: every node passes).
        exceeds = sum(1 for n in sample.rejected if fits(_account(accounts, n), need, numa_aligned=numa).unresolvable)
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=len(sample.rejected) - exceeds,
            exceeds_pool=exceeds,
            examined=len(candidates),
        )
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in sample.rejected:
        verdict = fits(_account(accounts, name), need, numa_aligned=numa)
        (unresolvable if verdict.unresolvable else failed)[name] = reasons.of(verdict)
    insufficient, exceeds_pool = len(failed), len(unresolvable)

    if sample.kept:
        outcome = Outcome.FIT
    elif not sample.exhausted:
        outcome = Outcome.NO_FIT_IN_SAMPLE
        # Unexamined nodes are reported, not dropped: a dropped node counts as
        # unresolvable and preemption would skip it.
        examined = set(sample.rejected)  # nothing was kept
        failed.update((n, reasons.not_sampled) for n in candidates if n not in examined)
    elif insufficient:
        outcome = Outcome.NO_HUGEPAGE_CAPACITY
    else:
        outcome = Outcome.NO_COMPATIBLE_NODE
    return FilterDecision(
        passed=sample.kept,
        failed=failed,
        unresolvable=unresolvable,
        outcome=outcome,
        insufficient=insufficient,
        exceeds_pool=exceeds_pool,
        examined=len(sample.kept) + len(sample.rejected),
        widened=sample.widened,
    )


def _fits_int64(demand: PodDemand) -> bool:
    return demand.hugepage_bytes <= UNBOUNDED and demand.cpu_millis <= UNBOUNDED


def reads_columns(candidates: Sequence[str]) -> bool:
    """Whether a decision over ``candidates`` reads the numpy columns; below this many the
    per-node loop is faster than numpy's setup, and the columns need not be brought up to date."""
    return len(candidates) > VECTOR_THRESHOLD


def _examine_every(
    need: int, candidates: Sequence[str], room_of: Callable[[str, int], int], columns: NodeColumns | None
) -> Sample[str]:
    """Every candidate, split into those with room for ``need`` and the others, in order."""
    if columns is None or not reads_columns(candidates) or need > UNBOUNDED:
        kept: list[str] = []
        rejected: list[str] = []
        for name in candidates:
            (kept if need <= room_of(name, UNBOUNDED) else rejected).append(name)
        return Sample(kept, rejected, exhausted=True, widened=False)
    admitted = need <= columns.column("headroom")[columns.slots(candidates)]
    if admitted.all():
        return Sample(candidates, [], exhausted=True, widened=False)  # echoed as it came
    names = np.array(candidates.names() if isinstance(candidates, NameList) else candidates, dtype=object)
    return Sample(names[admitted].tolist(), names[~admitted].tolist(), exhausted=True, widened=False)


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


def prioritize_nodes(
    demand: PodDemand,
    candidates: Sequence[str],
    *,
    accounts: Accounts,
    policy: Policy,
    columns: NodeColumns | None = None,
) -> HostScores:
    """A 0..10 score per candidate; neutral (all 0) unless the policy enforces.

    With ``columns`` (the same accounts as numpy columns) thousands of nodes are
    scored at once; the scores are the scalar ones.
    """
    if policy.mode is not Mode.ENFORCE or not demand.wants_hugepages:
        return HostScores.neutral(candidates)
    if columns is not None and reads_columns(candidates) and _fits_int64(demand):
        return HostScores(candidates, priorities(demand, columns.slots(candidates), columns, policy))
    scores = (priority(node_load(_account(accounts, name), demand, policy)) for name in candidates)
    return HostScores(candidates, np.fromiter(scores, np.int64, len(candidates)))
