"""CI cannot skip its proof: under ``CI=true`` (``.ci/run`` exports it) the kind suite fails where
Docker cannot run instead of being reported skipped, and ``.ci/run`` ends with every skip by name.

Docker is made unavailable for the script alone: a PATH without ``docker``, ``dockerd`` and
``apt-get`` (so none can be found or installed) and a ``DOCKER_HOST`` nothing listens on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "e2e" / "kind" / "run.sh"
SKIPPED = ROOT / ".ci" / "skipped"
NO_DOCKER = {"docker", "dockerd", "apt-get", "containerd"}


@pytest.fixture
def without_docker(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has every command of the system's but Docker's and apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for command in Path(directory).glob("*") if Path(directory).is_dir() else []:
            target = bin_dir / command.name
            if command.name not in NO_DOCKER and not target.exists():
                target.symlink_to(command)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "KIND_E2E_SKIP_REASON", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")  # also under make unit
    }
    env.update(
        PATH=str(bin_dir),
        DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock",
        PYTHON=sys.executable,
        ARTIFACTS=str(tmp_path / "artifacts"),
    )
    return env


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RUN), "--if-possible"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


def test_under_ci_the_kind_suite_fails_where_docker_cannot_run_and_says_why(without_docker: dict[str, str]) -> None:
    result = run({**without_docker, "CI": "true"})
    assert result.returncode != 0, result.stdout + result.stderr
    assert "the kind e2e suite cannot run here: no Docker engine answers" in result.stderr
    assert "CI=true" in result.stderr
    assert "never skipped in CI" in result.stderr
    assert "SKIPPED" not in result.stderr + result.stdout


def test_make_kind_e2e_as_ci_runs_it_fails_and_says_why(without_docker: dict[str, str]) -> None:
    """The target `make test` (and so .ci/run) calls, with --if-possible, under CI=true."""
    result = subprocess.run(
        ["make", "--no-print-directory", "kind-e2e"],
        env={**without_docker, "CI": "true"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0, result.stdout + result.stderr
    assert "e2e/kind/run.sh --if-possible" in result.stdout
    assert "the kind e2e suite cannot run here: no Docker engine answers" in result.stderr
    assert "never skipped in CI" in result.stderr


def test_outside_ci_it_is_reported_skipped_by_name(without_docker: dict[str, str], tmp_path: Path) -> None:
    result = run(without_docker)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIPPED: the kind e2e suite cannot run here: no Docker engine answers" in result.stderr
    # The skip is in the run's JUnit report, which .ci/skipped prints by name.
    report = tmp_path / "artifacts" / "junit.xml"
    listed = subprocess.run(
        [sys.executable, str(SKIPPED), str(report)], capture_output=True, text=True, check=True
    ).stdout
    assert "ci: SKIPPED e2e" in listed, listed
    assert "kind e2e cannot run here: no Docker engine answers" in listed


def test_every_skip_is_printed_by_name_and_no_report_is_no_proof(tmp_path: Path) -> None:
    (tmp_path / "test_some.py").write_text(
        "import pytest\n\ndef test_ran():\n    pass\n\n"
        "@pytest.mark.skip(reason='no widget here')\ndef test_widget():\n    pass\n"
    )
    report = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), f"--junitxml={report}"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    )
    listed = subprocess.run(
        [sys.executable, str(SKIPPED), str(report), str(tmp_path / "absent.xml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0
    assert "ci: SKIPPED test_some::test_widget: no widget here" in listed.stdout
    assert "test_ran" not in listed.stdout
    assert f"ci: no test report at {tmp_path / 'absent.xml'}" in listed.stdout
    assert "ci: 1 test(s) skipped" in listed.stdout
    nothing = subprocess.run(
        [sys.executable, str(SKIPPED), str(tmp_path / "absent.xml")], capture_output=True, check=False
    )
    assert nothing.returncode == 1


def test_ci_run_exports_ci_true() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "export CI=true" in script
    assert ".ci/skipped out/junit.xml out/kind-e2e/junit.xml" in script
