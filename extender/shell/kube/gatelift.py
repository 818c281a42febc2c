"""The lift itself: one JSON patch per pod that removes the extender's scheduling gate.

The patch tests that the entry it removes is the extender's gate (``extender.core.gates.GATE``) and removes
that entry only: another controller's gates stay, and a pod whose gates changed since the watch showed
it is refused (422) rather than touched. The extender's service account may ``patch`` pods for this;
the chart's ValidatingAdmissionPolicy (``templates/gate-policy.yaml``) lets that account's pod updates
remove this gate and change nothing else. Which pods to lift, and when, is ``extender.state.gatelift``'s
business; the writes are counted under ``hugepage_extender_api_writes_total{kind="gate"}``.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from extender.core.gates import GATE, GatedPod
from extender.shell.kube.client import release
from extender.shell.metrics import Metrics

log = logging.getLogger("extender.shell.kube.gatelift")


class GateWriter:
    """Sends lifts off the event loop, a few at once (each one API write)."""

    def __init__(self, api: client.ApiClient, metrics: Metrics, *, timeout_seconds: float = 5.0) -> None:
        self._core = client.CoreV1Api(api)
        self._metrics = metrics
        self._timeout = timeout_seconds
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gates")

    def lift(self, pod: GatedPod) -> None:
        asyncio.get_running_loop().run_in_executor(self._pool, self._patch, pod)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _patch(self, pod: GatedPod) -> None:
        path = f"/spec/schedulingGates/{pod.gate_index}"
        body = [{"op": "test", "path": f"{path}/name", "value": GATE}, {"op": "remove", "path": path}]
        try:
            response = self._core.patch_namespaced_pod(
                pod.name,
                pod.namespace,
                cast(Any, body),
                _content_type="application/json-patch+json",
                _request_timeout=self._timeout,
                _preload_content=False,
            )
        except (ApiException, OSError, TransportError) as error:  # urllib3's errors are not OSErrors
            self._metrics.child(self._metrics.api_writes, "gate", "failed").inc()
            why = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)[:200]
            log.warning("could not lift the scheduling gate of pod %s/%s: %s", pod.namespace, pod.name, why)
            return
        release(response)
        self._metrics.child(self._metrics.api_writes, "gate", "written").inc()
