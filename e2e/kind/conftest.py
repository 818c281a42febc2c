"""The kind suite's order, by phase (pytest's file order within one):

0. every module's scenarios with the secondary-mode release run.sh installed;
1. test_bystanders.py's scenario before the uninstall (its pinned bystanders would change
   the pools the earlier scenarios count);
2. test_kind.py's uninstall of that release;
3. what runs with no release installed: test_bystanders.py's scenario after the uninstall,
   the docs' blocks run verbatim (test_docs_run.py: their own install and uninstall) and the
   demo's steps (test_demo.py: its own install);
4. the cluster's own scheduler in own mode (test_own_scheduler.py installs the chart again,
   as a DaemonSet beside the static kube-scheduler, and uninstalls it).
"""

from __future__ import annotations

import pytest

UNINSTALL = "test_helm_uninstall_leaves_nothing_behind"
BEFORE_UNINSTALL = "test_secondary_bystanders_installed_and_through_a_flip"
UNINSTALLED = ("test_bystanders.py", "test_docs_run.py", "test_demo.py")
OWN_MODE = "test_own_scheduler.py"


def _phase(item: pytest.Item) -> int:
    if item.path.name == OWN_MODE:
        return 4
    if item.name == UNINSTALL:
        return 2
    if item.name == BEFORE_UNINSTALL:
        return 1
    return 3 if item.path.name in UNINSTALLED else 0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_phase)
