"""Shadow's verdicts in the replay, graded as the live scorecard grades them (``extender.state.scorecard``).

Each shadow pod is judged at its pick (the replay binds 10 ms later) and its outcome is the node's at
landing: admitted (ran) or not (failed). The extender's own ``Scorecard`` turns the pairs into cells,
with the same credit per node and burst: a false alarm and a miss on one node, judged within
``PAIR_SECONDS`` of the burst's first verdict, count as a foreseen failure and a pod that ran as
predicted. Its rows are the ladder's steps: each pod counts in the step it was requested in.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.podoutcome import PodSignal, Prediction
from extender.state.scorecard import PAIR_SECONDS, Scorecard
from replay.tally import StepTally

ADMITTED = PodSignal(ready=True)  # with no settle time, ran at once
REFUSED = PodSignal(failure="Failed to place sandbox: the node's pool cannot hold the pod")


class ShadowGrades:
    """The scorecard over the replay's clock, counting into each step's ``ShadowTally``."""

    def __init__(
        self,
        steps: list[StepTally],
        clock: Callable[[], float],
        *,
        horizon_seconds: float,
        pair_seconds: float = PAIR_SECONDS,  # 0: no pairing, each pod graded alone
    ) -> None:
        self._steps = steps
        # Nothing expires before the run ends: every pod lands within its placement delay.
        self.card = Scorecard(
            settle_seconds=0.0,
            window_seconds=horizon_seconds,
            clock=clock,
            row_of=lambda row: row,
            pair_seconds=pair_seconds,
        )

    def judged(self, uid: str, step: int, node: str, *, would_reject: bool) -> None:
        why = "the fit filter would reject the node" if would_reject else "room for it"
        self._count(self.card.judged(uid, str(step), uid, node, Prediction(would_reject, why, "pick")))

    def landed(self, uid: str, *, failed: bool) -> None:
        self._count(self.card.seen(uid, REFUSED if failed else ADMITTED))
        self.tick()

    def tick(self) -> None:
        """Bursts past their time release what they held (the replay calls it at each landing, and once
        at the end, ``PAIR_SECONDS`` after the last)."""
        self._count(self.card.tick())

    def _count(self, ended: list[tuple[str, str]]) -> None:
        for step, cell in ended:
            self._steps[int(step)].shadow.count(cell)
