"""Where the pinned control-plane binaries come from: ``$E2E_TOOLS_BIN`` or ``e2e/tools/build``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from e2e.controlplane.errors import BinariesUnavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "e2e" / "tools" / "build"
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")


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
