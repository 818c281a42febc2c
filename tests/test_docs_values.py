"""The chart values the docs cite exist: every backticked dotted name whose first part is a
top-level key of the chart's values (``scheduler.own.active``, ``nodeAgent.enabled``,
``config.namespaces.<ns>.mode=enforce``) is a path of values.schema.json, which rejects unknown
keys at install, so a doc cannot tell an operator to set what `helm install` would refuse. And the
figures one doc quotes from the measurements of another (docs/performance.md, reliability.md, soak.md)
are the ones that doc gives."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.config import Config
from extender.core.policy import Policy, policy_document

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "hugepage-extender"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DOCS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        ROOT / "e2e" / "kind" / "README.md",
        ROOT / "charts" / "hugepage-extender" / "README.md",
    }
)
# A backticked name, or one after `--set `, up to `=`, `:` or a space.
CITED = re.compile(r"(?:`|--set )([a-z][A-Za-z]*(?:\.[A-Za-z0-9<>*_{}-]+)+)")
# Not chart values, though they begin like one: files, Python names (snake_case, modules of the
# package), and the value the upgrade notes say is gone.
FILES = re.compile(r"\.(go|json|yaml|py|md|txt|crt|key|sh)$")
PYTHON = re.compile(r"\.[a-z]+_[a-z_]+|^extender\.(core|state|shell|cli)\b")
REMOVED = {"scheduler.extender.ignorable": "install.md"}


def resolve(path: list[str], schema: dict[str, Any]) -> str | None:
    """None when ``path`` is a path of ``schema``; else the first part that is not."""
    node = schema
    for part in path:
        if "$ref" in node:
            node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
        properties = node.get("properties", {})
        if part in properties:
            node = properties[part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]  # a map: any key (a namespace, a label)
        elif node.get("additionalProperties") is True or (node.get("type") == "object" and not properties):
            return None  # free-form (extraEnv, podAnnotations)
        else:
            return part
    return None


def cited(doc: Path) -> set[str]:
    names = set()
    for match in CITED.finditer(doc.read_text()):
        name = match[1]
        if name.split(".")[0] not in SCHEMA["properties"] or FILES.search(name) or PYTHON.search(name):
            continue
        if REMOVED.get(name) == doc.name:
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_chart_value_a_doc_cites_exists(doc: Path) -> None:
    unknown = {}
    for name in cited(doc):
        parts = [p for p in name.split(".") if p not in ("*",)]
        if (missing := resolve(parts, SCHEMA)) is not None:
            unknown[name] = missing
    assert not unknown, f"{doc.name} cites values the chart does not have: {unknown}"


def test_the_check_finds_what_it_is_for() -> None:
    assert resolve(["scheduler", "own", "active"], SCHEMA) is None
    assert resolve(["config", "namespaces", "payments", "mode"], SCHEMA) is None
    assert resolve(["scheduler", "own", "enabled"], SCHEMA) == "enabled"
    assert "scheduler.own.active" in cited(ROOT / "docs" / "install.md")


def yaml_block_after(text: str, marker: str) -> Any:
    """The first fenced YAML block after ``marker``."""
    block = text.split(marker, 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def built_in_value(config: Config, key: str) -> Any:
    """The config's value of a file key: ``resourceName`` (one size) is ``resource_names``' one name."""
    if key == "resourceName":
        (name,) = config.resource_names
        return name
    return getattr(config, snake(key))


@pytest.mark.parametrize(
    ("doc", "marker", "under"),
    [("README.md", "## Configuration", None), ("docs/install.md", "## Configuration: per-namespace modes", "config")],
)
def test_a_config_block_gives_the_built_in_defaults(doc: str, marker: str, under: str | None) -> None:
    shown = yaml_block_after((ROOT / doc).read_text(), marker)
    shown = shown[under] if under else shown
    built_in = Config()
    wrong = {
        key: (value, built_in_value(built_in, key))
        for key, value in shown.items()
        if key not in ("defaults", "namespaces") and value != built_in_value(built_in, key)
    }
    defaults = policy_document(Policy())
    assert set(shown["defaults"]) == set(defaults), f"{doc}: the block shows every knob of defaults"
    wrong |= {
        f"defaults.{key}": (value, defaults[key]) for key, value in shown["defaults"].items() if value != defaults[key]
    }
    assert not wrong, f"{doc}: (shown, built in)"


def test_the_chart_readmes_defaults_are_the_charts() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rows = re.findall(r"^\| (`[^|]+`) \| `([^`]*)` \|", (CHART / "README.md").read_text(), re.MULTILINE)
    assert len(rows) > 10
    wrong = {}
    for keys, default in rows:
        for key in re.findall(r"`([^`<]+)`", keys):
            node: Any = values
            for part in key.split("."):
                node = node[part]
            if node != yaml.safe_load(default or "''"):
                wrong[key] = (default, node)
    assert not wrong, "charts/hugepage-extender/README.md: (shown, values.yaml)"


def test_the_readmes_prerequisites_are_the_projects() -> None:
    """Kubernetes, Python and Go as the README's prerequisites name them: the chart's kubeVersion,
    pyproject's requires-python, the newest `go` line of the Go modules the tests build."""
    readme = (ROOT / "README.md").read_text().split("## Prerequisites", 1)[1].split("\n## ", 1)[0]
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    minimum = re.fullmatch(r">=(\d+\.\d+)\.0-0", kube_version)
    assert minimum is not None
    assert f"Kubernetes {minimum[1]} or newer" in readme
    python = re.search(r'requires-python = ">=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert python is not None
    assert f"Python {python[1]}+" in readme
    go_mods = [
        *ROOT.glob("e2e/tools/*/go.mod"),
        ROOT / "e2e/promtool/go.mod",
        *ROOT.glob("e2e/kind/images/go/*/go.mod"),
    ]
    lines = [re.search(r"^go (\S+)$", path.read_text(), re.MULTILINE) for path in go_mods]
    newest = max((m[1] for m in lines if m), key=lambda v: tuple(int(p) for p in v.split(".")))
    assert f"Go {newest.removesuffix('.0')}+" in readme


# A figure with its unit ("0.42 ms", "1.2 x", "0.15-0.25 ms", "90 %"), after spaces and dashes are
# made one shape by `plain`; a paragraph (or list item) quoting figures that names one of these docs
# takes them from it, so each must be there as written, unit and all (a bare table cell is no match:
# "| 0.3 |" is a size in KB as often as a time).
MEASURED = ("performance.md", "reliability.md", "soak.md")
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?) ?(ms|us|MiB|s|x|%)(?!\w)")


def plain(text: str) -> str:
    text = re.sub(r"(?<=\d) ?[-\u2013\u2014] ?(?=\d)", "-", re.sub(r"\s+", " ", text))
    return text.replace("\u00b5s", "us").replace("\u00d7", "x")


def paragraphs(doc: Path) -> list[str]:
    return re.split(r"\n\s*\n|\n(?=- )", doc.read_text())


def unsourced(paragraph: str) -> list[str]:
    """The figures of ``paragraph`` that no doc it names has."""
    named = [ROOT / "docs" / name for name in MEASURED if name in paragraph]
    sources = [plain(doc.read_text()) for doc in named]
    missing = []
    for number, unit in FIGURE.findall(plain(paragraph)) if sources else []:
        written = re.compile(rf"(?<![\w.-]){re.escape(number)} ?{re.escape(unit)}(?!\w)")
        if not any(written.search(source) for source in sources):
            missing.append(f"{number} {unit}")
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_figures_a_doc_quotes_from_another_are_there(doc: Path) -> None:
    wrong = {p.strip()[:60]: m for p in paragraphs(doc) if (m := unsourced(p))}
    assert not wrong, f"{doc.name} quotes figures the doc it names does not have: {wrong}"


def test_the_figure_check_finds_a_wrong_figure() -> None:
    assert unsourced("docs/performance.md: 28 MiB of cache, the filter 0.17 \u2013 0.21 ms, within 1.2x") == []
    assert unsourced("docs/performance.md: the filter 0.15-0.25 ms, 0.3 ms to prioritize") == ["0.15-0.25 ms", "0.3 ms"]
    assert unsourced("docs/performance.md: 8 MiB of cache (part of '28 MiB'), 0.21 ms") == ["8 MiB", "0.21 ms"]
    assert unsourced("no doc named: 2.78 ms") == []
