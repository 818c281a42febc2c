"""The kind suite's order: every module's scenarios, then the uninstall of the release,
then the cluster's own scheduler in own mode (which installs the chart again, as a
DaemonSet beside the static kube-scheduler)."""

from __future__ import annotations

import pytest

UNINSTALL = "test_helm_uninstall_leaves_nothing_behind"
OWN_MODE = "test_own_scheduler.py"


def _phase(item: pytest.Item) -> int:
    if item.path.name == OWN_MODE:
        return 2
    return 1 if item.name == UNINSTALL else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Modules run in file order (test_kind.py before test_topology.py): the uninstall,
    # test_kind.py's last scenario, waits for the other modules' scenarios too.
    items.sort(key=_phase)
