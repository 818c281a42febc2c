"""The ``replay`` command through argparse, as ``python -m replay`` runs it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli import main as cli_main
from replay import add_parser
from replay.__main__ import main as replay_main
from replay.cli import command_line, settings_from_args
from replay.model import Blind, Ladder, Trace
from tests.conftest import ROOT


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m")
    add_parser(top.add_subparsers(dest="command", required=True))
    return top


def run(*argv: str) -> int:
    args = parser().parse_args(["replay", *argv])
    return int(args.run(args))


@pytest.mark.slow
def test_quick_runs_the_whole_matrix_and_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # How long it takes is printed by the replay itself, not asserted: a shared
    # machine's load decides that.
    assert run("--quick", "--out", str(tmp_path), "--seed", "3") == 0
    captured = capsys.readouterr()
    assert f"wrote {tmp_path / 'report.md'}" in captured.out
    assert "quick replay [" in captured.err  # the progress bar
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["command"] == "python -m replay --quick --seed 3"
    assert len(summary["variants"]) == 24
    assert summary["scale"]["node_count"] == 5000


def test_options_shape_the_settings(tmp_path: Path) -> None:
    options = "--quick --ladder 5,50 --step-seconds 30 --variants off,enforce:k1 --blind random --scale-nodes 0"
    args = parser().parse_args(["replay", *options.split(), "--out", str(tmp_path)])
    settings = settings_from_args(args)
    assert settings.scenario.workload == Ladder((5, 50), 30.0)
    assert [v.name for v in settings.variants] == ["off", "enforce:fullscan:k1"]
    assert settings.blind is Blind.RANDOM
    assert settings.scale is None
    assert command_line(args) == (
        "python -m replay --quick --seed 1 --step-seconds 30.0 --variants off,enforce:k1"
        " --scale-nodes 0 --ladder 5,50 --blind random"
    )


def test_a_trace_replaces_the_ladder(tmp_path: Path) -> None:
    trace = tmp_path / "arrivals.csv"
    rows = [f"{t},vm,16Gi,2,300" for t in range(0, 60, 2)]
    trace.write_text("time,namespace,hugepages,cpu,lifetime\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    argv = ["--quick", "--trace", str(trace), "--windows", "3", "--variants", "off,enforce:k3:inflight=bind"]
    assert run(*argv, "--scale-nodes", "0", "--no-progress", "--out", str(out)) == 0
    settings = settings_from_args(parser().parse_args(["replay", *argv]))
    assert isinstance(settings.scenario.workload, Trace)
    summary = json.loads((out / "summary.json").read_text())
    # Three equal windows from 0 to the last arrival (58 s).
    assert [s["label"] for s in summary["variants"][0]["steps"]] == ["0-19 s", "19-39 s", "39-58 s"]
    assert sum(s["attempts"] for s in summary["variants"][0]["steps"]) == 30
    assert summary["variants"][1]["total"]["failed_node"] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", "enforce:wide"], "unknown token 'wide'"),
        (["--scenario", "/nonexistent.yaml"], "cannot read scenario /nonexistent.yaml"),
        (["--trace", "/nonexistent.csv"], "cannot read trace /nonexistent.csv"),
    ],
)
def test_bad_input_is_a_clear_error_and_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--quick", "--no-progress", "--out", str(tmp_path), *argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("argv", [["--ladder", "10,x"], ["--step-seconds", "0"], ["--windows", "0"]])
def test_bad_option_values_are_refused_by_argparse(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parser().parse_args(["replay", *argv])
    assert exit_info.value.code == 2


def test_python_dash_m_runs_the_same_subcommand(tmp_path: Path) -> None:
    argv = ["--quick", "--variants", "off", "--scale-nodes", "0", "--no-progress", "--out", str(tmp_path)]
    assert replay_main(argv) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["variants"][0]["name"] == "off"


def test_the_replay_loads_matplotlib_only_for_a_report() -> None:
    probe = "import sys, replay; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], check=False, cwd=ROOT).returncode == 0


def test_the_extender_never_loads_the_replay() -> None:
    """The replay left the package the image ships: `serve` and the CLI import neither it nor matplotlib."""
    probe = "import sys, extender.cli; sys.exit(any(m in sys.modules for m in ('replay', 'matplotlib')))"
    assert subprocess.run([sys.executable, "-c", probe], check=False, cwd=ROOT).returncode == 0


def test_the_old_command_says_where_the_replay_went(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["replay", "--quick", "--seed", "3"]) == 2
    assert "run `python -m replay --quick --seed 3` in the source tree" in capsys.readouterr().err


def test_matplotlib_is_only_the_replay_extra() -> None:
    """`pip install .` brings no plotting: the server never needs it."""
    from importlib.metadata import requires  # noqa: PLC0415

    plotting = [r for r in requires("hugepage-extender") or [] if r.startswith("matplotlib")]
    assert plotting
    assert all('extra == "replay"' in r for r in plotting), plotting
