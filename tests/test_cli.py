"""The command line: explain's table and JSON, and serve with no arguments."""

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

from extender.cli import main
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
    assert main(["serve", "--config", str(config)]) == 2
    assert "defaults.mode: Invalid enum value 'sometimes'" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_serve_with_no_arguments_serves_the_bundled_example(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "extender", "serve", "--port", str(port)], stdout=log, stderr=log, env=env
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
