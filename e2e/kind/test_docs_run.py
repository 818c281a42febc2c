"""The docs' marked blocks run verbatim against the chart they install (``<!-- run: kind STEP``
above a ```sh block; tests/chart/test_docs_commands.py checks their names against the render
everywhere): the README's install and "why is my pod Pending?" blocks (the example pod below),
install.md's upgrade and uninstall block; then docs/install.md's install block (the chart's
defaults, the image under its default name run.sh loaded), its example pod (payments/dpdk-router,
which waits: no node has its 2 CPUs and 2Gi of pages), every diagnostic block of
docs/runbooks.md, install.md's upgrade and uninstall block, then its command for marked pods left
Pending (the example pod, whose scheduler is gone).

conftest.py runs this with no release installed (after the secondary-mode uninstall)."""

from __future__ import annotations

import json
import re

import yaml

from e2e.controlplane import wait_until
from e2e.kind.bystanders import doc_blocks, nothing_stranded, run_block, wait_nothing_stranded, wait_served_markers
from e2e.kind.demo import lease_holder
from e2e.kind.test_kind import NAMESPACE, REPORTS, ROOT, SCHEDULER_NAME, kubectl

EXAMPLE_POD = re.compile(r"```yaml\n(apiVersion: v1\nkind: Pod\nmetadata: \{name: dpdk-router.*?)```", re.DOTALL)


EXPLAINED = "pod payments/dpdk-router: needs 2147483648 bytes of hugepages-2Mi"


def _installed_with_the_example_pod(install: str, pod: dict[str, object]) -> None:
    # An install block creates the release namespace: an earlier release's is deleted first.
    kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s", "--ignore-not-found")
    run_block(install)
    # The diagnostic blocks ask the Lease holder: a scheduler becomes leader a moment after it is ready.
    wait_until("the scheduler's Lease", lease_holder, timeout=120, interval=1.0)
    kubectl("create", "namespace", "payments")
    wait_served_markers("payments", SCHEDULER_NAME, {"hugepage-extender.io/shadow"})
    kubectl("apply", "-f", "-", stdin=json.dumps(pod))


def test_the_install_block_the_runbooks_checks_and_the_uninstall_run_verbatim() -> None:
    (install,) = doc_blocks("docs/install.md", "install")
    diagnose = doc_blocks("docs/runbooks.md", "diagnose")
    (uninstall,) = doc_blocks("docs/install.md", "uninstall")
    readme_install, readme_explain = doc_blocks("README.md", "readme")
    (example,) = EXAMPLE_POD.findall((ROOT / "docs" / "install.md").read_text())
    pod = yaml.safe_load(example)
    try:
        # The README's install (the image named as a release pushes it) and its "why is my pod Pending?".
        _installed_with_the_example_pod(readme_install, pod)
        explained = run_block(readme_explain)
        assert EXPLAINED in explained, explained
        run_block(uninstall)
        kubectl("delete", "namespace", "payments", "--wait=true", "--timeout=180s")
        # docs/install.md's install, the runbooks' checks, its upgrade and uninstall, its leftovers command.
        _installed_with_the_example_pod(install, pod)
        outputs = [run_block(block) for block in diagnose]
        assert EXPLAINED in outputs[0], outputs[0]
        run_block(uninstall)
        wait_served_markers("payments", SCHEDULER_NAME, set())
        # The default install ran the node agent: its records go with the release (garbage
        # collected), so that the own-mode scenarios after this see none.
        wait_until(
            "the node agents' records collected",
            lambda: not kubectl("get", REPORTS, "-o", "name", "--ignore-not-found", check=False).split(),
            timeout=120,
            interval=1.0,
        )
        # The example pod was marked (shadow, the defaults) and its scheduler is gone.
        assert "payments/dpdk-router" in nothing_stranded()
        (leftovers,) = doc_blocks("docs/install.md", "leftovers")
        run_block(leftovers)
        wait_nothing_stranded()
    finally:
        kubectl("delete", "namespace", "payments", "--wait=false", "--ignore-not-found", check=False)
