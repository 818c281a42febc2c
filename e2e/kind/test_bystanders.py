"""Bystanders with the secondary scheduler (e2e/kind/values.yaml, the release run.sh installs):
a hugepage DaemonSet of the default scheduler, a hugepage pod of a third scheduler and a plain
pod, in an enforcing, a shadow and an off namespace, are never marked and are placed exactly as
without the chart, installed, after ``helm upgrade`` flips a namespace (shadow -> enforce), and
after ``helm uninstall``; a pod of the chart's scheduler marked while installed and still Pending
after the uninstall is dealt with by the docs' one command (docs/install.md, run verbatim).

conftest.py runs the first scenario just before test_kind.py's uninstall, the second just after
(the bystanders and the waiting pod made in the first are checked again in the second). Own mode:
test_own_scheduler.py's last scenario."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from e2e.kind.bystanders import (
    Bystanders,
    doc_blocks,
    make_namespaces,
    markers,
    nothing_stranded,
    pod_container,
    run_block,
    wait_nothing_stranded,
    wait_served_markers,
)
from e2e.kind.test_kind import (
    POOL,
    SCHEDULER_NAME,
    failed_scheduling,
    get_json,
    helm_upgrade,
    kubectl,
    says_no_room,
    set_reserved,
    worker_names,
)

# e2e/kind/values.yaml: hp-by-enforce enforces, hp-by-off is off, hp-by-shadow has no entry (the
# defaults: shadow; flipped to enforce here).
BY_ENFORCE, BY_SHADOW, BY_OFF = "hp-by-enforce", "hp-by-shadow", "hp-by-off"
ENFORCE_MARKER, SHADOW_MARKER = "hugepage-extender.io/enforce", "hugepage-extender.io/shadow"


@pytest.fixture(scope="session")
def secondary() -> Iterator[Bystanders]:
    """The bystanders, on the third worker, shared by the scenario before the uninstall and the
    one after it."""
    node = worker_names()[2]
    make_namespaces(BY_ENFORCE, BY_SHADOW, BY_OFF)
    yield Bystanders(node=node, namespaces=(BY_ENFORCE, BY_SHADOW, BY_OFF))
    kubectl("delete", "namespace", BY_ENFORCE, BY_SHADOW, BY_OFF, "--wait=false", check=False)
    set_reserved({node: None})


def test_secondary_bystanders_installed_and_through_a_flip(secondary: Bystanders) -> None:
    wait_served_markers(BY_ENFORCE, SCHEDULER_NAME, {ENFORCE_MARKER})
    wait_served_markers(BY_SHADOW, SCHEDULER_NAME, {SHADOW_MARKER})
    wait_served_markers(BY_OFF, SCHEDULER_NAME, set())
    # A pod the chart's scheduler serves, marked enforce, waiting (its node's pool held outside
    # pods): still Pending at the uninstall.
    set_reserved({secondary.node: POOL})
    waits = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "waits", "namespace": BY_ENFORCE, "labels": {"bystander": "yes"}},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "nodeSelector": {"kubernetes.io/hostname": secondary.node},
            "terminationGracePeriodSeconds": 0,
            "containers": [pod_container("64Mi")],
        },
    }
    kubectl("apply", "-f", "-", stdin=json.dumps(waits))
    assert markers(get_json("pod", "waits", "-n", BY_ENFORCE)) == {ENFORCE_MARKER}
    secondary.create("installed")
    secondary.check("installed")
    # helm upgrade, a namespace flipped: shadow -> enforce (the scheduler pods roll).
    helm_upgrade(f"config.namespaces.{BY_SHADOW}.mode=enforce")
    wait_served_markers(BY_SHADOW, SCHEDULER_NAME, {ENFORCE_MARKER})
    secondary.create("upgraded")
    secondary.check("upgraded")
    message = failed_scheduling(BY_ENFORCE, "waits")
    assert says_no_room(message), message


def test_secondary_bystanders_after_the_uninstall(secondary: Bystanders) -> None:
    # test_kind.py's test_helm_uninstall_leaves_nothing_behind ran just before.
    for namespace in secondary.namespaces:
        wait_served_markers(namespace, SCHEDULER_NAME, set())
    secondary.create("uninstalled")
    secondary.check("uninstalled")
    # The chart's scheduler is gone: its marked pod waits for good until the docs' command.
    assert f"{BY_ENFORCE}/waits" in nothing_stranded()
    (leftovers,) = doc_blocks("docs/install.md", "leftovers")
    run_block(leftovers)
    wait_nothing_stranded()
    pending = f"spec.schedulerName={SCHEDULER_NAME},status.phase=Pending"
    left = get_json("pods", "-A", "--field-selector", pending)["items"]
    assert not left, [p["metadata"]["name"] for p in left]
    secondary.check("after the docs' command")
    # Gone before the scenarios that follow (their pools are the workers' whole pools).
    secondary.delete()
    set_reserved({secondary.node: None})
