"""The placement policy: one set of knobs, a default and per-namespace overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Mode(StrEnum):
    """How the fit filter acts on a namespace's pods."""

    OFF = "off"  # the extender is neutral: every candidate passes, equal scores
    SHADOW = "shadow"  # neutral like off, but would-be rejections are counted
    ENFORCE = "enforce"  # nodes that cannot hold the pod are rejected; nodes are ranked


class Widening(StrEnum):
    """What best-of-K does when its sample holds no fitting node."""

    NONE = "none"  # sample K, keep those that fit; an empty sample fails the pod
    RESAMPLE = "resample"  # one more round of K draws after an empty first round
    FULLSCAN = "fullscan"  # after an empty first round, keep drawing until K fit or none are left
    DRAW_UNTIL_K = "drawUntilK"  # rejected draws never count: draw until K fit


@dataclass(frozen=True, slots=True)
class Policy:
    """The knobs that apply to one pod. Defaults follow docs/decisions/."""

    mode: Mode = Mode.SHADOW
    sample_size: int = 3
    widening: Widening = Widening.FULLSCAN
    score_hugepages: bool = True
    overcommit_ratio: float = 4.0
    alpha: float = 0.5
    reservation_timeout_seconds: float = 30.0
    need_from_memory: bool = False
    node_report_max_age_seconds: float = 1800.0  # older node-agent records: requests-only accounting
    numa_aligned: bool = False  # Guaranteed pods need one NUMA node with the pages (single-numa-node nodes)

    @property
    def examines_every_candidate(self) -> bool:
        """Shadow counts every would-be rejection; K = 0 passes every fitting node."""
        return self.mode is Mode.SHADOW or self.sample_size <= 0


PASSTHROUGH = Policy(mode=Mode.OFF)


@dataclass(frozen=True, slots=True)
class Placement:
    """The resolved policy table: defaults, per-namespace policies, exempt namespaces."""

    defaults: Policy = Policy()
    namespaces: Mapping[str, Policy] = field(default_factory=dict)
    exempt_namespaces: frozenset[str] = frozenset()

    def policy_for(self, namespace: str) -> Policy:
        """A namespace's own entry wins over the defaults; exempt namespaces pass through."""
        if namespace in self.exempt_namespaces:
            return PASSTHROUGH
        return self.namespaces.get(namespace, self.defaults)
