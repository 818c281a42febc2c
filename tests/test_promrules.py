"""Scraped samples into promtool input series (e2e/promrules.py): the arithmetic of the hold."""

from __future__ import annotations

from e2e.promrules import Scrapes, _values

EXPOSITION = """\
# HELP hugepage_extender_requests_total Extender HTTP requests by verb and status code.
# TYPE hugepage_extender_requests_total counter
hugepage_extender_requests_total{{code="200",verb="filter"}} {requests}
# HELP hugepage_extender_ready 1 once the cluster state is loaded.
# TYPE hugepage_extender_ready gauge
hugepage_extender_ready {ready}
# HELP hugepage_extender_waiting_pod_max_age_seconds How long.
# TYPE hugepage_extender_waiting_pod_max_age_seconds gauge
hugepage_extender_waiting_pod_max_age_seconds {age}
"""


def test_counters_keep_their_rate_gauges_their_value_ages_their_pace() -> None:
    # Counter 0, 10, 20 over steps 0..2: 10 a step; held 3 more steps -> 30, 40, 50.
    assert _values({0: 0, 1: 10, 2: 20}, "counter", 2, 3) == "0 10 20 30+10x2"
    # A gauge keeps its last value.
    assert _values({0: 1, 2: 0}, "gauge", 2, 3) == "1 _ 0 0+0x2"
    # An age grows at its latest pace (1 a step), not its average since the first scrape.
    assert _values({0: 0, 1: 0, 2: 0, 3: 1}, "age", 3, 2) == "0 0 0 1 2+1x1"


def test_scrapes_label_series_as_a_service_monitor_would_and_record_up() -> None:
    scrapes = Scrapes({"job": "hugepage-extender", "namespace": "hugepage-extender", "pod": "a"})
    texts = iter(
        [
            EXPOSITION.format(requests=0, ready=1, age=0),
            None,  # the target did not answer
            EXPOSITION.format(requests=4, ready=1, age=2),
        ]
    )
    for _ in range(3):
        scrapes.scrape(lambda: next(texts))
    assert scrapes.last_step == 2  # never two scrapes on one step
    series = {s["series"]: s["values"] for s in scrapes.input_series(hold_steps=2)}
    target = 'job="hugepage-extender", namespace="hugepage-extender", pod="a"'
    assert series[f"up{{{target}}}"] == "1 0 1 1+0x1"
    assert series[f'hugepage_extender_requests_total{{code="200", {target}, verb="filter"}}'] == "0 _ 4 6+2x1"
    assert series[f"hugepage_extender_ready{{{target}}}"] == "1 _ 1 1+0x1"
    assert series[f"hugepage_extender_waiting_pod_max_age_seconds{{{target}}}"] == "0 _ 2 3+1x1"
