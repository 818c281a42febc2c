"""What the server needs of a binder, and the error it reports: the seam between the HTTP
server and the Kubernetes client layer (``extender.kube.binder`` implements it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from extender.errors import ExtenderError


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


class BindError(ExtenderError):
    """The Binding could not be created; the message goes back to the scheduler."""


class Binder(Protocol):
    async def bind(self, args: BindingArgs) -> None: ...
