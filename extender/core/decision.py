"""The filter and prioritize decisions: one dispatcher between the reference and the numpy path.

The decision itself is ``reference`` (as the RFC states it, node by node); ``columnar`` reaches
the same one over numpy columns when there are many candidates, and property tests hold the two
equal. Both verbs read the same accounts and the same ``capacity.fits``, so a node the filter
admits is never scored as if it could not hold the pod.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from extender.core.answer import FilterDecision, HostScores, Reasons, passed_through
from extender.core.capacity import UNBOUNDED, NodeAccount
from extender.core.columnar import filter_on_columns, reads, scores_on_columns
from extender.core.columns import NodeColumns
from extender.core.config import DEFAULT_RESOURCE
from extender.core.podrequest import PodDemand
from extender.core.policy import Mode, Policy
from extender.core.reference import SizeView, filter_per_node, scores_per_node

_NO_REASONS = Reasons(insufficient="", exceeds_pool="", not_sampled="")  # a score gives no reason


def filter_sizes(
    demand: PodDemand, candidates: Sequence[str], *, views: Sequence[SizeView], policy: Policy, rng: random.Random
) -> FilterDecision:
    """Which candidates may receive the pod, under its namespace's policy: a node is admitted
    only if each pool the pod needs (``views``, one per size, usually one) can hold it.

    Not the extender's business when the policy is off or the pod needs no pages. A pod pinned to
    one NUMA node is judged node by node (the columns hold whole pools); otherwise many candidates
    are judged on the columns when every size has them."""
    if policy.mode is Mode.OFF or not any(view.need > 0 for view in views):
        return passed_through(candidates)
    numa = policy.numa_aligned and demand.guaranteed
    if not numa and all(reads(view, candidates) for view in views):
        return filter_on_columns(candidates, views, policy, rng)
    return filter_per_node(candidates, views, policy, rng, numa=numa)


def filter_nodes(
    demand: PodDemand,
    candidates: Sequence[str],
    *,
    accounts: Mapping[str, NodeAccount],
    policy: Policy,
    reasons: Reasons,
    rng: random.Random,
    headroom: Mapping[str, int] | None = None,
    columns: NodeColumns | None = None,
    resource_name: str = DEFAULT_RESOURCE,
) -> FilterDecision:
    """``filter_sizes`` over one size: the pod's bytes of ``resource_name``, of these accounts."""
    view = SizeView(demand.bytes_of(resource_name), accounts, reasons, headroom, columns)
    return filter_sizes(demand, candidates, views=(view,), policy=policy, rng=rng)


def prioritize_sizes(
    demand: PodDemand, candidates: Sequence[str], *, views: Sequence[SizeView], policy: Policy
) -> HostScores:
    """A 0..10 score per candidate, by its tightest pool; neutral (all 0) unless the policy
    enforces. Many candidates are scored at once on the columns, with the same scores."""
    if policy.mode is not Mode.ENFORCE or not any(view.need > 0 for view in views):
        return HostScores.neutral(candidates)
    if demand.cpu_millis <= UNBOUNDED and all(reads(view, candidates) for view in views):
        return scores_on_columns(demand, candidates, views, policy)
    return scores_per_node(demand, candidates, views, policy)


def prioritize_nodes(
    demand: PodDemand,
    candidates: Sequence[str],
    *,
    accounts: Mapping[str, NodeAccount],
    policy: Policy,
    columns: NodeColumns | None = None,
    resource_name: str = DEFAULT_RESOURCE,
) -> HostScores:
    """``prioritize_sizes`` over one size: the pod's bytes of ``resource_name``, of these accounts."""
    view = SizeView(demand.bytes_of(resource_name), accounts, _NO_REASONS, columns=columns)
    return prioritize_sizes(demand, candidates, views=(view,), policy=policy)
