"""The scheduler's window (extender/core/window.py): an Error, so the scheduler tries its next nodes, only
when every node it sent was turned away, it stopped short (exactly numFeasibleNodesToFind candidates),
some node the pod may use would hold it, the pod came through the enforce entry, and the pod's run of
retries is not over."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest
from prometheus_client import generate_latest

from extender.core.answer import Reasons
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.objects import Node, Pod
from extender.core.reference import SizeView
from extender.core.window import (
    ENFORCE_MARKER,
    WindowRetries,
    feasible_nodes_to_find,
    room_anywhere,
    stopped_short,
    through_enforce_entry,
    windows_to_cover,
)
from extender.shell.handlers import WINDOW_RETRY_MESSAGE
from extender.shell.server import create_app
from extender.state.verbs import ExtenderVerbs
from tests.conftest import ROOT, make_account, make_extender, make_node, make_pod, make_state, pod_json
from tests.test_server import ClientFactory

NODES = 300
PERCENTAGE = 5  # of 300 nodes: numFeasibleNodesToFind 100, the scheduler's least
ANY_NODE = {"may_use": lambda name: True}


@pytest.mark.parametrize(
    ("nodes", "percentage", "found"),
    [
        (50, 0, 50),  # below 100 nodes: every node
        (99, 30, 99),
        (100, 0, 100),  # 50% of 100 is 50, at least 100
        (160, 5, 100),
        (300, 0, 144),  # adaptive: 50 - 300/125 = 48%
        (1000, 0, 420),  # 42%
        (5000, 0, 500),  # 10%
        (6000, 0, 300),  # 50 - 48 = 2%, at least 5%
        (15000, 0, 750),
        (5000, 50, 2500),
        (300, 100, 300),
    ],
)
def test_feasible_nodes_to_find_is_the_schedulers(nodes: int, percentage: int, found: int) -> None:
    """Scheduler.numFeasibleNodesToFind, pkg/scheduler/schedule_one.go (k8s.io/kubernetes v1.37.2)."""
    assert feasible_nodes_to_find(nodes, percentage) == found


def test_the_scheduler_stopped_short_only_at_exactly_its_count_of_feasible_nodes() -> None:
    assert stopped_short(144, 300, 0)
    assert not stopped_short(120, 300, 0)  # fewer found: it filtered every node (a whole scan)
    assert not stopped_short(143, 300, 0)
    assert not stopped_short(145, 300, 0)  # not what this scheduler stops at (another percentage)
    assert stopped_short(100, 300, PERCENTAGE)
    assert not stopped_short(300, 300, 100)  # every node sent
    assert not stopped_short(80, 80, 0)  # below 100 nodes it filters every node
    assert stopped_short(500, 5000, 0)
    assert windows_to_cover(100, 300) == 3
    assert windows_to_cover(144, 300) == 3
    assert windows_to_cover(500, 5000) == 10


def test_a_run_of_retries_ends_after_the_windows_that_cover_the_nodes_then_rests() -> None:
    retries = WindowRetries(rest_seconds=300)
    asked: list[int] = []

    def room() -> bool:
        asked.append(1)
        return True

    def retry(now: float, candidates: int = 100) -> int:
        return retries.retry("u", candidates=candidates, nodes=300, percentage=PERCENTAGE, now=now, room=room)

    assert [retry(0), retry(1), retry(3), retry(7)] == [1, 2, 3, 0]
    assert [retry(10), retry(306)] == [0, 0]  # resting: events that requeue it start no new run
    assert retry(307.1) == 1  # rested: a new run
    retries.placed("u")
    assert len(retries) == 0
    asked.clear()
    assert retry(400, candidates=99) == 0
    assert asked == []  # room is asked last, only when a retry is otherwise allowed


def test_a_pod_no_node_can_hold_is_turned_away_at_once() -> None:
    retries = WindowRetries()
    assert retries.retry("u", candidates=100, nodes=300, percentage=PERCENTAGE, now=0, room=lambda: False) == 0
    assert len(retries) == 0


def test_runs_are_remembered_for_a_bounded_number_of_pods() -> None:
    retries = WindowRetries(remembered=2)
    for uid in ("a", "b", "c"):
        retries.retry(uid, candidates=100, nodes=300, percentage=PERCENTAGE, now=0, room=lambda: True)
    assert len(retries) == 2


def size(need: int, accounts: Any, headroom: Any = None) -> SizeView:
    return SizeView(need, accounts, Reasons.for_resource("hugepages-2Mi"), headroom)


def test_room_anywhere_from_the_headroom_agrees_with_the_accounts() -> None:
    need = 2 * 1024**2
    state = make_state(None, [make_node(f"n{i}", hugepages="1Gi", reserved="1Gi") for i in range(3)])
    assert not room_anywhere([size(need, state.books[DEFAULT_RESOURCE].accounts)], numa=False, **ANY_NODE)
    assert not room_anywhere(
        [size(need, state.books[DEFAULT_RESOURCE].accounts, state.books[DEFAULT_RESOURCE].headroom)],
        numa=False,
        **ANY_NODE,
    )
    state.apply_node(make_node("n1", hugepages="1Gi"))
    assert room_anywhere([size(need, state.books[DEFAULT_RESOURCE].accounts)], numa=False, **ANY_NODE)
    assert room_anywhere(
        [size(need, state.books[DEFAULT_RESOURCE].accounts, state.books[DEFAULT_RESOURCE].headroom)],
        numa=False,
        **ANY_NODE,
    )
    pinned = {"n": make_account(512, numa_free=0)}  # the pool is free, no NUMA node has a page
    assert room_anywhere([size(need, pinned)], numa=False, **ANY_NODE)
    assert not room_anywhere([size(need, pinned)], numa=True, **ANY_NODE)


def test_room_counts_only_on_nodes_the_pod_may_use() -> None:
    need = 2 * 1024**2
    state = make_state(None, [make_node("full", hugepages="1Gi", reserved="1Gi"), make_node("free", hugepages="1Gi")])
    asked: list[str] = []

    def only_full(name: str) -> bool:
        asked.append(name)
        return name == "full"

    assert not room_anywhere(
        [size(need, state.books[DEFAULT_RESOURCE].accounts, state.books[DEFAULT_RESOURCE].headroom)],
        numa=False,
        may_use=only_full,
    )
    assert asked == ["free"]  # asked only of the nodes with room
    assert room_anywhere(
        [size(need, state.books[DEFAULT_RESOURCE].accounts, state.books[DEFAULT_RESOURCE].headroom)],
        numa=False,
        may_use=lambda name: True,
    )


def test_room_anywhere_for_a_pod_of_two_sizes_needs_one_node_with_both() -> None:
    need = 2 * 1024**2
    small = {"a": make_account(512), "b": make_account(0)}  # 2Mi room on a only
    large = {"a": make_account(0), "b": make_account(512)}  # the other size's room on b only
    assert not room_anywhere([size(need, small), size(need, large)], numa=False, **ANY_NODE)
    large["a"] = make_account(512)
    assert room_anywhere([size(need, small), size(need, large)], numa=False, **ANY_NODE)
    assert not room_anywhere([], numa=False, **ANY_NODE)


def marked(pod: Pod, marker: str = ENFORCE_MARKER) -> Pod:
    document: Any = msgspec.to_builtins(pod)
    document["spec"]["containers"][0]["resources"].setdefault("limits", {})[marker] = "1"
    document["spec"]["containers"][0]["resources"]["requests"][marker] = "1"
    return msgspec.convert(document, Pod)


def test_the_enforce_marker_is_the_charts() -> None:
    helpers = (ROOT / "charts" / "hugepage-extender" / "templates" / "_helpers.tpl").read_text()
    assert f'define "hugepage-extender.marker.enforce" -}}}}{ENFORCE_MARKER}{{{{- end' in helpers
    assert through_enforce_entry(marked(make_pod(hugepages="1Gi")))
    assert not through_enforce_entry(marked(make_pod(hugepages="1Gi"), "hugepage-extender.io/shadow"))
    assert not through_enforce_entry(make_pod(hugepages="1Gi"))


def node(name: str, *, full: bool, labels: dict[str, str] | None = None, taint: str | None = None) -> Node:
    """A node with a 1Gi pool, held outside pods when ``full``; its labels and a NoSchedule taint ``taint``."""
    document: Any = msgspec.to_builtins(make_node(name, hugepages="1Gi", reserved="1Gi" if full else None))
    document["metadata"]["labels"] = labels or {}
    if taint is not None:
        document["spec"] = {"taints": [{"key": taint, "effect": "NoSchedule"}]}
    return msgspec.convert(document, Node)


def cluster(
    fitting: set[int], mode: str = "enforce", percentage: int = PERCENTAGE, nodes: list[Node] | None = None
) -> ExtenderVerbs:
    """NODES nodes, every pool held outside pods but those in ``fitting`` (or ``nodes``); the scheduler's
    ``percentageOfNodesToScore``."""
    if nodes is None:
        nodes = [node(f"n{i:03d}", full=i not in fitting) for i in range(NODES)]
    document = {"defaults": {"mode": mode}, "percentageOfNodesToScore": percentage}
    return ExtenderVerbs(build_config(document, {}), make_state(document, nodes), rng=random.Random(1))


def names(count: int) -> list[str]:
    return [f"n{i:03d}" for i in range(count)]


WINDOW = names(100)


def with_placement(pod: Pod, **spec: Any) -> Pod:
    document: Any = msgspec.to_builtins(pod)
    document["spec"].update(spec)
    return msgspec.convert(document, Pod)


def test_a_whole_scan_of_a_pods_selector_is_turned_away_at_once() -> None:
    """The issue's case: 300 nodes, 120 of them the pod's node selector picks, all full; 180 free. The
    scheduler (adaptive: 144 of 300) filters all 300 and sends the 120: no window retry, although
    the free nodes have room."""
    nodes = [node(f"n{i:03d}", full=i < 120, labels={"pool": "vm"} if i < 120 else {}) for i in range(NODES)]
    verbs = cluster(set(), percentage=0, nodes=nodes)
    pod = with_placement(marked(make_pod(hugepages="512Mi")), nodeSelector={"pool": "vm"})
    result = verbs.filter_pod(pod, names(120))
    assert not result.decision.passed
    assert result.window_retry == 0
    # Stopped short (144 of the 300 sent) and the free nodes outside the selector: still none.
    assert verbs.filter_pod(pod, names(144)).window_retry == 0
    free_pod = marked(make_pod("free", hugepages="512Mi"))  # no selector: the free nodes are its own
    assert verbs.filter_pod(free_pod, names(120)).window_retry == 0  # a whole scan, though room is elsewhere
    assert verbs.filter_pod(free_pod, names(144)[:120] + names(144)[:24]).window_retry == 1


def test_room_on_a_node_the_pod_does_not_tolerate_is_no_reason_to_retry() -> None:
    nodes = [node(f"n{i:03d}", full=i < 250, taint=None if i < 250 else "dedicated") for i in range(NODES)]
    verbs = cluster(set(), nodes=nodes)
    assert verbs.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0
    tolerant = with_placement(
        marked(make_pod("tolerant", hugepages="512Mi")), tolerations=[{"key": "dedicated", "operator": "Exists"}]
    )
    assert verbs.filter_pod(tolerant, WINDOW).window_retry == 1


def test_a_scan_narrowed_to_named_nodes_is_counted_as_the_scheduler_counts_it() -> None:
    """NodeAffinity's PreFilter narrows the scan to the nodes a metadata.name requirement names: 150 named
    of 300 (adaptive: 100 of 150), room on one named node not sent."""
    verbs = cluster({149}, percentage=0)
    named = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in names(150)]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": named}}}
    pod = with_placement(marked(make_pod(hugepages="512Mi")), affinity=affinity)
    assert verbs.filter_pod(pod, WINDOW).window_retry == 1  # of 300 the scheduler would stop at 144, not 100


@pytest.mark.parametrize("fitting", [{250}, {5}], ids=["outside-the-window", "inside-the-window"])
def test_an_enforced_pod_turned_away_by_its_window_is_retried_while_a_node_outside_would_hold_it(
    fitting: set[int],
) -> None:
    verbs = cluster(fitting)
    pod = marked(make_pod(hugepages="512Mi"))
    result = verbs.filter_pod(pod, WINDOW)
    if 5 in fitting:
        assert list(result.decision.passed) == ["n005"]
        assert not result.window_retry
        return
    assert not result.decision.passed
    assert result.window_retry == 1
    assert [verbs.filter_pod(pod, WINDOW).window_retry for _ in range(3)] == [2, 3, 0]
    assert not result.held


def test_no_retry_for_a_pod_no_node_can_hold_an_unmarked_pod_a_shadow_pod_or_a_full_scan() -> None:
    verbs = cluster(set())
    assert verbs.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0  # no node has room
    verbs = cluster({250})
    assert verbs.filter_pod(make_pod("unmarked", hugepages="512Mi"), WINDOW).window_retry == 0
    assert verbs.filter_pod(marked(make_pod("few", hugepages="512Mi")), WINDOW[:99]).window_retry == 0
    adaptive = cluster({250}, percentage=0)  # stops at 144 of 300: 100 candidates were a whole scan
    assert adaptive.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0
    assert adaptive.filter_pod(marked(make_pod(hugepages="512Mi")), names(144)).window_retry == 1
    shadow = cluster({250}, mode="shadow")
    assert shadow.filter_pod(marked(make_pod(hugepages="512Mi")), WINDOW).window_retry == 0  # every node passes


async def test_the_server_answers_a_window_retry_with_an_error_and_counts_it(aiohttp_client: ClientFactory) -> None:
    nodes = [make_node(f"n{i:03d}", hugepages="1Gi", reserved=None if i == 250 else "1Gi") for i in range(NODES)]
    extender = make_extender(
        make_state({"defaults": {"mode": "enforce"}, "percentageOfNodesToScore": PERCENTAGE}, nodes)
    )
    client = await aiohttp_client(create_app(extender))
    body = msgspec.json.encode({"Pod": pod_json(marked(make_pod(hugepages="512Mi"))), "NodeNames": WINDOW})
    answers = []
    for _ in range(4):
        response = await client.post("/filter", data=body, headers={"Content-Type": "application/json"})
        answers.append(msgspec.json.decode(await response.read()))
    assert [a["Error"] for a in answers] == [WINDOW_RETRY_MESSAGE] * 3 + [""]
    assert len(answers[3]["FailedAndUnresolvableNodes"]) == len(WINDOW)  # the run is over: turned away
    metrics = generate_latest(extender.metrics.registry).decode()
    assert "hugepage_extender_window_retries_total 3.0" in metrics
