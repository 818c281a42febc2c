"""docs/design.md's structure section ("The package, and what each part owns") against the tree:
its table names every module of ``extender/`` that exists and no module that does not. A module
added, moved or deleted breaks this test until the table says so.

The table's first column is the layer, which is the module's folder (``core``, ``state``, ``shell``:
the folders the import contracts in pyproject's ``[tool.importlinter]`` name), or ``package`` for
the package's top (``cli``, the wiring, and ``data``). The second column names modules by their path
in that folder (``quantity``, ``nodeagent.probe``) or a whole sub-package by its folder (``kube/``).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "extender"
SECTION = "## The package, and what each part owns"
# ``python -m extender``: two lines handing over to ``cli``, not a part a reader looks for.
ENTRY_POINTS = {"__main__"}
# The first column's name for the package's top: the wiring (``cli``) and the example snapshot (``data``).
TOP = "package"


def modules_in_the_tree() -> set[str]:
    """Every module of the package by its path in it (``nodeagent.probe``); a package that holds
    no module of its own (``data``: files beside an empty ``__init__``) counts as one."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] in ENTRY_POINTS:
            continue
        if parts[-1] == "__init__":
            folder = path.parent
            has_modules = any(p.name != "__init__.py" for p in folder.glob("*.py")) or any(
                (d / "__init__.py").exists() for d in folder.iterdir() if d.is_dir()
            )
            if has_modules or folder == PACKAGE:
                continue
            parts = parts[:-1]
        found.add(".".join(parts))
    return found


def table_rows(text: str) -> list[tuple[str, list[str]]]:
    """The structure table's rows: (layer, the names in its module column, each by its path in the package)."""
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] == "layer" or set(cells[0]) <= set("-: "):
            continue
        prefix = "" if cells[0] == TOP else f"{cells[0]}."
        rows.append((cells[0], [prefix + name for name in re.findall(r"`([^`]+)`", cells[1])]))
    return rows


def covered(name: str, modules: Iterable[str]) -> set[str]:
    """The modules a name of the table stands for: itself, or every module under a folder ``shell.kube/``."""
    if name.endswith("/"):
        folder = name.removesuffix("/").replace("/", ".")
        return {m for m in modules if m.startswith(folder + ".")}
    return {name} & set(modules)


def test_the_structure_table_names_every_module_of_the_tree_and_only_those() -> None:
    modules = modules_in_the_tree()
    rows = table_rows((ROOT / "docs" / "design.md").read_text())
    assert rows, f"docs/design.md has no table under {SECTION!r}"
    named = [name for _, names in rows for name in names]
    not_modules = sorted(name for name in named if not covered(name, modules))
    assert not_modules == [], "docs/design.md's structure table names modules extender/ does not have"
    twice = sorted({name for name in named if named.count(name) > 1})
    assert twice == [], "docs/design.md's structure table names a module in two rows"
    omitted = sorted(modules - {m for name in named for m in covered(name, modules)})
    assert omitted == [], "docs/design.md's structure table leaves out modules of extender/"


def test_the_tables_layers_are_the_contracts_folders() -> None:
    """Each row's layer is a folder the layers contract names (or the package's top): the folder a
    module sits in is its layer, so a row in the wrong layer names a module that does not exist."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    folders = set(next(c for c in contracts if c["id"] == "layers")["layers"]) & {p.name for p in PACKAGE.iterdir()}
    layers = {layer for layer, _ in table_rows((ROOT / "docs" / "design.md").read_text())}
    assert layers == folders | {TOP}


def test_the_reading_of_the_tree_sees_what_is_there() -> None:
    """The tree as this test reads it: plain modules, modules of a sub-package, a package of data
    files counted as one module, the entry point and the namespaces of sub-packages left out."""
    modules = modules_in_the_tree()
    assert {"core.quantity", "state.cluster", "shell.nodeagent.probe", "shell.kube.informer", "data", "cli"} <= modules
    assert not {"__main__", "core", "shell.kube", "shell.nodeagent", ""} & modules
    assert covered("shell.kube/", modules) == {m for m in modules if m.startswith("shell.kube.")}
    assert covered("no_such_module", modules) == set()


def test_a_stale_table_fails() -> None:
    """A row naming a module that is gone, or a table without a module, is caught."""
    modules = modules_in_the_tree()
    text = f"{SECTION}\n\n| layer | module | owns |\n|---|---|---|\n| core | `quantity`, `gone` | x |\n\n## Next\n"
    (row,) = table_rows(text)
    assert row == ("core", ["core.quantity", "core.gone"])
    assert covered("core.gone", modules) == set()
    assert modules - covered("core.quantity", modules)
