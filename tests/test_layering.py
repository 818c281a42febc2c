"""The layering contract (pyproject's ``[tool.importlinter]``) holds, and fails on a bad import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "extender", tmp_path / "extender", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    result = lint_imports(copy_of_the_package(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_core_module_importing_aiohttp_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_of_the_package(tmp_path)
    capacity = tree / "extender" / "capacity.py"
    capacity.write_text(capacity.read_text() + "\nimport aiohttp  # a deliberate bad import\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "extender.capacity is not allowed to import aiohttp" in result.stdout


def test_the_core_reaching_into_the_shell_breaks_the_contract(tmp_path: Path) -> None:
    tree = copy_of_the_package(tmp_path)
    scoring = tree / "extender" / "scoring.py"
    scoring.write_text(scoring.read_text() + "\nimport extender.server  # a deliberate bad import\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "extender.scoring is not allowed to import extender.server" in result.stdout
