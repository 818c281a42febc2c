"""The layering contracts (pyproject's ``[tool.importlinter]``) hold, the folders are the layers, and each
contract fails on a deliberate bad import of its kind or a module placed in no layer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
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
    for package in ("extender", "replay"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    result = lint_imports(copy_of_the_package(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_folders_are_the_layers() -> None:
    """The package's folders are its layers: the top contract names them, each folder's contract names
    its order, and all are exhaustive, so a module placed in no layer (a new file at the top, or one
    a folder's contract does not name) breaks the build (shown in the bad-imports test)."""
    by_id = {c["id"]: c for c in contracts()}
    top = by_id["layers"]
    assert top["containers"] == ["extender"]
    assert top["layers"] == ["__main__", "cli", "shell", "state", "core"]
    folders = sorted(p.name for p in (ROOT / "extender").iterdir() if (p / "__init__.py").exists())
    assert folders == ["core", "data", "shell", "state"]
    assert top["exhaustive_ignores"] == ["data"]
    for folder in ("shell", "state", "core"):
        (contract,) = [c for c in contracts() if c.get("containers") == [f"extender.{folder}"]]
        assert contract["type"] == "layers"
    assert all(c.get("exhaustive") is True for c in contracts() if c["type"] == "layers")


def test_the_io_contracts_name_the_folders() -> None:
    """The pure core and the state are held to their imports as folders: a module added to one is held at once."""
    by_id = {c["id"]: c for c in contracts()}
    assert by_id["pure-core"]["source_modules"] == ["extender.core"]
    assert by_id["state"]["source_modules"] == ["extender.state"]


def test_the_packages_hold_no_code() -> None:
    """The folders' own ``__init__`` modules say what the folder is and import nothing, so no layer's
    code hides in them."""
    inits = [path for path in (ROOT / "extender").rglob("__init__.py") if "__pycache__" not in path.parts]
    assert len(inits) >= 8
    for init in inits:
        assert "import" not in init.read_text(), init


# Each forbidden kind: (module, what it imports on purpose), which lint-imports names "- module -> imported".
BAD_IMPORTS = [
    ("core/capacity", "aiohttp"),  # an I/O framework
    ("core/quantity", "os"),  # the standard library's I/O
    ("core/policy", "pathlib"),
    ("core/scoring", "extender.shell.server"),  # core -> shell
    ("core/holds", "extender.state.cluster"),  # core -> state
    ("core/nodereport", "extender.shell.nodeagent.probe"),  # the agent's I/O
    ("state/cluster", "extender.shell.wire"),  # state -> shell
    ("state/explain", "kubernetes"),  # state -> framework
    ("shell/server", "extender.shell.kube.live"),  # shell parts
    ("shell/metrics", "replay"),  # the runtime -> the replay
]
# Modules placed in no layer: a file at the package's top, and one its folder's contract does not name.
STRAYS = [("stray", "- extender.stray"), ("state/stray", "- extender.state.stray")]


def test_a_bad_import_of_each_kind_breaks_a_contract(tmp_path: Path) -> None:
    tree = copy_of_the_package(tmp_path)
    for module, imported in BAD_IMPORTS:
        path = tree / "extender" / f"{module}.py"
        path.write_text(path.read_text() + f"\nimport {imported}  # a deliberate bad import\n")
    for module, _ in STRAYS:
        (tree / "extender" / f"{module}.py").write_text('"""A module placed in no layer."""\n')
    result = lint_imports(tree)
    assert result.returncode != 0
    expected = [rf"-\s+extender\.{module.replace('/', '.')} -> {imported} " for module, imported in BAD_IMPORTS]
    expected += [re.escape(message) for _, message in STRAYS]
    missing = [pattern for pattern in expected if not re.search(pattern, result.stdout)]
    assert missing == [], result.stdout
