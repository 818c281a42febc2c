"""The replay's Markdown report and summary.json, written from a ``Summary``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from replay.model import ReplayError
from replay.summary import StepSummary, Summary, VariantSummary

REPORT_FILE = "report.md"
SUMMARY_FILE = "summary.json"
FAILURE_FIGURE = "failure_rate.png"
LATENCY_FIGURE = "decision_latency.png"
UTILISATION_FIGURE = "utilisation.png"
SCALE_FIGURE = "widening_cost_5000_nodes.png"


def _pct(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{100 * value:.{digits}f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table; the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _scenario(summary: Summary) -> list[str]:
    s, m = summary.scenario, summary.timing
    groups = ", ".join(
        f"{g.count} x {g.prefix} ({g.pool_gib:g} GiB pool, {g.cpus:g} CPUs, "
        f"{g.outside_gib_range[0]:g}-{g.outside_gib_range[1]:g} GiB used outside pods)"
        for g in s.node_groups
    )
    steps = ", ".join(f"{level:g}" for level in s.levels)
    return [
        "## Scenario",
        "",
        f"- Command: `{summary.command}`" if summary.command else "- Command: (API call)",
        f"- Seed {summary.seed}; blind tie-break of the scheduler: `{summary.blind}`.",
        f"- {s.node_count} nodes: {groups}. Usable pool after outside usage: {s.usable_pool_gib:,.0f} GiB,"
        f" room for about {s.usable_pool_gib / s.mean_need_gib:,.0f} average pods ({s.mean_need_gib:g} GiB each).",
        f"- Workload: {s.workload}; steps {steps} ({s.step_seconds:g} simulated s each).",
        "- Pod mix (VM-backed: memory request, hugepage need derived from it): " + "; ".join(s.mix) + ".",
        f"- Decision times measured on {m.cpus} CPUs, 1-minute load average {m.load_average_start:g} at the"
        f" start and {m.load_average_end:g} at the end (other work on the machine inflates them, p99 most)."
        f" Run time {m.wall_seconds:.0f} s.",
        f"- A picked pod shows up bound in the extender's cache after {s.bind_delay_seconds:g} s (its hold ends"
        " then; measured on the real kube-scheduler by `python -m benchmarks hold`); the node admits or fails it"
        f" {s.placement_delay_seconds:g} s after the pick on average (0.5-1.5x); a client whose pod failed asks"
        f" again after {s.retry_backoff_seconds:g} s; in-flight holds time out after"
        f" {s.hold_timeout_seconds:g} s.",
        "",
    ]


def _variant_row(v: VariantSummary) -> list[str]:
    t, top = v.total, v.steps[-1]
    return [
        f"`{v.name}`",
        str(t.attempts),
        str(t.placed),
        _pct(t.failure_rate),
        str(t.failed_node),
        str(t.failed_decision),
        str(t.false_failures),
        _pct(top.failure_rate),
        _pct(top.node_failure_rate),
        _pct(top.utilisation),
        _num(top.imbalance_cv),
        _us(t.timing.p50_us),
        _us(t.timing.p99_us),
    ]


def _overview(summary: Summary) -> list[str]:
    top = summary.scenario.levels[-1]
    header = [
        "variant",
        "requests",
        "placed",
        "failed",
        "on node",
        "at decision",
        "false",
        f"failed @{top:g}",
        f"on node @{top:g}",
        f"util @{top:g}",
        f"CV @{top:g}",
        "p50 µs",
        "p99 µs",
    ]
    return [
        "## All variants, whole run",
        "",
        f"Counts over every step; `@{top:g}` columns are the last step. Latency is the wall-clock time of"
        " the real filter (with its in-flight hold) + prioritize calls per pod.",
        "",
        *table(header, (_variant_row(v) for v in summary.variants)),
    ]


def _step_cell(step: StepSummary) -> str:
    return f"{_pct(step.failure_rate)} / {_pct(step.node_failure_rate)} / {step.false_failures}"


def _groups(summary: Summary) -> list[str]:
    lines = [
        "## Failure rate by step, one table per question",
        "",
        "Each cell: all failures / failed on the node / false failures (rejected at the decision while"
        " some node had room), as shares of the pods requested in that step.",
        "",
    ]
    labels = [s.label for s in summary.variants[0].steps]
    for group in summary.groups:
        lines += [f"### {group.title}", ""]
        rows = ([f"`{v.name}`"] + [_step_cell(s) for s in v.steps] for v in map(summary.variant, group.variants))
        lines += table(["variant", *labels], rows)
    return lines


def _shadow(summary: Summary) -> list[str]:
    shadows = [v for v in summary.variants if v.total.shadow is not None]
    if not shadows:
        return []
    lines = [
        "## Shadow mode: would-be rejections against node failures",
        "",
        "For each pod placed under shadow: would the fit filter have rejected the node the scheduler"
        " chose, and did the node then fail the pod? Precision: of the predicted failures, the share"
        " that happened; recall: of the node failures, the share predicted.",
        "",
    ]
    for v in shadows:
        rows = []
        for step in [*v.steps, v.total]:
            s = step.shadow
            if s is None:
                continue
            rows.append(
                [
                    step.label,
                    str(s.predicted_and_failed),
                    str(s.predicted_but_placed),
                    str(s.missed_failure),
                    str(s.predicted_placed),
                    _pct(s.precision),
                    _pct(s.recall),
                ]
            )
        header = ["step", "predicted, failed", "predicted, placed", "missed failure", "predicted ok, placed"]
        lines += [f"`{v.name}`", "", *table([*header, "precision", "recall"], rows)]
    return lines


def _namespaces(summary: Summary) -> list[str]:
    # Per-namespace figures matter where a group compares namespace-scoped enforcement.
    scoped = [g for g in summary.groups if any(summary.variant(n).namespace for n in g.variants)]
    names = list(dict.fromkeys(n for g in scoped for n in g.variants))
    if not names:
        return []
    rows = [
        [
            f"`{v.name}`",
            namespace,
            str(n.attempts),
            str(n.placed),
            _pct(n.failure_rate),
            str(n.failed_node),
            str(n.failed_decision),
            str(n.false_failures),
        ]
        for v in map(summary.variant, names)
        for namespace, n in v.namespaces.items()
    ]
    header = ["variant", "namespace", "requests", "placed", "failed", "on node", "at decision", "false"]
    return ["## Per-namespace outcomes (flag scope)", "", *table(header, rows)]


def _cpu(summary: Summary) -> list[str]:
    rows = [
        [
            f"`{v.name}`",
            str(v.total.failed_native_cpu),
            _pct(v.steps[-1].cpu_utilisation),
            _pct(v.total.cpu_dominant_share) if v.mode == "enforce" else "n/a (no ranking)",
        ]
        for v in summary.variants
    ]
    return [
        "## CPU",
        "",
        "Failed for CPU: the scheduler's own CPU fit left no node. CPU term set the load: share of picks"
        " where the chosen node's CPU load (R-scaled) exceeded its hugepage load in max(cpuLoad, memLoad).",
        "",
        *table(["variant", "failed for CPU", "CPU requested @last step", "CPU term set the load"], rows),
    ]


def _scale(summary: Summary) -> list[str]:
    scale = summary.scale
    if scale is None:
        return []
    rows = [
        [
            r.strategy,
            f"{100 * r.fitting_fraction:g}% ({r.fitting_nodes})",
            _num(r.examined_mean, 1),
            _pct(r.no_node_share, 0),
            _us(r.timing.p50_us),
            _us(r.timing.p99_us),
        ]
        for r in scale.rows
    ]
    return [
        f"## Widening cost at {scale.node_count:,} nodes",
        "",
        "Real filter with its in-flight hold (+ prioritize when more than one node passes) on a ClusterState"
        f" of {scale.node_count:,} nodes where only a share can hold an 8 GiB pod; {scale.repetitions} decisions"
        " per row.",
        "",
        *table(["strategy", "nodes with room", "examined", "no node", "p50 µs", "p99 µs"], rows),
        f"![widening cost]({SCALE_FIGURE})",
        "",
    ]


DEFINITIONS = [
    "## How to read this",
    "",
    "- **failed on the node**: the scheduler sent the pod to a node whose real pool (pool minus pages used"
    " outside pods minus running pods) could not hold it when it arrived: the slow failure the RFC wants gone.",
    "- **failed at the decision**: the extender's filter left no node; the pod fails fast (in Kubernetes it"
    " stays Pending and is retried). **False** ones: rejected although some node could have held it, counting"
    " everything already on its way to nodes.",
    "- **in-flight**: `filter` (the default) is server.py without the bind verb: an enforcing filter holds the"
    " pod's need on every node it admits when it admits at most 16 (`FilterDecision.nodes_to_hold`; best-of-K"
    " leaves K), until the pod shows up bound or the hold times out; `bind` is server.py with the bind verb"
    " (serve --enable-bind): the same filter holds, then bind narrows the hold to the picked node, for pods of"
    " every mode with a hugepage need; `none` is server.py stripped of in-flight accounting, for comparison.",
    "- **utilisation**: pages of running pods over usable pages (pool minus outside usage), time-averaged;"
    " **CV**: coefficient of variation of per-node used fraction (outside + pods over pool).",
    "- Decision latency is wall clock on the machine that ran the replay; every other figure depends only on the seed.",
    "",
]


def render_markdown(summary: Summary) -> str:
    lines = [
        "# Hugepage-fit replay",
        "",
        "The extender's real filter, prioritize, ClusterState accounting and in-flight holds, driven through a"
        " simulated cluster whose scheduler cannot see hugepages.",
        "",
        *_scenario(summary),
        *_overview(summary),
        f"![failure rate]({FAILURE_FIGURE})",
        "",
        *_groups(summary),
        *_shadow(summary),
        *_namespaces(summary),
        *_cpu(summary),
        f"![utilisation]({UTILISATION_FIGURE})",
        "",
        f"![decision latency]({LATENCY_FIGURE})",
        "",
        *_scale(summary),
        *DEFINITIONS,
    ]
    return "\n".join(lines)


def summary_json(summary: Summary) -> bytes:
    return msgspec.json.format(msgspec.json.encode(summary), indent=2) + b"\n"


def write_report(summary: Summary, out: Path) -> list[Path]:
    """report.md, summary.json and the figures into ``out``; returns the paths written."""
    # matplotlib is imported here, not at module level: `hugepage-extender serve`
    # imports this package through the CLI and neither needs nor installs it
    # (it is the `replay` extra).
    try:
        from replay import plots  # noqa: PLC0415
    except ModuleNotFoundError as error:
        if error.name != "matplotlib":
            raise
        raise ReplayError(
            "the replay report's figures need matplotlib: pip install 'hugepage-extender[replay]'"
        ) from None

    out.mkdir(parents=True, exist_ok=True)
    figures = {
        FAILURE_FIGURE: plots.plot_failure_rates,
        LATENCY_FIGURE: plots.plot_latency,
        UTILISATION_FIGURE: plots.plot_utilisation,
    }
    if summary.scale is not None:
        figures[SCALE_FIGURE] = plots.plot_scale
    for name, draw in figures.items():
        draw(summary, out / name)
    (out / SUMMARY_FILE).write_bytes(summary_json(summary))
    (out / REPORT_FILE).write_text(render_markdown(summary))
    return [out / REPORT_FILE, out / SUMMARY_FILE, *(out / name for name in figures)]
