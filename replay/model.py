"""What a replay is made of: the cluster, the workload, and the variants compared.

Plain frozen values, no behaviour beyond naming: the simulation reads them,
the scenario loader builds them, the report prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from extender.core.config import Config
from extender.core.errors import ExtenderError
from extender.core.policy import Mode, Policy, PolicyTable, Widening

RESOURCE_NAME = "hugepages-2Mi"
PAGE_SIZE_BYTES = 2 * 1024 * 1024
GIB = 1024**3


class ReplayError(ExtenderError, ValueError):
    """A scenario, trace or variant the replay cannot use; the message says which and why."""


class InFlight(StrEnum):
    """Which of server.py's in-flight holds the extender makes (see ``simulate.Replay``)."""

    # No holds at all: server.py stripped of its in-flight accounting, for comparison.
    # The extender sees a placement only when the node reports the pod.
    NONE = "none"
    # server.py without the bind verb: an enforcing filter holds the pod's need on
    # ``FilterDecision.nodes_to_hold`` (every admitted node, when at most HOLD_LIMIT
    # are admitted) until the pod shows up bound or the hold times out.
    FILTER = "filter"
    # server.py with the bind verb (serve --enable-bind): the filter's holds, then bind
    # narrows the hold to the picked node, for pods of every mode with a hugepage need.
    BIND = "bind"


class Blind(StrEnum):
    """How the scheduler breaks ties among equally scored nodes (it cannot see hugepages)."""

    RANDOM = "random"
    LEAST_CPU = "least-cpu"  # NodeResourcesFit LeastAllocated on CPU requests, assumed pods included


@dataclass(frozen=True, slots=True)
class Variant:
    """One extender configuration under test."""

    mode: Mode
    widening: Widening = Widening.FULLSCAN
    sample_size: int = 3
    inflight: InFlight = InFlight.FILTER
    namespace: str | None = None  # the mode applies to this namespace only; the others run off
    overcommit_ratio: float = 4.0

    @property
    def name(self) -> str:
        """The canonical spec string; ``parse_variant(v.name) == v``."""
        # Widening and K only matter when enforcing, so off and shadow names omit them.
        enforce = self.mode is Mode.ENFORCE
        parts = [self.mode.value]
        if enforce or self.widening is not Widening.FULLSCAN:
            parts.append(self.widening.value)
        if enforce or self.sample_size != 3:
            parts.append(f"k{self.sample_size}")
        if self.inflight is not InFlight.FILTER:
            parts.append(f"inflight={self.inflight.value}")
        if self.namespace is not None:
            parts.append(f"ns={self.namespace}")
        if self.overcommit_ratio != 4.0:
            parts.append(f"R={self.overcommit_ratio:g}")
        return ":".join(parts)

    def config(self, hold_timeout_seconds: float) -> Config:
        """The extender Config this variant runs with.

        Every pod is VM-backed (``need_from_memory``), the premise of the
        replay: the scheduler sees a memory request, the node needs hugepages.
        """
        policy = Policy(
            mode=self.mode,
            sample_size=self.sample_size,
            widening=self.widening,
            overcommit_ratio=self.overcommit_ratio,
            hold_timeout_seconds=hold_timeout_seconds,
            need_from_memory=True,
        )
        if self.namespace is None:
            placement = PolicyTable(defaults=policy)
        else:
            off = Policy(mode=Mode.OFF, need_from_memory=True, hold_timeout_seconds=hold_timeout_seconds)
            placement = PolicyTable(defaults=off, namespaces={self.namespace: policy})
        return Config(resource_names=(RESOURCE_NAME,), placement=placement)


_E = TypeVar("_E", bound=StrEnum)


def _enum_value(kind: type[_E], text: str) -> _E | None:
    try:
        return kind(text)
    except ValueError:
        return None


def _ratio(value: str, spec: str) -> float:
    try:
        ratio = float(value)
    except ValueError:
        raise ReplayError(f"variant {spec!r}: R must be a number, got {value!r}") from None
    if not ratio > 0:
        raise ReplayError(f"variant {spec!r}: R must be > 0, got {value!r}")
    return ratio


def parse_variant(spec: str) -> Variant:
    """``mode[:widening][:kN][:inflight=none|filter|bind][:ns=NAME][:R=x]``, e.g. ``enforce:fullscan:k3``.

    Anything left out takes the extender's current default (fullscan, K = 3,
    the filter's in-flight holds as server.py makes them without the bind verb, R = 4).
    """
    tokens = spec.strip().split(":")
    mode = _enum_value(Mode, tokens[0])
    if mode is None:
        raise ReplayError(f"variant {spec!r}: must start with off, shadow or enforce")
    variant = Variant(mode)
    for token in tokens[1:]:
        key, eq, value = token.partition("=")
        widening = _enum_value(Widening, token)
        if eq and key == "inflight":
            inflight = _enum_value(InFlight, value)
            if inflight is None:
                raise ReplayError(f"variant {spec!r}: inflight must be none, filter or bind, got {value!r}")
            variant = replace(variant, inflight=inflight)
        elif eq and key == "ns" and value:
            variant = replace(variant, namespace=value)
        elif eq and key == "R":
            variant = replace(variant, overcommit_ratio=_ratio(value, spec))
        elif widening is not None:
            variant = replace(variant, widening=widening)
        elif token.startswith("k") and token[1:].isdigit():
            variant = replace(variant, sample_size=int(token[1:]))
        else:
            raise ReplayError(
                f"variant {spec!r}: unknown token {token!r} "
                "(expected a widening, kN, inflight=none|filter|bind, ns=NAME or R=x)"
            )
    return variant


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """``count`` alike nodes; each holds a random outside usage in [outside_min, outside_max]."""

    count: int
    pool_bytes: int  # status.allocatable[hugepages-2Mi]; 0: the node has no pool
    cpu_millis: int
    outside_min_bytes: int = 0  # pages used outside pod requests (VMs, DPDK), as the node reports them
    outside_max_bytes: int = 0
    prefix: str = "node"


@dataclass(frozen=True, slots=True)
class PodKind:
    """One kind of VM-backed pod in the workload mix."""

    namespace: str
    memory_bytes: int  # the pod's memory request; its hugepage need under need_from_memory
    cpu_millis: int
    lifetime_seconds: float  # mean; each pod draws uniformly in [0.5, 1.5] x mean
    weight: float


# Pick to bound in the extender's cache, as ``python -m benchmarks hold`` measured it on the
# real kube-scheduler (docs/performance.md, "Hold to bound"): the time a placement's hold lasts.
MEASURED_BIND_DELAY_SECONDS = 0.01


@dataclass(frozen=True, slots=True)
class Timing:
    placement_delay_seconds: float = 5.0  # mean time from pick to the node admitting or failing the pod
    bind_delay_seconds: float = MEASURED_BIND_DELAY_SECONDS  # pick to the pod seen bound: its hold ends
    retry_backoff_seconds: float = 10.0  # a client whose pod failed asks again after this
    sample_interval_seconds: float = 10.0  # utilisation and imbalance are sampled this often
    hold_timeout_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class Ladder:
    """Closed-loop clients: step i keeps ``levels[i]`` pods requested or running."""

    levels: tuple[int, ...]
    step_seconds: float


@dataclass(frozen=True, slots=True)
class Arrival:
    """One pod of a trace."""

    time_seconds: float
    namespace: str
    hugepage_bytes: int  # rendered as the pod's memory request (VM-backed)
    cpu_millis: int
    lifetime_seconds: float


@dataclass(frozen=True, slots=True)
class Trace:
    """Open-loop arrivals, reported in ``windows`` equal time windows."""

    arrivals: tuple[Arrival, ...]
    windows: int = 5
    source: str = "trace"


@dataclass(frozen=True, slots=True)
class Scenario:
    nodes: tuple[NodeGroup, ...]
    mix: tuple[PodKind, ...]
    workload: Ladder | Trace
    timing: Timing = Timing()

    @property
    def node_count(self) -> int:
        return sum(g.count for g in self.nodes)


@dataclass(frozen=True, slots=True)
class VariantGroup:
    """Variants that answer one question side by side (one panel, one table)."""

    title: str
    variants: tuple[Variant, ...]
    plot_utilisation: bool = False  # also drawn in the utilisation figure


@dataclass(frozen=True, slots=True)
class ScaleSettings:
    """The widening cost measurement on a large, nearly full cluster."""

    node_count: int = 5000
    fitting_fractions: tuple[float, ...] = (0.1, 0.01, 0.001, 0.0)
    repetitions: int = 100


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    scenario: Scenario
    groups: tuple[VariantGroup, ...]
    seed: int = 1
    blind: Blind = Blind.LEAST_CPU
    scale: ScaleSettings | None = ScaleSettings()
    command: str = ""  # how the run was started, for the report
    label: str = "replay"  # the progress bar's prefix

    @property
    def variants(self) -> tuple[Variant, ...]:
        """Every variant once, in first-mention order."""
        seen: dict[str, Variant] = {}
        for group in self.groups:
            for variant in group.variants:
                seen.setdefault(variant.name, variant)
        return tuple(seen.values())
