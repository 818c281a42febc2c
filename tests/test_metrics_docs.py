"""docs/install.md's metrics table names every metric the extender exports, and no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extender.core.config import Config
from extender.shell.metrics import Metrics
from extender.state.cluster import ClusterState
from tests.conftest import ROOT


def exported_families() -> set[str]:
    metrics = Metrics()
    metrics.watch_state(ClusterState(Config()))
    metrics.watch_pools({"hugepages-2Mi": list})
    metrics.watch_reflectors({})
    return {family.name for family in metrics.registry.collect() if family.name.startswith("hugepage_extender_")}


def documented_families() -> set[str]:
    table = (ROOT / "docs" / "install.md").read_text().split("| metric | meaning |", 1)[1].split("\n\n", 1)[0]
    names: set[str] = set()
    for row in table.splitlines():
        first_cell = row.split("|")[1] if row.count("|") > 2 else ""
        full = re.findall(r"`(hugepage_extender_[a-z_]+)", first_cell)
        names.update(full)
        # "`_cached_nodes`" after a full name shares its prefix
        names.update(f"hugepage_extender{short}" for short in re.findall(r"`(_[a-z_]+)", first_cell))
    # Counters are documented with their sample name, info metrics with _info.
    return {re.sub(r"_(total|info)$", "", name) for name in names}


def test_every_exported_metric_is_documented_and_nothing_else() -> None:
    exported, documented = exported_families(), documented_families()
    assert exported - documented == set(), "exported but not in docs/install.md"
    assert documented - exported == set(), "in docs/install.md but not exported"


DOCS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        ROOT / "e2e" / "kind" / "README.md",
        ROOT / "charts" / "hugepage-extender" / "README.md",
    }
)
# `name{label,label}` or a PromQL selector `name{label="value"}`.
CITED_LABELS = re.compile(r"(hugepage_extender_[a-z_]+)\{([^}]*)\}")


def exported_labels() -> dict[str, set[str]]:
    """Family -> its label names, also of families with no sample yet (the collectors' own
    label lists) and of info metrics (their samples' labels)."""
    metrics = Metrics()
    metrics.watch_state(ClusterState(Config()))
    metrics.watch_pools({"hugepages-2Mi": list})
    metrics.watch_reflectors({})
    labels: dict[str, set[str]] = {}
    for collector in list(metrics.registry._collector_to_names):
        for family in collector.collect():
            names = set(getattr(collector, "_labelnames", ())) | set(getattr(family, "_labelnames", ()))
            names |= {label for sample in family.samples for label in sample.labels} - {"le", "quantile"}
            labels[family.name] = names
    return labels


def cited_labels(text: str) -> list[tuple[str, set[str]]]:
    found = []
    for name, selector in CITED_LABELS.findall(text):
        family = re.sub(r"_(total|info)$", "", name)
        found.append((family, {part.split("=")[0].strip() for part in selector.split(",") if part.strip()}))
    return found


def test_the_metrics_table_names_each_metrics_labels() -> None:
    table = (ROOT / "docs" / "install.md").read_text().split("| metric | meaning |", 1)[1].split("\n\n", 1)[0]
    exported = exported_labels()
    wrong = {}
    for row in table.splitlines()[2:]:
        first_cell = row.split("|")[1]
        for family, labels in cited_labels(first_cell):
            if labels != exported[family]:
                wrong[family] = (labels, exported[family])
    assert not wrong, "docs/install.md's labels (documented, exported)"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_label_a_doc_cites_is_one_the_metric_has(doc: Path) -> None:
    exported = exported_labels()
    wrong = [
        f"{family}{{{','.join(sorted(labels))}}}"
        for family, labels in cited_labels(doc.read_text())
        if family not in exported or not labels <= exported[family]
    ]
    assert not wrong, f"{doc.relative_to(ROOT)} cites labels the metrics do not have"
