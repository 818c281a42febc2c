"""Alert rules against a real rule checker: promtool (built by e2e/promtool/build).

- ``promtool()``: the pinned binary (``$E2E_PROMTOOL`` or built on a cache miss).
- ``check_rules`` / ``run_rule_tests``: ``promtool check rules`` / ``promtool test rules``.
- ``Scrapes``: the extender's ``/metrics`` read during a scenario, turned into a
  ``promtool test rules`` input, so an alert is shown to fire on what the real
  extender exported (``alert_test``).

How scraped samples become input series: each scrape is one sample per series,
at the real time it was taken (rounded to ``step``). After the last scrape, the
scenario's state is held for ``hold``: gauges keep their last value, counters
(and histogram buckets) keep growing at the rate they grew during the scenario.
That is the question an alert asks ("if this goes on for 10 minutes"). ``up`` is
1 for every scrape that answered and 0 for one that did not, as Prometheus records it.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "e2e" / "promtool" / "build"


class PromtoolUnavailable(RuntimeError):
    """promtool could not be built (no Go, no module proxy)."""


def promtool() -> Path:
    env = os.environ.get("E2E_PROMTOOL")
    if env:
        return Path(env)
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PromtoolUnavailable(done.stderr.strip()[-2000:] or "e2e/promtool/build failed")
    return Path(done.stdout.strip().splitlines()[-1]) / "promtool"


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(promtool()), *map(str, args)], capture_output=True, text=True, check=False, cwd=cwd)
    output = "\n".join(p for p in (done.stdout.strip(), done.stderr.strip()) if p)
    if done.returncode != 0:
        raise AssertionError(f"promtool {' '.join(map(str, args))} failed:\n{output}")
    return output


def check_rules(rules: Path) -> str:
    """``promtool check rules`` (syntax, PromQL, templates), strict about duplicates and lint."""
    return _run("check", "rules", "--lint=all", "--lint-fatal", rules)


def run_rule_tests(test_file: Path) -> str:
    return _run("test", "rules", test_file.name, cwd=test_file.parent)


# --------------------------------------------------------------------------- scenario scrapes

Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    kind: str  # counter, gauge or age (histogram buckets, sums and counts are counters)
    points: dict[int, float] = field(default_factory=dict)  # step index -> value


@dataclass
class Scrapes:
    """The extender's ``/metrics`` read during a scenario, with the labels a ServiceMonitor adds."""

    target: Mapping[str, str]  # job, namespace, pod: what Prometheus attaches to each series
    step_seconds: float = 1.0
    started: float = field(default_factory=time.monotonic)
    series: dict[tuple[str, Labels], Series] = field(default_factory=dict)
    up: dict[int, float] = field(default_factory=dict)
    last_step: int = 0

    def _step(self) -> int:
        return round((time.monotonic() - self.started) / self.step_seconds)

    def scrape(self, fetch: Callable[[], str | None]) -> bool:
        """One scrape: ``fetch`` returns the exposition text, or None when the target did not answer."""
        # Never two scrapes on one step: a later one would overwrite the earlier sample.
        step = max(self._step(), self.last_step + 1) if self.up else self._step()
        self.last_step = step
        text = fetch()
        self.up[step] = 0.0 if text is None else 1.0
        if text is None:
            return False
        for family in text_string_to_metric_families(text):
            kind = "gauge" if family.type in ("gauge", "info", "unknown", "stateset") else "counter"
            if family.name.endswith("_age_seconds"):
                kind = "age"  # keeps growing while the state lasts, at its latest pace
            for sample in family.samples:
                labels = tuple(sorted({**sample.labels, **self.target}.items()))
                entry = self.series.setdefault((sample.name, labels), Series(kind))
                entry.points[step] = float(sample.value)
        return True

    def input_series(self, hold_steps: int) -> list[dict[str, str]]:
        """promtool ``input_series``: every scraped series, then the state held for ``hold_steps`` more steps."""
        out = [
            {
                "series": _selector("up", tuple(sorted(self.target.items()))),
                "values": _values(self.up, "gauge", self.last_step, hold_steps),
            }
        ]
        for (name, labels), entry in sorted(self.series.items()):
            out.append(
                {
                    "series": _selector(name, labels),
                    "values": _values(entry.points, entry.kind, self.last_step, hold_steps),
                }
            )
        return out


def _selector(name: str, labels: Labels) -> str:
    inner = ", ".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(value) if value != int(value) else str(int(value))


def _values(points: Mapping[int, float], kind: str, last_step: int, hold_steps: int) -> str:
    """Sample by step ('_' where a scrape did not have the series), then ``hold_steps`` more."""
    cells = [_number(points[s]) if s in points else "_" for s in range(last_step + 1)]
    known = sorted(points)
    if not known or hold_steps <= 0:
        return " ".join(cells)
    last = points[known[-1]]
    rate = 0.0
    if kind == "counter" and known[-1] > known[0]:
        rate = max(0.0, (last - points[known[0]]) / (known[-1] - known[0]))
    elif kind == "age" and len(known) > 1:
        rate = max(0.0, (last - points[known[-2]]) / (known[-1] - known[-2]))
    # promtool's expanding notation: "a+bxn" is a, a+b, ..., a+n*b (n+1 samples).
    cells.append(f"{_number(last + rate)}+{_number(rate)}x{hold_steps - 1}")
    return " ".join(cells)


@dataclass(frozen=True)
class Expected:
    alertname: str
    labels: Mapping[str, str]  # labels the firing alert must carry (severity included)


def alert_test(
    directory: Path,
    rules: Path,
    scrapes: Scrapes,
    *,
    hold_seconds: float,
    fires: Sequence[Expected],
    quiet: Sequence[str] = (),
) -> str:
    """Write a promtool test that feeds the scenario's scrapes, and run it: each of ``fires`` fires at the
    end of the hold with exactly the given labels; each alert named in ``quiet`` does not fire."""
    step = scrapes.step_seconds
    hold_steps = math.ceil(hold_seconds / step)
    eval_seconds = (scrapes.last_step + hold_steps) * step
    eval_time = f"{int(eval_seconds)}s"
    tests: list[dict[str, Any]] = []
    for expected in fires:
        tests.append(
            {
                "eval_time": eval_time,
                "alertname": expected.alertname,
                "exp_alerts": [{"exp_labels": dict(expected.labels)}],
            }
        )
    for name in quiet:
        tests.append({"eval_time": eval_time, "alertname": name, "exp_alerts": []})
    document = {
        "rule_files": ["scenario-rules.yaml"],
        "evaluation_interval": f"{int(step)}s" if step >= 1 else f"{int(step * 1000)}ms",
        "tests": [
            {
                "name": "scenario on the real control plane",
                "interval": f"{int(step)}s" if step >= 1 else f"{int(step * 1000)}ms",
                "input_series": scrapes.input_series(hold_steps),
                "alert_rule_test": tests,
            }
        ],
    }
    test_file = directory / "scenario.test.yaml"
    # Whether it fires, and with which labels, is the question here; the annotations' text
    # is checked by the rules' unit tests (promtool compares annotations in full).
    spec = yaml.safe_load(rules.read_text())
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (directory / "scenario-rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    test_file.write_text(yaml.safe_dump(document, sort_keys=False, width=1 << 16))
    return run_rule_tests(test_file)
