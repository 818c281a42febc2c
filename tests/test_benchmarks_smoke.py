"""The decision benchmarks run end to end at a tiny size (figures are printed by them, never asserted here)."""

from typing import Any

import msgspec

from benchmarks import (
    concurrency,
    decision,
    extender_round_trip,
    full_cluster,
    http_decision,
    in_flight,
    node_reports,
    previous,
    scale,
    scorecard,
)
from benchmarks.cluster import node_documents, request_body
from benchmarks.null_extender import field_skipping_decode, floor_prioritize, null_filter, null_prioritize
from extender.state.scorecard import MAX_FOLLOWED

NODES = 50
TINY = {"names": http_decision.Budget(3, 0.0, 2.0), "nodes": http_decision.Budget(3, 0.0, 2.0)}


def test_in_process_decision_benchmark_runs() -> None:
    rows = decision.run([NODES], repeat=3)
    verbs = {(row["mode"], row["verb"]) for row in rows}
    assert verbs == {
        ("NodeNames", "filter"),
        ("NodeNames", "prioritize"),
        ("Nodes", "filter"),
        ("Nodes", "prioritize"),
        ("Nodes", "full parse to dicts"),
    }
    assert all(row["p50 ms"] > 0 for row in rows)
    assert all(row["x floor"] > 0 for row in rows if row["mode"] == "Nodes")


def test_http_decision_benchmark_runs() -> None:
    memory: list[dict[str, Any]] = []
    rows = http_decision.run([NODES], clients=(2,), budgets=TINY, memory=memory)
    assert memory[0]["nodes"] == NODES
    assert memory[0]["peak rss MiB"] >= memory[0]["rss MiB after full Nodes"] > 0
    verbs = {(row["mode"], row["verb"]) for row in rows}
    assert ("NodeNames", "filter") in verbs
    assert ("Nodes", "floor filter") in verbs
    ours = [row for row in rows if row["verb"] in ("filter", "prioritize")]
    assert len(ours) == 10  # per mode: filter K=3, K=0, no hugepages; prioritize with and without
    assert all(row["requests"] >= 3 and row["req/s"] > 0 and row["x null"] > 0 for row in ours)


def test_full_cluster_benchmark_runs_every_case_against_its_base() -> None:
    two_sizes: list[dict[str, Any]] = []
    rows = full_cluster.run(  # 90%: 20 fit
        nodes=200, shares=(90, 100), rounds=2, requests=2, log=lambda line: None, two_sizes=two_sizes
    )
    assert [(row["full %"], row["case"]) for row in rows] == [
        (share, case) for share in (90, 100) for case in full_cluster.CASES
    ]
    bases = {(row["full %"], row["case"]): row["base"] for row in rows}
    assert bases[90, "enforce K=3"] == "null"
    assert bases[100, "enforce K=0 (bind)"] == "floor insufficient"  # every node named: the floor of that answer
    assert bases[90, "no pool can take"] == "floor exceeds pool"
    for row in rows:
        assert 0 < row["x min"] <= row["x base"] <= row["x max"]
        if row["base"] != "null":
            assert row["answer KB"] == row["base KB"]  # the floor's answer is as large as ours
    # The server guarding both sizes, in the same rounds and cases: a node passes for a pod of 2 MiB pages,
    # and for the same pod asking a 1 GiB page too, exactly where one passes with one size guarded (the
    # 1 GiB pools are full where the 2 MiB ones are; how many pass is the best-of-K draws').
    assert [(row["full %"], row["case"]) for row in two_sizes] == [(row["full %"], row["case"]) for row in rows]
    for row, two in zip(rows, two_sizes, strict=True):
        one, *others = (int(passed) for passed in two["passed"].split("/"))
        assert one == row["passed"]
        assert [passed > 0 for passed in others] == [one > 0, one > 0]
        assert 0 < two["x min"] <= two["x one size"] <= two["x max"]
        assert 0 < two["both x min"] <= two["both x one size"] <= two["both x max"]


def test_concurrency_benchmark_runs() -> None:
    rows = concurrency.run(NODES, levels=(1, 2), seconds=0.2, rounds=1, log=lambda line: None)
    assert {(row["mode"], row["schedulers"]) for row in rows} == {
        (mode, n) for mode in concurrency.MODES for n in (1, 2)
    }
    assert all(row["pods"] > 0 and row["x null pods/s"] > 0 and row["cpu ms/pod"] > 0 for row in rows)


def test_null_extender_answers_its_input_unchanged() -> None:
    documents = node_documents(3)
    names = [d["metadata"]["name"] for d in documents]
    for full in (False, True):
        body = request_body(documents, full_nodes=full, hugepages="1Gi")
        passed = msgspec.json.decode(null_filter(body))
        assert passed["Error"] == ""
        assert passed["FailedNodes"] == {}
        if full:
            assert passed["NodeNames"] is None
            assert passed["Nodes"]["items"] == documents
        else:
            assert passed["Nodes"] is None
            assert passed["NodeNames"] == names
        zeros = [{"Host": name, "Score": 0} for name in names]
        assert msgspec.json.decode(null_prioritize(body)) == zeros
        assert msgspec.json.decode(floor_prioritize(body)) == zeros
        pod, decoded = field_skipping_decode(body)
        assert decoded == names
        assert pod.metadata.name == "incoming"


def test_node_report_benchmarks_run() -> None:
    policy = node_reports.PublishPolicy(heartbeat_seconds=900, jitter=0.2)
    # 50 agents, no changes: about 50 / 810 writes a second; the closed form agrees within 10 %.
    simulated = node_reports.simulate_writes(50, policy, 0.0, hours=2)
    assert abs(simulated - policy.writes_per_second(50)) / policy.writes_per_second(50) < 0.1
    rows = node_reports.updates(quick=True)
    assert all(row["p50 us"] > 0 for row in rows)


def test_scale_benchmark_runs_without_an_apiserver() -> None:
    serving: dict[tuple[int, int], float] = {}
    rows = scale.decisions([(NODES, 500)], quick=True, serving=serving)
    assert {(row["path"], row["verb"], row["mode"]) for row in rows} >= {
        ("in process", "filter", "shadow"),
        ("HTTP", "filter", "enforce K=0"),
        ("HTTP", "prioritize", "enforce"),
    }
    assert serving[NODES, 500] > 0
    events = scale.watch_events([(NODES, 500)], events=20)
    assert {row["event"] for row in events} == {
        "pod ADDED (pending)",
        "pod MODIFIED (bound)",
        "pod DELETED",
        "node MODIFIED",
    }
    assert all(row["loop p50 us"] > 0 for row in events)
    (synced,) = scale.first_sync([], [(NODES, 2500)])  # more than one page of pods
    assert (synced["listed nodes"], synced["listed pods"]) == (NODES, 2500)
    assert synced["ready s"] >= synced["pods listed s"] > 0


def test_round_trip_benchmark_runs_both_paths() -> None:
    # Plain HTTP and HTTPS with client certificates on loopback; the same client runs in kind's pods.
    rows = extender_round_trip.run(calls=20)
    assert [row["path"].split(",")[1].strip().split(" ")[0] for row in rows] == ["plain", "HTTPS"]
    assert all(row["calls"] == 20 and 0 < row["p50_ms"] <= row["p99_ms"] for row in rows)


def test_previous_benchmark_measures_this_checkout_against_a_commit() -> None:
    rows = previous.run("HEAD", nodes=200, shares=(90,), rounds=2, requests=2, log=lambda line: None)
    assert [(row["case"], row["sizes"]) for row in rows] == [
        (case, sizes) for case in full_cluster.CASES for sizes in previous.SERVERS
    ]
    for row in rows:
        assert row["p50 ms"] > 0
        assert row["previous p50 ms"] > 0
        assert 0 < row["x min"] <= row["x previous"] <= row["x max"]
        this, before = row["passed"].split("/")
        if "K=3" not in row["case"] and "K=16" not in row["case"]:  # best-of-K answers are draws
            assert this == before  # the same cluster, and the same commit decides it alike


def test_in_flight_benchmark_runs_every_case_with_pods_in_flight() -> None:
    rows = in_flight.run(nodes=200, in_flight=20, rounds=2, requests=2, log=lambda line: None)
    assert [row["case"] for row in rows] == list(in_flight.CASES)
    bases = {row["case"]: row["base"] for row in rows}
    assert bases["enforce K=3"] == "null"
    assert bases["no pool can take"] == "floor exceeds pool"
    for row in rows:
        assert 0 < row["x min"] <= row["x none"] <= row["x max"]
        assert row["held pods"] == "20-24"


def test_scorecard_benchmark_samples_its_memory_and_its_worst_case_stops_at_the_cap() -> None:
    kept = scorecard.simulate(36_000, 0.2)
    assert kept["placed"] == 7200
    assert [s["hour"] for s in kept["samples"]] == [0.17]
    worst = scorecard.simulate(360_000, 0.2, outcomes=False)
    assert worst["samples"][-1]["followed"] == worst["max_followed"] == MAX_FOLLOWED
