"""Snapshot files: what kubectl writes, in YAML, JSON and several documents."""

import json
from pathlib import Path

import pytest

from extender.shell.snapshot import SnapshotError, load_snapshot, parse_snapshot

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1", "namespace": "d", "uid": "u1"}, "spec": {}}


def test_the_bundled_example_loads() -> None:
    snapshot = load_snapshot(None)
    assert len(snapshot.nodes) == 8
    assert len(snapshot.pods) == 10


def test_kubectl_list_json() -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE, POD]})
    snapshot = parse_snapshot(text)
    assert [n.metadata.name for n in snapshot.nodes] == ["n1"]
    assert [p.metadata.uid for p in snapshot.pods] == ["u1"]


def test_typed_lists_and_several_yaml_documents() -> None:
    node_list = {"kind": "NodeList", "items": [{k: v for k, v in NODE.items() if k != "kind"}]}
    text = json.dumps(node_list) + "\n---\n" + json.dumps(POD) + "\n---\n"
    snapshot = parse_snapshot(text)
    assert len(snapshot.nodes) == 1
    assert len(snapshot.pods) == 1


def test_a_running_pods_status_as_kubectl_saves_it_in_json_and_yaml() -> None:
    # Conditions and container statuses are kept undecoded (extender.core.objects.PodStatus); a snapshot
    # with them, as every live cluster's has, still loads, timestamps and all.
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-02T13:00:00Z"}],
        "containerStatuses": [{"name": "a", "ready": True, "restartCount": 0, "state": {"running": {}}}],
    }
    metadata = {"name": "p1", "namespace": "d", "uid": "u1", "creationTimestamp": "2026-12-02T12:59:00Z"}
    pod = {**POD, "metadata": metadata, "status": status}
    json_text = json.dumps({"kind": "List", "items": [pod]})
    yaml_text = "kind: List\nitems:\n- " + json.dumps(pod)
    for text in (json_text, yaml_text):
        (loaded,) = parse_snapshot(text).pods
        assert loaded.status.phase == "Running"
        assert json.loads(bytes(loaded.status.conditions))[0]["type"] == "Ready"


def test_other_kinds_are_ignored() -> None:
    assert parse_snapshot(json.dumps({"kind": "ConfigMap", "metadata": {"name": "x"}})).nodes == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n- b\n", "expected a Kubernetes object or List"),
        ("kind: List\nitems: [3]\n", "items[0]: expected an object"),
        ("kind: Node\nmetadata: {name: n}\nstatus: {allocatable: []}\n", "Node n"),
        ("kind: [unclosed\n", "not valid YAML or JSON"),
    ],
)
def test_bad_snapshots_say_where(text: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=None) as raised:
        parse_snapshot(text, "snap.yaml")
    assert message in str(raised.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="cannot read snapshot"):
        load_snapshot(tmp_path / "nope.yaml")
