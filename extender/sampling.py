"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle that keeps only
the positions it swapped), each O(1), so a decision costs O(draws), not
O(nodes): with best-of-K a filter over 5,000 candidates reads about K of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from extender.policy import Widening

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sample(Generic[T]):
    kept: Sequence[T]  # accepted candidates: at most K, or every one when all are examined
    rejected: Sequence[T]  # candidates examined and not accepted
    exhausted: bool  # every candidate was examined
    widened: bool  # the widening strategy had to act
    abandoned: bool = False  # ``hopeless`` stopped the draws: no candidate left would be accepted


def _random_order(candidates: Sequence[T], rng: random.Random) -> Iterator[T]:
    """The candidates in random order, drawn one at a time without replacement: a Fisher-Yates
    shuffle that records only the positions it swapped, so a draw costs O(1) and reads one
    candidate (the candidates may decode names as they are read; the sequence is never copied).
    A generator: on a full cluster a scan makes hundreds of draws, and resuming one costs less
    than a method call."""
    size = len(candidates)
    moved: dict[int, int] = {}  # position -> index of the candidate now there
    randrange = rng.randrange
    for i in range(size):
        j = randrange(i, size)
        picked = moved.get(j, j)
        moved[j] = moved.get(i, i)
        yield candidates[picked]


HOPELESS_AFTER = 64  # draws after which ``best_of_k`` asks ``hopeless`` once


def best_of_k(
    candidates: Sequence[T],
    k: int,
    widening: Widening,
    accept: Callable[[T], bool],
    rng: random.Random,
    *,
    hopeless: Callable[[], bool] | None = None,
) -> Sample[T]:
    """Keep up to ``k`` (at least 1) accepted candidates, drawn at random.

    ``hopeless``, asked once when ``HOPELESS_AFTER`` draws have kept nothing, may say that
    no candidate at all would be accepted: the draws stop there (``abandoned``) instead of
    reading thousands more one by one, for a caller that can judge them all at once."""
    order = _random_order(candidates, rng)
    size = len(candidates)
    drawn = 0
    abandoned = False
    kept: list[T] = []
    rejected: list[T] = []
    keep, reject = kept.append, rejected.append

    def draw_round(limit: int, stop_at: int) -> None:
        nonlocal drawn, abandoned
        for _ in range(min(limit, size - drawn)):
            if len(kept) >= stop_at:
                return
            if drawn == HOPELESS_AFTER and hopeless is not None and not kept and hopeless():
                abandoned = True
                return
            candidate = next(order)
            drawn += 1
            (keep if accept(candidate) else reject)(candidate)

    if widening is Widening.DRAW_UNTIL_K:
        draw_round(len(candidates), k)
        return Sample(kept, rejected, exhausted=drawn == size, widened=bool(rejected), abandoned=abandoned)

    draw_round(k, k)
    widened = False
    if not kept and size - drawn:
        if widening is Widening.RESAMPLE:
            widened = True
            draw_round(k, k)
        elif widening is Widening.FULLSCAN:
            widened = True
            draw_round(size - drawn, k)
    return Sample(kept, rejected, exhausted=drawn == size, widened=widened, abandoned=abandoned)
