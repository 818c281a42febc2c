"""The release path: the chart's default image is where the release workflow pushes, with the
chart's appVersion as tag, which is what `make image` builds and tags."""

from __future__ import annotations

import os
import re
import subprocess

import yaml

from tests.conftest import ROOT

CHART = ROOT / "charts" / "hugepage-extender"
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"


def chart_owner() -> str:
    """The GitHub owner of the chart's repository (Chart.yaml home)."""
    home = yaml.safe_load((CHART / "Chart.yaml").read_text())["home"]
    found = re.fullmatch(r"https://github\.com/([^/]+)/[^/]+", home)
    assert found, home
    return found[1]


def test_the_charts_default_image_is_where_the_release_workflow_pushes() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["push"]["tags"] == ["v*"]  # PyYAML reads the key `on` as True
    registry = workflow["env"]["REGISTRY"]
    assert registry == "ghcr.io/${{ github.repository_owner }}"
    steps = {step.get("name"): step for step in workflow["jobs"]["release"]["steps"]}
    version = "${{ steps.version.outputs.version }}"
    pushed = f"$REGISTRY/hugepage-extender:{version}"
    assert f'make image IMAGE="{pushed}"' in steps["Build the image"]["run"]
    assert f'docker push "{pushed}"' in steps["Push the image"]["run"]
    assert 'helm push "dist/hugepage-extender-' in steps["Package and push the chart"]["run"]
    assert '"oci://$REGISTRY/charts"' in steps["Package and push the chart"]["run"]
    # The chart's default: that registry for this repository's owner, tagged with its appVersion.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == f"ghcr.io/{chart_owner()}/hugepage-extender"
    assert values["image"]["tag"] == ""  # the appVersion, the release's tag


def test_make_image_builds_offline_and_tags_the_charts_default() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under make unit
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "image"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    expected = f"{values['image']['repository']}:{chart['appVersion']}"
    assert dry.strip().splitlines() == [f"e2e/kind/images/build --extender-only {expected}"]
    # The version the image reports is the one it is tagged with.
    init = (ROOT / "extender" / "__init__.py").read_text()
    assert f'__version__ = "{chart["appVersion"]}"' in init
