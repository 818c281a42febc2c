"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-scheduler.

No Docker, no kubelet, no controller-manager. The binaries come from
``e2e/tools/build`` (or ``$E2E_TOOLS_BIN``); certificates are made with the
``openssl`` command. Nodes are plain API objects whose status the tests write
themselves, so the real kube-scheduler binds pods to them and the pods stay
Pending with ``spec.nodeName`` set.

Typical use::

    with ControlPlane() as cp:                      # etcd + kube-apiserver, admin kubeconfig
        cp.create_node("node-a", hugepages_2mi="1Gi")
        cp.start_scheduler()                        # default profile, no extender
        cp.create_pod("default", "p", hugepages_2mi="128Mi")
        assert cp.wait_for_pod_bound("default", "p") == "node-a"

Every process runs in its own process group with its output in
``<workdir>/logs/<name>.log``; ``stop()`` (and interpreter exit, and on Linux
the death of the thread that started them) kills them all.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import ctypes
import http.client
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

__all__ = [
    "DEFAULT_SCHEDULER",
    "FAKE_NODE_LABEL",
    "PAUSE_IMAGE",
    "REPO_ROOT",
    "BinariesUnavailable",
    "Certificates",
    "ControlPlane",
    "ControlPlaneError",
    "ManagedProcess",
    "Scheduler",
    "Service",
    "create_namespace",
    "create_node",
    "create_pod",
    "delete_pods",
    "extender_scheduler_config",
    "find_binaries",
    "free_port",
    "generate_certificates",
    "http_get",
    "issue_client_certificate",
    "node_manifest",
    "pod_assignments",
    "pod_events",
    "pod_manifest",
    "port_is_open",
    "wait_for_pod_bound",
    "wait_for_pods_bound",
    "write_kubeconfig",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "e2e" / "tools" / "build"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
DEFAULT_SCHEDULER = "default-scheduler"
FAKE_NODE_LABEL = "e2e.hugepage-extender.io/fake-node"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LOOPBACK = "127.0.0.1"


class ControlPlaneError(RuntimeError):
    """A component failed to start, died, or did not become ready (the message carries its log tail)."""


class BinariesUnavailable(ControlPlaneError):
    """etcd / kube-apiserver / kube-scheduler are not built and could not be built."""


# --------------------------------------------------------------------------- binaries


def _missing(bin_dir: Path, names: Iterable[str]) -> list[str]:
    return [n for n in names if not os.access(bin_dir / n, os.X_OK)]


def find_binaries(*, build: bool | None = None, names: Sequence[str] = CONTROL_PLANE_BINARIES) -> Path:
    """The directory holding the pinned binaries.

    ``$E2E_TOOLS_BIN`` wins when set (and must hold them). Otherwise the cache
    dir of ``e2e/tools/build --print-dir``; when that is incomplete and
    ``build`` is true (default: unless ``$E2E_TOOLS_BUILD=0``), runs
    ``e2e/tools/build``, which builds on a cache miss (many minutes on a cold
    Go cache) and waits on a concurrent build through its lock.
    """
    if env_dir := os.environ.get("E2E_TOOLS_BIN"):
        bin_dir = Path(env_dir)
        if missing := _missing(bin_dir, names):
            raise BinariesUnavailable(f"E2E_TOOLS_BIN={env_dir} lacks {', '.join(missing)}")
        return bin_dir
    if build is None:
        build = os.environ.get("E2E_TOOLS_BUILD", "1") not in ("0", "false", "no")
    try:
        printed = subprocess.run(
            [str(BUILD_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise BinariesUnavailable(f"{BUILD_SCRIPT} --print-dir failed: {error}") from None
    bin_dir = Path(printed.stdout.strip().splitlines()[-1])
    missing = _missing(bin_dir, names)
    if not missing:
        return bin_dir
    if not build:
        raise BinariesUnavailable(
            f"{bin_dir} lacks {', '.join(missing)}; run `make tools` (e2e/tools/build) or set E2E_TOOLS_BIN"
        )
    try:
        built = subprocess.run([str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True)
    except (OSError, subprocess.CalledProcessError) as error:
        raise BinariesUnavailable(f"{BUILD_SCRIPT} failed: {error}") from None
    bin_dir = Path(built.stdout.strip().splitlines()[-1])
    if missing := _missing(bin_dir, names):
        raise BinariesUnavailable(f"{BUILD_SCRIPT} ran but {bin_dir} lacks {', '.join(missing)}")
    return bin_dir


# --------------------------------------------------------------------------- ports and probes


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the usual bind-to-0 race applies)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_is_open(port: int, host: str = LOOPBACK) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_get(
    port: int, path: str, *, context: ssl.SSLContext | None = None, timeout: float = 2.0
) -> tuple[int, bytes] | None:
    """GET ``path`` on 127.0.0.1 (HTTPS when ``context`` is given); None when nothing answers."""
    conn: http.client.HTTPConnection
    if context is None:
        conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection(LOOPBACK, port, context=context, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _insecure_context(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    # kube-scheduler serves a self-signed certificate made in memory at start.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(cert, key)
    return context


T = TypeVar("T")


def wait_until(what: str, check: Callable[[], T | None], *, timeout: float, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; that value. AssertionError on timeout.

    For tests waiting on the cluster; the control plane's own start-up waits with ``_wait_for``.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def _wait_for(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    process: ManagedProcess | None = None,
    interval: float = 0.05,
) -> float:
    """Poll ``check`` until true; the seconds it took. Fails early when ``process`` exits."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if check():
            return time.monotonic() - started
        if process is not None and not process.running:
            raise ControlPlaneError(
                f"{process.name} exited with status {process.returncode} while waiting for {what}\n"
                + process.log_tail()
            )
        if time.monotonic() > deadline:
            tail = process.log_tail() if process is not None else ""
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(interval)


# --------------------------------------------------------------------------- processes

_PR_SET_PDEATHSIG = 1
_LIBC: ctypes.CDLL | None = None
if sys.platform == "linux":
    with contextlib.suppress(OSError):
        _LIBC = ctypes.CDLL(None, use_errno=True)

_LIVE: set[ManagedProcess] = set()


def _kill_leftovers() -> None:
    for process in list(_LIVE):
        process.stop(timeout=2.0)


atexit.register(_kill_leftovers)


class ManagedProcess:
    """One child process in its own process group, output appended to ``log_path``.

    With ``die_with_parent`` (Linux) the child gets SIGKILL when the *thread*
    that started it exits, so a killed test runner leaves nothing behind. Start
    long-lived processes from the main thread (or pass False).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.die_with_parent = die_with_parent
        self.starts = 0
        self._popen: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"ManagedProcess({self.name!r}, pid={self.pid}, running={self.running})"

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def start(self) -> None:
        if self.running:
            raise ControlPlaneError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        death_signal = self.die_with_parent and _LIBC is not None

        def _prepare_child() -> None:
            # Runs in the child between fork and exec: async-signal-safe calls only.
            if _LIBC is not None:
                _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent:  # the parent died before prctl
                    os._exit(1)

        log: IO[bytes]
        with self.log_path.open("ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log.write(f"=== {stamp} start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                preexec_fn=_prepare_child if death_signal else None,  # noqa: PLW1509
            )
        self.starts += 1
        _LIVE.add(self)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` s (at once if <= 0); the exit status."""
        popen = self._popen
        if popen is None:
            return None
        pgid = popen.pid  # start_new_session: the leader's pid is the group id
        if popen.poll() is None:
            try:
                if timeout <= 0:
                    raise subprocess.TimeoutExpired(self.argv, 0)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGTERM)
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                popen.wait()
        # Whatever the leader left in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        _LIVE.discard(self)
        return popen.returncode

    def kill(self) -> int | None:
        """SIGKILL at once (a crash, as far as the others can tell)."""
        return self.stop(timeout=0.0)

    def log_tail(self, lines: int = 40) -> str:
        return f"----- {self.name} ({self.log_path}), last {lines} lines -----\n{_tail(self.log_path, lines)}"


def _tail(path: Path, lines: int, max_bytes: int = 256 * 1024) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as error:
        return f"(cannot read {path}: {error.strerror})"
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


@dataclass
class Service:
    """A helper process that serves plain HTTP on 127.0.0.1 (e.g. the extender)."""

    name: str
    port: int
    process: ManagedProcess

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def get(self, path: str) -> tuple[int, bytes] | None:
        return http_get(self.port, path)

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.process.stop(timeout)


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Certificates:
    """PEM files: one CA signs the apiserver's serving cert and every client cert.

    ``front_proxy_ca_cert`` (--requestheader-client-ca-file) signs nothing: it is there
    so kube-scheduler's delegated authentication finds a request-header CA in
    kube-system/extension-apiserver-authentication instead of logging an error every
    second, without letting any client cert assert identities through headers.
    """

    directory: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    front_proxy_ca_cert: Path


_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign, digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost, IP:10.0.0.1, DNS:kubernetes, DNS:kubernetes.default, \
DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str | Path) -> None:
    command = ["openssl", *(str(a) for a in args)]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    except FileNotFoundError:
        raise ControlPlaneError("the openssl command is needed to make the control plane's certificates") from None
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace")
        raise ControlPlaneError(f"{' '.join(command)} failed: {stderr}") from None


def _ec_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", path)
    path.chmod(0o600)


def _subject(common_name: str, organizations: Sequence[str] = ()) -> str:
    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace("/", "\\/").replace("=", "\\=")

    return "".join(f"/O={esc(o)}" for o in organizations) + f"/CN={esc(common_name)}"


def _sign(certs_dir: Path, stem: str, subject: str, extensions: str, ca: tuple[Path, Path]) -> tuple[Path, Path]:
    ca_cert, ca_key = ca
    key, csr, cert = certs_dir / f"{stem}.key", certs_dir / f"{stem}.csr", certs_dir / f"{stem}.crt"
    config = certs_dir / "openssl.cnf"
    _ec_key(key)
    _openssl("req", "-new", "-key", key, "-subj", subject, "-config", config, "-out", csr)
    _openssl(
        "x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key,
        "-set_serial", str(secrets.randbits(62)), "-days", "3650", "-sha256",
        "-extfile", config, "-extensions", extensions, "-out", cert,
    )  # fmt: skip
    csr.unlink()
    return cert, key


def _self_signed_ca(directory: Path, stem: str, common_name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    _ec_key(key)
    _openssl(
        "req", "-x509", "-new", "-key", key, "-subj", f"/CN={common_name}",
        "-days", "3650", "-sha256", "-config", directory / "openssl.cnf", "-extensions", "ca", "-out", cert,
    )  # fmt: skip
    return cert, key


def generate_certificates(directory: Path) -> Certificates:
    """A CA, the apiserver serving cert (127.0.0.1, localhost), an admin client cert
    (O=system:masters) and an RSA service-account key, all under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openssl.cnf").write_text(_OPENSSL_CONFIG)
    ca_cert, ca_key = _self_signed_ca(directory, "ca", "hugepage-extender-e2e-ca")
    front_proxy_ca, _ = _self_signed_ca(directory, "front-proxy-ca", "hugepage-extender-e2e-front-proxy-ca")
    serving_cert, serving_key = _sign(directory, "apiserver", "/CN=kube-apiserver", "server", (ca_cert, ca_key))
    admin_cert, admin_key = _sign(
        directory, "admin", _subject("kubernetes-admin", ["system:masters"]), "client", (ca_cert, ca_key)
    )
    sa_key = directory / "service-account.key"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", sa_key)
    sa_key.chmod(0o600)
    return Certificates(
        directory, ca_cert, ca_key, serving_cert, serving_key, admin_cert, admin_key, sa_key, front_proxy_ca
    )


def issue_client_certificate(certs: Certificates, user: str, groups: Sequence[str] = ()) -> tuple[Path, Path]:
    """A client cert and key for ``user`` in ``groups`` (the apiserver trusts the CA)."""
    stem = "user-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in user)
    return _sign(certs.directory, stem, _subject(user, groups), "client", (certs.ca_cert, certs.ca_key))


def write_kubeconfig(
    path: Path, server: str, ca_cert: Path, client_cert: tuple[Path, Path], user: str = "admin"
) -> Path:
    """A kubeconfig for ``server`` authenticating with the (cert, key) pair ``client_cert``."""
    cert, key = client_cert
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- kube-scheduler


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
        answer = http_get(self.port, "/healthz", context=_insecure_context())
        return answer is not None and answer[0] == 200

    def ready(self) -> bool:
        """/readyz: serving, and its informers' event handlers have synced (``sched-handler-sync``)."""
        answer = http_get(self.port, "/readyz", context=_insecure_context())
        return answer is not None and answer[0] == 200

    def wait_healthy(self, timeout: float = 60.0) -> float:
        """Wait for /healthz, then /readyz; the seconds it took."""
        started = time.monotonic()
        _wait_for(f"{self.name} /healthz", self.healthy, timeout=timeout, process=self.process)
        remaining = max(1.0, timeout - (time.monotonic() - started))
        _wait_for(f"{self.name} /readyz", self.ready, timeout=remaining, process=self.process)
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
        context = _insecure_context(certs.admin_cert, certs.admin_key)
        answer: tuple[int, bytes] | None = None

        def fetch() -> bool:
            # Until the scheduler has read the client CA from the apiserver, callers are anonymous (403).
            nonlocal answer
            answer = http_get(self.port, "/metrics", context=context)
            return answer is not None and answer[0] not in (401, 403)

        with contextlib.suppress(ControlPlaneError):
            _wait_for(f"{self.name} /metrics", fetch, timeout=timeout, process=self.process, interval=0.2)
        if answer is None or answer[0] != 200:
            raise ControlPlaneError(f"{self.name} /metrics answered {answer[0] if answer else 'nothing'}")
        return answer[1].decode()

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)


# --------------------------------------------------------------------------- the control plane


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

        _wait_for("etcd /health", healthy, timeout=self.startup_timeout, process=process)
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
        _wait_for("kube-apiserver /readyz", self.apiserver_ready, timeout=self.startup_timeout, process=process)
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
            _wait_for(f"{name} to be ready", ready, timeout=timeout, process=process)
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

    def wait_for_pod_bound(self, namespace: str, name: str, timeout: float = 30.0) -> str:
        return wait_for_pod_bound(self.core, namespace, name, timeout=timeout)

    def wait_for_pods_bound(self, namespace: str, names: Iterable[str], timeout: float = 60.0) -> dict[str, str]:
        return wait_for_pods_bound(self.core, namespace, names, timeout=timeout)

    def pod_assignments(self, namespace: str | None, label_selector: str | None = None) -> dict[str, str | None]:
        return pod_assignments(self.core, namespace, label_selector=label_selector)

    def pod_events(self, namespace: str, name: str) -> list[str]:
        return pod_events(self.core, namespace, name)


# --------------------------------------------------------------------------- scheduler configs


def extender_scheduler_config(
    url_prefix: str,
    *,
    scheduler_name: str = "hugepage-scheduler",
    filter_verb: str | None = "filter",
    prioritize_verb: str | None = "prioritize",
    weight: int = 1,
    node_cache_capable: bool = True,
    ignorable: bool = False,
    http_timeout: str = "5s",
    percentage_of_nodes_to_score: int | None = 100,
    extender: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A KubeSchedulerConfiguration with one profile and one HTTP extender at ``url_prefix``.

    ``extender`` adds or overrides keys of the extender entry (e.g. ``bindVerb``,
    ``managedResources``, ``tlsConfig``). Pass the result to ``ControlPlane.start_scheduler``.
    """
    entry: dict[str, Any] = {
        "urlPrefix": url_prefix,
        "httpTimeout": http_timeout,
        "nodeCacheCapable": node_cache_capable,
        "ignorable": ignorable,
        "enableHTTPS": url_prefix.startswith("https:"),
    }
    if filter_verb:
        entry["filterVerb"] = filter_verb
    if prioritize_verb:
        entry["prioritizeVerb"] = prioritize_verb
        entry["weight"] = weight
    entry.update(extender or {})
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if percentage_of_nodes_to_score is not None:
        profile["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [profile],
        "extenders": [entry],
    }


# --------------------------------------------------------------------------- object helpers


def node_manifest(
    name: str,
    *,
    hugepages_2mi: str = "1Gi",
    cpu: str = "16",
    memory: str = "64Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    resources: Mapping[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node with its status: capacity = allocatable = the given resources (``resources`` adds/overrides)."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "hugepages-2Mi": hugepages_2mi, **(resources or {})}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FAKE_NODE_LABEL: "true",
                **(labels or {}),
            },
        },
        "spec": {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "fake node (no kubelet)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.37.2",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        },
    }


def create_node(core: client.CoreV1Api, name: str, **kwargs: Any) -> client.V1Node:
    """Create a fake Node (``node_manifest`` kwargs), then write its status (ignored on create).

    The TaintNodesByCondition admission plugin puts ``node.kubernetes.io/not-ready:NoSchedule``
    on every new Node, and no node-lifecycle controller runs here to lift it: remove it
    (unless ``taints`` are given, which replace it).
    """
    taints = kwargs.pop("taints", None)
    manifest = node_manifest(name, **kwargs)
    status = manifest.pop("status")
    core.create_node(client.V1Node.model_validate(manifest))
    core.patch_node(name, {"spec": {"taints": taints}}, _content_type="application/merge-patch+json")
    return core.patch_node_status(name, {"status": status}, _content_type="application/merge-patch+json")


def create_namespace(core: client.CoreV1Api, name: str, labels: Mapping[str, str] | None = None) -> client.V1Namespace:
    """Create a namespace (no controller-manager runs, so deleting one never finishes: use fresh names)."""
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    return core.create_namespace(client.V1Namespace.model_validate(body))


def pod_manifest(
    name: str,
    *,
    scheduler_name: str | None = None,
    hugepages_2mi: str | None = None,
    cpu: str | None = "100m",
    memory: str | None = "64Mi",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    image: str = PAUSE_IMAGE,
) -> dict[str, Any]:
    """A one-container pod. Hugepages and memory get limits equal to their requests, as the API demands."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = limits["memory"] = memory
    if hugepages_2mi:
        requests["hugepages-2Mi"] = limits["hugepages-2Mi"] = hugepages_2mi
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": image, "resources": {"requests": requests, "limits": limits}}],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def create_pod(core: client.CoreV1Api, namespace: str, name: str, **kwargs: Any) -> client.V1Pod:
    """Create a pod from ``pod_manifest(name, **kwargs)``."""
    return core.create_namespaced_pod(namespace, client.V1Pod.model_validate(pod_manifest(name, **kwargs)))


def _scheduling_condition(pod: client.V1Pod) -> str:
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled":
            return f"PodScheduled={condition.status} {condition.reason or ''}: {condition.message or ''}".strip()
    return "no PodScheduled condition yet"


def wait_for_pod_bound(
    core: client.CoreV1Api, namespace: str, name: str, *, timeout: float = 30.0, interval: float = 0.1
) -> str:
    """The node a pod is bound to, once ``spec.nodeName`` is set; TimeoutError says why not."""
    deadline = time.monotonic() + timeout
    while True:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.spec is not None and pod.spec.node_name:
            return str(pod.spec.node_name)
        if time.monotonic() > deadline:
            events = "; ".join(pod_events(core, namespace, name)) or "no events"
            raise TimeoutError(
                f"pod {namespace}/{name} not bound after {timeout:.0f}s: {_scheduling_condition(pod)} ({events})"
            )
        time.sleep(interval)


def wait_for_pods_bound(
    core: client.CoreV1Api, namespace: str, names: Iterable[str], *, timeout: float = 60.0, interval: float = 0.2
) -> dict[str, str]:
    """Wait until every named pod is bound; name -> node."""
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        bound = {k: v for k, v in pod_assignments(core, namespace).items() if k in wanted and v}
        if len(bound) == len(wanted):
            return bound
        if time.monotonic() > deadline:
            pending = sorted(wanted - bound.keys())
            raise TimeoutError(f"{len(pending)} of {len(wanted)} pods in {namespace} not bound: {pending[:10]}")
        time.sleep(interval)


def pod_assignments(
    core: client.CoreV1Api, namespace: str | None, *, label_selector: str | None = None
) -> dict[str, str | None]:
    """Pod -> node (None while unbound). Keys are names in ``namespace``, or ``ns/name`` for all (None)."""
    if namespace is None:
        pods = core.list_pod_for_all_namespaces(label_selector=label_selector).items
    else:
        pods = core.list_namespaced_pod(namespace, label_selector=label_selector).items
    result: dict[str, str | None] = {}
    for pod in pods:
        meta = pod.metadata
        if meta is None or meta.name is None:
            continue
        key = meta.name if namespace is not None else f"{meta.namespace}/{meta.name}"
        result[key] = pod.spec.node_name if pod.spec is not None else None
    return result


def pod_events(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    """``reason: message`` of the events about one pod, oldest first."""
    try:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=Pod"
        ).items
    except ApiException:
        return []
    return [f"{e.reason}: {e.message}" for e in events]


def delete_pods(core: client.CoreV1Api, namespace: str, label_selector: str | None = None) -> int:
    """Delete pods at once (grace period 0: no kubelet will confirm); how many."""
    names = list(pod_assignments(core, namespace, label_selector=label_selector))
    for pod_name in names:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod_name, namespace, grace_period_seconds=0)
    return len(names)
