"""The replay's results as plain values: what summary.json holds, what the report reads.

Everything measured on the wall clock sits under a ``timing`` field, so two
runs with one seed are identical once those fields are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from replay.model import GIB, PAGE_SIZE_BYTES, Ladder, ReplaySettings, Scenario, Variant
from replay.scale import ScaleRow
from replay.simulate import VariantRun, build_nodes, step_seconds
from replay.tally import OutcomeTally, StepTally, mean, merge, percentile, ratio

SUMMARY_VERSION = 1


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _micros(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e6, 1)


@dataclass(frozen=True, slots=True)
class ShadowSummary:
    predicted_and_failed: int
    predicted_but_placed: int
    missed_failure: int
    predicted_placed: int
    precision: float | None
    recall: float | None


@dataclass(frozen=True, slots=True)
class DecisionTiming:
    decisions: int
    p50_us: float | None
    p99_us: float | None


@dataclass(frozen=True, slots=True)
class StepSummary:
    label: str
    level: float  # pods in flight for a ladder step; window start (s) for a trace
    attempts: int
    placed: int
    failed: int
    failed_native_cpu: int
    failed_decision: int
    failed_node: int
    false_failures: int
    failure_rate: float | None
    node_failure_rate: float | None
    decision_failure_rate: float | None
    outcomes: dict[str, int]
    widened: int
    cpu_dominant_share: float | None
    mean_seconds_to_failure: float | None  # simulated seconds from request to failure
    utilisation: float | None
    imbalance_cv: float | None
    cpu_utilisation: float | None
    shadow: ShadowSummary | None
    timing: DecisionTiming


@dataclass(frozen=True, slots=True)
class NamespaceSummary:
    attempts: int
    placed: int
    failed_decision: int
    failed_node: int
    false_failures: int
    failure_rate: float | None
    node_failure_rate: float | None


@dataclass(frozen=True, slots=True)
class RunTiming:
    wall_seconds: float


@dataclass(frozen=True, slots=True)
class MachineTiming:
    """The whole run's wall time, and how busy the machine was: decision times depend on it."""

    wall_seconds: float
    cpus: int
    load_average_start: float  # 1-minute load average
    load_average_end: float


@dataclass(frozen=True, slots=True)
class VariantSummary:
    name: str
    groups: list[str]
    mode: str
    widening: str
    sample_size: int
    inflight: str
    namespace: str | None
    overcommit_ratio: float
    steps: list[StepSummary]
    total: StepSummary
    namespaces: dict[str, NamespaceSummary]
    placements_sha256: str
    timing: RunTiming


@dataclass(frozen=True, slots=True)
class ScaleRowTiming:
    p50_us: float
    p99_us: float


@dataclass(frozen=True, slots=True)
class ScaleRowSummary:
    strategy: str
    fitting_fraction: float
    fitting_nodes: int
    examined_mean: float
    no_node_share: float
    timing: ScaleRowTiming


@dataclass(frozen=True, slots=True)
class ScaleSummary:
    node_count: int
    repetitions: int
    rows: list[ScaleRowSummary]


@dataclass(frozen=True, slots=True)
class NodeGroupSummary:
    prefix: str
    count: int
    pool_gib: float
    cpus: float
    outside_gib_range: tuple[float, float]


@dataclass(frozen=True, slots=True)
class ScenarioSummary:
    workload: str  # "ladder" or "trace"
    levels: list[float]
    step_seconds: float
    node_count: int
    node_groups: list[NodeGroupSummary]
    usable_pool_gib: float  # pools minus outside usage, for this seed
    mean_need_gib: float
    mix: list[str]
    placement_delay_seconds: float
    bind_delay_seconds: float
    retry_backoff_seconds: float
    hold_timeout_seconds: float


@dataclass(frozen=True, slots=True)
class GroupSummary:
    title: str
    variants: list[str]
    plot_utilisation: bool


@dataclass(frozen=True, slots=True)
class Summary:
    version: int
    command: str
    seed: int
    blind: str
    scenario: ScenarioSummary
    groups: list[GroupSummary]
    variants: list[VariantSummary]
    scale: ScaleSummary | None
    timing: MachineTiming

    def variant(self, name: str) -> VariantSummary:
        return next(v for v in self.variants if v.name == name)


def _shadow(step: StepTally) -> ShadowSummary | None:
    s = step.shadow
    if not s.observed:
        return None
    return ShadowSummary(
        s.predicted_and_failed,
        s.predicted_but_placed,
        s.missed_failure,
        s.predicted_placed,
        _round(s.precision),
        _round(s.recall),
    )


def summarise_step(step: StepTally, label: str, level: float) -> StepSummary:
    return StepSummary(
        label=label,
        level=level,
        attempts=step.attempts,
        placed=step.placed,
        failed=step.failed,
        failed_native_cpu=step.failed_native_cpu,
        failed_decision=step.failed_decision,
        failed_node=step.failed_node,
        false_failures=step.false_failures,
        failure_rate=_round(ratio(step.failed, step.attempts)),
        node_failure_rate=_round(ratio(step.failed_node, step.attempts)),
        decision_failure_rate=_round(ratio(step.failed_decision, step.attempts)),
        outcomes=dict(sorted(step.outcomes.items())),
        widened=step.widened,
        cpu_dominant_share=_round(ratio(step.cpu_dominant, step.picks)),
        mean_seconds_to_failure=_round(mean(step.seconds_to_failure), 2),
        utilisation=_round(mean(step.utilisation)),
        imbalance_cv=_round(mean(step.imbalance)),
        cpu_utilisation=_round(mean(step.cpu_utilisation)),
        shadow=_shadow(step),
        timing=DecisionTiming(
            len(step.decision_seconds),
            _micros(percentile(step.decision_seconds, 50)),
            _micros(percentile(step.decision_seconds, 99)),
        ),
    )


def _namespace(tally: OutcomeTally) -> NamespaceSummary:
    return NamespaceSummary(
        tally.attempts,
        tally.placed,
        tally.failed_decision,
        tally.failed_node,
        tally.false_failures,
        _round(ratio(tally.failed, tally.attempts)),
        _round(ratio(tally.failed_node, tally.attempts)),
    )


def step_labels(scenario: Scenario) -> list[tuple[str, float]]:
    workload = scenario.workload
    if isinstance(workload, Ladder):
        return [(f"{level} pods", float(level)) for level in workload.levels]
    length = step_seconds(scenario)
    return [(f"{i * length:.0f}-{(i + 1) * length:.0f} s", i * length) for i in range(workload.windows)]


def summarise_variant(run: VariantRun, scenario: Scenario, groups: list[str]) -> VariantSummary:
    v: Variant = run.variant
    labels = step_labels(scenario)
    return VariantSummary(
        name=v.name,
        groups=groups,
        mode=v.mode.value,
        widening=v.widening.value,
        sample_size=v.sample_size,
        inflight=v.inflight.value,
        namespace=v.namespace,
        overcommit_ratio=v.overcommit_ratio,
        steps=[summarise_step(s, label, level) for s, (label, level) in zip(run.steps, labels, strict=True)],
        total=summarise_step(merge(run.steps), "all steps", 0.0),
        namespaces={name: _namespace(t) for name, t in run.namespaces.items()},
        placements_sha256=run.placements_digest,
        timing=RunTiming(round(run.wall_seconds, 3)),
    )


def summarise_scenario(scenario: Scenario, seed: int) -> ScenarioSummary:
    nodes = build_nodes(scenario.nodes, seed)
    usable_pages = sum(n.pool_pages - n.outside_pages for n in nodes if n.pool_pages)
    total_weight = sum(k.weight for k in scenario.mix)
    mean_need = sum(k.memory_bytes * k.weight for k in scenario.mix) / total_weight if total_weight else 0.0
    workload = scenario.workload
    levels = [label[1] for label in step_labels(scenario)]
    return ScenarioSummary(
        workload="ladder" if isinstance(workload, Ladder) else f"trace {workload.source}",
        levels=levels,
        step_seconds=round(step_seconds(scenario), 3),
        node_count=len(nodes),
        node_groups=[
            NodeGroupSummary(
                g.prefix,
                g.count,
                g.pool_bytes / GIB,
                g.cpu_millis / 1000,
                (g.outside_min_bytes / GIB, g.outside_max_bytes / GIB),
            )
            for g in scenario.nodes
        ],
        usable_pool_gib=round(usable_pages * PAGE_SIZE_BYTES / GIB, 1),
        mean_need_gib=round(mean_need / GIB, 2),
        mix=[
            f"{k.namespace} {k.memory_bytes / GIB:g} GiB {k.cpu_millis / 1000:g} CPU "
            f"{k.lifetime_seconds:g} s x{k.weight / total_weight:.3f}"
            for k in scenario.mix
        ],
        placement_delay_seconds=scenario.timing.placement_delay_seconds,
        bind_delay_seconds=scenario.timing.bind_delay_seconds,
        retry_backoff_seconds=scenario.timing.retry_backoff_seconds,
        hold_timeout_seconds=scenario.timing.hold_timeout_seconds,
    )


def summarise_scale(rows: list[ScaleRow], node_count: int, repetitions: int) -> ScaleSummary:
    return ScaleSummary(
        node_count,
        repetitions,
        [
            ScaleRowSummary(
                r.strategy,
                r.fitting_fraction,
                r.fitting_nodes,
                round(r.examined_mean, 1),
                round(r.no_node_share, 4),
                ScaleRowTiming(round(r.p50_seconds * 1e6, 1), round(r.p99_seconds * 1e6, 1)),
            )
            for r in rows
        ],
    )


def summarise(
    settings: ReplaySettings, runs: list[VariantRun], scale: list[ScaleRow] | None, machine: MachineTiming
) -> Summary:
    membership: dict[str, list[str]] = {}
    for group in settings.groups:
        for variant in group.variants:
            membership.setdefault(variant.name, []).append(group.title)
    return Summary(
        version=SUMMARY_VERSION,
        command=settings.command,
        seed=settings.seed,
        blind=settings.blind.value,
        scenario=summarise_scenario(settings.scenario, settings.seed),
        groups=[GroupSummary(g.title, [v.name for v in g.variants], g.plot_utilisation) for g in settings.groups],
        variants=[summarise_variant(r, settings.scenario, membership[r.variant.name]) for r in runs],
        scale=(
            summarise_scale(scale, settings.scale.node_count, settings.scale.repetitions)
            if scale is not None and settings.scale is not None
            else None
        ),
        timing=machine,
    )
