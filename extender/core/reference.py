"""The filter decision as the RFC states it (docs/rfc.md), node by node: the reference.

For each page size the pod asks, a node is admitted only if that pool can hold the pod on top
of what it carries (``capacity.fits``: the pool less the pages used, reserved and held in
flight). The candidates examined are every one (shadow, K = 0) or a best-of-K sample, widened
when it finds none (``sampling.best_of_k``). A rejected node gets the verdict of its first size
that could never hold the pod, else of its first size without room now, and that verdict's
constant reason; the answer is built from those (``answer.filter_answer``).

``columnar`` reaches the same decision over numpy columns, and property tests hold the two equal
(tests/test_properties.py); ``decision`` chooses between them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from extender.core.answer import Examined, FilterDecision, HostScores, Reasons, Rejections, SizeCounts, filter_answer
from extender.core.capacity import (
    UNBOUNDED,
    UNKNOWN_ACCOUNT,
    Fit,
    NodeAccount,
    ceiling_bytes,
    fits,
    headroom_bytes,
    numa_headroom_bytes,
)
from extender.core.columns import NodeColumns
from extender.core.podrequest import PodDemand, SizeNeed
from extender.core.policy import Mode, Policy
from extender.core.sampling import Judge, Sample, best_of_k
from extender.core.scoring import node_load, priority

Accounts = Mapping[str, NodeAccount]
Admits = Callable[[str], bool]  # whether a node has room for the pod in every pool it needs


@dataclass(frozen=True, slots=True)
class SizeView:
    """One page size's accounts as a decision reads them, and the pod's need of that size (bytes).

    ``headroom`` (``capacity.headroom_bytes`` of every account, kept by the cluster state) makes
    admission one lookup and one comparison per node; ``columns`` hold the same accounts as numpy
    columns (``columnar``)."""

    need: int
    accounts: Accounts
    reasons: Reasons
    headroom: Mapping[str, int] | None = None
    columns: NodeColumns | None = None


def account_of(view: SizeView, name: str) -> NodeAccount:
    """A node's account of this size. One the extender does not know has page size 0: Fit.UNKNOWN,
    admitted and left to the scheduler."""
    return view.accounts.get(name, UNKNOWN_ACCOUNT)


def filter_per_node(
    candidates: Sequence[str], views: Sequence[SizeView], policy: Policy, rng: random.Random, *, numa: bool
) -> FilterDecision:
    """Which candidates may receive the pod (``numa``: pinned to one NUMA node): those examined
    judged by their accounts, those rejected classified by their verdicts."""
    sample = draw(candidates, policy, admission(views, numa=numa), rng)
    rejections = rejections_of(sample.rejected, views, numa=numa, mode=policy.mode)
    examined = Examined(len(sample.kept) + len(sample.rejected), sample.exhausted, sample.widened)
    return filter_answer(
        candidates,
        sample.kept,
        rejections,
        mode=policy.mode,
        examined=examined,
        not_sampled=views[0].reasons.not_sampled,
    )


def draw(
    candidates: Sequence[str], policy: Policy, admits: Admits, rng: random.Random, judge: Judge | None = None
) -> Sample[str]:
    """The candidates examined, split into kept and rejected: every one when the policy examines
    every one (shadow counts each would-be rejection, K = 0 passes every node that fits), else
    best-of-K (``judge``: every candidate judged at once, as ``admits`` would)."""
    if policy.examines_every_candidate:
        kept: list[str] = []
        rejected: list[str] = []
        for name in candidates:
            (kept if admits(name) else rejected).append(name)
        return Sample(kept, rejected, exhausted=True, widened=False)
    return best_of_k(candidates, policy.sample_size, policy.widening, admits, rng, judge=judge)


def admission(views: Sequence[SizeView], *, numa: bool) -> Admits:
    """Whether a node has room in every pool the pod needs: the need within each size's headroom
    (the largest need ``fits`` admits; property tests hold the two equal)."""
    rooms = [(view.need, room_of(view, numa=numa)) for view in views]
    if len(rooms) == 1:  # one size: one lookup and one comparison per node
        need, room = rooms[0]
        return lambda name: need <= room(name, UNBOUNDED)

    def every_size(name: str) -> bool:
        for need, room in rooms:  # noqa: SIM110 (all() over a generator costs half as much again a node)
            if need > room(name, UNBOUNDED):
                return False
        return True

    return every_size


def room_of(view: SizeView, *, numa: bool) -> Callable[[str, int], int]:
    """A node's headroom of this size in bytes (``default`` for a node without an account)."""
    accounts = view.accounts

    def computed(name: str, default: int) -> int:
        account = accounts.get(name)
        return default if account is None else headroom_bytes(account)

    whole = view.headroom.get if view.headroom is not None else computed
    if not numa:
        return whole

    def within_one_numa_node(name: str, default: int) -> int:
        # Pinned to one NUMA node (Guaranteed, single-numa-node nodes), the pod also needs one NUMA node
        # with the pages free; nodes that report no NUMA figures are judged on the whole pool.
        account = accounts.get(name)
        room = whole(name, default)
        return room if account is None else min(room, numa_headroom_bytes(account))

    return within_one_numa_node


def size_verdict(views: Sequence[SizeView], name: str, *, numa: bool) -> tuple[Fit, SizeView]:
    """A node's verdict over every size the pod needs, and the size it comes from: the first
    size no pod leaving could make room in, else the first without room now, else the first
    (every size admits)."""
    first: tuple[Fit, SizeView] | None = None
    short: tuple[Fit, SizeView] | None = None
    for view in views:
        verdict = fits(account_of(view, name), view.need, numa_aligned=numa)
        if verdict.unresolvable:
            return verdict, view
        if short is None and not verdict.admits:
            short = verdict, view
        first = first or (verdict, view)
    return cast("tuple[Fit, SizeView]", short or first)


def rejections_of(rejected: Sequence[str], views: Sequence[SizeView], *, numa: bool, mode: Mode) -> Rejections:
    """The rejected nodes, each with the reason of its verdict (``size_verdict``): short of room
    now, or never. In shadow only counted, per candidate given."""
    verdict_of = _verdict_of_rejected(views, numa=numa)
    if mode is Mode.SHADOW:
        given = [verdict_of(name) for name in rejected]
        exceeds = sum(1 for verdict, _ in given if verdict.unresolvable)
        return Rejections({}, {}, len(given) - exceeds, exceeds, counts_by_size(views, given))
    verdicts: dict[str, tuple[Fit, SizeView]] = {}  # a name given twice is one node
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name in rejected:
        verdict, view = verdicts[name] = verdict_of(name)
        if verdict is Fit.INSUFFICIENT:  # the usual one, told by identity (an Enum's hash is a Python call)
            failed[name] = view.reasons.insufficient
        else:
            (unresolvable if verdict.unresolvable else failed)[name] = view.reasons.of(verdict)
    return Rejections(failed, unresolvable, len(failed), len(unresolvable), counts_by_size(views, verdicts.values()))


def _verdict_of_rejected(views: Sequence[SizeView], *, numa: bool) -> Callable[[str], tuple[Fit, SizeView]]:
    """``size_verdict`` of a node admission turned away. Over one size (the usual case), a node
    within its ceiling (what its pool less the pages held outside pods could ever hold) is short of
    room now, Fit.INSUFFICIENT, without ``fits``: a cluster of full nodes costs one comparison each
    (tests/test_properties.py holds ``ceiling_bytes`` to ``fits``' unresolvable verdicts)."""
    if numa or any(view.need < 1 for view in views):  # a NUMA node's room only fits tells from the pool's
        return lambda name: size_verdict(views, name, numa=numa)
    if len(views) > 1:
        return _verdict_over_sizes(views)
    view = views[0]
    need, accounts = view.need, view.accounts

    def one_size(name: str) -> tuple[Fit, SizeView]:
        account = accounts.get(name, UNKNOWN_ACCOUNT)
        return (Fit.INSUFFICIENT if need <= ceiling_bytes(account) else fits(account, need)), view

    return one_size


def _verdict_over_sizes(views: Sequence[SizeView]) -> Callable[[str], tuple[Fit, SizeView]]:
    """``size_verdict`` of a rejected node over several sizes, as ``one_size`` tells it over one: a size
    whose need is beyond its ceiling is the first that never could hold the pod (``fits`` then says
    why), else the first whose need is beyond its headroom is short of room now; ``fits`` runs only
    for the unresolvable (tests/test_properties.py holds this to ``size_verdict``)."""
    rooms = [(view, view.need, view.accounts, view.headroom) for view in views]

    def over_sizes(name: str) -> tuple[Fit, SizeView]:
        short: SizeView | None = None
        for view, need, accounts, headroom in rooms:
            account = accounts.get(name, UNKNOWN_ACCOUNT)
            if need > ceiling_bytes(account):
                return fits(account, need), view
            if short is None:
                room = headroom.get(name, UNBOUNDED) if headroom is not None else headroom_bytes(account)
                if need > room:
                    short = view
        return (Fit.INSUFFICIENT, short) if short is not None else size_verdict(views, name, numa=False)

    return over_sizes


def counts_by_size(views: Sequence[SizeView], verdicts: Iterable[tuple[Fit, SizeView]]) -> SizeCounts:
    """(short of room, never) per size, in the views' order, of the verdicts (``size_verdict``'s);
    empty over one size (every verdict is its own)."""
    if len(views) == 1:
        return ()
    position = {id(view): index for index, view in enumerate(views)}
    counts = [[0, 0] for _ in views]
    for verdict, view in verdicts:
        counts[position[id(view)]][verdict.unresolvable] += 1
    return tuple((short, never) for short, never in counts)


def size_load(views: Sequence[SizeView], name: str, demand: PodDemand, policy: Policy) -> float:
    """A node's load for the pod: its tightest pool. Each pool's load is a fraction of that pool
    (bytes over bytes), so sizes compare directly; the max keeps ``load <= 1`` (alpha = 0) exactly
    when every pool fits, as for one size."""
    return _tightest(_needs(views, demand), name, policy)


def scores_per_node(
    demand: PodDemand, candidates: Sequence[str], views: Sequence[SizeView], policy: Policy
) -> HostScores:
    """A 0..10 score per candidate from its tightest pool (``size_load``): the RFC's memoryScore,
    over the same accounts admission reads, so a node the filter admits is never scored as full."""
    needs = _needs(views, demand)
    scores = (priority(_tightest(needs, name, policy)) for name in candidates)
    return HostScores(candidates, np.fromiter(scores, np.int64, len(candidates)))


def _needs(views: Sequence[SizeView], demand: PodDemand) -> list[tuple[SizeView, SizeNeed]]:
    return [(view, SizeNeed(view.need, demand.cpu_millis)) for view in views]


def _tightest(needs: Sequence[tuple[SizeView, SizeNeed]], name: str, policy: Policy) -> float:
    return max(node_load(account_of(view, name), need, policy) for view, need in needs)
