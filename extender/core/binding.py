"""What the server needs of a binder, and the error it reports: the seam between the HTTP
server and the Kubernetes client layer (``extender.shell.kube.binder`` implements it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from extender.core.errors import ExtenderError


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


class BindError(ExtenderError):
    """The Binding could not be created, or its outcome is unknown; the message goes back to the
    scheduler. ``known`` is False when the API server may have created it all the same (the
    connection dropped, a timeout, a 5xx): the pod may be bound, and its room must stay held."""

    def __init__(self, message: str, *, known: bool = True) -> None:
        super().__init__(message)
        self.known = known


class Binder(Protocol):
    async def bind(self, args: BindingArgs) -> None: ...
