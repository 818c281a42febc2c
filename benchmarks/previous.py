"""Filter on full clusters over HTTP: this checkout against an earlier commit, in one run.

A refactoring must not cost the scheduler time. The earlier commit (``rev``, e.g. the commit before
a change began) is checked out into a temporary git worktree and its own
``benchmarks.extender_server`` runs from there (``python -m`` imports the checkout it runs in first),
beside this checkout's, on the same cluster (``benchmarks.full_cluster``'s nodes, share of pools full
and cases). Both guard one page size, and two more servers (one each) guard two
(``full_cluster.RESOURCE_NAMES``), sent each case's pod of 2 MiB pages and the same pod asking a
1 GiB page besides. One keep-alive client sends every target in turn, every other round in the
reverse order, so both commits see the same moments of the machine.

``x previous`` is each round's ratio of medians, this checkout over the earlier one, median and
range over the rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.cluster import node_documents
from benchmarks.full_cluster import BOTH_SIZES, CASES, ONE_GIB_POOL, RESOURCE_NAMES, Times, _measure, case_bodies
from benchmarks.http_decision import REPO_ROOT, server_process

COLUMNS = [
    "full %",
    "case",
    "sizes",
    "p50 ms",
    "previous p50 ms",
    "x previous",
    "x min",
    "x max",
    "passed",
]
# The servers of each commit: their extra arguments, and which request body each is sent.
SERVERS = {
    "one size": ((), "one"),
    "two sizes": (("--resource-names", RESOURCE_NAMES), "one"),
    "both sizes": (("--resource-names", RESOURCE_NAMES), "both"),
}


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """``rev`` of this repository in a temporary worktree, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="benchmark-previous-") as parent:
        path = Path(parent) / "checkout"
        git = ["git", "-C", str(REPO_ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", "--quiet", str(path), rev], check=True)
        try:
            yield path
        finally:
            subprocess.run([*git, "remove", "--force", str(path)], check=True)


def run(
    rev: str,
    *,
    nodes: int = 5000,
    shares: Sequence[int] = (10, 50, 90, 99, 100),
    rounds: int = 5,
    requests: int = 40,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """One row per share, case and server shape (``SERVERS``): this checkout over ``rev``."""
    documents = node_documents(nodes)
    bodies = {"one": case_bodies(documents), "both": case_bodies(documents, one_gib=BOTH_SIZES)}
    rows: list[dict[str, Any]] = []
    with checkout(rev) as previous:
        for share in shares:
            shape = ["--nodes", str(nodes), "--full-percent", str(share), "--one-gib-pool", ONE_GIB_POOL]
            with contextlib.ExitStack() as stack:
                urls = {
                    (commit, shape_name): stack.enter_context(
                        server_process("benchmarks.extender_server", *shape, *extra, cwd=root)
                    ).url
                    for commit, root in (("this", REPO_ROOT), ("previous", previous))
                    for shape_name, (extra, _) in SERVERS.items()
                }
                targets = [
                    (f"{commit} {shape_name} {case}", f"{urls[commit, shape_name]}/filter", bodies[kind][case])
                    for case in CASES
                    for shape_name, (_, kind) in SERVERS.items()
                    for commit in ("this", "previous")
                ]
                per_round, answers = asyncio.run(_measure(targets, rounds, requests))
            rows += _rows(share, per_round, answers, rounds * requests)
            log(f"previous: {share}% full measured")
    return rows


def _rows(share: int, per_round: list[Times], answers: dict[str, bytes], requests: int) -> list[dict[str, Any]]:
    def p50(name: str) -> float:
        return statistics.median(t for one in per_round for t in one[name]) * 1000

    rows = []
    for case in CASES:
        for shape_name in SERVERS:
            this, previous = f"this {shape_name} {case}", f"previous {shape_name} {case}"
            ratios = [statistics.median(one[this]) / statistics.median(one[previous]) for one in per_round]
            passed = [len(msgspec.json.decode(answers[name]).get("NodeNames") or []) for name in (this, previous)]
            rows.append(
                {
                    "full %": share,
                    "case": case,
                    "sizes": shape_name,
                    "requests": requests,
                    "p50 ms": p50(this),
                    "previous p50 ms": p50(previous),
                    "x previous": statistics.median(ratios),
                    "x min": min(ratios),
                    "x max": max(ratios),
                    "passed": "/".join(map(str, passed)),
                }
            )
    return rows
