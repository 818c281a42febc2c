"""The code names the docs cite exist: a renamed function, a moved module or a deleted file
breaks this test instead of leaving a page that points at nothing.

Cited are backticked names (``diagnostics.with_holds``, ``ClusterState.hold()``,
``extender/shell/diagnose.py``) and the dotted names in the docs' code blocks (the data-flow
diagram). A name is checked when its first part is a module of the package, a class
of it, or ``state`` / ``verbs`` (how the docs call the ``ClusterState`` and the
``ExtenderVerbs``); config keys, chart values and file names of other projects are not.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import extender
from extender.core.config import Config
from extender.state.cluster import ClusterState
from extender.state.verbs import ExtenderVerbs

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("docs/**/*.md"),
        ROOT / "e2e" / "kind" / "README.md",
        ROOT / "charts" / "hugepage-extender" / "README.md",
    }
)
PATH_ROOTS = ("extender/", "replay/", "tests/", "e2e/", "benchmarks/", "charts/", "docs/", "manifests/", "examples/")
ALIASES: dict[str, Any] = {"state": ClusterState, "verbs": ExtenderVerbs}
# Also roots of the chart's values (``tls.enabled``, ``metrics.prometheusRule``): checked as code only
# when called (``config.policy_for()``) or in a code block, where ``config`` is the ``Config``.
VALUE_HEADS = {"config", "tls", "metrics", "gates"}  # chart values whose head is also a module
FILE_SUFFIXES = {"io", "py", "go", "sh", "md", "yaml", "yml", "json", "toml", "txt", "crt", "key", "slice"}
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?$")
FENCE = re.compile(r"^```.*?$(.*?)^```", re.MULTILINE | re.DOTALL)


def package_modules() -> dict[str, ModuleType]:
    """Every module of the package, by its full name and by its name within the package."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.walk_packages(extender.__path__, "extender."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found[info.name] = module
        short = info.name.removeprefix("extender.")
        found.setdefault(short, module)
        for layer in ("core.", "state.", "shell."):  # nodeagent.probe for shell.nodeagent.probe
            if short.startswith(layer):
                found.setdefault(short.removeprefix(layer), module)
        found.setdefault(short.rpartition(".")[2], module)  # probe for nodeagent.probe
    for folder in ("core", "state", "shell"):  # a layer's folder is no module a doc cites by its short name:
        found.pop(folder)  # ``state.hold`` is ``ClusterState.hold`` (ALIASES)
    return found


def package_classes(modules: dict[str, ModuleType]) -> dict[str, Any]:
    classes: dict[str, Any] = {}
    for module in modules.values():
        for name, value in vars(module).items():
            if inspect.isclass(value) and getattr(value, "__module__", "").startswith("extender."):
                classes.setdefault(name, value)
    return classes


def cited(text: str) -> tuple[set[str], set[str]]:
    """The backticked names, and the dotted names of code blocks."""
    quoted = set(re.findall(r"`([^`\n]+)`", text))
    code: set[str] = set()
    for block in FENCE.findall(text):
        code |= set(re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?", block))
    return quoted, code


def has(owner: Any, name: str) -> bool:
    if hasattr(owner, name):
        return True
    fields = {
        *getattr(owner, "__dataclass_fields__", {}),
        *getattr(owner, "__struct_fields__", ()),
        *getattr(owner, "__annotations__", {}),
    }
    return name in fields


def resolve(name: str, modules: dict[str, ModuleType], classes: dict[str, Any], *, code: bool) -> bool | None:
    """True: it exists; False: it does not; None: not a name of this package."""
    parts = name.removesuffix("()").split(".")
    if parts[-1] in FILE_SUFFIXES or any(re.search(r"[a-z][A-Z]", part) for part in parts):
        return None  # a file name, or a key of a config or a Kubernetes object
    if parts[0] in VALUE_HEADS and not code and not name.endswith("()"):
        return None
    if parts[0] == "config" and code:
        return has(Config, parts[1]) if len(parts) == 2 else None
    if parts[0] == "extender":
        parts = parts[1:]
    # The longest module prefix, then attributes.
    for cut in range(len(parts), 0, -1):
        module = modules.get(".".join(parts[:cut]))
        if module is not None:
            owner: Any = module
            rest = parts[cut:]
            break
    else:
        owner = ALIASES.get(parts[0]) or classes.get(parts[0])
        if owner is None:
            return None
        rest = parts[1:]
    for part in rest:
        if not has(owner, part):
            return False
        owner = getattr(owner, part, None)
    return True


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_name_a_doc_cites_exists(doc: Path) -> None:
    modules = package_modules()
    classes = package_classes(modules)
    quoted, code = cited(doc.read_text())
    missing = []
    for name in sorted(quoted):
        if name.startswith(PATH_ROOTS):
            path = name.split()[0].split(":")[0].rstrip("/")
            if "*" not in path and not (ROOT / path).exists():
                missing.append(name)
        elif DOTTED.match(name) and resolve(name, modules, classes, code=False) is False:
            missing.append(name)
    missing += [name for name in sorted(code - quoted) if resolve(name, modules, classes, code=True) is False]
    assert missing == [], f"{doc.relative_to(ROOT)} cites what the code does not have"


def test_the_design_names_every_module_of_the_layers_contract() -> None:
    """docs/design.md's "Layers" lists name each module lint-imports places in a layer."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = [layer for c in contracts if c["type"] == "layers" for layer in c["layers"]]
    modules = {m.strip() for layer in layers for m in layer.split(":")} - {"__main__"}
    text = (ROOT / "docs" / "design.md").read_text().split("**Layers.**", 1)[1].split("**Errors.**", 1)[0]
    quoted = set(re.findall(r"`([^`]+)`", text))
    missing = sorted(
        m for m in modules if m.rpartition(".")[2] not in quoted and f"{m.rpartition('.')[2]}/" not in quoted
    )
    assert not missing, "docs/design.md's layers leave out modules the contract places"
