"""An API client from a kubeconfig file or from the pod's in-cluster service account."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config


def api_client(kubeconfig: Path | None, *, in_cluster: bool) -> client.ApiClient:
    if in_cluster:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.ApiClient(configuration)
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig) if kubeconfig else None
    )
    return api


def release(response: Any) -> None:
    """Read an answer left undecoded (``_preload_content=False``) to its end and give its connection back
    to the pool. An answer never read keeps its connection out of the pool, and the next write opens
    another: a TCP and TLS handshake for every bind, lift and nudge (half the gate writer's time, by
    py-spy, in the backlog benchmark)."""
    response.drain_conn()  # a connection that breaks here is closed, not pooled (urllib3 keeps quiet)
    response.release_conn()
