"""The API calls made on the request path fail cleanly when the API server cannot be reached.

urllib3's connection errors and timeouts (``MaxRetryError``, ``ReadTimeoutError``, ...) are not
``OSError``s: a bind must still end in a ``BindError`` (a clean answer to the scheduler, the
placement in flight released) and an event post in a logged warning, never an exception.
"""

import asyncio
import socket

import pytest
from kubernetes import client

from extender.core.binding import BindError, BindingArgs
from extender.core.objects import ObjectMeta, Pod
from extender.shell.kube.binder import ApiBinder
from extender.shell.kube.events import PodEvents
from extender.shell.metrics import Metrics


def _unreachable_api() -> client.ApiClient:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.retries = 0
    return client.ApiClient(configuration)


def test_a_bind_the_api_server_never_gets_is_a_bind_error() -> None:
    binder = ApiBinder(_unreachable_api(), timeout_seconds=1.0)
    try:
        with pytest.raises(BindError, match="binding 'ns'/'p':"):
            asyncio.run(binder.bind(BindingArgs("p", "ns", "uid-1", "node-a")))
    finally:
        binder.close()


def test_an_event_the_api_server_never_gets_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    events = PodEvents(_unreachable_api(), metrics, instance="test")
    pod = Pod(metadata=ObjectMeta(name="p", namespace="ns", uid="uid-1"))
    try:
        body = events._event(pod, "NoHugepageCapacity", "message")
        events._post(pod, "NoHugepageCapacity", body)  # what no_fit runs in its thread pool
    finally:
        events.close()
    assert "could not post NoHugepageCapacity event on pod ns/p" in caplog.text
    assert metrics.events.labels("NoHugepageCapacity")._value.get() == 0
