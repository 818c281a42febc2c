"""``run_replay``: every variant through the scenario, the scale measurement, the report."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TextIO

from replay.model import ReplaySettings, ScaleSettings, VariantGroup, parse_variant
from replay.progress import Progress
from replay.report import write_report
from replay.scale import measure_widening_cost
from replay.scenario import full_scenario, quick_scenario
from replay.simulate import run_variant, step_count
from replay.summary import MachineTiming, Summary, summarise

# server.py without the bind verb: best-of-K, the filter holding the need on every node it admits.
SERVER_AS_IS = "enforce:fullscan:k3"
# server.py with the bind verb (serve --enable-bind): the filter's holds, narrowed to the pick by bind.
WITH_BIND = "enforce:fullscan:k3:inflight=bind"
WIDENINGS = ("none", "resample", "fullscan", "drawUntilK")
SAMPLE_SIZES = (1, 2, 3, 5, 0)


def default_groups() -> tuple[VariantGroup, ...]:
    """The comparison matrix: one group per question, sharing baselines (each runs once)."""

    def group(title: str, specs: list[str], *, plot_utilisation: bool = False) -> VariantGroup:
        return VariantGroup(title, tuple(parse_variant(s) for s in specs), plot_utilisation)

    return (
        group("Rollout: off, shadow, enforce", ["off", "shadow", SERVER_AS_IS, WITH_BIND], plot_utilisation=True),
        group("Widening at K=3, without the bind verb (filter holds)", [f"enforce:{w}:k3" for w in WIDENINGS]),
        group("Widening at K=3, with the bind verb", [f"enforce:{w}:k3:inflight=bind" for w in WIDENINGS]),
        group(
            "Sample size K, fullscan, without the bind verb (filter holds; k0 = every node)",
            [f"enforce:fullscan:k{k}" for k in SAMPLE_SIZES],
        ),
        group(
            "Sample size K, fullscan, with the bind verb (k0 = every node)",
            [f"enforce:fullscan:k{k}:inflight=bind" for k in SAMPLE_SIZES],
            plot_utilisation=True,
        ),
        group(
            "In-flight accounting (fullscan): none, filter holds, filter holds + bind",
            [
                "enforce:fullscan:k3:inflight=none",
                SERVER_AS_IS,
                WITH_BIND,
                "enforce:fullscan:k1:inflight=none",
                "enforce:fullscan:k1",
                "shadow:inflight=bind",
            ],
        ),
        group(
            "Flag scope: only namespace vm enforces, batch runs off",
            ["off", f"{SERVER_AS_IS}:ns=vm", f"{WITH_BIND}:ns=vm", SERVER_AS_IS, WITH_BIND],
        ),
        group("CPU over-commit R in the score (fullscan K=3, bind)", [WITH_BIND, f"{WITH_BIND}:R=1"]),
    )


def quick_settings(seed: int = 1) -> ReplaySettings:
    return ReplaySettings(
        scenario=quick_scenario(),
        groups=default_groups(),
        seed=seed,
        scale=ScaleSettings(repetitions=10),
        label="quick replay",
    )


def full_settings(seed: int = 1) -> ReplaySettings:
    return ReplaySettings(scenario=full_scenario(), groups=default_groups(), seed=seed, scale=ScaleSettings())


def _work_units(settings: ReplaySettings) -> int:
    scale = len(settings.scale.fitting_fractions) if settings.scale is not None else 0
    return len(settings.variants) * step_count(settings.scenario) + scale


def run_replay(
    settings: ReplaySettings,
    *,
    out: Path | None = None,
    progress_stream: TextIO | None = None,
) -> Summary:
    """Replay every variant of ``settings``; with ``out``, write the report there.

    ``progress_stream`` (e.g. sys.stderr) receives a progress bar.
    """
    progress = Progress(_work_units(settings), progress_stream, settings.label)
    load_at_start = os.getloadavg()[0]
    started = time.perf_counter()
    runs = []
    for variant in settings.variants:
        progress.describe(variant.name)
        runs.append(
            run_variant(settings.scenario, variant, seed=settings.seed, blind=settings.blind, tick=progress.advance)
        )
    scale_rows = None
    if settings.scale is not None:
        progress.describe(f"widening cost at {settings.scale.node_count} nodes")
        scale_rows = measure_widening_cost(settings.scale, settings.seed, tick=progress.advance)
    machine = MachineTiming(
        wall_seconds=round(time.perf_counter() - started, 3),
        cpus=os.cpu_count() or 1,
        load_average_start=round(load_at_start, 2),
        load_average_end=round(os.getloadavg()[0], 2),
    )
    summary = summarise(settings, runs, scale_rows, machine)
    if out is not None:
        progress.describe(f"writing the report to {out}")
        write_report(summary, out)
    progress.finish()
    return summary
