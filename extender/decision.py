"""The filter and prioritize decisions: pure functions over node accounts.

Both verbs read the same ``NodeAccount`` values and the same ``capacity.fits``,
so a node the filter admits is never scored as if it could not hold the pod.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import cast

import numpy as np
import numpy.typing as npt

from extender.capacity import (
    UNBOUNDED,
    UNKNOWN_ACCOUNT,
    Fit,
    NodeAccount,
    ceiling_bytes,
    fits,
    headroom_bytes,
    numa_headroom_bytes,
)
from extender.columns import NodeColumns
from extender.holds import HOLD_LIMIT
from extender.namelist import NameList
from extender.podrequest import PodDemand
from extender.policy import Mode, Policy
from extender.sampling import Sample, best_of_k
from extender.scoring import loads, node_load, priorities, priorities_of, priority

Accounts = Mapping[str, NodeAccount]
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
    by_size: tuple[tuple[int, int], ...] = ()

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
    # A node the extender does not know gets an account of page size 0: Fit.UNKNOWN, left to the scheduler.
    return accounts.get(name, UNKNOWN_ACCOUNT)


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
    without it each candidate's headroom is computed from its account. The
    reference is ``_filter_per_node``, one verdict per node; with ``columns`` (the
    same accounts as numpy columns) and many candidates, ``_filter_on_columns``
    reaches the same decision with numpy (property tests hold the two equal).
    """
    if policy.mode is Mode.OFF or not demand.wants_hugepages:
        return FilterDecision(passed=candidates)
    # A pod pinned to one NUMA node is judged per node: the columns hold the whole pool only.
    numa = policy.numa_aligned and demand.guaranteed
    if not numa and columns is not None and _reads(columns, candidates, demand.hugepage_bytes):
        return _filter_on_columns(demand.hugepage_bytes, candidates, accounts, policy, reasons, rng, headroom, columns)
    return _filter_per_node(demand.hugepage_bytes, candidates, accounts, policy, reasons, rng, headroom, numa=numa)


def _filter_per_node(  # noqa: PLR0917 (filter_nodes' arguments, in order)
    need: int,
    candidates: Sequence[str],
    accounts: Accounts,
    policy: Policy,
    reasons: Reasons,
    rng: random.Random,
    headroom: Mapping[str, int] | None,
    *,
    numa: bool,
) -> FilterDecision:
    """The reference decision: each candidate's verdict from its account (``fits``, through its
    headroom), the sample drawn by best-of-K, or every candidate when the policy examines all."""
    room_of = _room_of(accounts, headroom, numa=numa)
    if policy.examines_every_candidate:
        sample = _examine_every(need, candidates, room_of)
    else:
        sample = best_of_k(
            candidates, policy.sample_size, policy.widening, lambda name: need <= room_of(name, UNBOUNDED), rng
        )
    return _decision_of(sample, need, candidates, accounts, policy.mode, reasons, numa=numa)


def _room_of(accounts: Accounts, headroom: Mapping[str, int] | None, *, numa: bool) -> Callable[[str, int], int]:
    """A node's headroom in bytes (``default`` for a node without an account)."""
    room_of = (headroom if headroom is not None else _HeadroomOf(accounts)).get
    if not numa:
        return room_of

    def numa_room_of(name: str, default: int) -> int:
        # A pod pinned to one NUMA node (Guaranteed, single-numa-node nodes) also needs one node with
        # the pages free; nodes that report no NUMA figures are judged on the whole pool.
        account = accounts.get(name)
        whole = room_of(name, default)
        return whole if account is None else min(whole, numa_headroom_bytes(account))

    return numa_room_of


def _decision_of(  # noqa: PLR0917 (a sample and what it was drawn for)
    sample: Sample[str],
    need: int,
    candidates: Sequence[str],
    accounts: Accounts,
    mode: Mode,
    reasons: Reasons,
    *,
    numa: bool,
    columns: NodeColumns | None = None,
) -> FilterDecision:
    """The answer, its outcome and counts, from the nodes a sample kept and rejected."""
    if mode is Mode.SHADOW:
        # Counted per candidate given (the verdicts are not sent: every node passes).
        exceeds = sum(1 for n in sample.rejected if fits(_account(accounts, n), need, numa_aligned=numa).unresolvable)
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=len(sample.rejected) - exceeds,
            exceeds_pool=exceeds,
            examined=len(candidates),
        )
    failed, unresolvable = _reasons_of(sample.rejected, need, accounts, reasons, numa=numa, columns=columns)
    return _answer(sample, failed, unresolvable, candidates, None, reasons.not_sampled)


def _answer(  # noqa: PLR0917 (a sample, its verdicts, and what it was drawn from)
    sample: Sample[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    candidates: Sequence[str],
    examined: Container[str] | None,
    not_sampled: str,
    *,
    by_size: tuple[tuple[int, int], ...] = (),
) -> FilterDecision:
    """The enforce answer from a sample and the reasons of the nodes it rejected (``examined``:
    the nodes it looked at; None: those it rejected, as nothing was kept when it matters)."""
    insufficient, exceeds_pool = len(failed), len(unresolvable)
    if sample.kept:
        outcome = Outcome.FIT
    elif not sample.exhausted:
        outcome = Outcome.NO_FIT_IN_SAMPLE
        # Unexamined nodes are reported, not dropped, so the scheduler's event counts them.
        seen = set(sample.rejected) if examined is None else examined
        failed.update((n, not_sampled) for n in candidates if n not in seen)
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
        by_size=by_size,
    )


# --------------------------------------------------------------------------- the same decision over numpy columns


def _filter_on_columns(  # noqa: PLR0917 (filter_nodes' arguments, in order)
    need: int,
    candidates: Sequence[str],
    accounts: Accounts,
    policy: Policy,
    reasons: Reasons,
    rng: random.Random,
    headroom: Mapping[str, int] | None,
    columns: NodeColumns,
) -> FilterDecision:
    """``_filter_per_node`` over many candidates: a policy that examines every candidate does so in
    one numpy comparison over ``columns`` (the same headroom, by slot); a widened best-of-K scan
    judges the candidates left in one comparison too (the same picks: ``sampling.best_of_k``), and
    the reasons of many rejected nodes are read off the ceiling column."""
    if policy.examines_every_candidate:
        return _decide_every_on_columns(need, candidates, columns, policy.mode, reasons)
    room_of = _room_of(accounts, headroom, numa=False)

    def judge() -> npt.NDArray[np.bool_]:
        admitted: npt.NDArray[np.bool_] = need <= columns.column("headroom")[columns.slots(candidates)]
        return admitted

    sample = best_of_k(
        candidates, policy.sample_size, policy.widening, lambda name: need <= room_of(name, UNBOUNDED), rng, judge=judge
    )
    if sample.rejected_at is None:
        return _decision_of(sample, need, candidates, accounts, policy.mode, reasons, numa=False, columns=columns)
    if not sample.kept:  # the scan rejected every candidate: the exhaustive decision
        decision = _decide_every_on_columns(need, candidates, columns, Mode.ENFORCE, reasons)
        return dataclasses.replace(decision, widened=True)
    return _scanned_on_columns(sample, sample.rejected_at, need, candidates, accounts, reasons, columns)


def _scanned_on_columns(  # noqa: PLR0917 (a sample and what it was drawn for)
    sample: Sample[str],
    rejected_at: npt.NDArray[np.intp],
    need: int,
    candidates: Sequence[str],
    accounts: Accounts,
    reasons: Reasons,
    columns: NodeColumns,
) -> FilterDecision:
    """``_decision_of`` for a judged scan that kept some: the rejected (hundreds on a nearly full
    cluster) counted and grouped by reason on the columns, their names selected only if read."""
    if not (isinstance(candidates, NameList) and candidates.distinct()):
        rejected = [candidates[at] for at in rejected_at.tolist()]  # a name given twice: one entry
        whole = dataclasses.replace(sample, rejected=rejected, rejected_at=None)
        return _decision_of(whole, need, candidates, accounts, Mode.ENFORCE, reasons, numa=False, columns=columns)
    slots = columns.slots(candidates)[rejected_at]
    unresolvable = need > columns.column("ceiling")[slots]
    names = candidates.array()  # selected only if read
    exceeds_pool = int(np.count_nonzero(unresolvable))
    groups = _unresolvable_groups(need, slots, unresolvable, columns, reasons) if exceeds_pool else []
    failed = RejectedByReason(names, [(reasons.insufficient, ~unresolvable)], rejected_at)
    return _kept(sample, len(rejected_at), failed, RejectedByReason(names, groups, rejected_at), exceeds_pool)


def _kept(  # noqa: PLR0917 (a sample and its rejected nodes, in order)
    sample: Sample[str],
    rejected: int,
    failed: RejectedByReason,
    unresolvable: RejectedByReason,
    exceeds_pool: int,
    by_size: tuple[tuple[int, int], ...] = (),
) -> FilterDecision:
    """The answer of a widened scan that kept some nodes and rejected ``rejected`` (positions in the
    request: named only if read)."""
    return FilterDecision(
        passed=sample.kept,
        failed=failed,
        unresolvable=unresolvable,
        outcome=Outcome.FIT,
        insufficient=rejected - exceeds_pool,
        exceeds_pool=exceeds_pool,
        examined=len(sample.kept) + rejected,
        widened=sample.widened,
        by_size=by_size,
    )


def _unresolvable_groups(
    need: int,
    slots: npt.NDArray[np.intp],
    unresolvable: npt.NDArray[np.bool_],
    columns: NodeColumns,
    reasons: Reasons,
) -> list[tuple[str, npt.NDArray[np.bool_]]]:
    """The unresolvable nodes by reason (``fits``' order: no pool, whole pool too small, what pages
    held outside pods leave too small), a mask each over ``slots``."""
    total = columns.column("total_pages")[slots]
    page = columns.column("page_size")[slots]
    need_pages = np.where(page > 0, -(-need // np.maximum(page, 1)), 0)  # never a division by 0
    no_pool = unresolvable & ((total <= 0) | (page <= 0))
    exceeds = unresolvable & ~no_pool & (need_pages > total)
    held_outside = unresolvable & ~no_pool & ~exceeds
    return [(reasons.no_pool, no_pool), (reasons.exceeds_pool, exceeds), (reasons.held_outside, held_outside)]


def _reasons_of(
    rejected: Sequence[str],
    need: int,
    accounts: Accounts,
    reasons: Reasons,
    *,
    numa: bool,
    columns: NodeColumns | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The rejected nodes' reasons: short of room now (it may free up), and never.

    A node rejected yet within what it could ever hold (``capacity.ceiling_bytes``) is
    Fit.INSUFFICIENT, a property test holds the two equal; only the others need ``fits`` for
    their reason. Many rejections (a scan of a full cluster) read the ceilings off the columns."""
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    if numa:
        beyond: Iterable[bool] = itertools.repeat(True, len(rejected))  # NUMA verdicts come from fits alone
    elif columns is not None and _reads(columns, rejected, need):
        beyond = (need > columns.column("ceiling")[columns.slots(rejected)]).tolist()
    else:
        beyond = (need > ceiling_bytes(_account(accounts, name)) for name in rejected)
    for name, maybe_unresolvable in zip(rejected, beyond, strict=True):
        if maybe_unresolvable:
            verdict = fits(_account(accounts, name), need, numa_aligned=numa)
            (unresolvable if verdict.unresolvable else failed)[name] = reasons.of(verdict)
        else:
            failed[name] = reasons.insufficient
    return failed, unresolvable


def _fits_int64(demand: PodDemand) -> bool:
    return demand.hugepage_bytes <= UNBOUNDED and demand.cpu_millis <= UNBOUNDED


def reads_columns(candidates: Sequence[str]) -> bool:
    """Whether a decision over ``candidates`` reads the numpy columns; below this many the
    per-node loop is faster than numpy's setup, and the columns need not be brought up to date."""
    return len(candidates) > VECTOR_THRESHOLD


def _reads(columns: NodeColumns | None, candidates: Sequence[str], need: int) -> bool:
    return columns is not None and reads_columns(candidates) and need <= UNBOUNDED


def _examine_every(need: int, candidates: Sequence[str], room_of: Callable[[str, int], int]) -> Sample[str]:
    """Every candidate, split into those with room for ``need`` and the others, in order."""
    kept: list[str] = []
    rejected: list[str] = []
    for name in candidates:
        (kept if need <= room_of(name, UNBOUNDED) else rejected).append(name)
    return Sample(kept, rejected, exhausted=True, widened=False)


def _decide_every_on_columns(
    need: int, candidates: Sequence[str], columns: NodeColumns, mode: Mode, reasons: Reasons
) -> FilterDecision:
    """Shadow and K = 0 over many candidates: every verdict from numpy comparisons over the columns
    (headroom: admitted; ceiling: unresolvable), no Python work per node but the names of the answer.
    Property tests hold it equal to the per-node path (``fits`` on every account)."""
    slots = columns.slots(candidates)
    admitted = need <= columns.column("headroom")[slots]
    unresolvable = need > columns.column("ceiling")[slots]  # only ever on rejected nodes
    rejected_count = len(candidates) - int(np.count_nonzero(admitted))
    unresolvable_count = int(np.count_nonzero(unresolvable))
    if mode is Mode.SHADOW:
        # Counted per candidate given (the verdicts are not sent: every node passes).
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=rejected_count - unresolvable_count,
            exceeds_pool=unresolvable_count,
            examined=len(candidates),
        )
    if not rejected_count:
        return FilterDecision(passed=candidates, outcome=Outcome.FIT, examined=len(candidates))  # echoed as it came
    if isinstance(candidates, NameList):
        names, plain = candidates.array(), candidates.distinct()
    else:
        names, plain = np.array(candidates, dtype=object), False

    def by_reason(groups: Groups) -> Mapping[str, str]:
        """Constant reasons: names selected by a mask per reason, no Python work per node."""
        if plain:
            return RejectedByReason(names, groups)
        built: dict[str, str] = {}  # a name given twice is one entry, as in the per-node path
        for reason, mask in groups:
            built.update(dict.fromkeys(names[mask].tolist(), reason))
        return built

    failed = by_reason([(reasons.insufficient, ~admitted & ~unresolvable)])
    unresolvable_names: Mapping[str, str] = {}
    if unresolvable_count:
        unresolvable_names = by_reason(_unresolvable_groups(need, slots, unresolvable, columns, reasons))
    # Read in place: the admitted names' JSON is cut from the request's (no string per name).
    kept = candidates.select(admitted) if isinstance(candidates, NameList) else names[admitted].tolist()
    insufficient = len(failed)
    return FilterDecision(
        passed=kept,
        failed=failed,
        unresolvable=unresolvable_names,
        outcome=Outcome.FIT if kept else Outcome.NO_HUGEPAGE_CAPACITY if insufficient else Outcome.NO_COMPATIBLE_NODE,
        insufficient=insufficient,
        exceeds_pool=len(unresolvable_names),
        examined=len(candidates),
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


# --------------------------------------------------------------------------- every page size the pod needs


@dataclass(frozen=True, slots=True)
class SizeView:
    """One page size's accounts as a decision reads them, and the pod's need of that size (bytes)."""

    need: int
    accounts: Accounts
    reasons: Reasons
    headroom: Mapping[str, int] | None = None
    columns: NodeColumns | None = None


def filter_sizes(
    demand: PodDemand,
    candidates: Sequence[str],
    *,
    views: Sequence[SizeView],
    policy: Policy,
    rng: random.Random,
) -> FilterDecision:
    """``filter_nodes`` over every size the pod needs (``views``, one per size, usually one):
    a node is admitted only if each of those pools can hold the pod.

    One size is ``filter_nodes`` itself, its fast paths included, so a pod asking one size
    costs what it did before there were others. Several are judged node by node: a node's
    verdict is its first unresolvable size's (no pod leaving makes room for that one, so
    the scheduler need not retry it), else its first size without room."""
    if len(views) == 1:
        view = views[0]
        return filter_nodes(
            PodDemand(view.need, demand.cpu_millis, demand.guaranteed),
            candidates,
            accounts=view.accounts,
            policy=policy,
            reasons=view.reasons,
            rng=rng,
            headroom=view.headroom,
            columns=view.columns,
        )
    if policy.mode is Mode.OFF or not views:
        return FilterDecision(passed=candidates)
    numa = policy.numa_aligned and demand.guaranteed
    rooms = [(view.need, _room_of(view.accounts, view.headroom, numa=numa)) for view in views]

    def admits(name: str) -> bool:
        return all(need <= room_of(name, UNBOUNDED) for need, room_of in rooms)

    sample = _sample_sizes(candidates, views, policy, admits, rng, on_columns=not numa and _all_read(views, candidates))
    if isinstance(sample, FilterDecision):
        return sample
    verdicts = {name: size_verdict(views, name, numa=numa) for name in sample.rejected}
    if policy.mode is Mode.SHADOW:
        # Counted per candidate given, as for one size.
        exceeds = sum(1 for name in sample.rejected if verdicts[name][0].unresolvable)
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=len(sample.rejected) - exceeds,
            exceeds_pool=exceeds,
            examined=len(candidates),
            by_size=_counts_by_size(views, (verdicts[name] for name in sample.rejected)),
        )
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    for name, (verdict, view) in verdicts.items():
        (unresolvable if verdict.unresolvable else failed)[name] = view.reasons.of(verdict)
    by_size = _counts_by_size(views, verdicts.values())
    return _answer(sample, failed, unresolvable, candidates, verdicts, views[0].reasons.not_sampled, by_size=by_size)


def _counts_by_size(views: Sequence[SizeView], verdicts: Iterable[tuple[Fit, SizeView]]) -> tuple[tuple[int, int], ...]:
    """(insufficient, exceeds_pool) per size, in the views' order, of the verdicts (``size_verdict``'s)."""
    position = {id(view): index for index, view in enumerate(views)}
    counts = [[0, 0] for _ in views]
    for verdict, view in verdicts:
        counts[position[id(view)]][verdict.unresolvable] += 1
    return tuple((insufficient, exceeds) for insufficient, exceeds in counts)


def _all_read(views: Sequence[SizeView], candidates: Sequence[str]) -> bool:
    return all(_reads(view.columns, candidates, view.need) for view in views)


def _sample_sizes(
    candidates: Sequence[str],
    views: Sequence[SizeView],
    policy: Policy,
    admits: Callable[[str], bool],
    rng: random.Random,
    *,
    on_columns: bool,
) -> Sample[str] | FilterDecision:
    """The candidates ``filter_sizes`` keeps and rejects; a decision outright where the columns
    decide every candidate at once (every one examined, or a widened scan that rejects every one)."""
    if policy.examines_every_candidate:
        if on_columns:
            return _decide_sizes_on_columns(candidates, views, policy.mode)
        kept = [name for name in candidates if admits(name)]
        admitted = set(kept)
        return Sample(kept, [n for n in candidates if n not in admitted], exhausted=True, widened=False)
    judge = (lambda: _sizes_admitted(candidates, views)) if on_columns else None
    sample = best_of_k(candidates, policy.sample_size, policy.widening, admits, rng, judge=judge)
    if sample.rejected_at is None:
        return sample
    if not sample.kept:  # a widened scan judged on the columns rejected every candidate
        decision = _decide_sizes_on_columns(candidates, views, Mode.ENFORCE)
        return dataclasses.replace(decision, widened=True)
    rejected_at = np.sort(sample.rejected_at)
    if isinstance(candidates, NameList) and candidates.distinct():
        return _scanned_sizes_on_columns(sample, rejected_at, candidates, views)
    return dataclasses.replace(sample, rejected=[candidates[at] for at in rejected_at.tolist()])


def _sizes_admitted(candidates: Sequence[str], views: Sequence[SizeView]) -> npt.NDArray[np.bool_]:
    """Per candidate, whether every pool the pod needs has room: one comparison per size."""
    admitted: npt.NDArray[np.bool_] | None = None
    for view in views:
        columns = cast("NodeColumns", view.columns)
        room = view.need <= columns.column("headroom")[columns.slots(candidates)]
        admitted = room if admitted is None else admitted & room
    return cast("npt.NDArray[np.bool_]", admitted)


Groups = list[tuple[str, npt.NDArray[np.bool_]]]  # (reason, mask): the rejected nodes of each reason
# Per size, the rejected whose verdict comes from it: (short of room, never), a mask each.
SizeMasks = list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]]


def _decide_sizes_on_columns(candidates: Sequence[str], views: Sequence[SizeView], mode: Mode) -> FilterDecision:
    """``filter_sizes`` for a policy that examines every candidate, over many candidates: each size's
    verdicts from its columns (``_size_groups``), no Python work per node but the names of the answer.
    Property tests hold it equal to the node-by-node path."""
    admitted, any_unresolvable, short_groups, unresolvable_groups, by_size = _size_groups(candidates, views)
    rejected_count = len(candidates) - int(np.count_nonzero(admitted))
    unresolvable_count = int(np.count_nonzero(any_unresolvable))
    if mode is Mode.SHADOW:
        return FilterDecision(
            passed=candidates,
            outcome=Outcome.SHADOW,
            insufficient=rejected_count - unresolvable_count,
            exceeds_pool=unresolvable_count,
            examined=len(candidates),
            by_size=_counted(by_size),  # per candidate given, as the totals
        )
    if not rejected_count:
        return FilterDecision(
            passed=candidates, outcome=Outcome.FIT, examined=len(candidates), by_size=_counted(by_size)
        )
    if isinstance(candidates, NameList):
        names, plain = candidates.array(), candidates.distinct()
    else:
        names, plain = np.array(candidates, dtype=object), False

    def by_reason(groups: Groups) -> Mapping[str, str]:
        if plain:
            return RejectedByReason(names, groups)
        built: dict[str, str] = {}  # a name given twice is one entry, as in the per-node path
        for reason, mask in groups:
            built.update(dict.fromkeys(names[mask].tolist(), reason))
        return built

    failed = by_reason([(reason, mask & ~any_unresolvable) for reason, mask in short_groups])
    unresolvable = by_reason(unresolvable_groups)
    kept = names[admitted].tolist()
    return FilterDecision(
        passed=kept,
        failed=failed,
        unresolvable=unresolvable,
        outcome=Outcome.FIT if kept else Outcome.NO_HUGEPAGE_CAPACITY if failed else Outcome.NO_COMPATIBLE_NODE,
        insufficient=len(failed),
        exceeds_pool=len(unresolvable),
        examined=len(candidates),
        by_size=_counted(by_size) if plain else _counted(by_size, names),
    )


def _size_groups(
    candidates: Sequence[str], views: Sequence[SizeView], at: npt.NDArray[np.intp] | None = None
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], Groups, Groups, SizeMasks]:
    """Every size's verdicts from its columns (headroom: room; ceiling: unresolvable) for the candidates
    (those at positions ``at``, when given), combined as ``size_verdict`` combines them: the first
    unresolvable size, else the first without room. Returns which are admitted, which are unresolvable
    in some size, the masks of each reason short of room (to be read without the unresolvable), those
    of each unresolvable reason, and per size the masks of the rejected whose verdict comes from it
    (``_counted``: ``FilterDecision.by_size``)."""
    count = len(candidates) if at is None else len(at)
    admitted = np.ones(count, dtype=bool)
    any_unresolvable = np.zeros(count, dtype=bool)
    any_short = np.zeros(count, dtype=bool)
    unresolvable_groups: Groups = []
    short_groups: Groups = []
    nevers: list[npt.NDArray[np.bool_]] = []
    for view in views:
        columns = cast("NodeColumns", view.columns)
        slots = columns.slots(candidates)
        if at is not None:
            slots = slots[at]
        room = view.need <= columns.column("headroom")[slots]
        never = view.need > columns.column("ceiling")[slots]
        admitted &= room
        first_never = never & ~any_unresolvable
        any_unresolvable |= never
        short_groups.append((view.reasons.insufficient, ~room & ~never & ~any_short))
        any_short |= ~room & ~never
        nevers.append(first_never)
        if first_never.any():
            total = columns.column("total_pages")[slots]
            page = columns.column("page_size")[slots]
            with np.errstate(divide="ignore", invalid="ignore"):
                need_pages = np.where(page > 0, -(-view.need // np.maximum(page, 1)), 0)
            no_pool = first_never & ((total <= 0) | (page <= 0))
            exceeds = first_never & ~no_pool & (need_pages > total)
            unresolvable_groups += [
                (view.reasons.no_pool, no_pool),
                (view.reasons.exceeds_pool, exceeds),
                (view.reasons.held_outside, first_never & ~no_pool & ~exceeds),
            ]
    by_size = [(short & ~any_unresolvable, never) for (_, short), never in zip(short_groups, nevers, strict=True)]
    return admitted, any_unresolvable, short_groups, unresolvable_groups, by_size


def _counted(by_size: SizeMasks, names: npt.NDArray[np.object_] | None = None) -> tuple[tuple[int, int], ...]:
    """``FilterDecision.by_size`` from ``_size_groups``' masks: per candidate, or per name given (``names``: a
    name given twice is one rejected node, as in the per-node path)."""
    if names is None:
        return tuple((int(np.count_nonzero(short)), int(np.count_nonzero(never))) for short, never in by_size)
    return tuple((len(set(names[short].tolist())), len(set(names[never].tolist()))) for short, never in by_size)


def _scanned_sizes_on_columns(
    sample: Sample[str], rejected_at: npt.NDArray[np.intp], candidates: NameList, views: Sequence[SizeView]
) -> FilterDecision:
    """``filter_sizes`` for a judged scan that kept some (``_scanned_on_columns`` for several sizes): the
    rejected (hundreds on a nearly full cluster) counted and grouped by reason on each size's columns,
    their names selected only if read."""
    _, any_unresolvable, short_groups, unresolvable_groups, by_size = _size_groups(candidates, views, rejected_at)
    names = candidates.array()  # selected only if read
    exceeds_pool = int(np.count_nonzero(any_unresolvable))
    short = [(reason, mask & ~any_unresolvable) for reason, mask in short_groups]
    failed = RejectedByReason(names, short, rejected_at)
    unresolvable = RejectedByReason(names, unresolvable_groups, rejected_at)
    by_names = _counted(by_size)  # each name given once (the caller checked)
    return _kept(sample, len(rejected_at), failed, unresolvable, exceeds_pool, by_names)


def size_verdict(views: Sequence[SizeView], name: str, *, numa: bool) -> tuple[Fit, SizeView]:
    """A node's verdict over every size the pod needs, and the size it comes from: the first
    size no pod leaving could make room in, else the first without room now, else the first
    (every size admits)."""
    verdicts = [(fits(_account(view.accounts, name), view.need, numa_aligned=numa), view) for view in views]
    for verdict, view in verdicts:
        if verdict.unresolvable:
            return verdict, view
    for verdict, view in verdicts:
        if not verdict.admits:
            return verdict, view
    return verdicts[0]


def size_load(views: Sequence[SizeView], name: str, demand: PodDemand, policy: Policy) -> float:
    """A node's load for a pod of several sizes: the tightest pool it needs. Each pool's load is a
    fraction of that pool (bytes over bytes), so sizes compare directly; the max keeps
    ``load <= 1`` (alpha = 0) exactly when every pool fits, as for one size."""
    return max(
        node_load(_account(view.accounts, name), PodDemand(view.need, demand.cpu_millis), policy) for view in views
    )


def prioritize_sizes(
    demand: PodDemand, candidates: Sequence[str], *, views: Sequence[SizeView], policy: Policy
) -> HostScores:
    """``prioritize_nodes`` over every size the pod needs: one size is ``prioritize_nodes``; several
    score each node by its tightest pool (``size_load``)."""
    if len(views) == 1:
        view = views[0]
        return prioritize_nodes(
            PodDemand(view.need, demand.cpu_millis, demand.guaranteed),
            candidates,
            accounts=view.accounts,
            policy=policy,
            columns=view.columns,
        )
    if policy.mode is not Mode.ENFORCE or not views:
        return HostScores.neutral(candidates)
    columns_hold_it = all(v.columns is not None and v.need <= UNBOUNDED for v in views)
    if reads_columns(candidates) and columns_hold_it and demand.cpu_millis <= UNBOUNDED:
        # The tightest pool per node, as ``size_load``: each size's loads from its columns, the max.
        load = None
        for view in views:
            columns = cast("NodeColumns", view.columns)
            size = loads(PodDemand(view.need, demand.cpu_millis), columns.slots(candidates), columns, policy)
            load = size if load is None else np.maximum(load, size)
        return HostScores(candidates, priorities_of(cast("npt.NDArray[np.float64]", load)))
    scores = (priority(size_load(views, name, demand, policy)) for name in candidates)
    return HostScores(candidates, np.fromiter(scores, np.int64, len(candidates)))
