"""Real hugepage consumers on real pages: VMs (QEMU) and DPDK, in kind and on the host.

Run by e2e/kind/run.sh beside test_kind.py (before it: its last scenario uninstalls the
release). The consumers (consumers.py) are the images e2e/kind/images/build makes from Debian's
packages (images/consumers):

- ``vm``: QEMU whose guest RAM is a preallocated ``memory-backend-file`` on hugetlbfs, booting a
  Debian kernel and a busybox initramfs that says ``guest: up`` on the serial console (TCG here:
  these machines' /dev/kvm cannot run an unmodified guest). Two pod styles: one requests
  ``hugepages-2Mi`` and backs the guest with its HugePages emptyDir (as KubeVirt does); one
  requests only ``memory`` (its runtime's own hugetlbfs mount, pages the kubelet never
  accounts) in a ``needFromMemory`` namespace.
- ``dpdk``: ``dpdk-testpmd --no-pci --vdev net_null0 -m 128`` on the pod's HugePages emptyDir,
  ready once forwarding starts.
- on the host, outside any pod: QEMU holding its guest RAM (stopped, ``-S``: the pages are
  taken at start all the same) while every kubelet keeps reporting the whole pool.

A consumer that finds no pages fails on its node with its own error, which is what the A/B
counts (``CONSUMER_ERRORS``). Every consumer takes ``UNIT`` pages (128 MiB).

The A/B's shadow arm places as off does; shadow's scorecard, read with ``kubectl hugepages
shadow`` as an operator reads it, must put each of its pods in the one cell of what the test saw
(a false alarm and a miss of the burst paired: a foreseen failure and a pod that ran as predicted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane import wait_until
from e2e.kind import soak
from e2e.kind.consumers import (
    CONSUMER_ERRORS,
    ENFORCE,
    KINDS,
    LABEL,
    NAMESPACE,
    NAMESPACES,
    OFF,
    RELEASE,
    RUNTIME_CLASS_OBJECT,
    SHADOW,
    UNIT,
    consumer_error,
    consumer_pod,
    vm_on_the_host,
)
from e2e.kind.test_kind import (
    KUBECTL,
    POOL_PAGES,
    delete_pods,
    failure_on_the_node,
    get_json,
    helm_upgrade,
    host_pool,
    is_ready,
    kubectl,
    leader,
    outside_pages,
    pages_in_use,
    says_no_room,
    scheduling_messages,
    set_reserved,
    settle,
    worker_names,
)
from e2e.kind.test_topology import VERBS_PORT, port_forward
from extender.core.podoutcome import CELLS
from extender.state.scorecard import STORIES_PER_CELL


@pytest.fixture(scope="module")
def workers() -> Iterator[list[str]]:
    names = worker_names()
    assert len(names) == 3, names
    assert host_pool()["nr_hugepages"] == POOL_PAGES, host_pool()
    for namespace in NAMESPACES:
        namespace_object = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        kubectl("apply", "-f", "-", stdin=json.dumps(namespace_object))
    kubectl("apply", "-f", "-", stdin=json.dumps(RUNTIME_CLASS_OBJECT))
    set_reserved(dict.fromkeys(names))
    yield names
    for namespace in NAMESPACES:
        delete_pods(namespace, f"app={LABEL}")
    set_reserved(dict.fromkeys(names))


def pages_back_to(in_use: int) -> None:
    wait_until("the pages to go back to the pool", lambda: pages_in_use() == in_use, timeout=120, interval=1.0)


def burst(namespace: str, node: str, count: int) -> dict[str, Any]:
    """``count`` consumers on one worker, the three kinds in turn; the counts once settled."""
    pods = [consumer_pod(namespace, f"{KINDS[i % 3]}-{i:02d}", KINDS[i % 3], node=node) for i in range(count)]
    names = [p["metadata"]["name"] for p in pods]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    result = settle(namespace, names, timeout=360)
    messages = scheduling_messages(namespace)
    placed = [n for n in names if result[n]["spec"].get("nodeName")]
    failed = {n: why for n in placed if (why := failure_on_the_node(result[n])) is not None}
    errors = {n: consumer_error(namespace, n) for n in failed}
    pending = {n: messages.get(n, "") for n in names if n not in placed}
    return {"pods": len(names), "placed": placed, "failed": failed, "errors": errors, "pending": pending}


def hugepages_shadow(namespace: str, *options: str) -> str:
    """``kubectl hugepages shadow NAMESPACE`` as an operator runs it: the plugin (this Python's
    ``kubectl-hugepages``) through kubectl, to the lease holder's extender through port-forward."""
    plugins = str(Path(sys.executable).parent)
    environment = {**os.environ, "PATH": f"{plugins}{os.pathsep}{os.environ.get('PATH', '')}"}
    with port_forward(leader(), VERBS_PORT) as local:
        command = [KUBECTL, "hugepages", "shadow", namespace, "--extender", f"http://127.0.0.1:{local}", *options]
        done = subprocess.run(command, capture_output=True, text=True, env=environment, check=False, timeout=60)
    assert done.returncode == 0, done
    return done.stdout


def scorecard_of(namespace: str, pods: int) -> dict[str, Any]:
    """The namespace's row once ``pods`` pods have an end (a cell, deleted, expired, dropped), none awaiting."""

    def complete() -> dict[str, Any] | None:
        row: dict[str, Any] = json.loads(hugepages_shadow(namespace, "-o", "json"))["namespaces"][namespace]
        return row if sum(row["total"].values()) >= pods and row["awaiting"] == 0 else None

    return wait_until(f"shadow's scorecard to count {pods} pods of {namespace}", complete, timeout=90, interval=2.0)


def scorecard_cells(row: dict[str, Any], pods: list[str]) -> dict[str, str]:
    """Each pod's cell: the pods each cell lists (its last ``STORIES_PER_CELL``), and the rest in the
    one cell that lists fewer than it counts (a burst of at most 2 x STORIES_PER_CELL + 1 pods has one)."""
    cells: dict[str, str] = {}
    for cell in CELLS:
        for story in row["pods"][cell]:
            name = story["pod"].split("/", 1)[1]
            assert name not in cells, f"{name} listed in {cells[name]} and {cell}"
            cells[name] = cell
    unlisted = [name for name in pods if name not in cells]
    short = [cell for cell in CELLS if row["total"][cell] > len(row["pods"][cell])]
    for cell in CELLS:
        assert len(row["pods"][cell]) == min(row["total"][cell], STORIES_PER_CELL), (cell, row)
    if unlisted:
        assert len(short) == 1, (unlisted, row)
        assert len(unlisted) == row["total"][short[0]] - len(row["pods"][short[0]]), (unlisted, row)
        cells.update(dict.fromkeys(unlisted, short[0]))
    return cells


def check_shadow_arm(result: dict[str, Any], node: str, room: int) -> dict[str, Any]:
    """Shadow's arm of the A/B: decisions as off's, and its scorecard, read as an operator reads it,
    agrees with the pods pod by pod. Returns the row."""
    names = [*result["placed"], *result["pending"]]
    row = scorecard_of(SHADOW, len(names))
    print(hugepages_shadow(SHADOW))
    # The outcomes the scorecard waited for (Ready for shadowSettleSeconds) are still the test's.
    now = {p["metadata"]["name"]: p for p in get_json("pods", "-n", SHADOW, "-l", f"app={LABEL}")["items"]}
    assert {n for n in names if failure_on_the_node(now[n]) is not None} == set(result["failed"]), now
    assert all(is_ready(now[n]) for n in names if n not in result["failed"]), now
    # Every pod counted once, in a cell: none deleted, expired or dropped, none counted twice (this
    # namespace's pods are this burst's only: over the window as since the extender started).
    assert row["window"] == row["total"], row
    assert sum(row["total"].values()) == sum(row["total"][cell] for cell in CELLS) == len(names), row
    cells = scorecard_cells(row, names)
    assert sorted(cells) == sorted(names), (cells, names)
    for name, cell in cells.items():
        failed = cell in ("predicted_failed", "failed_unpredicted")
        assert failed == (name in result["failed"]), (name, cell, result["failed"].get(name))
    # Shadow would have turned away what enforce keeps Pending: the pods past the room left. It names
    # the last placed; the kernel fails whichever consumers start last. The burst is judged within the
    # scorecard's PAIR_SECONDS (the 8 binds take about a second), so each false alarm pairs with a miss
    # (extender.state.scorecard): the failures foreseen, none of the predicted pods left as false alarms.
    predicted = len(names) - room
    assert row["total"]["predicted_ran"] == 0, row
    assert row["total"]["predicted_failed"] == predicted, row
    assert row["total"]["failed_unpredicted"] == len(result["failed"]) - predicted, row
    assert row["precision"] == 1.0, row
    for cell in CELLS:
        for story in row["pods"][cell]:
            assert story["node"] == node, story
            # Judged at the first watch event showing it bound: a shadow pod goes to the scheduler's
            # ignorable extender entry, which has no bind verb (decision 0005).
            assert story["judgedBy"] == "watch", story
            # Its own verdict, unless paired: a paired miss is a foreseen failure, a paired false alarm
            # a pod that ran as predicted, each naming the other, in the other cell of the pair.
            partner = story["pairedWith"].split("/", 1)[-1]
            would_reject = story["verdict"].startswith("would reject")
            assert cell.startswith("predicted_") == (would_reject != bool(partner)), story
            if partner:
                assert (
                    cells[partner]
                    == {"predicted_failed": "ran_as_predicted", "ran_as_predicted": "predicted_failed"}[cell]
                ), (story, cells)
            if cell in ("predicted_failed", "failed_unpredicted"):  # the consumer's own error, in its status
                assert any(error in story["outcome"] for error in CONSUMER_ERRORS), story
    return row


# -- scenarios ---------------------------------------------------------------------------------


def test_ab_real_consumers_do_not_fail_on_the_node(workers: list[str]) -> None:
    # One worker (with one pool behind every node, the reserved annotation read from the host's
    # counters is exact only there). Pool: POOL_PAGES; QEMU on the host holds 2 units; the burst
    # asks for 8 units: VMs of both styles and DPDK, in turn.
    w1 = workers[0]
    slots = POOL_PAGES // UNIT
    assert slots >= 6, f"the pool ({POOL_PAGES} pages) is too small for {UNIT}-page consumers"
    assert pages_in_use() == 0, f"pages in use before the A/B: {host_pool()}"
    count, held = slots, 2 * UNIT
    room = (POOL_PAGES - held) // UNIT
    counts: dict[str, dict[str, Any]] = {}
    took: dict[str, float] = {}
    with vm_on_the_host(held):
        for namespace in (OFF, SHADOW, ENFORCE):
            started = time.monotonic()
            outside = pages_in_use()
            set_reserved({w1: f"{outside * 2}Mi"})
            counts[namespace] = result = burst(namespace, w1, count)
            print(
                f"\nconsumer A/B {namespace}: {result['pods']} consumers, {len(result['placed'])} placed on {w1}, "
                f"{len(result['failed'])} failed on the node, {len(result['pending'])} pending; "
                f"host pool {host_pool()}, {outside} pages held outside pods"
            )
            for name, why in sorted(result["failed"].items()):
                print(f"  failed  {namespace}/{name}: {why}: {result['errors'][name]}")
            for name, why in sorted(result["pending"].items()):
                print(f"  pending {namespace}/{name}: {why.splitlines()[0] if why else ''}")
            if namespace == SHADOW and not result["pending"]:  # else the assertions below say why
                counts[namespace]["scorecard"] = check_shadow_arm(result, w1, room)
            delete_pods(namespace, f"app={LABEL}")
            pages_back_to(outside)
            took[namespace] = time.monotonic() - started
    set_reserved({w1: None})
    off, shadow, enforce = counts[OFF], counts[SHADOW], counts[ENFORCE]
    by_message = sum(1 for e in off["errors"].values() if e)
    total = shadow.get("scorecard", {}).get("total", {})
    summary = (
        f"A/B with real consumers ({POOL_PAGES} x 2Mi pool, QEMU on the host holding {held} pages, "
        f"burst of {off['pods']} VMs and DPDK x {UNIT} pages): "
        f"off: {len(off['failed'])} of {off['pods']} failed on the node ({by_message} by the consumer's own error); "
        f"shadow: {len(shadow['failed'])} failed ({', '.join(sorted(shadow['failed']))}), "
        f"scorecard {', '.join(f'{c} {total.get(c)}' for c in CELLS)}; "
        f"enforce: {len(enforce['failed'])} failed, {len(enforce['pending'])} pending with a reason "
        f"({', '.join(sorted(enforce['pending']))}); "
        f"seconds per arm: {', '.join(f'{n} {t:.0f}' for n, t in took.items())}"
    )
    print("\n" + summary)
    if artifacts := os.environ.get("KIND_E2E_ARTIFACTS"):
        Path(artifacts, "consumer-ab-counts.txt").write_text(summary + "\n")
    # off: the scheduler alone sees the whole pool and places them all; the kernel has `room`
    # (more may fail: DPDK takes its pages one by one, and two starting at once can each fail
    # with pages half taken, which a QEMU starting meanwhile did not find either).
    assert len(off["placed"]) == count, off
    assert len(off["failed"]) >= count - room, off
    assert by_message == len(off["failed"]), off["errors"]
    # shadow: the same decisions as off (its scorecard checked pod by pod above, on failures that are the
    # consumers' own).
    assert len(shadow["placed"]) == count, shadow
    assert len(shadow["failed"]) >= count - room, shadow
    assert all(shadow["errors"].values()), shadow["errors"]
    assert "scorecard" in shadow, shadow
    # enforce: none fails on the node; what does not fit waits, saying why.
    assert enforce["failed"] == {}, enforce
    assert len(enforce["placed"]) == room, enforce
    assert len(enforce["pending"]) == count - room, enforce
    for name, message in enforce["pending"].items():
        assert says_no_room(message), (name, message)


def test_node_agent_counts_a_vms_pages_once(workers: list[str]) -> None:
    # The emptyDir fallback (this machine: the hugetlb controller off). A memory-only VM on w2 has
    # its guest RAM on its runtime's own hugetlbfs: in no emptyDir. The agent finds it through the
    # VM's process: w2's record counts it as its pod's, so outside w2's pods there is only the
    # host's QEMU; needFromMemory counts the pod's memory once, not also as outside pages.
    # Seen from w1 (same kernel), the VM's pages are outside its pods.
    w1, w2 = workers[0], workers[1]
    # Pages someone else holds on the machine (none, on a machine of its own) are outside every
    # node's pods too.
    before = pages_in_use()
    set_reserved(dict.fromkeys(workers))
    held = 2 * UNIT
    helm_upgrade("nodeAgent.enabled=true")
    kubectl("rollout", "status", f"daemonset/{RELEASE}-node-agent", "-n", NAMESPACE, "--timeout=180s")
    try:
        with vm_on_the_host(held):
            pod = consumer_pod(ENFORCE, "vm-memory-agent", "vm-memory", node=w2)
            kubectl("apply", "-f", "-", stdin=json.dumps(pod))
            settled = settle(ENFORCE, ["vm-memory-agent"], timeout=240)["vm-memory-agent"]
            assert failure_on_the_node(settled) is None, settled["status"]

            def records() -> tuple[int | None, int | None] | None:
                seen = (outside_pages(w1), outside_pages(w2))
                return seen if seen == (before + held + UNIT, before + held) else None

            try:
                wait_until("the node agents' records", records, timeout=120, interval=1.0)
            finally:
                print(
                    f"\nnode agent, a memory-only VM on {w2} ({UNIT} pages), QEMU on the host ({held}), {before} "
                    f"held before: pages outside pods: {w1}: {outside_pages(w1)}, {w2}: {outside_pages(w2)}"
                )
            delete_pods(ENFORCE, f"app={LABEL}")
            pages_back_to(before + held)
    finally:
        delete_pods(ENFORCE, f"app={LABEL}")
        helm_upgrade("nodeAgent.enabled=false")


def test_churn_soak(workers: list[str]) -> None:
    """The churn soak (e2e/kind/soak.py): SOAK_MINUTES in enforce (here 4, and 1 in off: about 5
    minutes); `make soak` runs it for 60."""
    minutes = float(os.environ.get("SOAK_MINUTES", "4"))
    artifacts = Path(os.environ.get("KIND_E2E_ARTIFACTS", tempfile.mkdtemp(prefix="hugepage-soak.")))
    report = soak.run(minutes=minutes, workers=workers, artifacts=artifacts)
    print("\n" + report.summary())
    assert report.failed_on_the_node == 0, report.failures
    assert report.stranded == 0, report.strandings
    # ...and it did what it is there for: every pod class ran, every fault was applied, the
    # consumer outside pods started (a tick that failed is retried, never proof of anything).
    assert not report.enforce.unproven(), report.enforce.unproven()


def test_nothing_left_holding_pages() -> None:
    # test_kind.py runs next; nothing of this module's may be left holding pages.
    wait_until("no pages in use", lambda: pages_in_use() == 0, timeout=120, interval=1.0)
    time.sleep(1)
    assert get_json("pods", "-n", ENFORCE, "-l", f"app={LABEL}")["items"] == []
