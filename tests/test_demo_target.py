"""`make demo`, which the README names: run.sh's kind cluster with the demo in place of the suite
(e2e/kind/demo.py; e2e/kind/test_demo.py runs its steps in the kind suite)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_demo_runs_the_kind_demo_and_the_readme_names_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under make unit
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert dry.strip().splitlines()[-1].endswith("e2e/kind/run.sh --demo"), dry
    assert "`make demo`" in (ROOT / "README.md").read_text()
    assert "test_demo.py" in (ROOT / "README.md").read_text()
    assert (ROOT / "e2e" / "kind" / "test_demo.py").is_file()
