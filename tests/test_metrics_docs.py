"""docs/install.md's metrics table names every metric the extender exports, and no other."""

from __future__ import annotations

import re

from extender.cluster import ClusterState
from extender.config import Config
from extender.metrics import Metrics
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
