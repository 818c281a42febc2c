"""The rendered config and args, read by the extender's own code.

The ConfigMap must load with the real config loader, per-namespace values must
change exactly that namespace's policy, and the container args must parse with
the real CLI: the chart and the extender cannot drift apart unnoticed.
"""

from __future__ import annotations

import dataclasses
import json
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
import yaml

from extender.cli import build_parser
from extender.core.config import (
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_RESOURCE,
    FILE_KEYS,
    Config,
    build_config,
    page_size_of,
)
from extender.core.policy import POLICY_FIELDS, POLICY_KEYS, Mode, Policy, Widening, field_type
from tests.conftest import other_value

from .chartlib import CHART, CI_VALUES, Helm, Rendered
from .test_render import effective, is_bind, is_loopback, is_mtls, is_tls, the_extender_container, topology_of

EXTENDER = "hugepage-extender"


def rendered_config(rendered: Rendered) -> Config:
    document = yaml.safe_load(rendered.get("ConfigMap", EXTENDER)["data"]["config.yaml"])
    return build_config(document, environ={})


FIELD_OF_KEY = {key: name for name, key in POLICY_KEYS.items()}


def test_chart_defaults_are_the_extenders_defaults(helm: Helm) -> None:
    config = rendered_config(helm.template())
    # The chart spells every default out; they must be the ones the extender
    # would use with no config at all, so neither surprises the other.
    assert config == build_config(None, environ={})
    assert config.placement.defaults == Policy()
    assert config.resource_names[0] == DEFAULT_RESOURCE
    assert config.max_request_bytes == DEFAULT_MAX_REQUEST_BYTES


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_scenario_config_loads(helm: Helm, values: Path) -> None:
    config = rendered_config(helm.template(values=[values]))
    wanted = (yaml.safe_load(values.read_text()) or {}).get("config", {})
    assert config.resource_names[0] == wanted.get("resourceName", DEFAULT_RESOURCE)
    for namespace, fields in wanted.get("namespaces", {}).items():
        policy = config.policy_for(namespace)
        for key, value in fields.items():
            # Mode and Widening are StrEnums, so they equal their YAML spelling.
            assert getattr(policy, FIELD_OF_KEY[key]) == value, f"{namespace}.{key}"


def test_one_value_flips_one_namespace_to_enforce(helm: Helm) -> None:
    config = rendered_config(helm.template(set_values={"config.namespaces.payments.mode": "enforce"}))
    assert config.policy_for("payments").mode is Mode.ENFORCE
    assert config.policy_for("other").mode is Mode.SHADOW
    # Every other knob of payments still comes from the defaults.
    assert config.policy_for("payments") == dataclasses.replace(Policy(), mode=Mode.ENFORCE)


@pytest.mark.parametrize(
    ("set_values", "namespace", "expected"),
    [
        ({"config.namespaces.vms.needFromMemory": "true"}, "vms", {"need_from_memory": True}),
        ({"config.namespaces.batch.sampleSize": "0"}, "batch", {"sample_size": 0}),
        ({"config.namespaces.batch.widening": "drawUntilK"}, "batch", {"widening": Widening.DRAW_UNTIL_K}),
        ({"config.namespaces.legacy.mode": "off"}, "legacy", {"mode": Mode.OFF}),
        (
            {"config.defaults.mode": "enforce", "config.namespaces.canary.mode": "shadow"},
            "canary",
            {"mode": Mode.SHADOW},
        ),
    ],
)
def test_per_namespace_flags_take_effect(
    helm: Helm, set_values: dict[str, str], namespace: str, expected: dict[str, Any]
) -> None:
    config = rendered_config(helm.template(set_values=set_values))
    policy = config.policy_for(namespace)
    for field, value in expected.items():
        assert getattr(policy, field) == value


def test_resource_names_and_the_memory_size_reach_the_extender(helm: Helm) -> None:
    config = rendered_config(
        helm.template(
            extra=[
                "--set-json",
                'config.resourceNames=["hugepages-2Mi","hugepages-1Gi"]',
                "--set",
                "config.namespaces.vms.needFromMemoryResource=hugepages-1Gi",
            ]
        )
    )
    assert config.resource_names == ("hugepages-2Mi", "hugepages-1Gi")
    assert config.memory_resource(config.policy_for("vms")) == "hugepages-1Gi"
    assert config.memory_resource(config.policy_for("other")) == "hugepages-2Mi"


def test_namespaces_scenario(helm: Helm) -> None:
    config = rendered_config(helm.template(values=[CHART / "ci" / "namespaces-values.yaml"]))
    assert config.resource_names[0] == "hugepages-1Gi"
    assert page_size_of(config.resource_names[0]) == 1024**3
    vms = config.policy_for("vms")
    assert (vms.mode, vms.need_from_memory, vms.widening, vms.hold_timeout_seconds) == (
        Mode.ENFORCE,
        True,
        Widening.RESAMPLE,
        60,
    )
    assert config.policy_for("payments").need_from_memory is False
    assert config.policy_for("elsewhere").mode is Mode.SHADOW


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number"}


def test_schema_policy_keys_types_and_bounds_are_the_extenders() -> None:
    """Field by field over ``Policy``: the schema's key, type, enum and bound are the extender's."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    config = schema["properties"]["config"]["properties"]
    (namespace_policy,) = config["namespaces"]["patternProperties"].values()
    assert config["namespaces"]["additionalProperties"] is False
    for policy in (config["defaults"], namespace_policy):
        assert set(policy["properties"]) == set(POLICY_KEYS.values())
        assert policy["additionalProperties"] is False
        for f in POLICY_FIELDS:
            entry = policy["properties"][POLICY_KEYS[f.name]]
            kind = field_type(f.name)
            if kind in _JSON_TYPES:
                assert entry["type"] == _JSON_TYPES[kind], f.name
            elif kind is str:
                assert entry["type"] == "string", f.name
            else:
                members = [member.value for member in cast("type[StrEnum]", kind)]
                assert (entry["type"], entry["enum"]) == ("string", members), f.name
            words = ("minimum", "exclusiveMinimum", "pattern", "maxLength")
            bounds = {bound: entry[bound] for bound in words if bound in entry}
            assert bounds == dict(f.metadata), f.name
    assert set(config) == set(FILE_KEYS)


@pytest.mark.parametrize("name", [f.name for f in POLICY_FIELDS])
def test_each_knob_set_through_the_chart_reaches_the_extender(helm: Helm, name: str) -> None:
    value = json.loads(msgspec.json.encode(other_value(name)))
    key = POLICY_KEYS[name]
    rendered = helm.template(
        extra=["--set-json", f"config.namespaces.roundtrip.{key}={json.dumps(value)}"],
    )
    config = rendered_config(rendered)
    assert config.policy_for("roundtrip") == dataclasses.replace(Policy(), **{name: other_value(name)})


def extender_args(rendered: Rendered, scenario: str) -> list[str]:
    args: list[str] = the_extender_container(rendered, topology_of(scenario))["args"]
    return args


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_container_args_parse_with_the_extender_cli(helm: Helm, values: Path) -> None:
    rendered = helm.template(values=[values])
    scenario = values.name.removesuffix("-values.yaml")
    args = build_parser().parse_args(extender_args(rendered, scenario))
    assert args.command == "serve"
    assert args.in_cluster is True
    assert args.kubeconfig is None
    assert args.snapshot is None
    # Loopback: only the scheduler beside it; behind a Service: the pod's own IP.
    assert args.host == ("127.0.0.1" if is_loopback(scenario) else "0.0.0.0")  # noqa: S104
    assert args.probe_host == "0.0.0.0"  # noqa: S104 - the kubelet's probes and Prometheus
    assert args.port == 8888
    assert args.probe_port == 8081
    wanted = effective(scenario)
    assert args.enable_bind is is_bind(scenario)
    assert (args.tls_cert_file is not None) is is_tls(scenario)
    assert (args.client_ca_file is not None) is is_mtls(scenario)
    assert args.drain_seconds + args.shutdown_timeout < wanted["terminationGracePeriodSeconds"]
    if args.enable_bind:
        # under the scheduler's httpTimeout
        http_timeout = float(str(wanted["scheduler"]["extender"]["httpTimeout"]).removesuffix("s"))
        assert args.bind_timeout_seconds < http_timeout


@pytest.mark.parametrize("mode", ["secondary", "own"])
def test_the_extender_is_told_the_schedulers_percentage_of_nodes_to_score(helm: Helm, mode: str) -> None:
    """One value: the extender tells a scan cut short from a whole one by it (extender/core/window.py)."""
    assert rendered_config(helm.template(set_values={"scheduler.mode": mode})).percentage_of_nodes_to_score == 0
    rendered = helm.template(set_values={"scheduler.mode": mode, "scheduler.percentageOfNodesToScore": "30"})
    assert rendered_config(rendered).percentage_of_nodes_to_score == 30
