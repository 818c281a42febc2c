"""What a node autoscaler's simulation makes of a marked pod (docs/autoscalers.md), on the real
kube-scheduler: the Cluster Autoscaler runs the same in-tree ``NodeResourcesFit`` filter, with the
scheduler configuration the operator gives it (``--scheduler-config-file``).

Without that configuration, a pod marked ``hugepage-extender.io/enforce`` is ``Insufficient`` on a node
whose hugepage pool has room; with the configuration block of docs/autoscalers.md, run as written but
for its profile's name (so it serves only this test's pods), the same pod is placed there.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.placement_support import assert_stays_pending, wait_for_event
from e2e.controlplane import ControlPlane, Scheduler
from e2e.controlplane.objects import create_namespace, create_node, create_pod, delete_pods, wait_for_pod_bound

pytestmark = pytest.mark.cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "autoscalers.md"
MARKER = "hugepage-extender.io/enforce"
StartScheduler = Callable[..., Scheduler]


def documented_config() -> dict[str, Any]:
    """The YAML block of docs/autoscalers.md marked ``<!-- run: e2e/cluster/test_autoscalers.py -->``."""
    match = re.search(r"<!-- run: e2e/cluster/test_autoscalers\.py -->\n```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, f"{DOC} has no YAML block marked for this test"
    config = yaml.safe_load(match.group(1))
    assert isinstance(config, dict)
    return config


def renamed(config: dict[str, Any], scheduler_name: str) -> dict[str, Any]:
    document = copy.deepcopy(config)
    (profile,) = document["profiles"]
    profile["schedulerName"] = scheduler_name
    return document


def test_documented_config_ignores_the_markers(control_plane: ControlPlane, start_scheduler: StartScheduler) -> None:
    core = control_plane.core
    tag = uuid.uuid4().hex[:6]
    namespace = f"autoscalers-{tag}"
    create_namespace(core, namespace)
    node = f"autoscaler-node-{tag}"
    create_node(core, node, hugepages_2mi="1Gi", labels={"autoscalers-test": tag})
    pod_kwargs: dict[str, Any] = {
        "hugepages_2mi": "512Mi",
        "extended": {MARKER: "1"},
        "node_selector": {"autoscalers-test": tag},
    }
    try:
        plain = f"plain-{tag}"
        start_scheduler({"profiles": [{"schedulerName": plain}]}, name=plain)
        create_pod(core, namespace, "without-config", scheduler_name=plain, **pod_kwargs)
        event = wait_for_event(core, namespace, "without-config", "FailedScheduling", contains=f"Insufficient {MARKER}")
        assert_stays_pending(core, namespace, ["without-config"], seconds=2)

        documented = f"documented-{tag}"
        start_scheduler(renamed(documented_config(), documented), name=documented)
        create_pod(core, namespace, "with-config", scheduler_name=documented, **pod_kwargs)
        assert wait_for_pod_bound(core, namespace, "with-config", timeout=60) == node, event
    finally:
        delete_pods(core, namespace)
        core.delete_node(node)
