"""The control plane itself: etcd, kube-apiserver, schedulers and extenders on 127.0.0.1."""

from __future__ import annotations

import contextlib
import copy
import shutil
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e.controlplane.binaries import find_binaries
from e2e.controlplane.certificates import (
    Certificates,
    generate_certificates,
    issue_client_certificate,
    write_kubeconfig,
)
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.objects import (
    create_namespace,
    create_node,
    create_pod,
    pod_assignments,
    pod_events,
    wait_for_pod_bound,
    wait_for_pods_bound,
)
from e2e.controlplane.probes import LOOPBACK, free_port, http_get, wait_for_ready
from e2e.controlplane.processes import ManagedProcess, Service
from e2e.controlplane.scheduler import Scheduler

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass
class _Layout:
    root: Path
    logs: Path = field(init=False)
    pki: Path = field(init=False)
    etcd_data: Path = field(init=False)
    configs: Path = field(init=False)

    def __post_init__(self) -> None:
        self.logs = self.root / "logs"
        self.pki = self.root / "pki"
        self.etcd_data = self.root / "etcd-data"
        self.configs = self.root / "configs"
        for d in (self.logs, self.pki, self.configs):
            d.mkdir(parents=True, exist_ok=True)


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, an admin kubeconfig, and kube-schedulers on demand.

    ``workdir`` (created if missing, kept afterwards) holds certificates,
    etcd's data, configs and logs; without it a temp dir is made and removed by
    ``stop()`` unless ``keep_workdir``. ``apiserver_args`` / ``etcd_args`` are
    appended to the defaults: a repeated scalar flag overrides (the last one wins),
    but a repeated list flag such as ``--disable-admission-plugins`` ADDS to the
    default's list (pflag string slices append after the first occurrence).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        bin_dir: Path | None = None,
        apiserver_args: Sequence[str] = (),
        etcd_args: Sequence[str] = (),
        apiserver_verbosity: int = 1,
        scheduler_verbosity: int = 2,
        startup_timeout: float = 120.0,
        keep_workdir: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="hugepage-e2e-")) if workdir is None else workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._layout = _Layout(self.workdir)
        self._bin_dir = bin_dir
        self.apiserver_extra_args = list(apiserver_args)
        self.etcd_extra_args = list(etcd_args)
        self.apiserver_verbosity = apiserver_verbosity
        self.scheduler_verbosity = scheduler_verbosity
        self.startup_timeout = startup_timeout
        self.keep_workdir = keep_workdir
        self.die_with_parent = die_with_parent
        self.timings: dict[str, float] = {}
        self.processes: dict[str, ManagedProcess] = {}
        self.schedulers: dict[str, Scheduler] = {}
        self.services: dict[str, Service] = {}
        self._certs: Certificates | None = None
        self._etcd_port = 0
        self._etcd_peer_port = 0
        self._apiserver_port = 0
        self._api_client: client.ApiClient | None = None
        self._clients: list[client.ApiClient] = []
        self._started = False
        self._stopped = False

    # -- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Certificates, etcd, kube-apiserver (ready), admin kubeconfig. Stops everything on failure."""
        if self._started:
            return self
        self._started = True
        begin = time.monotonic()
        try:
            self._bin_dir = self._bin_dir or find_binaries()
            t0 = time.monotonic()
            self._certs = generate_certificates(self._layout.pki)
            self.timings["certificates"] = time.monotonic() - t0
            self._start_etcd()
            self._apiserver_port = free_port()
            certs = self._certs
            write_kubeconfig(self.kubeconfig, self.apiserver_url, certs.ca_cert, (certs.admin_cert, certs.admin_key))
            self.start_apiserver()
        except BaseException:
            self.stop()
            raise
        self.timings["control_plane"] = time.monotonic() - begin
        return self

    def stop(self) -> None:
        """Kill every process this control plane started (group-wide), close clients. Idempotent."""
        for api in self._clients:
            with contextlib.suppress(Exception):
                api.close()  # type: ignore[no-untyped-call]
        self._clients.clear()
        self._api_client = None
        # Dependents first: services and schedulers, then the apiserver, then etcd.
        last = {"kube-apiserver": 1, "etcd": 2}
        for process in sorted(self.processes.values(), key=lambda p: last.get(p.name, 0)):
            process.stop()
        if self._own_workdir and not self.keep_workdir and not self._stopped:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._stopped = True

    # -- facts

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            raise ControlPlaneError("not started")
        return self._bin_dir

    @property
    def certificates(self) -> Certificates:
        if self._certs is None:
            raise ControlPlaneError("not started")
        return self._certs

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self._etcd_port}"

    @property
    def apiserver_port(self) -> int:
        return self._apiserver_port

    @property
    def apiserver_url(self) -> str:
        return f"https://{LOOPBACK}:{self._apiserver_port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin (system:masters) kubeconfig, with file paths for CA, cert and key."""
        return self.workdir / "admin.kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self._layout.logs

    @property
    def ports(self) -> dict[str, int]:
        """Every port this control plane listens on, by component."""
        found = {"etcd": self._etcd_port, "etcd-peer": self._etcd_peer_port, "kube-apiserver": self._apiserver_port}
        found.update({name: s.port for name, s in self.schedulers.items()})
        found.update({name: s.port for name, s in self.services.items()})
        return {k: v for k, v in found.items() if v}

    def pids(self) -> dict[str, int]:
        """Pids of the processes running now, by name."""
        return {name: p.pid for name, p in self.processes.items() if p.running and p.pid is not None}

    # -- etcd

    def _start_etcd(self) -> None:
        self._etcd_port = free_port()
        while (peer_port := free_port()) == self._etcd_port:
            pass
        self._etcd_peer_port = peer_port
        peer = f"http://{LOOPBACK}:{self._etcd_peer_port}"
        argv = [
            str(self.bin_dir / "etcd"),
            "--name=e2e",
            f"--data-dir={self._layout.etcd_data}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
            *self.etcd_extra_args,
        ]
        process = self._process("etcd", argv)
        t0 = time.monotonic()
        process.start()

        def healthy() -> bool:
            answer = http_get(self._etcd_port, "/health")
            return answer is not None and answer[0] == 200 and b'"true"' in answer[1]

        wait_for_ready("etcd /health", healthy, timeout=self.startup_timeout, process=process)
        self.timings["etcd"] = time.monotonic() - t0

    # -- kube-apiserver

    def _apiserver_argv(self) -> list[str]:
        certs = self.certificates
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self._apiserver_port}",
            f"--cert-dir={self._layout.pki / 'apiserver-cert-dir'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--requestheader-client-ca-file={certs.front_proxy_ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={certs.service_account_key}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
            # With the default (0s) a SIGTERMed apiserver stops listening, then hangs until killed while
            # clients (kube-scheduler's informers) hold watches open; 2s lets it close them and exit in ~1s.
            "--shutdown-watch-termination-grace-period=2s",
            "--allow-privileged=true",
            "--profiling=false",
            f"--v={self.apiserver_verbosity}",
            *self.apiserver_extra_args,
        ]

    def apiserver_ready(self) -> bool:
        answer = http_get(self._apiserver_port, "/readyz", context=self.admin_ssl_context())
        return answer is not None and answer[0] == 200

    def start_apiserver(self) -> float:
        """Start kube-apiserver (same port and etcd as before) and wait for /readyz."""
        process = self.processes.get("kube-apiserver") or self._process("kube-apiserver", self._apiserver_argv())
        key = "kube-apiserver" if process.starts == 0 else "kube-apiserver:restart"
        t0 = time.monotonic()
        process.start()
        wait_for_ready("kube-apiserver /readyz", self.apiserver_ready, timeout=self.startup_timeout, process=process)
        elapsed = time.monotonic() - t0
        self.timings[key] = elapsed
        return elapsed

    def stop_apiserver(self, timeout: float = 15.0, *, graceful: bool = True) -> None:
        """SIGTERM kube-apiserver (SIGKILL after ``timeout``), or SIGKILL at once when not ``graceful``."""
        if process := self.processes.get("kube-apiserver"):
            process.stop(timeout if graceful else 0.0)

    def restart_apiserver(self, *, downtime: float = 0.0, graceful: bool = True) -> float:
        """Stop kube-apiserver, stay down ``downtime`` s, start it on the same port and etcd (data kept);
        the seconds from start until /readyz."""
        self.stop_apiserver(graceful=graceful)
        if downtime > 0:
            time.sleep(downtime)
        return self.start_apiserver()

    # -- kube-scheduler

    def scheduler_config(self, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``config`` completed: apiVersion/kind, clientConnection.kubeconfig (admin), leaderElect false."""
        document: dict[str, Any] = copy.deepcopy(dict(config or {}))
        document.setdefault("apiVersion", "kubescheduler.config.k8s.io/v1")
        document.setdefault("kind", "KubeSchedulerConfiguration")
        connection = document.setdefault("clientConnection", {})
        connection.setdefault("kubeconfig", str(self.kubeconfig))
        document.setdefault("leaderElection", {})["leaderElect"] = False
        return document

    def start_scheduler(
        self,
        config: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        extra_args: Sequence[str] = (),
        wait: bool = True,
        timeout: float = 60.0,
    ) -> Scheduler:
        """Start a kube-scheduler running ``config`` (a KubeSchedulerConfiguration as a dict; None: defaults).

        The scheduler listens on a free port of 127.0.0.1; /healthz needs no
        credentials, /metrics takes the admin cert (``Scheduler.metrics()``).
        """
        if name is None:
            name = (
                "kube-scheduler"
                if "kube-scheduler" not in self.schedulers
                else f"kube-scheduler-{len(self.schedulers) + 1}"
            )
        if name in self.schedulers and self.schedulers[name].running:
            raise ControlPlaneError(f"a scheduler named {name} is already running")
        document = self.scheduler_config(config)
        config_path = self._layout.configs / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        port = free_port()
        argv = [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={config_path}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            # Delegated authn/authz against the test apiserver: /metrics works with the admin cert;
            # /healthz, /readyz and /livez stay open (--authorization-always-allow-paths default).
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--v={self.scheduler_verbosity}",
            *extra_args,
        ]
        scheduler = Scheduler(self, name, document, self._process(name, argv), port)
        self.schedulers[name] = scheduler
        scheduler.start(wait=wait, timeout=timeout)
        return scheduler

    # -- other processes

    def start_process(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        ready: Callable[[], bool] | None = None,
        timeout: float = 30.0,
    ) -> ManagedProcess:
        """Any process whose log joins ``log_tails()`` and which ``stop()`` kills."""
        process = self._process(name, argv, env=env)
        process.start()
        if ready is not None:
            wait_for_ready(f"{name} to be ready", ready, timeout=timeout, process=process)
        return process

    def start_extender(
        self,
        args: Sequence[str] = (),
        *,
        name: str = "hugepage-extender",
        port: int | None = None,
        executable: Sequence[str] | None = None,
        ready_path: str = "/healthz",
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> Service:
        """``hugepage-extender serve --host 127.0.0.1 --port <free> *args``, waited for on ``ready_path``.

        ``executable`` defaults to the ``hugepage-extender`` script beside
        this interpreter (else ``python -m extender``).
        """
        port = port or free_port()
        if executable is None:
            script = Path(sys.executable).parent / "hugepage-extender"
            executable = [str(script)] if script.exists() else [sys.executable, "-m", "extender"]
        argv = [*executable, "serve", "--host", LOOPBACK, "--port", str(port), *args]

        def ready() -> bool:
            answer = http_get(port, ready_path)
            return answer is not None and answer[0] == 200

        process = self.start_process(name, argv, env=env, ready=ready, timeout=timeout)
        service = Service(name, port, process)
        self.services[name] = service
        return service

    def _process(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> ManagedProcess:
        existing = self.processes.get(name)
        if existing is not None and existing.running:
            raise ControlPlaneError(f"a process named {name} is already running")
        process = ManagedProcess(
            name,
            argv,
            self._layout.logs / f"{name}.log",
            env=env,
            cwd=self.workdir,
            die_with_parent=self.die_with_parent,
        )
        self.processes[name] = process
        return process

    # -- diagnostics

    def log_tails(self, lines: int = 40) -> str:
        """The last ``lines`` lines of every component's log, for a failing test's report."""
        return "\n".join(p.log_tail(lines) for p in self.processes.values())

    # -- clients

    def admin_ssl_context(self) -> ssl.SSLContext:
        certs = self.certificates
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        context.load_cert_chain(certs.admin_cert, certs.admin_key)
        return context

    def new_api_client(self, cert: Path | None = None, key: Path | None = None) -> client.ApiClient:
        """A kubernetes ApiClient as the admin (or as the owner of ``cert``); closed by ``stop()``."""
        certs = self.certificates
        configuration = client.Configuration(
            host=self.apiserver_url,
            ssl_ca_cert=str(certs.ca_cert),
            cert_file=str(cert or certs.admin_cert),
            key_file=str(key or certs.admin_key),
            no_proxy="127.0.0.1,localhost",
        )
        api = client.ApiClient(configuration)
        self._clients.append(api)
        return api

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client = self.new_api_client()
        return self._api_client

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def kubeconfig_for(self, user: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig authenticating as ``user`` in ``groups`` (for RBAC checks)."""
        cert, key = issue_client_certificate(self.certificates, user, groups)
        path = self.workdir / f"{cert.stem}.kubeconfig"
        return write_kubeconfig(path, self.apiserver_url, self.certificates.ca_cert, (cert, key), user=user)

    def version(self) -> str:
        """kube-apiserver's gitVersion, e.g. v1.37.2."""
        return str(client.VersionApi(self.api_client).get_code().git_version)

    # -- object helpers bound to the admin client

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> client.V1Namespace:
        return create_namespace(self.core, name, labels)

    def create_node(self, name: str, **kwargs: Any) -> client.V1Node:
        return create_node(self.core, name, **kwargs)

    def create_pod(self, namespace: str, name: str, **kwargs: Any) -> client.V1Pod:
        return create_pod(self.core, namespace, name, **kwargs)

    def wait_for_pod_bound(self, namespace: str, name: str, timeout: float = 120.0) -> str:
        return wait_for_pod_bound(self.core, namespace, name, timeout=timeout)

    def wait_for_pods_bound(self, namespace: str, names: Iterable[str], timeout: float = 180.0) -> dict[str, str]:
        return wait_for_pods_bound(self.core, namespace, names, timeout=timeout)

    def pod_assignments(self, namespace: str | None, label_selector: str | None = None) -> dict[str, str | None]:
        return pod_assignments(self.core, namespace, label_selector=label_selector)

    def pod_events(self, namespace: str, name: str) -> list[str]:
        return pod_events(self.core, namespace, name)
