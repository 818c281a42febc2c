"""The chart tests' view of helm: the pinned binary and a typed `helm template`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "hugepage-extender"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RELEASE = "hugepage-extender"
NAMESPACE = "hugepage-extender"
# What `helm template` assumes as the cluster version (the pinned helm's default
# is v1.37.0; stating it keeps the tests independent of how helm was built).
KUBE_VERSION = "v1.37.2"

Doc = dict[str, Any]


def helm_path() -> Path:
    bin_dir = os.environ.get("E2E_TOOLS_BIN")
    if bin_dir:
        return Path(bin_dir) / "helm"
    printed = subprocess.run(
        [str(ROOT / "e2e" / "tools" / "build"), "--print-dir"], check=True, capture_output=True, text=True
    ).stdout
    return Path(printed.strip().splitlines()[-1]) / "helm"


class HelmError(Exception):
    """helm exited non-zero; the message is its output (lint reports on stdout)."""


@dataclass(frozen=True)
class Rendered:
    """A `helm template` result: every object, addressable by kind and name."""

    docs: list[Doc]

    def all(self, kind: str) -> list[Doc]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> Doc:
        found = [d for d in self.all(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
        return found[0]

    def has(self, kind: str, name: str) -> bool:
        return any(d["metadata"]["name"] == name for d in self.all(kind))


@dataclass(frozen=True)
class Helm:
    binary: Path

    def run(self, *args: str) -> str:
        result = subprocess.run([str(self.binary), *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise HelmError("\n".join(part for part in (result.stdout.strip(), result.stderr.strip()) if part))
        return result.stdout

    def template_text(
        self,
        *,
        values: Sequence[Path] = (),
        set_values: Mapping[str, str] = {},
        chart: Path = CHART,
        extra: Sequence[str] = (),
        release: str = RELEASE,
    ) -> str:
        args = ["template", release, str(chart), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
        for path in values:
            args += ["--values", str(path)]
        for key, value in set_values.items():
            args += ["--set", f"{key}={value}"]
        return self.run(*args, *extra)

    def template(
        self,
        *,
        values: Sequence[Path] = (),
        set_values: Mapping[str, str] = {},
        chart: Path = CHART,
        extra: Sequence[str] = (),
    ) -> Rendered:
        text = self.template_text(values=values, set_values=set_values, chart=chart, extra=extra)
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        for doc in docs:
            assert isinstance(doc, dict), f"a rendered document is not a mapping: {doc!r}"
        return Rendered(docs)
