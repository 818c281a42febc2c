"""run_replay end to end: the files it writes, and that a seed fixes everything but timing."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from replay.model import ReplaySettings, ScaleSettings, VariantGroup, parse_variant
from replay.report import REPORT_FILE, SUMMARY_FILE, table
from replay.run import quick_settings, run_replay
from replay.summary import Summary

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def small_settings(seed: int = 1) -> ReplaySettings:
    """The quick scenario with a few variants and a small scale measurement: a second or two."""
    rollout = ("off", "shadow", "enforce:fullscan:k3:inflight=bind")
    scope = ("off", "enforce:fullscan:k3:ns=vm")
    groups = (
        VariantGroup("Rollout", tuple(map(parse_variant, rollout)), plot_utilisation=True),
        VariantGroup("Scope", tuple(map(parse_variant, scope))),
    )
    scale = ScaleSettings(node_count=300, fitting_fractions=(0.01, 0.0), repetitions=3)
    return dataclasses.replace(quick_settings(seed), groups=groups, scale=scale, command="test")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Summary]:
    out = tmp_path_factory.mktemp("replay")
    return out, run_replay(small_settings(), out=out)


def without_timing(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: without_timing(v) for k, v in document.items() if k != "timing"}
    if isinstance(document, list):
        return [without_timing(v) for v in document]
    return document


def test_the_report_files_exist_and_the_figures_are_pngs(written: tuple[Path, Summary]) -> None:
    out, _ = written
    names = {p.name for p in out.iterdir()}
    figures = {"failure_rate.png", "decision_latency.png", "utilisation.png", "widening_cost_5000_nodes.png"}
    assert names == {REPORT_FILE, SUMMARY_FILE} | figures
    for name in figures:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 10_000  # axes, lines and labels, not an empty canvas


def test_the_markdown_has_the_tables_and_links_every_figure(written: tuple[Path, Summary]) -> None:
    out, _ = written
    report = (out / REPORT_FILE).read_text()
    for heading in (
        "## All variants, whole run",
        "### Rollout",
        "## Shadow mode: would-be rejections against node failures",
        "## Per-namespace outcomes (flag scope)",
        "## Widening cost at 300 nodes",
    ):
        assert heading in report
    assert "| `enforce:fullscan:k3:inflight=bind` |" in report
    assert "| variant | 10 pods | 20 pods | 40 pods | 80 pods | 160 pods |" in report
    for figure in ("failure_rate.png", "decision_latency.png", "utilisation.png", "widening_cost_5000_nodes.png"):
        assert f"]({figure})" in report


def test_summary_json_holds_each_variant_once_with_its_steps(written: tuple[Path, Summary]) -> None:
    out, summary = written
    document = json.loads((out / SUMMARY_FILE).read_text())
    assert [v["name"] for v in document["variants"]] == [
        "off",
        "shadow",
        "enforce:fullscan:k3:inflight=bind",
        "enforce:fullscan:k3:ns=vm",
    ]
    off = document["variants"][0]
    assert off["groups"] == ["Rollout", "Scope"]
    assert [s["level"] for s in off["steps"]] == [10, 20, 40, 80, 160]
    assert off["total"]["attempts"] == sum(s["attempts"] for s in off["steps"])
    assert off["total"]["failed_node"] == summary.variant("off").total.failed_node > 0
    assert document["variants"][2]["total"]["failed_node"] == 0
    assert len(document["scale"]["rows"]) == 2 * 6


def test_one_seed_gives_one_summary_apart_from_timing(written: tuple[Path, Summary], tmp_path: Path) -> None:
    out, _ = written
    run_replay(small_settings(), out=tmp_path / "again")
    run_replay(small_settings(seed=2), out=tmp_path / "other")
    first = json.loads((out / SUMMARY_FILE).read_text())
    again = json.loads((tmp_path / "again" / SUMMARY_FILE).read_text())
    other = json.loads((tmp_path / "other" / SUMMARY_FILE).read_text())
    assert first != again  # wall-clock timing differs...
    assert without_timing(first) == without_timing(again)  # ...and nothing else
    assert without_timing(first) != without_timing(other)


def test_progress_goes_to_the_stream_given() -> None:
    stream = io.StringIO()
    settings = dataclasses.replace(small_settings(), scale=None)
    run_replay(settings, progress_stream=stream)
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("quick replay [##############################] 20/20")


def test_markdown_tables_align_the_first_column_left() -> None:
    assert table(["a", "b"], [["x", "1"]]) == ["| a | b |", "|:---|---:|", "| x | 1 |", ""]
