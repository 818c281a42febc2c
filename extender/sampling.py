"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle that keeps only
the positions it swapped), each O(1), so a decision costs O(draws), not
O(nodes): with best-of-K a filter over 5,000 candidates reads about K of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
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


class _Draws(Generic[T]):
    """Random draws without replacement: a Fisher-Yates shuffle that records only the
    positions it swapped, so a draw costs O(1) and reads one candidate (the candidates
    may decode names as they are read; the sequence is never copied)."""

    def __init__(self, candidates: Sequence[T], rng: random.Random) -> None:
        self._candidates = candidates
        self._size = len(candidates)
        self._moved: dict[int, int] = {}  # position -> index of the candidate now there
        self._next = 0
        self._rng = rng

    @property
    def remaining(self) -> int:
        return self._size - self._next

    def draw(self) -> T:
        i = self._next
        j = self._rng.randrange(i, self._size)
        moved = self._moved
        picked = moved.get(j, j)
        moved[j] = moved.get(i, i)
        self._next = i + 1
        return self._candidates[picked]


def best_of_k(
    candidates: Sequence[T],
    k: int,
    widening: Widening,
    accept: Callable[[T], bool],
    rng: random.Random,
) -> Sample[T]:
    """Keep up to ``k`` (at least 1) accepted candidates, drawn at random."""
    draws = _Draws(candidates, rng)
    kept: list[T] = []
    rejected: list[T] = []

    def draw_round(limit: int, stop_at: int) -> None:
        taken = 0
        while taken < limit and len(kept) < stop_at and draws.remaining:
            candidate = draws.draw()
            taken += 1
            (kept if accept(candidate) else rejected).append(candidate)

    if widening is Widening.DRAW_UNTIL_K:
        draw_round(len(candidates), k)
        return Sample(kept, rejected, exhausted=not draws.remaining, widened=bool(rejected))

    draw_round(k, k)
    widened = False
    if not kept and draws.remaining:
        if widening is Widening.RESAMPLE:
            widened = True
            draw_round(k, k)
        elif widening is Widening.FULLSCAN:
            widened = True
            draw_round(draws.remaining, k)
    return Sample(kept, rejected, exhausted=not draws.remaining, widened=widened)
