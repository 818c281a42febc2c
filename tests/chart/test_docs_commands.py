"""The fenced blocks the docs mark as run (``<!-- run: ... -->`` above a ```sh block) name only what
the chart creates: each block's helm install/upgrade is rendered with its own arguments, and every
``kubectl ... rollout status KIND/NAME``, namespace and Pod Security label it runs must match that
render; an image tag it names is the chart's appVersion. Those marked ``<!-- run: kind STEP`` the
kind suite also runs verbatim (e2e/kind/test_docs_run.py, test_bystanders.py,
test_own_scheduler.py): install.md's install, upgrade-and-uninstall and leftovers blocks and the
runbooks' diagnostic blocks; this checks they stay marked, and what can be checked everywhere.
docs/install.md's list of what the default install creates is held to the default render the same way."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from .chartlib import CHART, ROOT, Helm

DOCS = [ROOT / "README.md", ROOT / "docs" / "install.md", ROOT / "docs" / "runbooks.md"]
MARKED = re.compile(r"<!-- run:[^>]*-->\n```sh\n(.*?)```", re.DOTALL)
KINDS = {"deployment": "Deployment", "daemonset": "DaemonSet"}
PRIVILEGED = "pod-security.kubernetes.io/enforce=privileged"


def marked_blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in MARKED.finditer(text):
            found.append((path.name, text[: match.start()].count("\n") + 1, match[1]))
    return found


def commands(block: str) -> list[list[str]]:
    joined = block.replace("\\\n", " ")
    return [words for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def test_the_docs_mark_their_install_blocks() -> None:
    where = {(name, block.count("helm install")) for name, _, block in marked_blocks()}
    assert ("README.md", 1) in where
    assert ("install.md", 1) in where


def kind_steps(path: Path) -> list[str]:
    """The steps of a doc's blocks the kind suite runs verbatim (``<!-- run: kind STEP``)."""
    return re.findall(r"<!-- run: kind (\w+)[^>]*-->\n```sh\n", path.read_text())


def test_the_kind_suite_runs_the_install_section_and_the_runbooks_checks() -> None:
    # e2e/kind/test_docs_run.py runs these (and test_bystanders.py the leftovers command): a
    # block that loses its mark would silently stop being run.
    install = ROOT / "docs" / "install.md"
    section = install.read_text().split("## Install (secondary scheduler)", 1)[1].split("\n## ", 1)[0]
    assert section.count("<!-- run: kind install") == 1
    assert section.count("```sh") == 1
    assert sorted(kind_steps(install)) == ["install", "leftovers", "uninstall"]
    runbooks = ROOT / "docs" / "runbooks.md"
    assert kind_steps(runbooks) == ["diagnose"] * 4
    # The README's quickstart: its chart install and its "why is my pod Pending?", in that order.
    blocks = re.findall(r"<!-- run: kind readme[^>]*-->\n```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert len(blocks) == 2
    assert "helm install" in blocks[0]
    assert "hugepages explain" in blocks[1]
    # Every runbook block the kind suite runs names the default install's objects, no placeholder.
    for match in re.finditer(r"<!-- run: kind diagnose[^>]*-->\n```sh\n(.*?)```", runbooks.read_text(), re.DOTALL):
        assert not re.search(r"<\w+>|NAMESPACE/POD", match[1]), match[1]


@dataclasses.dataclass
class Block:
    """What a block runs: its install (the default one's release and namespace when it has none)."""

    release: str = "hugepage-extender"
    namespace: str = "hugepage-extender"
    installs: int = 0
    sets: list[str] = dataclasses.field(default_factory=list)
    created: set[str] = dataclasses.field(default_factory=set)
    labelled: set[str] = dataclasses.field(default_factory=set)
    leases: set[str] = dataclasses.field(default_factory=set)
    rollouts: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    uncreated: set[str] = dataclasses.field(default_factory=set)

    def read(self, words: list[str]) -> None:
        if words[:3] == ["kubectl", "create", "namespace"]:
            self.created.add(words[3])
        if words[:3] == ["kubectl", "label", "namespace"] and PRIVILEGED in words:
            self.labelled.add(words[3])
        if "lease" in words:  # also inside $(...)
            self.leases.add(words[words.index("lease") + 1])
        if "rollout" in words:
            kind, name = words[words.index("status") + 1].split("/")
            self.rollouts.add((KINDS[kind], name, words[words.index("-n") + 1]))
        if words[:2] in (["helm", "install"], ["helm", "upgrade"]):
            self.release, chart = words[2], words[3]
            assert (ROOT / chart).resolve() == CHART, f"chart {chart}"
            installs = words[1] == "install"  # an upgrade's namespace and labels are the install's
            self.installs += installs
            flag = "--namespace" if "--namespace" in words else "-n"
            self.namespace = words[words.index(flag) + 1]
            self.sets += [words[i + 1] for i, word in enumerate(words) if word == "--set"]
            if installs and "--create-namespace" not in words and self.namespace not in self.created:
                self.uncreated.add(self.namespace)


def needs_privileged(rendered: list[dict[str, Any]]) -> set[str]:
    """Namespaces of pods on the host network or PID namespace or with host paths (the node agent,
    the own-mode DaemonSet): Pod Security allows them only at the privileged level."""
    found = set()
    for d in rendered:
        if d["kind"] in ("DaemonSet", "Deployment"):
            pod = d["spec"]["template"]["spec"]
            host = pod.get("hostNetwork") or pod.get("hostPID")
            if host or any("hostPath" in v for v in pod.get("volumes", [])):
                found.add(d["metadata"]["namespace"])
    return found


@pytest.mark.parametrize(("doc", "line", "block"), marked_blocks(), ids=lambda v: str(v)[:20])
def test_a_marked_block_names_only_what_its_install_renders(helm: Helm, doc: str, line: int, block: str) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    for tag in re.findall(r"hugepage-extender:([0-9][^\s]*)", block):
        assert tag == app_version, f"{doc}:{line} names image tag {tag}, the chart's appVersion is {app_version}"
    runs = Block()
    for words in commands(block):
        runs.read(words)
    assert not runs.uncreated, f"{doc}:{line}: namespaces never created: {runs.uncreated}"
    args = ["template", runs.release, str(CHART), "--namespace", runs.namespace, "--kube-version", "v1.37.2"]
    for value in runs.sets:
        args += ["--set", value]
    rendered = [d for d in yaml.safe_load_all(helm.run(*args)) if d]
    objects = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", runs.namespace)) for d in rendered}
    assert runs.rollouts <= objects, f"{doc}:{line}: not rendered: {runs.rollouts - objects}"
    leases = {
        yaml.safe_load(d["data"]["scheduler-config.yaml"]).get("leaderElection", {}).get("resourceName")
        for d in rendered
        if d["kind"] == "ConfigMap" and "scheduler-config.yaml" in d["data"]
    }
    assert runs.leases <= leases, f"{doc}:{line}: leases {runs.leases}; the scheduler's is {leases}"
    if runs.installs:
        assert needs_privileged(rendered) <= runs.labelled, f"{doc}:{line}: labels {runs.labelled} only"


def test_what_the_default_install_creates_is_what_it_renders(helm: Helm) -> None:
    """docs/install.md's list of what the default install creates: every `Kind `name`` it names is in
    the default render (CRDs included), and every kind the render has is named there."""
    text = (ROOT / "docs" / "install.md").read_text()
    section = text.split("What the default install creates", 1)[1].split("\nNo NetworkPolicy", 1)[0]
    named = {
        (kind, name)
        for kinds, name in re.findall(r"([A-Z][A-Za-z]+(?: and [A-Z][A-Za-z]+)?) `([a-z0-9.-]+)`", section)
        for kind in kinds.split(" and ")
        if kind != "Lease"  # the scheduler's, written at run time
    }
    args = ["template", "hugepage-extender", str(CHART), "--namespace", "hugepage-extender", "--include-crds"]
    rendered = [d for d in yaml.safe_load_all(helm.run(*args, "--kube-version", "v1.37.2")) if d]
    objects = {
        ("CRD" if d["kind"] == "CustomResourceDefinition" else d["kind"], d["metadata"]["name"]) for d in rendered
    }
    assert named <= objects, f"named but not rendered: {named - objects}"
    unnamed = {kind for kind, _ in objects if not re.search(rf"\b{kind}\b", section) and not kind.endswith("Binding")}
    assert not unnamed, f"rendered but not in the list: {unnamed}"
