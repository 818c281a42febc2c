"""A kube-scheduler process of the control plane, with its config, health and metrics."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.probes import LOOPBACK, http_get, unverified_ssl_context, wait_for_ready
from e2e.controlplane.processes import ManagedProcess

if TYPE_CHECKING:
    from e2e.controlplane.plane import ControlPlane


DEFAULT_SCHEDULER = "default-scheduler"


class Scheduler:
    """One kube-scheduler process and the KubeSchedulerConfiguration it runs."""

    def __init__(self, plane: ControlPlane, name: str, config: dict[str, Any], process: ManagedProcess, port: int):
        self.plane = plane
        self.name = name
        self.config = config
        self.process = process
        self.port = port

    def __repr__(self) -> str:
        return f"Scheduler({self.name!r}, port={self.port}, running={self.running})"

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process.running

    @property
    def profiles(self) -> list[str]:
        return [str(p.get("schedulerName", DEFAULT_SCHEDULER)) for p in self.config.get("profiles") or [{}]]

    def healthy(self) -> bool:
        answer = http_get(self.port, "/healthz", context=unverified_ssl_context())
        return answer is not None and answer[0] == 200

    def ready(self) -> bool:
        """/readyz: serving, and its informers' event handlers have synced (``sched-handler-sync``)."""
        answer = http_get(self.port, "/readyz", context=unverified_ssl_context())
        return answer is not None and answer[0] == 200

    def wait_healthy(self, timeout: float = 60.0) -> float:
        """Wait for /healthz, then /readyz; the seconds it took."""
        started = time.monotonic()
        wait_for_ready(f"{self.name} /healthz", self.healthy, timeout=timeout, process=self.process)
        remaining = max(1.0, timeout - (time.monotonic() - started))
        wait_for_ready(f"{self.name} /readyz", self.ready, timeout=remaining, process=self.process)
        return time.monotonic() - started

    def start(self, *, wait: bool = True, timeout: float = 60.0) -> float:
        started = time.monotonic()
        self.process.start()
        if wait:
            self.wait_healthy(timeout)
        elapsed = time.monotonic() - started
        self.plane.timings[f"scheduler:{self.name}"] = elapsed
        return elapsed

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.process.stop(timeout)

    def restart(self, *, wait: bool = True, timeout: float = 60.0) -> float:
        self.stop()
        return self.start(wait=wait, timeout=timeout)

    def metrics(self, timeout: float = 10.0) -> str:
        """The scheduler's /metrics (authenticated as the admin, authorized via the apiserver)."""
        certs = self.plane.certificates
        context = unverified_ssl_context(certs.admin_cert, certs.admin_key)
        answer: tuple[int, bytes] | None = None

        def fetch() -> bool:
            # Until the scheduler has read the client CA from the apiserver, callers are anonymous (403).
            nonlocal answer
            answer = http_get(self.port, "/metrics", context=context)
            return answer is not None and answer[0] not in (401, 403)

        with contextlib.suppress(ControlPlaneError):
            wait_for_ready(f"{self.name} /metrics", fetch, timeout=timeout, process=self.process, interval=0.2)
        if answer is None or answer[0] != 200:
            raise ControlPlaneError(f"{self.name} /metrics answered {answer[0] if answer else 'nothing'}")
        return answer[1].decode()

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)
