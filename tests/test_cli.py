"""The command line: explain's table and JSON, serve's sources, startup errors and log formats."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from extender.cli import main
from extender.shell import kubectl_plugin
from tests.conftest import ROOT

POD = ROOT / "examples" / "pod-2gi.yaml"


def test_explain_prints_a_readable_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", str(POD)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("pod dpdk/dpdk-router-3: needs 2147483648 bytes of hugepages-2Mi")
    header = next(line for line in lines if line.startswith("NODE"))
    for column in ("POOL", "USED", "IN FLIGHT", "FREE", "NEED", "VERDICT", "SCORE"):
        assert column in header
    assert any(line.startswith("hp-full") and "insufficient" in line for line in lines)
    assert any(line.startswith("hp-small") and "exceeds pool" in line for line in lines)
    assert any(line.startswith("plain-1") and "no pool" in line for line in lines)
    assert lines[-1] == "4 of 8 nodes can hold the pod"


def test_explain_reads_a_pod_as_kubectl_get_saves_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A live pod's status (conditions, container statuses, timestamps) as `kubectl get pod -o yaml` gives it.
    pod = yaml.safe_load(POD.read_text())
    pod["metadata"]["creationTimestamp"] = "2026-12-02T12:59:00Z"
    pod["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-12-02T13:00:00Z"}],
        "containerStatuses": [{"name": "a", "ready": False, "restartCount": 0, "state": {"waiting": {}}}],
    }
    saved = tmp_path / "pod.yaml"
    saved.write_text(yaml.safe_dump(pod))
    assert main(["explain", "--pod", str(saved)]) == 0
    assert capsys.readouterr().out.startswith("pod dpdk/dpdk-router-3: needs 2147483648 bytes")


def test_explain_json_for_chosen_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", str(POD), "--nodes", "hp-full,hp-small", "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {n["node"]: n["verdict"] for n in result["nodes"]} == {"hp-full": "insufficient", "hp-small": "exceeds pool"}
    assert result["summary"].startswith("no node with hugepage capacity")


def test_invalid_config_stops_the_process_with_the_key_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("defaults:\n  mode: sometimes\n")
    assert main(["serve", "--example", "--config", str(config)]) == 2
    assert "defaults.mode: Invalid enum value 'sometimes'" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_needs_a_source(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve"])
    assert exit_.value.code == 2
    assert "one of the arguments --snapshot --kubeconfig --in-cluster --example is required" in capsys.readouterr().err


def test_a_startup_error_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "extender", "serve", "--snapshot", str(missing)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"cannot read snapshot {missing}" in result.stderr


def test_json_log_lines_keep_a_forged_newline_inside_one_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    forged = tmp_path / "x\n2026-01-01 00:00:00 INFO extender: forged"
    assert main(["--log-format", "json", "serve", "--snapshot", str(forged)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "ERROR"
    assert record["logger"] == "extender"
    assert "INFO extender: forged" in record["message"]


def test_serve_example_serves_the_bundled_example(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--example", "--port", str(port)], stdout=log, stderr=log, env=env
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert process.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline, "extender did not become ready"
                time.sleep(0.1)
        pod = {"metadata": {"name": "x", "namespace": "dpdk"}, "spec": {"containers": []}}
        body = json.dumps({"Pod": pod, "NodeNames": ["hp-full", "hp-roomy-1"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            assert json.loads(response.read())["NodeNames"] == ["hp-full", "hp-roomy-1"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0  # a graceful stop on SIGTERM
        log.close()
    assert "loaded the bundled example snapshot: 8 nodes" in Path(tmp_path / "serve.log").read_text()


def _serve_fails(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``hugepage-extender *args`` as a process; its exit code and stderr."""
    run = subprocess.run(
        [sys.executable, "-m", "extender", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return run.returncode, run.stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--log-level", "loud", "serve", "--example"], {}, "--log-level: 'loud' is not one of"),
        (["serve", "--example"], {"LOG_LEVEL": "chatty"}, "--log-level: 'chatty' is not one of"),
        (["serve", "--example", "--port", "99999"], {}, "--port: '99999' is not a port"),
        (["serve", "--example", "--port", "http"], {}, "--port: 'http' is not a whole number"),
        (
            ["serve", "--example", "--tls-cert-file", "/no/such.crt", "--tls-key-file", "/no/such.key"],
            {},
            "/no/such.crt",
        ),
        (["serve", "--kubeconfig", "/no/such/kubeconfig"], {}, "cannot start"),
        (["serve", "--kubeconfig", "not-yaml.kubeconfig"], {}, "cannot start"),
        (["serve", "--in-cluster"], {"KUBERNETES_SERVICE_HOST": ""}, "cannot start"),
        (["serve", "--example", "--config", "k0.yaml"], {}, "defaults.sampleSize: 0 with mode enforce"),
        (
            ["serve", "--example", "--shutdown-timeout", "nan"],
            {},
            "--shutdown-timeout: 'nan' is not a number of seconds",
        ),
    ],
)
def test_startup_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    (tmp_path / "not-yaml.kubeconfig").write_text("{[: not yaml")
    (tmp_path / "k0.yaml").write_text("defaults: {mode: enforce, sampleSize: 0}\n")
    code, err = _serve_fails(args, tmp_path, env)
    assert code == 2, err
    assert one_error_line(err).count(named) == 1, err


def one_error_line(stderr: str) -> str:
    """The one line naming the problem: the last, and no traceback before it (log lines may be)."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("hugepage-extender")] == lines[-1:], stderr
    return lines[-1]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = _serve_fails(["serve", "--example", "--port", str(port)], tmp_path)
    assert code == 2, err
    line = one_error_line(err)
    assert "cannot start" in line
    assert "address already in use" in line


def test_sample_size_beyond_holds_is_accepted_with_bind(tmp_path: Path) -> None:
    # With --enable-bind the same config passes this check (and then needs a cluster).
    (tmp_path / "k0.yaml").write_text("defaults: {mode: enforce, sampleSize: 0}\n")
    code, err = _serve_fails(["serve", "--example", "--config", "k0.yaml", "--enable-bind"], tmp_path)
    assert code == 2
    assert "--enable-bind needs a cluster" in err


def test_kubectl_hugepages_shadow_needs_the_running_extender(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HUGEPAGE_EXTENDER_URL", raising=False)
    assert kubectl_plugin.main(["shadow", "payments"]) == 1
    assert "give --extender or --extender-service" in capsys.readouterr().err
