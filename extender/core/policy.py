"""The placement policy: one set of knobs, a default and per-namespace overrides.

``Policy`` is the one definition of the knobs: the config file's keys (``config``),
the ``/debug/state`` document and its reading (``diagnostics``) derive from its
fields here; the chart's schema is checked against them field by field
(tests/chart/test_config.py). A knob added to ``Policy`` is a config key, shows in
``/debug/state`` and reads back, with no other list to extend.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import msgspec


class Mode(StrEnum):
    """How the fit filter acts on a namespace's pods."""

    OFF = "off"  # the extender is neutral: every candidate passes, equal scores
    SHADOW = "shadow"  # neutral like off, but would-be rejections are counted
    ENFORCE = "enforce"  # nodes that cannot hold the pod are rejected; nodes are ranked


class Widening(StrEnum):
    """What best-of-K does when its sample holds no fitting node."""

    NONE = "none"  # sample K, keep those that fit; an empty sample fails the pod
    RESAMPLE = "resample"  # one more round of K draws after an empty first round
    FULLSCAN = "fullscan"  # after an empty first round, keep drawing until K fit or none are left
    DRAW_UNTIL_K = "drawUntilK"  # rejected draws never count: draw until K fit


# A RuntimeClass name (a DNS subdomain: at most 253 characters) or "".
RUNTIME_CLASS_PATTERN = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"


@dataclass(frozen=True, slots=True)
class Policy:
    """The knobs that apply to one pod. Defaults follow docs/decisions/."""

    mode: Mode = Mode.SHADOW
    sample_size: int = field(default=3, metadata={"minimum": 0})
    widening: Widening = Widening.FULLSCAN
    score_hugepages: bool = True
    overcommit_ratio: float = field(default=4.0, metadata={"exclusiveMinimum": 0})
    alpha: float = field(default=0.5, metadata={"minimum": 0})
    hold_timeout_seconds: float = field(default=30.0, metadata={"exclusiveMinimum": 0})
    need_from_memory: bool = False
    # The size (one of resourceNames) a need derived from memory draws from; "": the first one.
    need_from_memory_resource: str = field(default="", metadata={"pattern": "^(hugepages-[0-9]+[KMGT]i)?$"})
    # Only pods of this RuntimeClass (the VM runtime's) have their memory counted; "": every pod asking no
    # hugepages. A namespace that also runs plain pods names it, or each plain pod holds room it never uses.
    need_from_memory_runtime_class: str = field(
        default="", metadata={"pattern": RUNTIME_CLASS_PATTERN, "maxLength": 253}
    )
    # older node-agent records: requests-only accounting
    node_report_max_age_seconds: float = field(default=1800.0, metadata={"exclusiveMinimum": 0})
    numa_aligned: bool = False  # Guaranteed pods need one NUMA node with the pages (single-numa-node nodes)

    @property
    def examines_every_candidate(self) -> bool:
        """Shadow counts every would-be rejection; K = 0 passes every fitting node."""
        return self.mode is Mode.SHADOW or self.sample_size <= 0


PASSTHROUGH = Policy(mode=Mode.OFF)


@dataclass(frozen=True, slots=True)
class PolicyTable:
    """The resolved policy table: defaults, per-namespace policies, exempt namespaces."""

    defaults: Policy = Policy()
    namespaces: Mapping[str, Policy] = field(default_factory=dict)
    exempt_namespaces: frozenset[str] = frozenset()

    def policy_for(self, namespace: str) -> Policy:
        """A namespace's own entry wins over the defaults; exempt namespaces pass through."""
        if namespace in self.exempt_namespaces:
            return PASSTHROUGH
        return self.namespaces.get(namespace, self.defaults)


# --------------------------------------------------------------------------- the knobs as outside keys


def config_key(field_name: str) -> str:
    """A ``Policy`` field's key in the config file, ``/debug/state`` and the chart: its camelCase name."""
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


POLICY_FIELDS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(Policy)
POLICY_KEYS: dict[str, str] = {f.name: config_key(f.name) for f in POLICY_FIELDS}  # field name -> key


def field_type(name: str) -> type:
    """A ``Policy`` field's value type (``int``, ``float``, ``bool``, ``str``, ``Mode``, ``Widening``)."""
    kind: type = typing.get_type_hints(Policy)[name]
    return kind


# JSON Schema's word -> msgspec's
_META = {"minimum": "ge", "exclusiveMinimum": "gt", "pattern": "pattern", "maxLength": "max_length"}


@functools.cache
def policy_fields_struct(*, forbid_unknown_fields: bool) -> type[msgspec.Struct]:
    """A struct of every knob, each optional (None: not given), with its bounds, read from and
    written as the config keys. Forbidding unknown keys catches a misspelt config; a client
    reading a newer extender's ``/debug/state`` ignores them."""
    fields = []
    for f in POLICY_FIELDS:
        kind: Any = field_type(f.name)
        if f.metadata:
            meta = {_META[bound]: value for bound, value in f.metadata.items()}
            kind = Annotated[kind, msgspec.Meta(**meta)]
        fields.append((f.name, kind | None, None))
    return msgspec.defstruct(
        "PolicyFields",
        fields,
        rename="camel",
        forbid_unknown_fields=forbid_unknown_fields,
        omit_defaults=True,
        module=__name__,
    )


def given(fields: msgspec.Struct) -> dict[str, Any]:
    """The knobs a ``policy_fields_struct`` holds, by field name (those given only)."""
    return {f.name: value for f in POLICY_FIELDS if (value := getattr(fields, f.name)) is not None}


def overlay(base: Policy, changes: Mapping[str, Any]) -> Policy:
    """``base`` with the knobs in ``changes`` (by field name) replaced."""
    return dataclasses.replace(base, **changes)


def policy_document(policy: Policy) -> dict[str, Any]:
    """Every knob under its config key, as JSON: how ``/debug/state`` shows a policy, so an
    operator reads it as the config they wrote."""
    return {key: _plain(getattr(policy, name)) for name, key in POLICY_KEYS.items()}


def _plain(value: object) -> object:
    return value.value if isinstance(value, StrEnum) else value


class PolicyDocumentError(ValueError):
    """A policy document that does not hold knobs of the right types and bounds."""


def policy_from_document(document: Any) -> Policy:
    """Read back ``policy_document``: keys it lacks (an older extender) are the built-in defaults',
    keys it does not know (a newer one) are ignored."""
    try:
        fields = msgspec.convert(document, policy_fields_struct(forbid_unknown_fields=False))
    except msgspec.ValidationError as error:
        raise PolicyDocumentError(str(error)) from None
    return overlay(Policy(), given(fields))
