"""Errors of the test control plane."""

from __future__ import annotations


class ControlPlaneError(RuntimeError):
    """A component failed to start, died, or did not become ready (the message carries its log tail)."""


class BinariesUnavailable(ControlPlaneError):
    """etcd / kube-apiserver / kube-scheduler are not built and could not be built."""
