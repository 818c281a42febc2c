"""The fenced blocks the docs mark as run (``<!-- run: ... -->`` above a ```sh block) name only what
the chart creates: each block's helm install/upgrade is rendered with its own arguments, and every
``kubectl ... rollout status KIND/NAME``, namespace and Pod Security label it runs must match that
render; an image tag it names is the chart's appVersion. (Running them verbatim needs a cluster: the
kind suite's; this is what can be checked everywhere.)"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from .chartlib import CHART, ROOT, Helm

DOCS = [ROOT / "README.md", ROOT / "docs" / "install.md"]
MARKED = re.compile(r"<!-- run:[^>]*-->\n```sh\n(.*?)```", re.DOTALL)
KINDS = {"deployment": "Deployment", "daemonset": "DaemonSet"}


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


@pytest.mark.parametrize(("doc", "line", "block"), marked_blocks(), ids=lambda v: str(v)[:20])
def test_a_marked_block_names_only_what_its_install_renders(helm: Helm, doc: str, line: int, block: str) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    for tag in re.findall(r"hugepage-extender:([0-9][^\s]*)", block):
        assert tag == app_version, f"{doc}:{line} names image tag {tag}, the chart's appVersion is {app_version}"
    created: set[str] = set()
    labelled: set[str] = set()
    release = namespace = ""
    sets: list[str] = []
    for words in commands(block):
        if words[:2] == ["kubectl", "create"] and words[2] == "namespace":
            created.add(words[3])
        if (
            words[:3] == ["kubectl", "label", "namespace"]
            and words[4] == "pod-security.kubernetes.io/enforce=privileged"
        ):
            labelled.add(words[3])
        if words[:2] in (["helm", "install"], ["helm", "upgrade"]):
            release, chart = words[2], words[3]
            assert (ROOT / chart).resolve() == CHART, f"{doc}:{line}: chart {chart}"
            namespace = (
                words[words.index("--namespace") + 1] if "--namespace" in words else words[words.index("-n") + 1]
            )
            sets += [words[i + 1] for i, word in enumerate(words) if word == "--set"]
            if "--create-namespace" not in words:
                assert namespace in created, f"{doc}:{line}: {namespace} is never created"
    assert release, f"{doc}:{line}: no helm install in the block"
    args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", "v1.37.2"]
    for value in sets:
        args += ["--set", value]
    rendered = [d for d in yaml.safe_load_all(helm.run(*args)) if d]
    objects = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", namespace)) for d in rendered}
    for words in commands(block):
        if words[0] == "kubectl" and "rollout" in words:
            kind, name = words[words.index("status") + 1].split("/")
            where = words[words.index("-n") + 1]
            assert (KINDS[kind], name, where) in objects, f"{doc}:{line}: {kind}/{name} in {where} is not rendered"
    # Pods on the host network or with host paths (the node agent, the own-mode DaemonSet) need the
    # privileged level: the block labels the namespaces they run in.
    for d in rendered:
        if d["kind"] in ("DaemonSet", "Deployment"):
            pod = d["spec"]["template"]["spec"]
            host = pod.get("hostNetwork") or any("hostPath" in v for v in pod.get("volumes", []))
            if host:
                assert d["metadata"]["namespace"] in labelled, f"{doc}:{line}: {d['metadata']['name']} needs privileged"
