"""The command lines the docs show for this project's commands use only flags those commands
have: `hugepage-extender serve|explain|node-agent ...`, `kubectl hugepages ...` and `python -m
replay ...`, in fenced blocks (continuation lines joined) and in backticked spans; and `make`
only targets and variables the Makefile has. A renamed or removed flag or target breaks this
test instead of a reader's copy-paste."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from extender.cli import build_parser
from extender.shell.kubectl_plugin import build_parser as build_plugin_parser
from replay.cli import add_parser as add_replay_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "e2e" / "kind" / "README.md"})
COMMAND = re.compile(r"(?:hugepage-extender|kubectl[ -]hugepages)\s+([a-z-]+)([^`\n|;&)]*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def options(parser: argparse.ArgumentParser) -> dict[str, set[str]]:
    """Subcommand -> its long options (with the parser's own, which every subcommand accepts)."""
    top = {s for a in parser._actions for s in a.option_strings if s.startswith("--")}
    found: dict[str, set[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = top | {s for a in sub._actions for s in a.option_strings if s.startswith("--")}
    return found


OURS = options(build_parser())
PLUGIN = options(build_plugin_parser())
_replay_commands = argparse.ArgumentParser().add_subparsers()
REPLAY = {s for a in add_replay_parser(_replay_commands)._actions for s in a.option_strings if s.startswith("--")}
REPLAY_COMMAND = re.compile(r"python -m replay([^`\n|;&)#]*)")


def command_lines(text: str) -> list[str]:
    joined = text.replace("\\\n", " ")
    spans = re.findall(r"```[a-z]*\n(.*?)```", joined, re.DOTALL)
    lines = [line for span in spans for line in span.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", joined)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_a_doc_gives_our_commands_exists(doc: Path) -> None:
    unknown = []
    for line in command_lines(doc.read_text()):
        for match in COMMAND.finditer(line):
            table = PLUGIN if match[0].startswith("kubectl") else OURS
            known = table.get(match[1])
            if known is None:
                continue  # not a subcommand (prose: "hugepage-extender is ...")
            unknown += [f"{match[1]} {flag}" for flag in FLAG.findall(match[2]) if flag not in known]
        for match in REPLAY_COMMAND.finditer(line):
            unknown += [f"replay {flag}" for flag in FLAG.findall(match[1]) if flag not in REPLAY]
    assert not unknown, f"{doc.name}: {unknown}"


def test_the_check_knows_the_commands() -> None:
    assert "--nudge-pod" in OURS["serve"]
    assert "--extender" in PLUGIN["explain"]
    assert {"--quick", "--out", "--seed"} <= REPLAY
    assert command_lines("```sh\nhugepage-extender serve \\\n  --nudge-pod a/b\n```")[0].endswith("--nudge-pod a/b")


MAKEFILE = (ROOT / "Makefile").read_text()
TARGETS = set(re.findall(r"^([a-z][a-z0-9-]*):", MAKEFILE, re.MULTILINE))
VARIABLES = set(re.findall(r"^([A-Z_0-9]+) *[?:]?=", MAKEFILE, re.MULTILINE))
# `make [VAR=value ...] target [VAR=value ...]`, at a line's or a span's start or after `;`, `&&`, `|`
# or a comment's `or:`.
ASSIGNMENTS = r"((?:\s+[A-Z_0-9]+=\S+)*)"
MAKE = re.compile(r"(?:^|[;&|:]\s*)(?:flock \S+ |CI=\S+ )*make" + ASSIGNMENTS + r"\s+([a-z][a-z0-9-]*)" + ASSIGNMENTS)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_and_variable_a_doc_gives_exists(doc: Path) -> None:
    unknown = []
    for line in command_lines(doc.read_text()):
        for match in MAKE.finditer(line.strip()):
            if match[2] not in TARGETS:
                unknown.append(f"make {match[2]}")
            variables = re.findall(r"([A-Z_0-9]+)=", match[1] + match[3])
            unknown += [f"make {match[2]} {name}=" for name in variables if name not in VARIABLES]
    assert not unknown, f"{doc.name}: {unknown}"


def test_the_make_check_knows_the_targets() -> None:
    assert {"run", "test", "unit", "core", "chart", "image", "soak", "kind-e2e", "tools"} <= TARGETS
    assert {"KIND_E2E", "SOAK_MINUTES", "IMAGE", "ARGS"} <= VARIABLES
    assert [m[2] for m in MAKE.finditer("make test KIND_E2E=0")] == ["test"]
    assert [m[2] for m in MAKE.finditer("CI=true flock /work/locks/kind.lock make kind-e2e")] == ["kind-e2e"]
