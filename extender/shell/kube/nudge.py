"""The nudge itself: one merge patch of an annotation on the extender's own pod.

kube-scheduler requeues a pod an extender turned away on any cluster event, an update
of an assigned pod among them (``framework/runtime/framework.go`` registers the
pseudo-plugin "Extender" for every resource with ActionType All; an annotation change
of an assigned pod is an ``AssignedPod/Update`` event, ``framework/events.go``
``PodSchedulingPropertiesChange``). Its own pod is the one object the extender may
write for this: its Role allows ``patch`` of pods in its namespace (RBAC cannot name a
pod whose name is generated) and a ValidatingAdmissionPolicy narrows that to the pod
named in its service-account token and to this one annotation
(``templates/nudge-policy.yaml``). When to nudge is ``extender.core.nudge``'s business.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from extender.shell.kube.client import release

log = logging.getLogger("extender.shell.kube.nudge")

NUDGE_ANNOTATION = "hugepage-extender.io/room-freed-at"


class PodNudger:
    """Writes ``NUDGE_ANNOTATION`` (the time, to the millisecond) on one pod; logs a failure once per run of them."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, *, timeout_seconds: float = 2.0) -> None:
        self._core = client.CoreV1Api(api)
        self.namespace = namespace
        self.name = name
        self._timeout = timeout_seconds
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nudge")
        self._failing = False

    async def nudge(self) -> bool:
        """True when the pod was annotated."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._patch)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _patch(self) -> bool:
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        body = {"metadata": {"annotations": {NUDGE_ANNOTATION: stamp}}}
        try:
            response = self._core.patch_namespaced_pod(
                self.name, self.namespace, cast(Any, body), _request_timeout=self._timeout, _preload_content=False
            )
        except ApiException as error:
            return self._failed(f"{error.status} {error.reason}")
        except (OSError, TransportError) as error:  # urllib3's timeouts and connection errors are not OSErrors
            return self._failed(" ".join(str(error).split())[:200])
        release(response)
        if self._failing:
            log.info("nudging pod %s/%s works again", self.namespace, self.name)
            self._failing = False
        return True

    def _failed(self, why: str) -> bool:
        if not self._failing:
            log.warning(
                "cannot annotate pod %s/%s to make the scheduler look again at the pods it turned away (%s); "
                "they wait for the next cluster event; retrying every second while room freed and pods wait",
                self.namespace,
                self.name,
                why,
            )
            self._failing = True
        return False
