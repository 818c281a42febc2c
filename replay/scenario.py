"""Scenarios: the built-in quick and full ones, scenario files, trace files.

A scenario file is YAML (or JSON) with camelCase keys::

    nodes:                       # node groups
      - {count: 64, pool: 32Gi, cpu: 16, outside: [0, 8Gi], prefix: small}
    mix:                         # VM-backed pod kinds, drawn by weight
      - {namespace: vm, memory: 8Gi, cpu: 1, lifetimeSeconds: 120, weight: 0.35}
    ladder: {levels: [40, 80, 160], stepSeconds: 600}
    timing: {placementDelaySeconds: 5, retryBackoffSeconds: 10}

A trace file (CSV with a header row, or JSON: a list of objects or
``{"arrivals": [...]}``) has one pod per row: ``time`` (seconds),
``namespace``, ``hugepages`` (a quantity, e.g. 8Gi), ``cpu`` (a quantity) and
``lifetime`` (seconds).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec
import yaml

from extender.core.quantity import QuantityError, RawQuantity, to_millis, to_units
from replay.model import (
    GIB,
    Arrival,
    Ladder,
    NodeGroup,
    PodKind,
    ReplayError,
    Scenario,
    Timing,
    Trace,
)

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Count = Annotated[int, msgspec.Meta(gt=0)]


def vm_mix(namespaces: Iterable[str], lifetime_seconds: float) -> tuple[PodKind, ...]:
    """VM sizes 4/8/16/32 GiB (40/35/20/5 %), CPU 1/1/2/4, spread evenly over ``namespaces``.

    Mean need 9.2 GiB of hugepages and 1.35 CPUs per pod: with 16-32 CPUs per
    32-64 GiB pool, the hugepage pool runs out long before CPU does, as on
    VM hosts.
    """
    names = tuple(namespaces)
    sizes = ((4, 1000, 0.40), (8, 1000, 0.35), (16, 2000, 0.20), (32, 4000, 0.05))
    return tuple(
        PodKind(ns, gib * GIB, cpu_millis, lifetime_seconds, weight / len(names))
        for ns in names
        for gib, cpu_millis, weight in sizes
    )


def _cluster(scale: int) -> tuple[NodeGroup, ...]:
    # Outside usage (VMs started outside Kubernetes, DPDK) varies per node: the
    # part of the pool the scheduler cannot see, and the extender reads from
    # the node's annotation.
    return (
        NodeGroup(16 * scale, 32 * GIB, 16_000, 0, 8 * GIB, "small"),
        NodeGroup(8 * scale, 64 * GIB, 32_000, 0, 16 * GIB, "large"),
    )


NAMESPACES = ("vm", "batch")


def quick_scenario() -> Scenario:
    """24 nodes (about 97 average pods of room); 10..160 pods in flight, 2 simulated minutes a step."""
    return Scenario(
        nodes=_cluster(1),
        mix=vm_mix(NAMESPACES, lifetime_seconds=60.0),
        workload=Ladder(levels=(10, 20, 40, 80, 160), step_seconds=120.0),
    )


def full_scenario() -> Scenario:
    """192 nodes (about 800 average pods of room); 80..1280 pods in flight, 15 simulated minutes a step."""
    return Scenario(
        nodes=_cluster(8),
        mix=vm_mix(NAMESPACES, lifetime_seconds=120.0),
        workload=Ladder(levels=(80, 160, 320, 640, 1280), step_seconds=900.0),
    )


# -- scenario files -----------------------------------------------------------


class _NodeGroupFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    count: _Count
    pool: RawQuantity
    cpu: RawQuantity
    outside: tuple[RawQuantity, RawQuantity] = (0, 0)
    prefix: str = "node"


class _PodKindFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    namespace: str
    memory: RawQuantity
    cpu: RawQuantity
    lifetime_seconds: _Positive
    weight: _Positive = 1.0


class _LadderFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    levels: list[Annotated[int, msgspec.Meta(ge=0)]]
    step_seconds: _Positive


_DEFAULT_TIMING = Timing()


class _TimingFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    placement_delay_seconds: Annotated[float, msgspec.Meta(ge=0)] = _DEFAULT_TIMING.placement_delay_seconds
    bind_delay_seconds: Annotated[float, msgspec.Meta(ge=0)] = _DEFAULT_TIMING.bind_delay_seconds
    retry_backoff_seconds: Annotated[float, msgspec.Meta(ge=0)] = _DEFAULT_TIMING.retry_backoff_seconds
    sample_interval_seconds: _Positive = _DEFAULT_TIMING.sample_interval_seconds
    hold_timeout_seconds: _Positive = _DEFAULT_TIMING.hold_timeout_seconds


class _ScenarioFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    nodes: list[_NodeGroupFile]
    mix: list[_PodKindFile]
    ladder: _LadderFile
    timing: _TimingFile = msgspec.field(default_factory=_TimingFile)


def _bytes(raw: RawQuantity, where: str) -> int:
    try:
        return to_units(raw)
    except QuantityError as error:
        raise ReplayError(f"{where}: {error}") from None


def _millis(raw: RawQuantity, where: str) -> int:
    try:
        return to_millis(raw)
    except QuantityError as error:
        raise ReplayError(f"{where}: {error}") from None


def _node_group(raw: _NodeGroupFile, where: str) -> NodeGroup:
    low, high = (_bytes(q, f"{where}.outside") for q in raw.outside)
    if low > high:
        raise ReplayError(f"{where}.outside: minimum above maximum")
    return NodeGroup(
        raw.count, _bytes(raw.pool, f"{where}.pool"), _millis(raw.cpu, f"{where}.cpu"), low, high, raw.prefix
    )


def _pod_kind(raw: _PodKindFile, where: str) -> PodKind:
    memory = _bytes(raw.memory, f"{where}.memory")
    if memory == 0:
        raise ReplayError(f"{where}.memory: a VM-backed pod needs memory")
    return PodKind(raw.namespace, memory, _millis(raw.cpu, f"{where}.cpu"), raw.lifetime_seconds, raw.weight)


_T = TypeVar("_T")


def _decode(document: Any, kind: type[_T], source: str) -> _T:
    try:
        return msgspec.convert(document, kind)
    except msgspec.ValidationError as error:
        raise ReplayError(f"{source}: {error}") from None


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ReplayError(f"cannot read {what} {path}: {error.strerror}") from None


def load_scenario(path: Path) -> Scenario:
    try:
        document = yaml.safe_load(_read_text(path, "scenario"))
    except yaml.YAMLError as error:
        raise ReplayError(f"scenario {path} is not valid YAML: {error}") from None
    raw = _decode(document, _ScenarioFile, str(path))
    if not raw.nodes or not raw.mix or not raw.ladder.levels:
        raise ReplayError(f"{path}: nodes, mix and ladder.levels must not be empty")
    t = raw.timing
    return Scenario(
        nodes=tuple(_node_group(g, f"{path}: nodes[{i}]") for i, g in enumerate(raw.nodes)),
        mix=tuple(_pod_kind(k, f"{path}: mix[{i}]") for i, k in enumerate(raw.mix)),
        workload=Ladder(tuple(raw.ladder.levels), raw.ladder.step_seconds),
        timing=Timing(
            placement_delay_seconds=t.placement_delay_seconds,
            bind_delay_seconds=t.bind_delay_seconds,
            retry_backoff_seconds=t.retry_backoff_seconds,
            sample_interval_seconds=t.sample_interval_seconds,
            hold_timeout_seconds=t.hold_timeout_seconds,
        ),
    )


# -- trace files --------------------------------------------------------------


class _ArrivalRow(msgspec.Struct, forbid_unknown_fields=True):
    time: Annotated[float, msgspec.Meta(ge=0)]
    namespace: str
    hugepages: RawQuantity
    cpu: RawQuantity
    lifetime: _Positive


def _trace_rows(text: str, path: Path) -> list[Any]:
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{")):
        try:
            document = msgspec.json.decode(text)
        except msgspec.DecodeError as error:
            raise ReplayError(f"trace {path} is not valid JSON: {error}") from None
        rows = document.get("arrivals") if isinstance(document, dict) else document
        if not isinstance(rows, list):
            raise ReplayError(f"trace {path}: expected a list of arrivals")
        return rows
    # CSV cells are strings; msgspec converts them to numbers with strict=False.
    return list(csv.DictReader(io.StringIO(text)))


def load_trace(path: Path, windows: int = 5) -> Trace:
    rows = _trace_rows(_read_text(path, "trace"), path)
    if not rows:
        raise ReplayError(f"trace {path} holds no arrivals")
    arrivals = []
    for index, row in enumerate(rows):
        where = f"{path}: arrival {index + 1}"
        try:
            raw = msgspec.convert(row, _ArrivalRow, strict=False)
        except msgspec.ValidationError as error:
            raise ReplayError(f"{where}: {error}") from None
        need = _bytes(raw.hugepages, f"{where}.hugepages")
        if need == 0:
            raise ReplayError(f"{where}.hugepages: a VM-backed pod needs hugepages")
        arrivals.append(Arrival(raw.time, raw.namespace, need, _millis(raw.cpu, f"{where}.cpu"), raw.lifetime))
    arrivals.sort(key=lambda a: a.time_seconds)
    return Trace(tuple(arrivals), windows=windows, source=path.name)
