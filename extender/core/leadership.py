"""Whether this replica lifts scheduling gates now: only the one beside the scheduler that holds the
leader Lease (docs/design.md, "Gates").

With several scheduler replicas each extender sees the same freed room; if every one lifted, one freed
slot could lift a pod per replica, and a replica whose scheduler is not scheduling lacks the holds of
the one that is. kube-scheduler's Lease names its holder ``<hostname>_<uuid>``: ``id := hostname + "_" +
string(uuid.NewUUID())`` with ``hostname, err := os.Hostname()`` (k8s.io/kubernetes v1.37.2,
cmd/kube-scheduler/app/options/options.go, ``makeLeaderElectionConfig``). The extender shares that
hostname where the chart puts it: a container of the scheduler's pod (topology sidecar) or, on the host
network, beside the static scheduler of the same node (topology controlPlane).

A Lease counts while ``renewTime + leaseDurationSeconds`` is ahead of this process's clock. client-go's
elector judges by when it last saw the record change (``isLeaseValid``, tools/leaderelection/
leaderelection.go); here the lifter is the replica beside the holder, whose node's clock wrote
``renewTime``, so no skew between nodes enters: and a watch that stops showing renewals stops the lifts
within ``leaseDurationSeconds`` rather than trusting a picture that no longer moves.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What the decision reads of a coordination.k8s.io Lease."""

    holder: str  # spec.holderIdentity, "" when none
    renewed_at: float | None  # spec.renewTime, seconds since the epoch
    duration_seconds: int | None  # spec.leaseDurationSeconds


@dataclass(frozen=True, slots=True)
class LiftTurn:
    """Whether to lift now, and why (for the log, ``/debug/state`` and the metric)."""

    lifts: bool
    why: str


EVERY_REPLICA = LiftTurn(lifts=True, why="no --leader-lease: this extender lifts (one scheduler)")


def holder_host(identity: str) -> str:
    """The hostname in a kube-scheduler holder identity ``<hostname>_<uuid>`` (the whole identity when
    it has no ``_``; a UUID has none, so the last one separates them)."""
    host, separator, _ = identity.rpartition("_")
    return host if separator else identity


def lift_turn(lease: LeaseRecord | None, *, read: bool, hostname: str, now: float) -> LiftTurn:
    """Whether the extender on ``hostname`` lifts at ``now`` (epoch seconds), given the Lease as last
    read (``None``: it does not exist; ``read`` false: not listed yet)."""
    if not read:
        return LiftTurn(lifts=False, why="the leader Lease is not read yet")
    if lease is None:
        # No scheduler elects a leader (one replica, or leader election off): nobody else lifts.
        return LiftTurn(lifts=True, why="no leader Lease: no scheduler elects a leader, this extender lifts")
    refused = _not_held_here(lease, hostname, now)
    if refused is not None:
        return LiftTurn(lifts=False, why=refused)
    return LiftTurn(lifts=True, why=f"the scheduler on this host ({hostname}) holds the leader Lease")


def _not_held_here(lease: LeaseRecord, hostname: str, now: float) -> str | None:
    """Why the Lease does not make ``hostname``'s scheduler the leader at ``now``, or None."""
    if not lease.holder:
        return "the leader Lease has no holder"
    host = holder_host(lease.holder)
    if host != hostname:
        return f"the scheduler on {host} holds the leader Lease"
    if lease.renewed_at is None or lease.duration_seconds is None:
        return "the leader Lease has no renewTime or leaseDurationSeconds"
    if lease.renewed_at + lease.duration_seconds <= now:
        return f"the leader Lease of this host ({hostname}) expired"
    return None
