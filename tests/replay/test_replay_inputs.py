"""Variant specs, scenario files and trace files: what is accepted, and how bad input is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.core.policy import Mode, Widening
from replay.model import GIB, InFlight, Ladder, ReplayError, Variant, parse_variant
from replay.run import default_groups
from replay.scenario import load_scenario, load_trace, quick_scenario, vm_mix


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("off", Variant(Mode.OFF)),
        ("shadow:inflight=bind", Variant(Mode.SHADOW, inflight=InFlight.BIND)),
        ("enforce", Variant(Mode.ENFORCE)),  # the extender's defaults: fullscan, K=3
        ("enforce:none:k1", Variant(Mode.ENFORCE, Widening.NONE, 1)),
        ("enforce:k0:drawUntilK", Variant(Mode.ENFORCE, Widening.DRAW_UNTIL_K, 0)),
        (
            "enforce:inflight=none:ns=vm:R=1",
            Variant(Mode.ENFORCE, inflight=InFlight.NONE, namespace="vm", overcommit_ratio=1),
        ),
    ],
)
def test_variant_specs(spec: str, expected: Variant) -> None:
    assert parse_variant(spec) == expected


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("off", "off"),
        ("enforce", "enforce:fullscan:k3"),
        ("enforce:k5:resample:inflight=filter", "enforce:resample:k5"),
        ("enforce:ns=vm:inflight=bind", "enforce:fullscan:k3:inflight=bind:ns=vm"),
        ("shadow:k5", "shadow:k5"),
    ],
)
def test_variant_names_are_canonical_and_parse_back(spec: str, name: str) -> None:
    variant = parse_variant(spec)
    assert variant.name == name
    assert parse_variant(variant.name) == variant


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("enforced", "must start with off, shadow or enforce"),
        ("enforce:wide", "unknown token 'wide'"),
        ("enforce:inflight=always", "inflight must be none, filter or bind"),
        ("enforce:inflight=bind-all", "inflight must be none, filter or bind"),  # bind now holds every mode
        ("enforce:R=0", "R must be > 0"),
        ("enforce:R=x", "R must be a number"),
        ("enforce:ns=", "unknown token 'ns='"),
    ],
)
def test_bad_variant_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ReplayError, match=message):
        parse_variant(spec)


def test_the_default_matrix_covers_every_mode_widening_and_k() -> None:
    variants = [v for g in default_groups() for v in g.variants]
    assert {v.mode for v in variants} == set(Mode)
    assert {v.widening for v in variants if v.mode is Mode.ENFORCE} == set(Widening)
    assert {v.sample_size for v in variants if v.mode is Mode.ENFORCE} >= {0, 1, 2, 3, 5}
    assert {v.inflight for v in variants} == set(InFlight)


def test_vm_mix_weights_sum_to_one_and_average_9_2_gib() -> None:
    mix = vm_mix(["a", "b"], 60.0)
    total = sum(k.weight for k in mix)
    assert total == pytest.approx(1.0)
    assert sum(k.memory_bytes * k.weight for k in mix) / GIB == pytest.approx(0.4 * 4 + 0.35 * 8 + 0.2 * 16 + 0.05 * 32)


SCENARIO = """
nodes:
  - {count: 3, pool: 32Gi, cpu: 16, outside: [0, 4Gi], prefix: small}
  - {count: 1, pool: 0, cpu: "8"}
mix:
  - {namespace: vm, memory: 8Gi, cpu: 500m, lifetimeSeconds: 60}
ladder: {levels: [5, 10], stepSeconds: 30}
timing: {placementDelaySeconds: 2}
"""


def test_a_scenario_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    assert scenario.node_count == 4
    assert scenario.nodes[0].outside_max_bytes == 4 * GIB
    assert scenario.nodes[1].pool_bytes == 0
    assert scenario.mix[0].cpu_millis == 500
    assert scenario.workload == Ladder((5, 10), 30.0)
    assert scenario.timing.placement_delay_seconds == 2.0
    assert scenario.timing.retry_backoff_seconds == quick_scenario().timing.retry_backoff_seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SCENARIO.replace("count: 3", "count: 0"), r"Expected `int` >= 1 - at `\$.nodes\[0\].count`"),
        (SCENARIO.replace("32Gi", "32Gx"), r"nodes\[0\]\.pool: invalid quantity"),
        (SCENARIO.replace("[0, 4Gi]", "[4Gi, 0]"), "minimum above maximum"),
        (SCENARIO.replace("stepSeconds", "stepSecs"), "unknown field `stepSecs`"),
        (SCENARIO.replace("memory: 8Gi", "memory: 0"), "a VM-backed pod needs memory"),
        ("nodes: [", "not valid YAML"),
    ],
)
def test_bad_scenario_files_name_the_key_at_fault(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ReplayError, match=message):
        load_scenario(path)


def test_a_missing_scenario_file() -> None:
    with pytest.raises(ReplayError, match=r"cannot read scenario /nonexistent\.yaml"):
        load_scenario(Path("/nonexistent.yaml"))


def test_a_csv_trace_is_sorted_by_time(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("time,namespace,hugepages,cpu,lifetime\n5,vm,8Gi,2,60\n1.5,batch,4294967296,500m,30\n")
    trace = load_trace(path, windows=2)
    assert [(a.time_seconds, a.namespace, a.hugepage_bytes, a.cpu_millis) for a in trace.arrivals] == [
        (1.5, "batch", 4 * GIB, 500),
        (5.0, "vm", 8 * GIB, 2000),
    ]
    assert (trace.windows, trace.source) == (2, "t.csv")


def test_a_json_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"arrivals": [{"time": 0, "namespace": "vm", "hugepages": "2Gi", "cpu": 1, "lifetime": 9}]}')
    assert load_trace(path).arrivals[0].hugepage_bytes == 2 * GIB


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.csv", "time,namespace,hugepages,cpu,lifetime\n", "holds no arrivals"),
        ("t.csv", "time,namespace,hugepages,cpu,lifetime\n-1,vm,1Gi,1,5\n", r"arrival 1: Expected `float` >= 0"),
        ("t.csv", "time,namespace,hugepages,cpu,lifetime\n1,vm,0,1,5\n", "needs hugepages"),
        ("t.csv", "time,namespace,hugepages\n1,vm,1Gi\n", "missing required field"),
        ("t.json", "[{", "not valid JSON"),
        ("t.json", '{"rows": 1}', "expected a list of arrivals"),
    ],
)
def test_bad_traces_name_the_row_at_fault(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ReplayError, match=message):
        load_trace(path)
