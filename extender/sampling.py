"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle that keeps only
the positions it swapped), each O(1), so a decision costs O(draws), not
O(nodes): with best-of-K a filter over 5,000 candidates reads about K of them.
A widened scan over many candidates (fullscan, drawUntilK after a first round
of K) takes the order of every candidate left at once instead, one permutation
drawn from the same generator: on a nearly full cluster it goes on until K of
thousands fit, and a caller that can judge many candidates at once (``judge``)
then judges them in one step, with the same picks as one at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from extender.policy import Widening

T = TypeVar("T")
Positions = npt.NDArray[np.intp]
# Given positions of candidates, whether each is accepted (as ``accept`` on each, in one step).
Judge = Callable[[Positions], npt.NDArray[np.bool_]]
SHUFFLE_REST_ABOVE = 64  # a scan over more candidates left than this orders them all at once


@dataclass(frozen=True, slots=True)
class Sample(Generic[T]):
    kept: Sequence[T]  # accepted candidates: at most K, or every one when all are examined
    rejected: Sequence[T]  # candidates examined and not accepted
    exhausted: bool  # every candidate was examined
    widened: bool  # the widening strategy had to act
    # With ``judge``: the positions of every rejected candidate in the order drawn (``rejected``
    # is then only those of the first rounds: the caller reads the rest off these positions).
    rejected_at: Positions | None = None


def _random_order(size: int, rng: random.Random, moved: dict[int, int]) -> Iterator[int]:
    """Positions of the candidates in random order, drawn one at a time without replacement: a
    Fisher-Yates shuffle that records only the positions it swapped (in ``moved``: position ->
    index of the candidate now there), so a draw costs O(1) and the candidates are never copied.
    A generator: a scan makes hundreds of draws, and resuming one costs less than a method call."""
    randrange = rng.randrange
    for i in range(size):
        j = randrange(i, size)
        picked = moved.get(j, j)
        moved[j] = moved.get(i, i)
        yield picked


def _rest_in_random_order(size: int, drawn: int, moved: dict[int, int], rng: random.Random) -> Positions:
    """The candidates not drawn yet (after ``drawn`` draws of ``_random_order``), in a random order
    drawn at once: one numpy permutation seeded from ``rng``."""
    rest = np.arange(drawn, size, dtype=np.intp)
    for position, index in moved.items():
        if position >= drawn:
            rest[position - drawn] = index
    generator = np.random.Generator(np.random.SFC64(rng.getrandbits(64)))
    shuffled: Positions = generator.permutation(rest)
    return shuffled


def best_of_k(  # noqa: PLR0915 (one scan, its rounds and its widenings)
    candidates: Sequence[T],
    k: int,
    widening: Widening,
    accept: Callable[[T], bool],
    rng: random.Random,
    *,
    judge: Judge | None = None,
) -> Sample[T]:
    """Keep up to ``k`` (at least 1) accepted candidates, drawn at random.

    A widened scan (fullscan, drawUntilK) over more than ``SHUFFLE_REST_ABOVE`` candidates left
    orders them all at once and goes through that order until enough are kept: one at a time
    with ``accept``, or with ``judge`` (which must agree with ``accept``) in one step, the same
    picks. The sample then says every rejected candidate's position (``rejected_at``)."""
    size = len(candidates)
    moved: dict[int, int] = {}
    order = _random_order(size, rng, moved)
    drawn = 0
    kept: list[T] = []
    rejected: list[T] = []
    rejected_positions: list[int] = []

    def draw_round(limit: int, stop_at: int) -> None:
        nonlocal drawn
        for _ in range(min(limit, size - drawn)):
            if len(kept) >= stop_at:
                return
            at = next(order)
            drawn += 1
            candidate = candidates[at]
            if accept(candidate):
                kept.append(candidate)
            else:
                rejected.append(candidate)
                rejected_positions.append(at)

    def scan_rest(stop_at: int) -> Positions | None:
        """Draw on until ``stop_at`` are kept or none are left; with ``judge``, every rejected
        candidate's position."""
        nonlocal drawn
        if size - drawn <= SHUFFLE_REST_ABOVE:
            draw_round(size - drawn, stop_at)
            return None
        rest = _rest_in_random_order(size, drawn, moved, rng)
        if judge is None:
            for at in rest.tolist():
                if len(kept) >= stop_at:
                    break
                drawn += 1
                candidate = candidates[at]
                (kept if accept(candidate) else rejected).append(candidate)
            return None
        accepted = judge(rest)
        hits = np.flatnonzero(accepted)
        wanted = stop_at - len(kept)
        end = int(hits[wanted - 1]) + 1 if len(hits) >= wanted else len(rest)
        drawn += end
        kept.extend(candidates[at] for at in rest[hits[:wanted]].tolist())
        seen = rest[:end]
        return np.concatenate((np.array(rejected_positions, dtype=np.intp), seen[~accepted[:end]]))

    rejected_at = None
    if widening is Widening.DRAW_UNTIL_K:
        draw_round(k, k)
        if len(kept) < k and size - drawn:
            rejected_at = scan_rest(k)
        widened = bool(rejected) if rejected_at is None else bool(len(rejected_at))
        return Sample(kept, rejected, drawn == size, widened=widened, rejected_at=rejected_at)

    draw_round(k, k)
    widened = False
    if not kept and size - drawn:
        if widening is Widening.RESAMPLE:
            widened = True
            draw_round(k, k)
        elif widening is Widening.FULLSCAN:
            widened = True
            rejected_at = scan_rest(k)
    return Sample(kept, rejected, exhausted=drawn == size, widened=widened, rejected_at=rejected_at)
