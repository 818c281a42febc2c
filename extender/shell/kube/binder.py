"""The bind verb: the extender creates the Binding itself.

Trade-offs (see docs/install.md): only one extender may bind, and the chart
binds through its enforce entry, which is not ignorable: a bind error fails the
pod's binding and the scheduler retries the pod (``schedule_one.go``,
``extendersBinding``; decision 0005). The API call carries its own timeout,
shorter than the scheduler's ``httpTimeout``, because aiohttp does not cancel a
handler when the client leaves: a late bind could succeed after the scheduler
already gave up.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import msgspec
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from extender.core.binding import BindError, BindingArgs
from extender.core.objects import Pod
from extender.core.quantity import quote
from extender.shell.kube.client import release

log = logging.getLogger("extender.shell.kube.binder")


class ApiBinder:
    def __init__(self, api: client.ApiClient, *, timeout_seconds: float = 1.5, workers: int = 8) -> None:
        self._core = client.CoreV1Api(api)
        self._timeout = timeout_seconds
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind")

    async def bind(self, args: BindingArgs) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._bind, args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _bind(self, args: BindingArgs) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            # The pod's UID is the precondition: a pod deleted and recreated under
            # the same name is not bound by a stale decision.
            "metadata": {"name": args.pod_name, "namespace": args.pod_namespace, "uid": args.pod_uid or None},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
        }
        try:
            response = self._core.create_namespaced_pod_binding(
                args.pod_name,
                args.pod_namespace,
                cast(Any, body),
                _request_timeout=self._timeout,
                _preload_content=False,
            )
        except ApiException as error:
            if error.status == 409 and self._bound_to(args) == args.node:
                return  # a repeated bind for the same pod and node is not an error
            message = f"binding {_pod(args)}: {error.status} {quote(_message(error), 300)}"
            raise BindError(message, known=error.status < 500) from None
        except (OSError, TransportError) as error:  # urllib3's timeouts and connection errors are not OSErrors
            # The request may have reached the API server before the connection broke: unknown.
            raise BindError(f"binding {_pod(args)}: {quote(str(error), 300)}", known=False) from None
        release(response)

    def _bound_to(self, args: BindingArgs) -> str | None:
        try:
            response: Any = self._core.read_namespaced_pod(
                args.pod_name, args.pod_namespace, _request_timeout=self._timeout, _preload_content=False
            )
        except (ApiException, OSError, TransportError):
            return None
        pod = msgspec.json.decode(response.data, type=Pod)
        if args.pod_uid and pod.metadata.uid != args.pod_uid:
            return None
        return pod.spec.node_name


def _pod(args: BindingArgs) -> str:
    """The pod as the request named it, quoted: it reaches log lines and the scheduler."""
    return f"{quote(args.pod_namespace)}/{quote(args.pod_name)}"


def _message(error: ApiException) -> str:
    try:
        return str(msgspec.json.decode(error.body or b"{}").get("message", error.reason))
    except (msgspec.DecodeError, AttributeError):
        return str(error.reason)
