"""Reconnect delays as client-go's reflector uses: 0.8 s doubling to 30 s, with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial: float = 0.8
    maximum: float = 30.0
    jitter: float = 0.5  # up to +50 %
    rng: random.Random = field(default_factory=random.Random)
    _current: float = 0.0

    def next_delay(self) -> float:
        self._current = self.initial if self._current == 0 else min(self._current * 2, self.maximum)
        return self._current * (1 + self.jitter * self.rng.random())

    def reset(self) -> None:
        self._current = 0.0
