"""The chart's alert rules in a real rule checker: promtool (e2e/promtool/build).

- ``promtool check rules`` (with lint) on the rendered PrometheusRule;
- ``promtool test rules`` (tests/chart/promtool/alerts.test.yaml): each alert fires on its
  input series and stays quiet on a healthy one;
- every alert has a runbook section, every metric a rule reads is exported (or is one
  the node agent's reports add, listed below).

The same rules fire on a real extender's metrics in e2e/cluster/test_alerts_live.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.promrules import PromtoolUnavailable, check_rules, promtool, run_rule_tests
from extender.core.config import Config
from extender.shell.metrics import Metrics
from extender.state.cluster import ClusterState

from .chartlib import CHART, ROOT, Helm

PROMTOOL_TESTS = Path(__file__).resolve().parent / "promtool" / "alerts.test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
MONITORING = CHART / "ci" / "monitoring-values.yaml"
# Every alert the chart renders; each has a runbook section and a promtool unit test.
ALERTS = {
    "HugepageExtenderDown",
    "HugepageExtenderNotReady",
    "HugepageExtenderFilterErrors",
    "HugepageExtenderFilterSlow",
    "HugepageShadowNamespaceWouldRejectPods",
    "HugepageShadowPredictedFailures",
    "HugepagePodsPendingTooLong",
    "HugepagePoolsNearlyFull",
    "HugepageNodeReportsStale",
    "HugepageNodeReportsMissing",
}


@pytest.fixture(scope="module")
def promtool_bin() -> Path:
    try:
        return promtool()
    except PromtoolUnavailable as error:
        pytest.fail(f"promtool could not be built: {error}", pytrace=False)


def rendered_rules(helm: Helm, directory: Path, set_values: dict[str, str] | None = None) -> Path:
    """The chart's PrometheusRule (monitoring values), as a plain rules file for promtool."""
    rendered = helm.template(values=[MONITORING], set_values=set_values or {})
    rules = rendered.all("PrometheusRule")
    assert len(rules) == 1, [r["metadata"]["name"] for r in rules]
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(rules[0]["spec"], sort_keys=False))
    return path


def _alerts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule]


def test_rules_pass_promtool_check(helm: Helm, tmp_path: Path, promtool_bin: Path) -> None:
    path = rendered_rules(helm, tmp_path)
    output = check_rules(path)
    assert "SUCCESS" in output, output
    names = {rule["alert"] for rule in _alerts(yaml.safe_load(path.read_text()))}
    assert names == ALERTS


def test_each_alert_fires_on_its_series(helm: Helm, tmp_path: Path, promtool_bin: Path) -> None:
    rendered_rules(helm, tmp_path)
    shutil.copy(PROMTOOL_TESTS, tmp_path / PROMTOOL_TESTS.name)
    output = run_rule_tests(tmp_path / PROMTOOL_TESTS.name)
    assert "SUCCESS" in output, output
    tested = set(re.findall(r"alertname: (\w+)", PROMTOOL_TESTS.read_text()))
    assert tested == ALERTS


def test_rules_only_with_monitoring(helm: Helm) -> None:
    assert not helm.template().all("PrometheusRule")
    assert not helm.template(values=[MONITORING], set_values={"metrics.prometheusRule.enabled": "false"}).all(
        "PrometheusRule"
    )


def test_node_report_alerts_only_with_the_node_agent(helm: Helm, tmp_path: Path) -> None:
    path = rendered_rules(helm, tmp_path, {"nodeAgent.enabled": "false"})
    names = {rule["alert"] for rule in _alerts(yaml.safe_load(path.read_text()))}
    assert names == ALERTS - {"HugepageNodeReportsStale", "HugepageNodeReportsMissing"}


def test_thresholds_come_from_values(helm: Helm, tmp_path: Path) -> None:
    path = rendered_rules(
        helm,
        tmp_path,
        {"metrics.prometheusRule.pendingMinutes": "30", "metrics.prometheusRule.for.poolsFull": "1h"},
    )
    alerts = {rule["alert"]: rule for rule in _alerts(yaml.safe_load(path.read_text()))}
    assert alerts["HugepagePodsPendingTooLong"]["expr"].endswith("> 1800")
    assert alerts["HugepagePoolsNearlyFull"]["for"] == "1h"
    # Every rule reads only this release's series.
    for rule in alerts.values():
        assert 'job="hugepage-extender", namespace="hugepage-extender"' in rule["expr"], rule["alert"]


def test_every_alert_has_a_runbook_section(helm: Helm, tmp_path: Path) -> None:
    runbooks = RUNBOOKS.read_text()
    anchors = {
        re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-")) for h in re.findall(r"^## (.+)$", runbooks, re.M)
    }
    for rule in _alerts(yaml.safe_load(rendered_rules(helm, tmp_path).read_text())):
        anchor = rule["annotations"]["runbook_url"].rsplit("#", 1)[1]
        assert anchor in anchors, f"{rule['alert']}: no section '## {rule['alert']}' in docs/runbooks.md"


def test_rules_read_only_exported_metrics(helm: Helm, tmp_path: Path) -> None:
    metrics = Metrics()
    metrics.watch_pools({"hugepages-2Mi": list})
    metrics.watch_state(ClusterState(Config()))
    exported = {family.name for family in metrics.registry.collect()}
    # Family names: counters are exported as <name>_total, histograms as _bucket/_sum/_count.
    samples = (
        {s.name for family in metrics.registry.collect() for s in family.samples}
        | {f"{name}_total" for name in exported}
        | {f"{name}_bucket" for name in exported}
    )
    read = set()
    for rule in _alerts(yaml.safe_load(rendered_rules(helm, tmp_path).read_text())):
        read |= set(re.findall(r"\bhugepage_extender_[a-z_]+", rule["expr"]))
    assert read <= samples, read - samples
