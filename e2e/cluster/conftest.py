"""Fixtures for tests against a real etcd + kube-apiserver + kube-scheduler (``e2e.controlplane``).

- ``control_plane`` (session): etcd and kube-apiserver, with an admin kubeconfig.
- ``default_scheduler`` (module): a kube-scheduler with the default profile, no extender.
- ``start_scheduler`` (function): a factory, ``start_scheduler(config_dict, name=...)``; stopped after the test.
- ``start_extender`` (function): a factory, ``start_extender(["--snapshot", path])`` runs
  ``hugepage-extender serve`` on a free port; stopped after the test.
- ``namespace`` (function): a fresh namespace (namespaces are never deleted: no controller-manager).
- ``test_label`` (function): a label (key, value) unique to the test, to fence its nodes off.
- ``report_crd`` (session): the chart's HugepageNodeReport CRD, established.

Every test here carries the ``cluster`` marker. When the binaries are missing and cannot be
built, the tests are skipped with the reason, or fail when ``CI=true``. A failing test's
report carries the tail of every component's log.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError

from e2e.cluster.placement_support import Cell
from e2e.controlplane import (
    BinariesUnavailable,
    ControlPlane,
    Scheduler,
    Service,
    find_binaries,
    wait_until,
)

HERE = Path(__file__).resolve().parent
REPORT_CRD = HERE.parents[1] / "charts" / "hugepage-extender" / "crds" / "hugepagenodereports.yaml"
_TIMINGS: list[tuple[str, dict[str, float]]] = []

StartScheduler = Callable[..., Scheduler]
StartExtender = Callable[..., Service]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        plane = getattr(item, "funcargs", {}).get("control_plane")
        if isinstance(plane, ControlPlane):
            report.sections.append((f"control plane logs ({plane.log_dir})", plane.log_tails(40)))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for what, timings in _TIMINGS:
        shown = ", ".join(f"{k} {v:.2f}s" for k, v in timings.items())
        terminalreporter.write_line(f"{what}: {shown}")


@pytest.fixture(scope="session")
def tools_bin() -> Path:
    """The bin dir of the pinned etcd / kube-apiserver / kube-scheduler."""
    try:
        return find_binaries()
    except BinariesUnavailable as error:
        if _in_ci():
            pytest.fail(f"CI=true and the control plane binaries are unavailable: {error}", pytrace=False)
        pytest.skip(f"control plane binaries unavailable ({error}); run `make tools` or set E2E_TOOLS_BIN")


def _leftovers(workdir: Path) -> list[str]:
    # Every component's command line names a file under the workdir.
    found = subprocess.run(["pgrep", "-af", str(workdir)], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def control_plane(tools_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver for the whole session; torn down (and checked) at the end."""
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), bin_dir=tools_bin)
    try:
        plane.start()
        yield plane
    finally:
        processes = list(plane.processes.values())
        plane.stop()
        _TIMINGS.append(("control plane startup", dict(plane.timings)))
        # Not by pid: a reaped process's pid may already be another's (pid_max is 32,768 here, and a
        # kind run beside spawns processes fast enough to wrap it within a session).
        left = [f"{p.name} (pid {p.pid})" for p in processes if p.running] + _leftovers(plane.workdir)
        assert not left, f"processes left after teardown: {left}"


@pytest.fixture(scope="module")
def default_scheduler(control_plane: ControlPlane) -> Iterator[Scheduler]:
    """A kube-scheduler with the default profile (``default-scheduler``) and no extender."""
    scheduler = control_plane.start_scheduler(None, name="default-scheduler")
    try:
        yield scheduler
    finally:
        scheduler.stop()


@pytest.fixture
def start_scheduler(control_plane: ControlPlane) -> Iterator[StartScheduler]:
    """``start_scheduler(config: dict | None = None, *, name=None, extra_args=())`` -> a healthy Scheduler."""
    started: list[Scheduler] = []

    def start(config: Mapping[str, Any] | None = None, **kwargs: Any) -> Scheduler:
        scheduler = control_plane.start_scheduler(config, **kwargs)
        started.append(scheduler)
        return scheduler

    try:
        yield start
    finally:
        for scheduler in started:
            scheduler.stop()


@pytest.fixture
def start_extender(control_plane: ControlPlane) -> Iterator[StartExtender]:
    """``start_extender(args: Sequence[str] = (), *, name=..., env=...)`` -> a running ``hugepage-extender serve``."""
    started: list[Service] = []

    def start(args: Sequence[str] = (), **kwargs: Any) -> Service:
        service = control_plane.start_extender(args, **kwargs)
        started.append(service)
        return service

    try:
        yield start
    finally:
        for service in started:
            service.stop()


def _slug(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    return f"{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    """A namespace made for this test."""
    name = _slug(request)
    control_plane.create_namespace(name)
    return name


@pytest.fixture
def test_label(request: pytest.FixtureRequest) -> tuple[str, str]:
    """A node label unique to this test: give it to the test's nodes and select it in its pods."""
    return "e2e.hugepage-extender.io/test", _slug(request)[:63].strip("-")


@pytest.fixture
def cell(  # noqa: PLR0917 (fixtures come as arguments)
    control_plane: ControlPlane,
    namespace: str,
    test_label: tuple[str, str],
    tmp_path: Path,
    start_extender: StartExtender,
    start_scheduler: StartScheduler,
) -> Cell:
    """One test's cluster: its namespace, labelled fake nodes, extenders and schedulers."""
    return Cell(control_plane, namespace, test_label, tmp_path, start_extender, start_scheduler)


@pytest.fixture(scope="session")
def report_crd(control_plane: ControlPlane) -> None:
    """The chart's CRD, once per session, established."""
    api = client.ApiextensionsV1Api(control_plane.api_client)
    body = yaml.safe_load(REPORT_CRD.read_text())
    crds = DynamicClient(control_plane.api_client).resources.get(  # type: ignore[no-untyped-call]
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    with contextlib.suppress(ConflictError):  # another module's tests made it
        crds.create(body=body)

    def established() -> bool:
        crd = api.read_custom_resource_definition(body["metadata"]["name"])
        conditions = (crd.status.conditions if crd.status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_until("the HugepageNodeReport CRD to be established", established, timeout=180)
