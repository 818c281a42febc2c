"""The report's figures, drawn from a ``Summary`` with matplotlib's Agg canvas.

``Figure`` objects are made directly (no pyplot), so drawing never touches a
global backend or leaks figures between calls.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.axis import XAxis, YAxis
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from replay.summary import Summary, VariantSummary

DPI = 90


def _percent(value: float | None) -> float:
    return math.nan if value is None else 100 * value


def _number(value: float | None) -> float:
    return math.nan if value is None else value


def _x_axis(ax: Axes, summary: Summary) -> None:
    levels = summary.scenario.levels
    if summary.scenario.workload == "ladder":
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [f"{level:g}" for level in levels])
        ax.minorticks_off()
        ax.set_xlabel("pods in flight (ladder step, concurrency)")
    else:
        ax.set_xlabel("trace window start (s)")


def _panels(count: int, *, width: float = 6.4, height: float = 3.8) -> tuple[Figure, list[Axes]]:
    columns = 2 if count > 1 else 1
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = [figure.add_subplot(rows, columns, i + 1) for i in range(count)]
    return figure, axes


def _plain_log_ticks(axis: XAxis | YAxis) -> None:
    """Log-scale ticks as plain numbers (1, 10, 100, 1,000), not powers of ten, and no minor labels."""
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _save(figure: Figure, path: Path) -> None:
    # Reports get committed: Pillow's optimiser keeps each figure near 100 KB.
    figure.savefig(path, dpi=DPI, pil_kwargs={"optimize": True})


def _title(ax: Axes, text: str) -> None:
    ax.set_title("\n".join(textwrap.wrap(text, 60)), fontsize=10)


def _variants(summary: Summary, names: Sequence[str]) -> list[VariantSummary]:
    return [summary.variant(n) for n in names]


def plot_failure_rates(summary: Summary, path: Path) -> None:
    """One panel per question: all failures (solid) and failures on the node (dashed) per step."""
    figure, axes = _panels(len(summary.groups))
    levels = summary.scenario.levels
    for ax, group in zip(axes, summary.groups, strict=True):
        for index, variant in enumerate(_variants(summary, group.variants)):
            colour = f"C{index % 10}"
            ax.plot(levels, [_percent(s.failure_rate) for s in variant.steps], "-o", color=colour, label=variant.name)
            ax.plot(levels, [_percent(s.node_failure_rate) for s in variant.steps], "--x", color=colour)
        _x_axis(ax, summary)
        ax.set_ylabel("pods failed (% of requests)")
        ax.set_ylim(bottom=-2)
        ax.grid(alpha=0.3)
        _title(ax, group.title)
        handles, _ = ax.get_legend_handles_labels()
        style = [
            Line2D([], [], color="black", linestyle="-", label="all failures"),
            Line2D([], [], color="black", linestyle="--", label="failed on the node"),
        ]
        ax.legend(handles=handles + style, fontsize=7, loc="upper left")
    figure.suptitle(f"Failure rate by ladder step (seed {summary.seed})")
    _save(figure, path)


def plot_latency(summary: Summary, path: Path) -> None:
    """p50 and p99 wall-clock time of filter + prioritize per pod, per variant, over the whole run."""
    variants = summary.variants
    figure = Figure(figsize=(8.5, 0.32 * len(variants) + 1.6), layout="constrained")
    ax = figure.add_subplot()
    positions = list(range(len(variants)))
    p50 = [v.total.timing.p50_us or math.nan for v in variants]
    p99 = [v.total.timing.p99_us or math.nan for v in variants]
    ax.barh([p - 0.2 for p in positions], p50, height=0.4, label="p50")
    ax.barh([p + 0.2 for p in positions], p99, height=0.4, label="p99")
    ax.set_yticks(positions, [v.name for v in variants], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_xlabel("decision time per pod (µs, log scale): filter + prioritize, wall clock")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper right")  # beside off's short bars
    ax.set_title(f"Decision latency, {summary.scenario.node_count} nodes", fontsize=10)
    _save(figure, path)


def plot_utilisation(summary: Summary, path: Path) -> None:
    """Hugepage utilisation and imbalance per step, for the groups marked for it."""
    names = list(dict.fromkeys(n for g in summary.groups if g.plot_utilisation for n in g.variants))
    figure, (used_ax, cv_ax) = _panels(2)
    levels = summary.scenario.levels
    for index, variant in enumerate(_variants(summary, names)):
        colour = f"C{index % 10}"
        used_ax.plot(levels, [_percent(s.utilisation) for s in variant.steps], "-o", color=colour, label=variant.name)
        cv_ax.plot(levels, [_number(s.imbalance_cv) for s in variant.steps], "-o", color=colour, label=variant.name)
    for ax in (used_ax, cv_ax):
        _x_axis(ax, summary)
        ax.grid(alpha=0.3)
    used_ax.set_ylabel("hugepage utilisation (%)")
    used_ax.set_ylim(0, 100)
    cv_ax.set_ylabel("imbalance: CV of per-node used fraction")
    cv_ax.set_ylim(bottom=0)
    _title(used_ax, "Pods' hugepages over the usable pool (pool minus outside usage), time average")
    _title(cv_ax, "Imbalance across nodes (lower is more even)")
    used_ax.legend(fontsize=7, loc="upper left")
    _save(figure, path)


def plot_scale(summary: Summary, path: Path) -> None:
    """Decision time and nodes examined per strategy, as the cluster fills up."""
    scale = summary.scale
    if scale is None:
        return
    fractions = list(dict.fromkeys(r.fitting_fraction for r in scale.rows))
    strategies = list(dict.fromkeys(r.strategy for r in scale.rows))
    labels = [f"{100 * f:g}%" if f else "0% (full)" for f in fractions]
    figure, (time_ax, examined_ax) = _panels(2, height=4.4)
    for index, strategy in enumerate(strategies):
        rows = {r.fitting_fraction: r for r in scale.rows if r.strategy == strategy}
        colour = f"C{index % 10}"
        time_ax.plot(labels, [rows[f].timing.p50_us for f in fractions], "-o", color=colour, label=strategy)
        examined_ax.plot(labels, [rows[f].examined_mean for f in fractions], "-o", color=colour, label=strategy)
    for ax in (time_ax, examined_ax):
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
        ax.set_xlabel("nodes that can hold the pod (share of the cluster)")
        ax.grid(alpha=0.3)
    time_ax.set_ylabel("decision time, p50 (µs, log scale)")
    examined_ax.set_ylabel("nodes examined per decision (mean, log scale)")
    _title(time_ax, f"Cost of each strategy at {scale.node_count} nodes (8 GiB pod)")
    _title(examined_ax, "Fit checks per decision")
    # Below both panels: inside, the legend would hide the lines it names.
    handles, names = time_ax.get_legend_handles_labels()
    figure.legend(handles, names, loc="outside lower center", ncols=3, fontsize=8)
    _save(figure, path)
