"""What the server needs of a binder, and the error it reports: the seam between the HTTP
server and the Kubernetes client layer (``extender.kube.binder`` implements it)."""

from __future__ import annotations

from typing import Protocol

from extender.errors import ExtenderError
from extender.wire import BindingArgs


class BindError(ExtenderError):
    """The Binding could not be created; the message goes back to the scheduler."""


class Binder(Protocol):
    async def bind(self, args: BindingArgs) -> None: ...
