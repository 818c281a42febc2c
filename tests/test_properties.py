"""Properties: admission and ranking never disagree; fullscan never fails falsely."""

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from extender.core.answer import FilterDecision, Reasons
from extender.core.capacity import Fit, NodeAccount, ceiling_bytes, fits, headroom_bytes, numa_headroom_bytes
from extender.core.columnar import VECTOR_THRESHOLD
from extender.core.columns import FIELDS as COLUMN_FIELDS
from extender.core.columns import NodeColumns
from extender.core.config import DEFAULT_RESOURCE, build_config
from extender.core.decision import filter_nodes, filter_sizes, prioritize_nodes, prioritize_sizes
from extender.core.namelist import NameList
from extender.core.nodereport import PoolReport
from extender.core.objects import ObjectMeta, Pod, PodSpec
from extender.core.podrequest import PodDemand, SizeNeed
from extender.core.policy import Mode, Policy, Widening
from extender.core.reference import SizeView, admission, rejections_of, size_load, size_verdict
from extender.core.scoring import hugepage_load, node_load, priorities, priority
from extender.shell.wire import ExtenderArgs, render_filter
from extender.state.cluster import ClusterState
from tests.conftest import Clock, examples, make_node, make_pod

PAGE = 2 * 1024 * 1024
REASONS = Reasons.for_resource("hugepages-2Mi")


@st.composite
def accounts(draw: st.DrawFn) -> NodeAccount:
    total = draw(st.integers(0, 2000))
    return NodeAccount(
        page_size=draw(st.sampled_from([PAGE, PAGE, PAGE, 0])),  # 0: a node the extender does not know
        total_pages=total,
        used_pages=draw(st.integers(0, 2200)),
        outside_pods_pages=draw(st.integers(0, 300)),
        held_bytes=draw(st.integers(0, 400)) * PAGE // draw(st.sampled_from([1, 3])),
        cpu_millis=draw(st.integers(0, 64_000)),
        cpu_requested_millis=draw(st.integers(0, 64_000)),
        numa_free_pages=draw(st.one_of(st.just(-1), st.integers(0, 2000))),
    )


clusters = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), accounts(), max_size=25)
demands = st.builds(
    lambda need, cpu: PodDemand({DEFAULT_RESOURCE: need}, cpu), st.integers(1, 5000 * PAGE), st.integers(0, 8000)
)
policies = st.builds(
    Policy,
    mode=st.just(Mode.ENFORCE),
    sample_size=st.integers(0, 6),
    widening=st.sampled_from(list(Widening)),
    alpha=st.floats(0, 2),
)


def _columns_of(accounts: Mapping[str, NodeAccount]) -> NodeColumns:
    columns = NodeColumns(capacity=2)
    for name, account in accounts.items():
        columns.put(name, account)
    return columns


def _candidates(names: list[str], *, in_place: bool) -> Sequence[str]:
    """The names as given, or read in place from the request's bytes (``NameList``), as the server does."""
    if not in_place:
        return names
    read = NameList.read(msgspec.json.encode(names))
    assert read is not None
    return read


@settings(max_examples=examples(300), deadline=None)
@given(account=accounts(), demand=demands)
def test_fits_is_exactly_a_committed_load_of_at_most_one(account: NodeAccount, demand: PodDemand) -> None:
    verdict = fits(account, demand.bytes_of(DEFAULT_RESOURCE))
    if not account.known:
        assert verdict is Fit.UNKNOWN
    elif not account.has_pool:
        assert verdict is Fit.NO_POOL
    else:
        assert (verdict is Fit.FITS) == (hugepage_load(account, demand.of_one(DEFAULT_RESOURCE), alpha=0.0) <= 1.0)


@settings(max_examples=examples(300), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, seed=st.integers())
def test_filter_and_prioritize_never_disagree(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, seed: int
) -> None:
    names = list(cluster)
    decision = filter_nodes(demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed))
    assert set(decision.passed) <= set(names)
    if policy.sample_size:
        assert len(decision.passed) <= policy.sample_size
    scores = dict(prioritize_nodes(demand, decision.passed, accounts=cluster, policy=policy))
    for name in decision.passed:
        account = cluster[name]
        assert fits(account, demand.bytes_of(DEFAULT_RESOURCE)).admits
        if account.has_pool:
            assert hugepage_load(account, demand.of_one(DEFAULT_RESOURCE), alpha=0.0) <= 1.0
        assert 0 <= scores[name] <= 10
    for name in (*decision.failed, *decision.unresolvable):
        assert name not in decision.passed
    if not decision.passed:
        assert set(decision.failed) | set(decision.unresolvable) == set(names)


@settings(max_examples=examples(300), deadline=None)
@given(cluster=clusters, demand=demands, k=st.integers(0, 6), seed=st.integers())
def test_fullscan_never_fails_when_a_node_fits(
    cluster: dict[str, NodeAccount], demand: PodDemand, k: int, seed: int
) -> None:
    names = list(cluster)
    any_fits = any(fits(a, demand.bytes_of(DEFAULT_RESOURCE)).admits for a in cluster.values())
    for widening in (Widening.FULLSCAN, Widening.DRAW_UNTIL_K):
        policy = Policy(mode=Mode.ENFORCE, sample_size=k, widening=widening)
        decision = filter_nodes(
            demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed)
        )
        assert bool(decision.passed) == any_fits


@settings(max_examples=examples(300), deadline=None)
@given(account=accounts(), demand=demands)
def test_headroom_is_exactly_fits(account: NodeAccount, demand: PodDemand) -> None:
    assert fits(account, demand.bytes_of(DEFAULT_RESOURCE)).admits == (
        demand.bytes_of(DEFAULT_RESOURCE) <= headroom_bytes(account)
    )


@settings(max_examples=examples(300), deadline=None)
@given(account=accounts(), demand=demands)
def test_ceiling_is_exactly_unresolvable(account: NodeAccount, demand: PodDemand) -> None:
    assume(demand.bytes_of(DEFAULT_RESOURCE) > 0)
    unresolvable = fits(account, demand.bytes_of(DEFAULT_RESOURCE)).unresolvable
    assert unresolvable == (demand.bytes_of(DEFAULT_RESOURCE) > ceiling_bytes(account))


@settings(max_examples=examples(300), deadline=None)
@given(account=accounts(), demand=demands)
def test_numa_headroom_is_exactly_fits_numa_aligned(account: NodeAccount, demand: PodDemand) -> None:
    room = min(headroom_bytes(account), numa_headroom_bytes(account))
    assert fits(account, demand.bytes_of(DEFAULT_RESOURCE), numa_aligned=True).admits == (
        demand.bytes_of(DEFAULT_RESOURCE) <= room
    )


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, seed=st.integers())
def test_the_headroom_table_decides_as_the_accounts_do(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, seed: int
) -> None:
    names = [*cluster, "unknown-node"]
    table = {name: headroom_bytes(account) for name, account in cluster.items()}
    with_table = filter_nodes(
        demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed), headroom=table
    )
    without = filter_nodes(demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed))
    assert with_table == without


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, score_hugepages=st.booleans())
def test_vectorized_scores_equal_the_scalar_ones(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, score_hugepages: bool
) -> None:
    policy = dataclasses.replace(policy, score_hugepages=score_hugepages)
    columns = _columns_of(cluster)  # from 2 slots: it grows
    names = [*cluster, "unknown-node"]
    vector = priorities(demand.of_one(DEFAULT_RESOURCE), columns.slots(names), columns, policy).tolist()
    scalar = [
        priority(node_load(cluster.get(n, NodeAccount()), demand.of_one(DEFAULT_RESOURCE), policy)) for n in names
    ]
    assert vector == scalar
    for name in list(cluster)[::2]:
        columns.drop(name)
    assert priorities(demand.of_one(DEFAULT_RESOURCE), columns.slots(names), columns, policy).tolist() == [
        priority(
            node_load(
                cluster.get(n, NodeAccount()) if i % 2 else NodeAccount(), demand.of_one(DEFAULT_RESOURCE), policy
            )
        )
        if n in cluster
        else priority(node_load(NodeAccount(), demand.of_one(DEFAULT_RESOURCE), policy))
        for i, n in enumerate(names)
    ]


@settings(max_examples=examples(200), deadline=None)
@given(
    cluster=clusters,
    demand=demands,
    mode=st.sampled_from([Mode.ENFORCE, Mode.SHADOW]),
    picks=st.lists(st.integers(0, 30), min_size=VECTOR_THRESHOLD + 1, max_size=150),
    in_place=st.booleans(),
    distinct=st.booleans(),
)
def test_examining_every_candidate_on_the_columns_decides_as_the_table_does(  # noqa: PLR0917 (hypothesis)
    cluster: dict[str, NodeAccount], demand: PodDemand, mode: Mode, picks: list[int], in_place: bool, distinct: bool
) -> None:
    known = sorted(cluster)
    names = [known[p] if p < len(known) else f"unknown-{p}" for p in picks]  # repeats too
    if distinct:  # as the scheduler sends them: each name once, and mostly rejected
        names = [*dict.fromkeys(names), *(f"gone-{i}" for i in range(VECTOR_THRESHOLD + 1))]
        cluster = cluster | dict.fromkeys((n for n in names if n.startswith("gone-")), NodeAccount(page_size=PAGE))
    candidates = _candidates(names, in_place=in_place)
    columns = _columns_of(cluster)
    table = {name: headroom_bytes(account) for name, account in cluster.items()}
    policy = Policy(mode=mode, sample_size=0)
    rng = random.Random(1)
    kwargs = {"accounts": cluster, "policy": policy, "reasons": REASONS, "rng": rng, "headroom": table}
    vector = filter_nodes(demand, candidates, columns=columns, **kwargs)  # type: ignore[arg-type]
    scalar = filter_nodes(demand, names, **kwargs)  # type: ignore[arg-type]
    assert list(vector.passed) == list(scalar.passed)
    assert dataclasses.replace(vector, passed=[]) == dataclasses.replace(scalar, passed=[])
    # And the answers the scheduler reads are the same JSON (the rejected written by joins when read in place).
    pod = Pod(metadata=ObjectMeta(name="p", namespace="default", uid="u"), spec=PodSpec(containers=[]))
    answers = [
        msgspec.json.decode(render_filter(ExtenderArgs(pod, c), d)) for c, d in ((candidates, vector), (names, scalar))
    ]
    assert answers[0] == answers[1]
    if not scalar.passed and mode is Mode.ENFORCE:
        assert answers[0]["FailedNodes"] == {}
        assert answers[0]["FailedAndUnresolvableNodes"] == {**scalar.failed, **scalar.unresolvable}


# One need (1 GiB of 2 MiB pages) and an account per verdict it can get, for clusters of many nodes
# where few fit: a best-of-K scan there goes on past its first round (sampling.SHUFFLE_REST_ABOVE).
NEED_PAGES = 512
VERDICT_ACCOUNTS = {
    Fit.FITS: NodeAccount(page_size=PAGE, total_pages=2000, used_pages=100),
    Fit.INSUFFICIENT: NodeAccount(page_size=PAGE, total_pages=2000, used_pages=1900),
    Fit.NO_POOL: NodeAccount(page_size=PAGE),
    Fit.EXCEEDS_POOL: NodeAccount(page_size=PAGE, total_pages=100),
    Fit.HELD_OUTSIDE: NodeAccount(page_size=PAGE, total_pages=1000, outside_pods_pages=900),
}


@settings(max_examples=examples(200), deadline=None)
@given(
    verdicts=st.lists(
        st.sampled_from([*VERDICT_ACCOUNTS, None]),  # None: a node the extender does not know (admitted)
        min_size=VECTOR_THRESHOLD + 1,
        max_size=400,
    ),
    fit_one_in=st.sampled_from([1, 3, 10, 10, 30, 1000]),
    k=st.integers(1, 20),
    widening=st.sampled_from(list(Widening)),
    seed=st.integers(),
    in_place=st.sampled_from([True, True, False]),  # as the scheduler sends them: read in place,
    repeat=st.sampled_from([False, False, True]),  # each name once
)
def test_best_of_k_on_the_columns_decides_as_one_node_at_a_time(  # noqa: PLR0917 (hypothesis)
    verdicts: list[Fit | None],
    fit_one_in: int,
    k: int,
    widening: Widening,
    seed: int,
    in_place: bool,
    repeat: bool,
) -> None:
    # Few admitted (nearly full clusters): most of what would be admitted becomes full instead.
    rng = random.Random(seed)
    kinds = [Fit.INSUFFICIENT if v in (Fit.FITS, None) and rng.randrange(fit_one_in) else v for v in verdicts]
    cluster = {f"n{i}": VERDICT_ACCOUNTS[v] for i, v in enumerate(kinds) if v is not None}
    names = [f"n{i}" for i in range(len(kinds))] + (["n0", "n1"] if repeat else [])  # a name given twice
    candidates = _candidates(names, in_place=in_place)
    columns = _columns_of(cluster)
    table = {name: headroom_bytes(account) for name, account in cluster.items()}
    demand = PodDemand({DEFAULT_RESOURCE: NEED_PAGES * PAGE}, 100)
    policy = Policy(mode=Mode.ENFORCE, sample_size=k, widening=widening)

    def decide(c: Sequence[str], with_columns: bool) -> tuple[FilterDecision, dict[str, object]]:
        decision = filter_nodes(
            demand,
            c,
            accounts=cluster,
            policy=policy,
            reasons=REASONS,
            rng=random.Random(seed),
            headroom=table,
            columns=columns if with_columns else None,
        )
        pod = Pod(metadata=ObjectMeta(name="p", namespace="default", uid="u"), spec=PodSpec(containers=[]))
        return decision, msgspec.json.decode(render_filter(ExtenderArgs(pod, c), decision))

    (vector, vector_answer), (scalar, scalar_answer) = decide(candidates, True), decide(names, False)
    assert list(vector.passed) == list(scalar.passed)  # the same picks, in the same order
    assert dataclasses.replace(vector, passed=[]) == dataclasses.replace(scalar, passed=[])
    assert vector_answer == scalar_answer


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, seed=st.integers(), numa=st.booleans())
def test_every_rejected_node_gets_the_reason_of_its_verdict(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, seed: int, numa: bool
) -> None:
    policy = dataclasses.replace(policy, numa_aligned=numa)
    demand = dataclasses.replace(demand, guaranteed=numa)
    names = [*cluster, "unknown-node"]
    decision = filter_nodes(demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed))
    for rejected in (decision.failed, decision.unresolvable):
        for name, reason in rejected.items():
            if reason == REASONS.not_sampled:
                continue
            verdict = fits(cluster.get(name, NodeAccount()), demand.bytes_of(DEFAULT_RESOURCE), numa_aligned=numa)
            assert reason == REASONS.of(verdict)
            assert (rejected is decision.unresolvable) == verdict.unresolvable


def test_needs_and_pools_beyond_int64_decide_as_the_scalar_path() -> None:
    huge = NodeAccount(page_size=PAGE, total_pages=1 << 60, cpu_millis=1 << 20)
    cluster = {f"n{i}": huge if i % 2 else NodeAccount(page_size=PAGE, total_pages=100) for i in range(80)}
    columns = NodeColumns()
    for name, account in cluster.items():
        columns.put(name, account)
    names = sorted(cluster)
    table = {name: headroom_bytes(account) for name, account in cluster.items()}
    for need in (PAGE, 1 << 63, 1 << 70):
        demand = PodDemand({DEFAULT_RESOURCE: need}, 1 << 70)
        for mode in (Mode.ENFORCE, Mode.SHADOW):
            policy = Policy(mode=mode, sample_size=0)
            kwargs = {"accounts": cluster, "policy": policy, "reasons": REASONS, "rng": random.Random(1)}
            vector = filter_nodes(demand, names, headroom=table, columns=columns, **kwargs)  # type: ignore[arg-type]
            assert vector == filter_nodes(demand, names, headroom=table, **kwargs)  # type: ignore[arg-type]
        scores = prioritize_nodes(demand, names, accounts=cluster, policy=Policy(mode=Mode.ENFORCE), columns=columns)
        assert list(scores) == list(prioritize_nodes(demand, names, accounts=cluster, policy=Policy(mode=Mode.ENFORCE)))


# --------------------------------------------------------------------------- every page size the pod needs

GIB = 1 << 30
REASONS_1G = Reasons.for_resource("hugepages-1Gi")


@st.composite
def gig_accounts(draw: st.DrawFn) -> NodeAccount:
    """A node's 1 GiB pool: a few pages, as such pools are."""
    total = draw(st.integers(0, 16))
    return NodeAccount(
        page_size=draw(st.sampled_from([GIB, GIB, GIB, 0])),
        total_pages=total,
        used_pages=draw(st.integers(0, 18)),
        outside_pods_pages=draw(st.integers(0, 4)),
        held_bytes=draw(st.integers(0, 6)) * GIB,
        cpu_millis=draw(st.integers(0, 64_000)),
        cpu_requested_millis=draw(st.integers(0, 64_000)),
        numa_free_pages=draw(st.one_of(st.just(-1), st.integers(0, 16))),
    )


two_size_clusters = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=4), st.tuples(accounts(), gig_accounts()), max_size=25
)


def _views(cluster: dict[str, tuple[NodeAccount, NodeAccount]], need_2m: int, need_1g: int) -> list[SizeView]:
    small = {name: pair[0] for name, pair in cluster.items()}
    large = {name: pair[1] for name, pair in cluster.items()}
    return [SizeView(need_2m, small, REASONS), SizeView(need_1g, large, REASONS_1G)]


@settings(max_examples=examples(300), deadline=None)
@given(
    cluster=two_size_clusters,
    need_2m=st.integers(1, 500 * PAGE),
    need_1g=st.integers(1, 8 * GIB),
    kept_headroom=st.booleans(),
)
def test_rejected_nodes_over_two_sizes_get_the_verdict_of_size_verdict(
    cluster: dict[str, tuple[NodeAccount, NodeAccount]], need_2m: int, need_1g: int, kept_headroom: bool
) -> None:
    # rejections_of tells a rejected node's verdict over several sizes from each size's ceiling and
    # headroom, calling fits only for the unresolvable: the same verdict, size and reason as size_verdict.
    views = _views(cluster, need_2m, need_1g)
    if kept_headroom:  # as the cluster state keeps it beside the accounts
        views = [
            dataclasses.replace(view, headroom={name: headroom_bytes(a) for name, a in view.accounts.items()})
            for view in views
        ]
    admits = admission(views, numa=False)
    rejected = [name for name in [*cluster, "not-a-node"] if not admits(name)]
    rejections = rejections_of(rejected, views, numa=False, mode=Mode.ENFORCE)
    counted = [[0, 0], [0, 0]]
    for name in rejected:
        verdict, view = size_verdict(views, name, numa=False)
        reasons = rejections.unresolvable if verdict.unresolvable else rejections.failed
        assert reasons[name] == view.reasons.of(verdict)
        counted[0 if view is views[0] else 1][verdict.unresolvable] += 1
    assert rejections.by_size == tuple(map(tuple, counted))


@settings(max_examples=examples(300), deadline=None)
@given(
    cluster=two_size_clusters,
    need_2m=st.integers(1, 500 * PAGE),
    need_1g=st.integers(1, 8 * GIB),
    policy=policies,
    seed=st.integers(),
    numa=st.booleans(),
)
def test_a_pod_of_two_sizes_is_admitted_only_where_each_pool_holds_it(  # noqa: PLR0917 (hypothesis)
    cluster: dict[str, tuple[NodeAccount, NodeAccount]],
    need_2m: int,
    need_1g: int,
    policy: Policy,
    seed: int,
    numa: bool,
) -> None:
    policy = dataclasses.replace(policy, numa_aligned=numa)
    demand = PodDemand({"hugepages-2Mi": need_2m, "hugepages-1Gi": need_1g}, 500, guaranteed=True)
    views = _views(cluster, need_2m, need_1g)
    names = list(cluster)
    decision = filter_sizes(demand, names, views=views, policy=policy, rng=random.Random(seed))
    both = {
        name
        for name, (small, large) in cluster.items()
        if fits(small, need_2m, numa_aligned=numa).admits and fits(large, need_1g, numa_aligned=numa).admits
    }
    assert set(decision.passed) <= both
    if policy.sample_size == 0 or policy.widening is Widening.FULLSCAN:
        assert bool(decision.passed) == bool(both)  # fullscan and K = 0 never fail while a node fits
    if policy.sample_size == 0:
        assert list(decision.passed) == [n for n in names if n in both]
    counted = [[0, 0], [0, 0]]  # per size: the rejected whose verdict comes from it, short of room and never
    for name, reason in {**decision.failed, **decision.unresolvable}.items():
        if reason == REASONS.not_sampled:
            continue
        verdict, view = size_verdict(views, name, numa=numa)
        assert reason == view.reasons.of(verdict)
        assert (name in decision.unresolvable) == verdict.unresolvable
        counted[0 if view is views[0] else 1][verdict.unresolvable] += 1
    assert decision.by_size == tuple(map(tuple, counted))  # the metrics' counts by size
    assert (decision.insufficient, decision.exceeds_pool) == (
        counted[0][0] + counted[1][0],
        counted[0][1] + counted[1][1],
    )
    # Ranking agrees with admission: every admitted node's tightest pool is within 1 at alpha 0.
    scores = dict(prioritize_sizes(demand, decision.passed, views=views, policy=policy))
    for name in decision.passed:
        small, large = cluster[name]
        for account, need in ((small, need_2m), (large, need_1g)):
            if account.has_pool:
                assert hugepage_load(account, SizeNeed(need, 0), alpha=0.0) <= 1.0
        assert scores[name] == priority(size_load(views, name, demand, policy))


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, seed=st.integers())
def test_one_size_through_filter_sizes_is_filter_nodes(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, seed: int
) -> None:
    """A pod of one size (in a cluster of several) is decided and scored by the one-size code itself."""
    names = list(cluster)
    view = SizeView(demand.bytes_of(DEFAULT_RESOURCE), cluster, REASONS)
    alone = filter_nodes(demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed))
    sized = filter_sizes(demand, names, views=[view], policy=policy, rng=random.Random(seed))
    assert sized == alone
    scored = prioritize_sizes(demand, names, views=[view], policy=policy)
    assert list(scored) == list(prioritize_nodes(demand, names, accounts=cluster, policy=policy))


@settings(max_examples=examples(200), deadline=None)
@given(cluster=clusters, demand=demands, policy=policies, seed=st.integers())
def test_a_size_every_node_can_hold_changes_no_decision(
    cluster: dict[str, NodeAccount], demand: PodDemand, policy: Policy, seed: int
) -> None:
    """The two-size path over a second size with room everywhere decides as the one-size path: the
    node-by-node judgement of several sizes is the reference's, only combined."""
    policy = dataclasses.replace(policy, sample_size=0)  # every candidate: no draws to line up
    names = list(cluster)
    roomy = {name: NodeAccount(page_size=GIB, total_pages=64, cpu_millis=a.cpu_millis) for name, a in cluster.items()}
    views = [SizeView(demand.bytes_of(DEFAULT_RESOURCE), cluster, REASONS), SizeView(GIB, roomy, REASONS_1G)]
    alone = filter_nodes(demand, names, accounts=cluster, policy=policy, reasons=REASONS, rng=random.Random(seed))
    sized = filter_sizes(demand, names, views=views, policy=policy, rng=random.Random(seed))
    assert list(sized.passed) == list(alone.passed)
    assert dict(sized.failed) == dict(alone.failed)
    assert dict(sized.unresolvable) == dict(alone.unresolvable)
    assert sized.outcome == alone.outcome


@settings(max_examples=examples(200), deadline=None)
@given(
    cluster=two_size_clusters,
    need_2m=st.integers(1, 500 * PAGE),
    need_1g=st.integers(1, 8 * GIB),
    policy=policies,
    mode=st.sampled_from([Mode.ENFORCE, Mode.SHADOW]),
    picks=st.lists(st.integers(0, 30), min_size=VECTOR_THRESHOLD + 1, max_size=150),
    in_place=st.booleans(),
    seed=st.integers(),
)
def test_two_sizes_on_the_columns_decide_and_score_as_node_by_node(  # noqa: PLR0917 (hypothesis)
    cluster: dict[str, tuple[NodeAccount, NodeAccount]],
    need_2m: int,
    need_1g: int,
    policy: Policy,
    mode: Mode,
    picks: list[int],
    in_place: bool,
    seed: int,
) -> None:
    """The numpy path of a pod of two sizes (each size's columns, combined) is the node-by-node one:
    every candidate examined, a best-of-K scan that finds no node at all or some, and the scores."""
    known = sorted(cluster)
    names = [known[p] if p < len(known) else f"unknown-{p}" for p in picks]
    candidates = _candidates(names, in_place=in_place)
    demand = PodDemand({"hugepages-2Mi": need_2m, "hugepages-1Gi": need_1g}, 500)
    plain = _views(cluster, need_2m, need_1g)
    columned = [dataclasses.replace(v, columns=_columns_of(v.accounts)) for v in plain]
    every = Policy(mode=mode, sample_size=0)
    vector = filter_sizes(demand, candidates, views=columned, policy=every, rng=random.Random(1))
    scalar = filter_sizes(demand, names, views=plain, policy=every, rng=random.Random(1))
    assert list(vector.passed) == list(scalar.passed)
    assert dict(vector.failed) == dict(scalar.failed)
    assert dict(vector.unresolvable) == dict(scalar.unresolvable)
    assert dataclasses.replace(vector, passed=[], failed={}, unresolvable={}) == dataclasses.replace(
        scalar, passed=[], failed={}, unresolvable={}
    )
    # Best-of-K: the same nodes kept (the same draws), or the same full answer when none fits.
    sampled_v = filter_sizes(demand, candidates, views=columned, policy=policy, rng=random.Random(seed))
    sampled_s = filter_sizes(demand, names, views=plain, policy=policy, rng=random.Random(seed))
    assert set(sampled_v.passed) == set(sampled_s.passed)
    assert sampled_v.outcome == sampled_s.outcome
    # And the same rejected, with the same reasons and counts (a widened scan that kept some counts
    # and groups its rejected on the columns, names selected only when read).
    assert dict(sampled_v.failed) == dict(sampled_s.failed)
    assert dict(sampled_v.unresolvable) == dict(sampled_s.unresolvable)
    counts = ("insufficient", "exceeds_pool", "examined", "widened")
    assert [getattr(sampled_v, c) for c in counts] == [getattr(sampled_s, c) for c in counts]
    scores_v = prioritize_sizes(demand, candidates, views=columned, policy=policy)
    scores_s = prioritize_sizes(demand, names, views=plain, policy=policy)
    assert scores_v.scores.tolist() == scores_s.scores.tolist()


# An account of the 1 GiB size per verdict for a need of two 1 GiB pages, as VERDICT_ACCOUNTS for 2 MiB.
GIG_NEED_PAGES = 2
GIG_VERDICT_ACCOUNTS = {
    Fit.FITS: NodeAccount(page_size=GIB, total_pages=16, used_pages=2),
    Fit.INSUFFICIENT: NodeAccount(page_size=GIB, total_pages=16, used_pages=15),
    Fit.NO_POOL: NodeAccount(page_size=GIB),
    Fit.EXCEEDS_POOL: NodeAccount(page_size=GIB, total_pages=1),
    Fit.HELD_OUTSIDE: NodeAccount(page_size=GIB, total_pages=4, outside_pods_pages=3),
}


@settings(max_examples=examples(200), deadline=None)
@given(
    verdicts=st.lists(
        st.tuples(st.sampled_from([*VERDICT_ACCOUNTS, None]), st.sampled_from(list(GIG_VERDICT_ACCOUNTS))),
        min_size=VECTOR_THRESHOLD + 1,
        max_size=400,
    ),
    fit_one_in=st.sampled_from([1, 3, 10, 10, 30, 1000]),
    k=st.integers(1, 20),
    widening=st.sampled_from(list(Widening)),
    seed=st.integers(),
    in_place=st.sampled_from([True, True, False]),
    repeat=st.sampled_from([False, False, True]),
)
def test_best_of_k_of_two_sizes_on_the_columns_decides_as_one_node_at_a_time(  # noqa: PLR0917 (hypothesis)
    verdicts: list[tuple[Fit | None, Fit]],
    fit_one_in: int,
    k: int,
    widening: Widening,
    seed: int,
    in_place: bool,
    repeat: bool,
) -> None:
    """A pod of two sizes on a nearly full cluster: a widened scan judged on each size's columns (its
    rejected grouped by reason there, the first unresolvable size's, else the first without room)
    keeps, rejects and answers as the node-by-node path."""
    rng = random.Random(seed)
    kinds = [
        (Fit.INSUFFICIENT if small in (Fit.FITS, None) and rng.randrange(fit_one_in) else small, large)
        for small, large in verdicts
    ]
    small = {f"n{i}": VERDICT_ACCOUNTS[s] for i, (s, _) in enumerate(kinds) if s is not None}
    large = {f"n{i}": GIG_VERDICT_ACCOUNTS[g] for i, (s, g) in enumerate(kinds) if s is not None}
    names = [f"n{i}" for i in range(len(kinds))] + (["n0", "n1"] if repeat else [])  # a name given twice
    candidates = _candidates(names, in_place=in_place)
    need_2m, need_1g = NEED_PAGES * PAGE, GIG_NEED_PAGES * GIB
    plain = [SizeView(need_2m, small, REASONS), SizeView(need_1g, large, REASONS_1G)]
    columned = [dataclasses.replace(v, columns=_columns_of(v.accounts)) for v in plain]
    demand = PodDemand({"hugepages-2Mi": need_2m, "hugepages-1Gi": need_1g}, 100)
    policy = Policy(mode=Mode.ENFORCE, sample_size=k, widening=widening)
    vector = filter_sizes(demand, candidates, views=columned, policy=policy, rng=random.Random(seed))
    scalar = filter_sizes(demand, names, views=plain, policy=policy, rng=random.Random(seed))
    assert list(vector.passed) == list(scalar.passed)  # the same picks, in the same order
    assert dict(vector.failed) == dict(scalar.failed)
    assert dict(vector.unresolvable) == dict(scalar.unresolvable)
    assert dataclasses.replace(vector, passed=[], failed={}, unresolvable={}) == dataclasses.replace(
        scalar, passed=[], failed={}, unresolvable={}
    )
    pod = Pod(metadata=ObjectMeta(name="p", namespace="default", uid="u"), spec=PodSpec(containers=[]))
    answers = [
        msgspec.json.decode(render_filter(ExtenderArgs(pod, c), d)) for c, d in ((candidates, vector), (names, scalar))
    ]
    assert answers[0] == answers[1]


# --------------------------------------------------------------------------- the state's accounts after any change

_NODES = ("a", "b", "c", "d")
_PODS = ("p", "q", "r")
state_changes = st.lists(
    st.one_of(
        st.tuples(st.just("node"), st.sampled_from(_NODES), st.sampled_from([None, "0", "2Gi", "8Gi"])),
        st.tuples(st.just("remove node"), st.sampled_from(_NODES)),
        st.tuples(
            st.just("pod"),
            st.sampled_from(_PODS),
            st.sampled_from([None, *_NODES]),
            st.sampled_from(["Pending", "Running", "Succeeded"]),
        ),
        st.tuples(st.just("remove pod"), st.sampled_from(_PODS)),
        st.tuples(
            st.just("hold"),
            st.sampled_from(_PODS),
            st.lists(st.sampled_from(_NODES), min_size=1, max_size=4),
            st.integers(1, 3000).map(lambda thirds: thirds * PAGE // 3),  # whole pages and not
            st.integers(0, 4000),
        ),
        st.tuples(st.just("release"), st.sampled_from(_PODS)),
        st.tuples(st.just("time"), st.integers(0, 60)),
        st.tuples(
            st.just("report"), st.sampled_from(_NODES), st.integers(0, 5000), st.integers(0, 300), st.integers(-60, 0)
        ),
    ),
    max_size=40,
)


@settings(max_examples=examples(300), deadline=None)
@given(changes=state_changes)
def test_after_any_changes_every_account_and_column_is_a_rebuild_of_it(changes: list[tuple[Any, ...]]) -> None:
    """Holds placed, released and expired update only the held figures of the nodes they touch
    (``ClusterState._refresh_holds``, ``NodeColumns.put_held``): after any sequence of changes of every
    kind, each account, its headroom, the room freed (``take_freed``) and the columns are what a state
    rebuilding every touched account whole (``_refresh``, as before) has, and what rebuilding every
    account from scratch gives, so no decision reading them can differ."""
    clock = Clock()
    state, whole = (ClusterState(build_config({}, {}), clock=clock, wall_clock=clock) for _ in range(2))
    whole_book = whole.books[DEFAULT_RESOURCE]
    whole_book.refresh_holds = whole_book.refresh  # type: ignore[method-assign] # the reference: rebuilt whole
    for each in (state, whole):
        each.replace([make_node(name, hugepages="4Gi") for name in _NODES[:2]], [])
    for change in changes:
        for each in (state, whole):
            _change(each, clock, change)
        if change[0] == "time":
            clock.now += change[1]
            for each in (state, whole):
                each.expire_holds()
                each.expire_reports()
        assert state.books[DEFAULT_RESOURCE].accounts == whole_book.accounts
        assert state.books[DEFAULT_RESOURCE].headroom == whole_book.headroom
        if change[0] in ("hold", "release", "time"):
            assert state.take_freed() == whole.take_freed()
            state.books[DEFAULT_RESOURCE].columns.column(
                "headroom"
            )  # the columns read between changes, as a filter reads them
    rebuilt = {
        name: state.books[DEFAULT_RESOURCE]._account(name) for name in state.books[DEFAULT_RESOURCE].accounts
    }  # every account anew
    assert state.books[DEFAULT_RESOURCE].accounts == rebuilt
    assert state.books[DEFAULT_RESOURCE].headroom == {
        name: headroom_bytes(account) for name, account in rebuilt.items()
    }
    fresh, names = _columns_of(rebuilt), sorted(rebuilt)
    for field in COLUMN_FIELDS:
        ours = (
            state.books[DEFAULT_RESOURCE]
            .columns.column(field)[state.books[DEFAULT_RESOURCE].columns.slots(names)]
            .tolist()
        )
        assert ours == fresh.column(field)[fresh.slots(names)].tolist(), field


def _change(state: ClusterState, clock: Clock, change: tuple[Any, ...]) -> None:
    match change:
        case ("node", name, hugepages):
            state.apply_node(make_node(name, hugepages=hugepages, cpu="8"))
        case ("remove node", name):
            state.remove_node(name)
        case ("pod", name, node, phase):
            state.apply_pod(make_pod(name, uid=name, hugepages="1Gi", cpu="1", node=node, phase=phase))
        case ("remove pod", name):
            state.remove_pod(name)
        case ("hold", uid, nodes, need, cpu):
            state.hold(uid, nodes, PodDemand({DEFAULT_RESOURCE: need}, cpu), 30)
        case ("release", uid):
            state.release(uid)
        case ("report", name, total, outside, age):
            state.apply_report(
                name, {DEFAULT_RESOURCE: (PoolReport(clock.now + age, "test", total, outside, None, 0, ()), None)}
            )
