"""What happened to a pod on its node, read from the status the watch shows (pure).

Shadow's scorecard (``extender.state.scorecard``) pairs each verdict with one of these outcomes:

- **ran**: every container started, the pod was Ready and still ran ``shadowSettleSeconds`` later
  (or it ended in phase Succeeded);
- **failed**: the node refused or broke it: the kubelet's admission refusal (phase Failed, reason
  ``OutOfhugepages-2Mi``, ``UnexpectedAdmissionError``, ...), a container that exited non-zero, restarted
  or crash-looped before the pod settled (its own message, a consumer's error, is kept);
- **deleted**: gone before either was known.

Only a status is read, never the node: the verdict and the outcome are two views of one pod.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from extender.core.objects import Pod, PodStatus

# A container waiting for one of these is failing on its node (an image still being pulled is not).
_FAILING_WAITS = frozenset({"CrashLoopBackOff", "RunContainerError", "CreateContainerError"})
MAX_DETAIL_CHARS = 200  # a status message is the consumer's own: kept short in memory and in the table


# The scorecard's cells: shadow's verdict on the chosen node (would reject / would admit) by the outcome
# (``cell_of``); the scorecard then pairs a false alarm and a miss of one node's burst (extender.state.scorecard).
CELLS = ("predicted_failed", "predicted_ran", "failed_unpredicted", "ran_as_predicted")
# Every way a followed pod is counted: a cell, or an end without an outcome (extender.state.scorecard).
ENDS = (*CELLS, "deleted", "expired", "dropped")


class PodOutcome(StrEnum):
    RAN = "ran"
    FAILED = "failed"
    DELETED = "deleted"


class Prediction(msgspec.Struct, frozen=True, gc=False):
    """What shadow said of the node the scheduler chose: would enforce have turned it away, and why."""

    would_reject: bool
    why: str  # the reason enforce would have sent, or "room for it"
    # "bind" (the bind verb, at bind time) or "watch" (the first event showing the pod bound); the replay's
    # verdicts are its "pick"'s.
    judged_by: str


class PodSignal(msgspec.Struct, frozen=True, gc=False):
    """A pod's status reduced to what decides its outcome."""

    ready: bool = False
    failure: str = ""  # why it failed on its node ("" while no failure shows)
    succeeded: bool = False
    deleting: bool = False  # deleted before its outcome: its containers' ends are the deletion's


class _State(msgspec.Struct, gc=False):
    exit_code: int | None = msgspec.field(default=None, name="exitCode")
    reason: str = ""
    message: str = ""


class _ContainerState(msgspec.Struct, gc=False):
    terminated: _State | None = None
    waiting: _State | None = None


class _ContainerStatus(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    restart_count: int = 0
    state: _ContainerState = msgspec.field(default_factory=_ContainerState)
    last_state: _ContainerState = msgspec.field(default_factory=_ContainerState)


class _Condition(msgspec.Struct, gc=False):
    type: str = ""
    status: str = ""


_containers = msgspec.json.Decoder(list[_ContainerStatus])
_conditions = msgspec.json.Decoder(list[_Condition])


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 3] + "..."


def _ending(head: str, output: str) -> str:
    """``head: output``, the output cut from the front when long: a container's termination message is
    often its log's last lines (``terminationMessagePolicy: FallbackToLogsOnError``), the error last."""
    output = " ".join(output.split())
    if not output:
        return head
    room = MAX_DETAIL_CHARS - len(head) - 2
    return f"{head}: {output}" if len(output) <= room else f"{head}: ...{output[3 - room :]}"


def _container_failure(status: _ContainerStatus) -> str:
    """Why this container failed, "" when it did not (yet)."""
    terminated = status.state.terminated
    if terminated is not None and terminated.exit_code:
        head = f"container {status.name} exited with code {terminated.exit_code}"
        return _ending(head, terminated.message or terminated.reason)
    if status.restart_count > 0:
        last = status.last_state.terminated
        said = (last.message or last.reason) if last else ""
        detail = f" (last exit code {last.exit_code}{': ' + said if said else ''})" if last else ""
        return _short(f"container {status.name} restarted {status.restart_count} times{detail}")
    waiting = status.state.waiting
    if waiting is not None and waiting.reason in _FAILING_WAITS:
        return _short(f"container {status.name} {waiting.reason}: {waiting.message}".rstrip(": "))
    return ""


def _given(raw: msgspec.Raw) -> bool:
    return bool(raw) and bytes(raw) != b"null"


def signal_of(pod: Pod) -> PodSignal:
    """The pod's status as an outcome reads it. A status it cannot read reads as nothing known yet."""
    if pod.metadata.deletion_timestamp:
        return PodSignal(deleting=True)
    ended = _phase_signal(pod.status)
    if ended is not None:
        return ended
    try:
        conditions, containers = _decoded_statuses(pod.status)
    except msgspec.DecodeError:
        return PodSignal()
    for container in containers:
        failure = _container_failure(container)
        if failure:
            return PodSignal(failure=failure)
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return PodSignal(ready=ready)


def _phase_signal(status: PodStatus) -> PodSignal | None:
    """The signal of a pod whose phase says it ended (Failed or Succeeded), None while it has not."""
    if status.phase == "Failed":
        why = status.reason or "Failed"
        return PodSignal(failure=_short(f"{why}: {status.message}" if status.message else why))
    if status.phase == "Succeeded":
        return PodSignal(succeeded=True)
    return None


def _decoded_statuses(status: PodStatus) -> tuple[list[_Condition], list[_ContainerStatus]]:
    """The pod's conditions, and its init containers' statuses then its containers' (raises
    ``msgspec.DecodeError`` on a status it cannot read)."""
    conditions = _conditions.decode(status.conditions) if _given(status.conditions) else []
    containers = [
        *(_containers.decode(status.init_container_statuses) if _given(status.init_container_statuses) else []),
        *(_containers.decode(status.container_statuses) if _given(status.container_statuses) else []),
    ]
    return conditions, containers


def outcome_of(signal: PodSignal, *, ready_for: float | None, settle_seconds: float) -> PodOutcome | None:
    """The outcome a status shows, None while undecided. ``ready_for``: how long the pod has been Ready
    without a failure (None: not Ready now)."""
    if signal.deleting:
        return PodOutcome.DELETED
    if signal.failure:
        return PodOutcome.FAILED
    if signal.succeeded or (ready_for is not None and ready_for >= settle_seconds):
        return PodOutcome.RAN
    return None


def outcome_at_deletion(signal: PodSignal | None) -> PodOutcome | None:
    """A pod the watch of active pods no longer shows: its last status decides; None when it does not. A
    pod that turned Failed or Succeeded leaves that watch as a deletion carrying its status from before
    (the API server's watch cache sends the previous object), so only the watch of ended pods
    (``informer.ENDED_PODS``) can tell it from one deleted."""
    if signal is not None and signal.deleting:
        return PodOutcome.DELETED
    if signal is not None and signal.failure:
        return PodOutcome.FAILED
    if signal is not None and signal.succeeded:
        return PodOutcome.RAN
    return None


def cell_of(prediction: Prediction, outcome: PodOutcome) -> str:
    """The cell of a verdict and an outcome (``deleted`` for a pod gone first)."""
    if outcome is PodOutcome.DELETED:
        return "deleted"
    failed = outcome is PodOutcome.FAILED
    if prediction.would_reject:
        return "predicted_failed" if failed else "predicted_ran"
    return "failed_unpredicted" if failed else "ran_as_predicted"
