"""The reference decision (``reference``) over numpy columns, for any number of page sizes.

Many candidates (a scheduler sends up to every node of the cluster) are judged with a few numpy
comparisons per size over the accounts' columns (``columns.NodeColumns``: headroom, ceiling,
pool), not one ``fits`` per node: headroom says who is admitted, the ceiling who never can be
(the largest need a pool less its pages held outside pods could ever hold), and the pool why
(``unresolvable_causes``, in ``fits``' order). The per-size verdicts combine as
``reference.size_verdict`` combines them, and the answer comes from ``answer.filter_answer``, as
the reference's does. Property tests hold every path here equal to the reference
(tests/test_properties.py); ``decision`` sends a decision here only when ``reads_columns``.
"""

from __future__ import annotations

import functools
import operator
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from extender.core.answer import (
    Examined,
    FilterDecision,
    HostScores,
    RejectedByReason,
    Rejections,
    SizeCounts,
    filter_answer,
)
from extender.core.capacity import UNBOUNDED
from extender.core.columns import NodeColumns
from extender.core.namelist import NameList
from extender.core.podrequest import PodDemand, SizeNeed
from extender.core.policy import Mode, Policy
from extender.core.reference import SizeView, admission, draw, rejections_of
from extender.core.sampling import Sample
from extender.core.scoring import loads, priorities_of

VECTOR_THRESHOLD = 64  # below this many candidates the scalar loop is faster than numpy's setup

Mask = npt.NDArray[np.bool_]
Groups = list[tuple[str, Mask]]  # (reason, mask): the rejected nodes of each constant reason


def reads_columns(candidates: Sequence[str]) -> bool:
    """Whether a decision over ``candidates`` reads the numpy columns; below this many the
    per-node loop is faster than numpy's setup, and the columns need not be brought up to date."""
    return len(candidates) > VECTOR_THRESHOLD


def reads(view: SizeView, candidates: Sequence[str]) -> bool:
    """Whether this size's part of a decision over ``candidates`` is read off its columns (the need in int64)."""
    return view.columns is not None and reads_columns(candidates) and view.need <= UNBOUNDED


def filter_on_columns(
    candidates: Sequence[str], views: Sequence[SizeView], policy: Policy, rng: random.Random
) -> FilterDecision:
    """``reference.filter_per_node`` over many candidates. A policy that examines every candidate
    does so in one comparison per size; a widened best-of-K scan judges the candidates left at
    once (the same picks: ``sampling.best_of_k``), and its many rejected are classified on the columns."""
    if policy.examines_every_candidate:
        return every_on_columns(candidates, views, policy.mode, widened=False)
    sample = draw(candidates, policy, admission(views, numa=False), rng, judge=lambda: admitted(candidates, views))
    if sample.rejected_at is None:  # decided in the first rounds, one candidate at a time
        rejections = rejections_by_name(sample.rejected, views)
        examined = Examined(len(sample.kept) + len(sample.rejected), sample.exhausted, sample.widened)
        return _answer(candidates, sample.kept, rejections, examined, views=views, mode=policy.mode)
    if not sample.kept:  # the widened scan rejected every candidate: the exhaustive decision
        return every_on_columns(candidates, views, policy.mode, widened=True)
    return _scanned(sample, sample.rejected_at, candidates, views)


def _answer(
    candidates: Sequence[str],
    kept: Sequence[str],
    rejections: Rejections,
    examined: Examined,
    *,
    views: Sequence[SizeView],
    mode: Mode,
) -> FilterDecision:
    return filter_answer(
        candidates, kept, rejections, mode=mode, examined=examined, not_sampled=views[0].reasons.not_sampled
    )


def every_on_columns(
    candidates: Sequence[str], views: Sequence[SizeView], mode: Mode, *, widened: bool
) -> FilterDecision:
    """Shadow and K = 0 over many candidates (or a widened scan that kept none): every verdict from
    the columns, no Python work per node but the names of the answer."""
    verdicts = verdicts_on_columns(candidates, views)
    if mode is Mode.SHADOW or not verdicts.rejected:
        kept = candidates  # echoed as it came
        rejections = rejections_on_columns(candidates, verdicts, mode=mode)
    elif isinstance(candidates, NameList):
        kept = candidates.select(verdicts.admitted)  # read in place: its JSON cut from the request's
        rejections = rejections_on_columns(candidates, verdicts, mode=mode)
    else:
        names = np.array(candidates, dtype=object)
        kept = names[verdicts.admitted].tolist()
        rejections = rejections_on_columns(candidates, verdicts, mode=mode, names=names)
    examined = Examined(len(candidates), exhausted=True, widened=widened)
    return _answer(candidates, kept, rejections, examined, views=views, mode=mode)


def _scanned(
    sample: Sample[str], rejected_at: npt.NDArray[np.intp], candidates: Sequence[str], views: Sequence[SizeView]
) -> FilterDecision:
    """A widened scan judged on the columns that kept some: its rejected (hundreds on a nearly full
    cluster, by position) classified on the columns. Names read in place keep their slots, so the
    rejected are read off them by position, and named only if read; others are named first."""
    at = np.sort(rejected_at)
    if isinstance(candidates, NameList):
        rejections = rejections_on_columns(
            candidates, verdicts_on_columns(candidates, views, at), mode=Mode.ENFORCE, at=at
        )
    else:
        rejections = rejections_by_name([candidates[position] for position in at.tolist()], views)
    examined = Examined(len(sample.kept) + len(at), sample.exhausted, sample.widened)
    return _answer(candidates, sample.kept, rejections, examined, views=views, mode=Mode.ENFORCE)


def rejections_by_name(rejected: Sequence[str], views: Sequence[SizeView]) -> Rejections:
    """The rejected of a sample's first rounds: on the columns when they are many, else by the reference."""
    if all(reads(view, rejected) for view in views):
        return rejections_on_columns(rejected, verdicts_on_columns(rejected, views), mode=Mode.ENFORCE)
    return rejections_of(rejected, views, numa=False, mode=Mode.ENFORCE)


def admitted(candidates: Sequence[str], views: Sequence[SizeView]) -> Mask:
    """Per candidate, whether every pool the pod needs has room: one comparison per size."""
    room: Mask | None = None
    for view in views:
        columns = cast("NodeColumns", view.columns)
        size = view.need <= columns.column("headroom")[columns.slots(candidates)]
        room = size if room is None else room & size
    return cast("Mask", room)


@dataclass(frozen=True, slots=True)
class SizeColumns:
    """One size's columns read for the candidates: where each one's slot is, and whether that
    pool has room for the pod now, or never could have (its ceiling)."""

    view: SizeView
    slots: npt.NDArray[np.intp]
    room: Mask
    never: Mask  # only ever where there is no room


@dataclass(frozen=True, slots=True)
class ColumnVerdicts:
    """The candidates' verdicts over every size the pod needs, from the columns."""

    sizes: list[SizeColumns]
    admitted: Mask  # room in every size
    never: Mask  # unresolvable in some size
    rejected: int  # how many are not admitted (each candidate given counted)


def verdicts_on_columns(
    candidates: Sequence[str], views: Sequence[SizeView], at: npt.NDArray[np.intp] | None = None
) -> ColumnVerdicts:
    """Every size's verdicts for the candidates (those at positions ``at``, when given) from its
    columns: headroom for room, the ceiling for never."""
    sizes: list[SizeColumns] = []
    for view in views:
        columns = cast("NodeColumns", view.columns)
        slots = columns.slots(candidates) if at is None else columns.slots(candidates)[at]
        room = view.need <= columns.column("headroom")[slots]
        sizes.append(SizeColumns(view, slots, room, view.need > columns.column("ceiling")[slots]))
    admitted: Mask = functools.reduce(operator.and_, (size.room for size in sizes))
    never: Mask = functools.reduce(operator.or_, (size.never for size in sizes))
    return ColumnVerdicts(sizes, admitted, never, len(admitted) - int(np.count_nonzero(admitted)))


def verdict_sizes(verdicts: ColumnVerdicts) -> list[tuple[SizeColumns, Mask, Mask]]:
    """Per size, the rejected whose verdict comes from it, as ``reference.size_verdict`` combines
    sizes: (short of room now: its first size without room, unresolvable in none; never: its first
    size no pod leaving could make room in)."""
    if len(verdicts.sizes) == 1:
        (size,) = verdicts.sizes
        return [(size, ~size.room & ~size.never, size.never)]
    short_before = np.zeros_like(verdicts.admitted)
    never_before = np.zeros_like(verdicts.admitted)
    combined = []
    for size in verdicts.sizes:
        short = ~size.room & ~size.never
        combined.append((size, short & ~short_before & ~verdicts.never, size.never & ~never_before))
        short_before |= short
        never_before |= size.never
    return combined


def unresolvable_causes(size: SizeColumns, never: Mask) -> Groups:
    """The nodes no pod leaving could make room in, by cause, in ``fits``' order: no pool, the
    whole pool too small, what pages held outside pods leave of it too small; a mask each over the slots."""
    view, columns = size.view, cast("NodeColumns", size.view.columns)
    total = columns.column("total_pages")[size.slots]
    page = columns.column("page_size")[size.slots]
    need_pages = np.where(page > 0, -(-view.need // np.maximum(page, 1)), 0)  # never a division by 0
    no_pool = never & ((total <= 0) | (page <= 0))
    exceeds = never & ~no_pool & (need_pages > total)
    held_outside = never & ~no_pool & ~exceeds
    reasons = view.reasons
    return [(reasons.no_pool, no_pool), (reasons.exceeds_pool, exceeds), (reasons.held_outside, held_outside)]


def rejections_on_columns(
    candidates: Sequence[str],
    verdicts: ColumnVerdicts,
    *,
    mode: Mode,
    at: npt.NDArray[np.intp] | None = None,
    names: npt.NDArray[np.object_] | None = None,
) -> Rejections:
    """The rejected nodes of ``verdicts`` by reason. Names read in place and each given once are
    grouped by a mask per reason (``RejectedByReason``: selected only if read); others are named
    in a dict, a name given twice once (``names``: the candidates' as an array, when the caller has it).
    In shadow only counted, per candidate given."""
    never = int(np.count_nonzero(verdicts.never))
    if mode is Mode.SHADOW or not verdicts.rejected:
        return Rejections({}, {}, verdicts.rejected - never, never, _counted(verdicts))
    combined = verdict_sizes(verdicts)
    short, causes = _reason_groups(combined)
    if isinstance(candidates, NameList):
        names = candidates.array()
        if candidates.distinct():
            failed, unresolvable = RejectedByReason(names, short, at), RejectedByReason(names, causes, at)
            return Rejections(failed, unresolvable, verdicts.rejected - never, never, _by_size(combined))
    elif names is None:
        names = np.array(candidates, dtype=object)
    given = names if at is None else names[at]
    named_failed, named_unresolvable = _named(given, short), _named(given, causes)
    by_size = _by_size(combined, given)
    return Rejections(named_failed, named_unresolvable, len(named_failed), len(named_unresolvable), by_size)


def _reason_groups(combined: list[tuple[SizeColumns, Mask, Mask]]) -> tuple[Groups, Groups]:
    """The rejected by reason: short of room now (each size's own reason), and never (by cause)."""
    short = [(size.view.reasons.insufficient, mask) for size, mask, _ in combined]
    causes = [cause for size, _, first in combined if first.any() for cause in unresolvable_causes(size, first)]
    return short, causes


def _counted(verdicts: ColumnVerdicts) -> SizeCounts:
    """``Rejections.by_size`` per candidate given (shadow, or nothing rejected); over one size, nothing to split."""
    return _by_size(verdict_sizes(verdicts)) if len(verdicts.sizes) > 1 else ()


def _named(names: npt.NDArray[np.object_], groups: Groups) -> Mapping[str, str]:
    named: dict[str, str] = {}  # a name given twice is one entry, as in the reference
    for reason, mask in groups:
        named.update(dict.fromkeys(names[mask].tolist(), reason))
    return named


def _by_size(
    combined: list[tuple[SizeColumns, Mask, Mask]], names: npt.NDArray[np.object_] | None = None
) -> SizeCounts:
    """``Rejections.by_size`` from ``verdict_sizes``: per candidate given, or per name (``names``);
    empty over one size."""
    if len(combined) == 1:
        return ()
    if names is None:
        return tuple((int(np.count_nonzero(short)), int(np.count_nonzero(never))) for _, short, never in combined)
    return tuple((len(set(names[short].tolist())), len(set(names[never].tolist()))) for _, short, never in combined)


def scores_on_columns(
    demand: PodDemand, candidates: Sequence[str], views: Sequence[SizeView], policy: Policy
) -> HostScores:
    """``reference.scores_per_node`` for many candidates: each size's loads from its columns
    (``scoring.loads``, the same arithmetic), the tightest per node, thousands scored at once."""
    load: npt.NDArray[np.float64] | None = None
    for view in views:
        columns = cast("NodeColumns", view.columns)
        size = loads(SizeNeed(view.need, demand.cpu_millis), columns.slots(candidates), columns, policy)
        load = size if load is None else np.maximum(load, size)
    return HostScores(candidates, priorities_of(cast("npt.NDArray[np.float64]", load)))
