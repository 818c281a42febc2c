"""The kind suite's order: every module's scenarios first, then the one that uninstalls the release."""

from __future__ import annotations

import pytest

LAST = "test_helm_uninstall_leaves_nothing_behind"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Modules run in file order (test_kind.py before test_topology.py): the uninstall,
    # test_kind.py's last scenario, must wait for the other modules' scenarios too.
    items.sort(key=lambda item: item.name == LAST)
