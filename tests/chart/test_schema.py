"""values.schema.json refuses bad values before anything reaches the cluster.

helm validates the merged values against the schema on template, install,
upgrade and lint; each case names the value at fault and what was wrong.
"""

from __future__ import annotations

import json

import pytest

from .chartlib import CHART, Helm, HelmError

SCHEMA_ERROR = "values don't meet the specifications of the schema(s)"


@pytest.mark.parametrize(
    ("args", "where", "why"),
    [
        pytest.param(
            ["--set", "config.defaults.mode=strict"],
            "/config/defaults/mode",
            "value must be one of 'off', 'shadow', 'enforce'",
            id="unknown-default-mode",
        ),
        pytest.param(
            ["--set", "config.namespaces.payments.mode=enforcing"],
            "/config/namespaces/payments/mode",
            "value must be one of 'off', 'shadow', 'enforce'",
            id="unknown-namespace-mode",
        ),
        pytest.param(
            ["--set", "config.defaults.widening=widest"],
            "/config/defaults/widening",
            "value must be one of 'none', 'resample', 'fullscan', 'drawUntilK'",
            id="unknown-widening",
        ),
        pytest.param(
            ["--set", "replicaCount=two"],
            "/replicaCount",
            "got string, want integer",
            id="replicas-not-a-number",
        ),
        pytest.param(
            ["--set-json", 'config.defaults.sampleSize="3"'],
            "/config/defaults/sampleSize",
            "got string, want integer",
            id="sample-size-quoted",
        ),
        pytest.param(
            ["--set", "config.defaults.sampleSize=-1"],
            "/config/defaults/sampleSize",
            "minimum: got -1, want 0",
            id="sample-size-negative",
        ),
        pytest.param(
            ["--set", "config.defaults.overcommitRatio=0"],
            "/config/defaults/overcommitRatio",
            "exclusiveMinimum: got 0, want 0",
            id="overcommit-zero",
        ),
        pytest.param(
            ["--set", "config.defaults.scoreHugepages=maybe"],
            "/config/defaults/scoreHugepages",
            "got string, want boolean",
            id="flag-not-a-bool",
        ),
        pytest.param(
            ["--set", "config.namespaces.payments.sampelSize=3"],
            "/config/namespaces/payments",
            "additional properties 'sampelSize' not allowed",
            id="misspelt-namespace-key",
        ),
        pytest.param(
            ["--set", "config.namespaces.Payments.mode=enforce"],
            "/config/namespaces",
            "additional properties 'Payments' not allowed",
            id="namespace-not-a-dns-label",
        ),
        pytest.param(
            ["--set", "config.resourceName=memory"],
            "/config/resourceName",
            "does not match pattern",
            id="not-a-hugepage-resource",
        ),
        pytest.param(
            ["--set", "scheduler.mode=primary"],
            "/scheduler/mode",
            "value must be one of 'secondary', 'own'",
            id="unknown-scheduler-mode",
        ),
        pytest.param(
            ["--set", "topology=deployment"],
            "/topology",
            "value must be one of '', 'sidecar', 'controlPlane', 'service'",
            id="unknown-topology",
        ),
        pytest.param(
            ["--set", "tls.source=vault"],
            "/tls/source",
            "value must be one of 'generate', 'secret', 'values'",
            id="unknown-tls-source",
        ),
        pytest.param(
            ["--set", "scheduler.extender.weight=0"],
            "/scheduler/extender/weight",
            "minimum: got 0, want 1",
            id="zero-weight",
        ),
        pytest.param(
            ["--set", "scheduler.extender.httpTimeout=5"],
            "/scheduler/extender/httpTimeout",
            "got number, want string",
            id="timeout-without-unit",
        ),
        pytest.param(
            # Removed by decision 0005: enforcing namespaces never fail open, shadow ones always do.
            ["--set", "scheduler.extender.ignorable=true"],
            "/scheduler/extender",
            "additional properties 'ignorable' not allowed",
            id="ignorable-is-gone",
        ),
        pytest.param(
            ["--set", "bind.enabled=sometimes"],
            "/bind/enabled",
            "got string, want null or boolean",
            id="bind-not-a-bool",
        ),
        pytest.param(
            ["--set", "tls.ca=not-a-pem"],
            "/tls/ca",
            "'not-a-pem' does not match pattern '^\\\\s*-----BEGIN CERTIFICATE-----'",
            id="ca-not-pem",
        ),
        pytest.param(
            ["--set", "enableBind=true"],
            "",
            "additional properties 'enableBind' not allowed",
            id="unknown-top-level-key",
        ),
    ],
)
def test_bad_values_are_refused_with_the_key_and_reason(helm: Helm, args: list[str], where: str, why: str) -> None:
    with pytest.raises(HelmError) as failure:
        helm.template(extra=args)
    message = str(failure.value)
    assert SCHEMA_ERROR in message
    assert f"at '{where}'" in message
    assert why in message


def test_lint_reports_schema_errors_too(helm: Helm) -> None:
    with pytest.raises(HelmError) as failure:
        helm.run("lint", str(CHART), "--strict", "--set", "config.defaults.mode=strict")
    assert "value must be one of 'off', 'shadow', 'enforce'" in str(failure.value)


def test_schema_is_strict_everywhere() -> None:
    """Every object in the schema that lists properties refuses unknown ones."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    loose: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                loose.append(path or "/")
            for key, child in node.items():
                walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{path}/{index}")

    walk(schema, "")
    assert loose == [], f"objects that accept unknown keys: {loose}"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--set", "config.namespaces.payments.mode=enforce"], id="set-namespace-mode"),
        pytest.param(["--set", "config.defaults.needFromMemory=true"], id="need-from-memory-everywhere"),
        pytest.param(["--set", "bind.enabled=null"], id="bind-by-mode"),
        pytest.param(["--set", "bind.enabled=false"], id="bind-off"),
        pytest.param(["--set-json", "config.defaults.alpha=0.25"], id="float-via-set-json"),
        pytest.param(["--set", "podDisruptionBudget.maxUnavailable=50%"], id="pdb-percentage"),
        pytest.param(["--set", "service.clusterIP=fd00::88"], id="ipv6-cluster-ip"),
        pytest.param(["--set", "topology=service"], id="topology-service"),
        pytest.param(["--set", "topology=sidecar", "--set", "tls.enabled=true"], id="tls-on-loopback"),
        pytest.param(["--set", "tls.enabled=null", "--set", "tls.clientAuth.enabled=null"], id="tls-derived"),
    ],
)
def test_good_values_pass(helm: Helm, args: list[str]) -> None:
    assert helm.template(extra=args).docs
