"""An API client from a kubeconfig file or from the pod's in-cluster service account."""

from __future__ import annotations

from pathlib import Path

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
