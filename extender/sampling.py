"""Best-of-K sampling of candidate nodes, with the widening strategies.

Draws are without replacement (a partial Fisher-Yates shuffle over a copy of
the candidate list), each O(1), so a decision costs O(draws), not O(nodes),
beyond one list copy.
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
    kept: list[T]  # accepted candidates, at most K (every one when K = 0)
    rejected: list[T]  # candidates examined and not accepted
    exhausted: bool  # every candidate was examined
    widened: bool  # the widening strategy had to act


class _Draws(Generic[T]):
    """Random draws without replacement from a private copy of the candidates."""

    def __init__(self, candidates: Sequence[T], rng: random.Random) -> None:
        self._pool = list(candidates)
        self._next = 0
        self._rng = rng

    @property
    def remaining(self) -> int:
        return len(self._pool) - self._next

    def draw(self) -> T:
        i = self._next
        j = self._rng.randrange(i, len(self._pool))
        pool = self._pool
        pool[i], pool[j] = pool[j], pool[i]
        self._next = i + 1
        return pool[i]


def best_of_k(
    candidates: Sequence[T],
    k: int,
    widening: Widening,
    accept: Callable[[T], bool],
    rng: random.Random,
) -> Sample[T]:
    """Keep up to ``k`` accepted candidates (``k == 0``: every accepted candidate)."""
    if k <= 0:
        every: list[T] = []
        others: list[T] = []
        for candidate in candidates:
            (every if accept(candidate) else others).append(candidate)
        return Sample(every, others, exhausted=True, widened=False)

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
