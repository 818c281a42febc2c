"""A pod's outcome from its watched status (extender.core.podoutcome)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from extender.core.objects import Pod
from extender.core.podoutcome import (
    PodOutcome,
    PodSignal,
    Prediction,
    cell_of,
    outcome_at_deletion,
    outcome_of,
    signal_of,
)


def _signal(status: dict[str, Any], **metadata: str) -> PodSignal:
    """The signal of a pod whose status is ``status``, decoded as the watch decodes it."""
    document = {"metadata": {"name": "p", **metadata}, "status": status}
    return signal_of(msgspec.json.decode(msgspec.json.encode(document), type=Pod))


def _container(**fields: Any) -> dict[str, Any]:
    return {"name": "app", "restartCount": 0, "state": {"running": {}}, **fields}


READY = [{"type": "Ready", "status": "True"}]


def test_a_running_ready_pod_is_ready_and_has_not_failed() -> None:
    signal = _signal({"phase": "Running", "conditions": READY, "containerStatuses": [_container(ready=True)]})
    assert signal == PodSignal(ready=True)
    assert outcome_of(signal, ready_for=None, settle_seconds=30) is None  # Ready only now: not settled
    assert outcome_of(signal, ready_for=29.9, settle_seconds=30) is None
    assert outcome_of(signal, ready_for=30, settle_seconds=30) is PodOutcome.RAN


def test_the_kubelets_admission_refusal_is_a_failure_with_its_reason() -> None:
    signal = _signal(
        {
            "phase": "Failed",
            "reason": "OutOfhugepages-2Mi",
            "message": "Pod was rejected: Node didn't have enough resource: hugepages-2Mi",
        }
    )
    assert signal.failure.startswith("OutOfhugepages-2Mi: Pod was rejected")
    assert outcome_of(signal, ready_for=None, settle_seconds=30) is PodOutcome.FAILED
    assert outcome_at_deletion(signal) is PodOutcome.FAILED
    assert _signal({"phase": "Failed", "reason": "UnexpectedAdmissionError"}).failure == "UnexpectedAdmissionError"


def test_a_container_exiting_non_zero_fails_with_its_own_message() -> None:
    terminated = {"terminated": {"exitCode": 1, "reason": "Error", "message": "EAL: Cannot get hugepage information"}}
    signal = _signal({"phase": "Running", "containerStatuses": [_container(name="dpdk", state=terminated)]})
    assert signal.failure == "container dpdk exited with code 1: EAL: Cannot get hugepage information"
    assert outcome_of(signal, ready_for=None, settle_seconds=30) is PodOutcome.FAILED


def test_a_long_termination_message_keeps_its_end_where_the_consumers_error_is() -> None:
    # FallbackToLogsOnError: the message is the log's last lines; DPDK's EAL says why last.
    log = "\n".join([*(f"EAL: Detected lcore {i} as core {i} on socket 0" for i in range(8)), "EAL: Cannot init EAL"])
    terminated = {"terminated": {"exitCode": 1, "reason": "Error", "message": log}}
    signal = _signal({"phase": "Running", "containerStatuses": [_container(name="main", state=terminated)]})
    assert len(signal.failure) == 200
    assert signal.failure.startswith("container main exited with code 1: ...")
    assert signal.failure.endswith("on socket 0 EAL: Cannot init EAL")


def test_a_restart_or_a_crash_loop_fails_even_when_ready_again() -> None:
    last = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    restarted = _container(name="qemu", restartCount=2, lastState=last)
    signal = _signal({"phase": "Running", "conditions": READY, "containerStatuses": [restarted]})
    assert signal.failure == "container qemu restarted 2 times (last exit code 137: OOMKilled)"
    looping = _container(state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}})
    assert _signal({"phase": "Running", "containerStatuses": [looping]}).failure == (
        "container app CrashLoopBackOff: back-off 10s"
    )
    init = _container(name="setup", state={"terminated": {"exitCode": 2}})
    assert _signal({"phase": "Pending", "initContainerStatuses": [init]}).failure == (
        "container setup exited with code 2"
    )


def test_pulling_an_image_is_undecided_even_when_the_pod_leaves_the_watch_of_active_pods() -> None:
    pulling = _container(state={"waiting": {"reason": "ContainerCreating"}})
    signal = _signal({"phase": "Pending", "containerStatuses": [pulling]})
    assert signal == PodSignal()
    assert outcome_of(signal, ready_for=None, settle_seconds=0) is None
    # Deleted, or turned Failed: that watch sends the status from before either way.
    assert outcome_at_deletion(signal) is None
    assert outcome_at_deletion(None) is None


def test_a_pod_being_deleted_is_deleted_whatever_its_containers_say() -> None:
    killed = _container(state={"terminated": {"exitCode": 143, "reason": "Error"}})
    signal = _signal({"phase": "Running", "containerStatuses": [killed]}, deletionTimestamp="2026-12-02T13:00:00Z")
    assert signal == PodSignal(deleting=True)
    assert outcome_of(signal, ready_for=None, settle_seconds=0) is PodOutcome.DELETED
    assert outcome_at_deletion(signal) is PodOutcome.DELETED


def test_succeeded_ran_and_a_long_message_is_cut() -> None:
    assert outcome_of(_signal({"phase": "Succeeded"}), ready_for=None, settle_seconds=30) is PodOutcome.RAN
    long = _signal({"phase": "Failed", "reason": "Evicted", "message": "x" * 1000})
    assert len(long.failure) == 200
    assert long.failure.endswith("...")


@pytest.mark.parametrize(
    ("would_reject", "outcome", "cell"),
    [
        (True, PodOutcome.FAILED, "predicted_failed"),
        (True, PodOutcome.RAN, "predicted_ran"),
        (False, PodOutcome.FAILED, "failed_unpredicted"),
        (False, PodOutcome.RAN, "ran_as_predicted"),
        (True, PodOutcome.DELETED, "deleted"),
        (False, PodOutcome.DELETED, "deleted"),
    ],
)
def test_each_verdict_and_outcome_have_one_cell(would_reject: bool, outcome: PodOutcome, cell: str) -> None:
    assert cell_of(Prediction(would_reject, "why", "bind"), outcome) == cell
