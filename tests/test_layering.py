"""The layering contracts (pyproject's ``[tool.importlinter]``) hold, cover every module, and fail
on a deliberate bad import of each forbidden kind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# Package roots that hold no code of a layer: the version string, the namespaces of sub-packages.
NOT_IN_A_LAYER = {"extender", "extender.kube", "extender.nodeagent"}


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


def modules() -> list[str]:
    package = ROOT / "extender"
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    result = lint_imports(copy_of_the_package(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_module_sits_in_a_layer() -> None:
    """A new module must be placed: in a layer of its own or under one (a package in a layer)."""
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    assert isinstance(layers["layers"], list)
    placed = {name.strip() for layer in layers["layers"] for name in layer.replace("|", ":").split(":")}
    unplaced = [
        module
        for module in modules()
        if module not in NOT_IN_A_LAYER and not any(module == p or module.startswith(p + ".") for p in placed)
    ]
    assert unplaced == []
    # Those left out hold no code that imports the package.
    for module in NOT_IN_A_LAYER:
        init = ROOT.joinpath(*module.split("."), "__init__.py")
        assert "import" not in init.read_text(), module


def test_every_core_module_is_held_to_no_io() -> None:
    """The core layer of the layers contract and the pure-core contract's sources are one list."""
    (layers,) = [c for c in contracts() if c["type"] == "layers"]
    (pure,) = [c for c in contracts() if c["id"] == "pure-core"]
    assert isinstance(layers["layers"], list)
    assert isinstance(pure["source_modules"], list)
    core = {name.strip() for name in layers["layers"][-2].split(":")} | {layers["layers"][-1]}
    assert core - {"extender.data"} == set(pure["source_modules"])


# Each forbidden kind: (module, the bad import added to it, what lint-imports says).
BAD_IMPORTS = [
    ("capacity", "import aiohttp", "extender.capacity is not allowed to import aiohttp"),  # an I/O framework
    ("quantity", "import os", "extender.quantity is not allowed to import os"),  # the standard library's I/O
    ("policy", "import pathlib", "extender.policy is not allowed to import pathlib"),
    ("scoring", "import extender.server", "extender.scoring is not allowed to import extender.server"),  # the shell
    ("holds", "import extender.cluster", "extender.holds is not allowed to import extender.cluster"),  # the state
    (
        "nodereport",
        "import extender.nodeagent.probe",
        "extender.nodereport is not allowed to import extender.nodeagent.probe",
    ),  # the agent's I/O
    ("cluster", "import extender.wire", "extender.cluster is not allowed to import extender.wire"),  # state -> shell
    ("explain", "import kubernetes", "extender.explain is not allowed to import kubernetes"),  # state -> framework
    ("server", "import extender.kube.live", "extender.server is not allowed to import extender.kube"),  # shell parts
    ("metrics", "import replay", "extender is not allowed to import replay"),  # the runtime -> the replay
]


def test_a_bad_import_of_each_kind_breaks_a_contract(tmp_path: Path) -> None:
    tree = copy_of_the_package(tmp_path)
    for module, statement, _ in BAD_IMPORTS:
        path = tree / "extender" / f"{module}.py"
        path.write_text(path.read_text() + f"\n{statement}  # a deliberate bad import\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    missing = [message for _, _, message in BAD_IMPORTS if message not in result.stdout]
    assert missing == [], result.stdout
