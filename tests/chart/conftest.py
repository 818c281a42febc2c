"""Fixtures for the chart tests: the pinned helm binary and a typed wrapper.

helm comes from e2e/tools/build (``$E2E_TOOLS_BIN/helm`` when set, as ``make
test`` does). A missing helm is an error, never a skip: these tests are the
chart's only guard.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .chartlib import CHART, Helm, helm_path


@pytest.fixture(scope="session")
def helm() -> Helm:
    path = helm_path()
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"helm not found at {path}: build the pinned tools with e2e/tools/build "
            "(or set E2E_TOOLS_BIN to their bin dir)",
            pytrace=False,
        )
    return Helm(path)


@pytest.fixture
def notes_chart(tmp_path: Path) -> Path:
    """A copy of the chart that renders NOTES.txt into a ConfigMap.

    `helm template` drops NOTES.txt, and `helm install --dry-run` needs a
    cluster; ``tpl`` over the same text, with the same helpers, shows what
    `helm install` would print.
    """
    chart = tmp_path / "hugepage-extender"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.tpl")
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rendered-notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.tpl") . | quote }}\n'
    )
    return chart
