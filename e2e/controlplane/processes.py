"""Child processes in their own process groups, logged to files and killed with their parent."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.probes import LOOPBACK, http_get

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
