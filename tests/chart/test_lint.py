"""helm lint, plain and --strict, over the default values and every ci/ scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from .chartlib import CHART, CI_VALUES, Helm


def test_ci_scenarios_exist() -> None:
    names = {p.name for p in CI_VALUES}
    # modes, TLS on/off, bind on/off, secondary vs own scheduler, the three topologies
    for expected in (
        "default-values.yaml",
        "enforce-values.yaml",
        "namespaces-values.yaml",
        "bind-values.yaml",
        "bind-off-values.yaml",
        "tls-generated-values.yaml",
        "mtls-generated-values.yaml",
        "tls-secret-values.yaml",
        "tls-values-values.yaml",
        "own-scheduler-values.yaml",
        "own-service-values.yaml",
        "loopback-tls-values.yaml",
        "monitoring-values.yaml",
    ):
        assert expected in names


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_lint_default_values(helm: Helm, strict: bool) -> None:
    args = ["lint", str(CHART), *(["--strict"] if strict else [])]
    output = helm.run(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in output
    assert "[WARNING]" not in output
    assert "[ERROR]" not in output


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict_ci_values(helm: Helm, values: Path) -> None:
    output = helm.run("lint", str(CHART), "--strict", "--values", str(values))
    assert "0 chart(s) failed" in output
    assert "[WARNING]" not in output
    assert "[ERROR]" not in output
