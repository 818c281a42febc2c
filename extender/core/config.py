"""Validating the extender's one YAML config file (read by ``configfile.load_config``).

Precedence, lowest first: built-in defaults, the file's ``defaults``, the
``BEST_OF_K_*`` environment variables (the RFC's deployment-wide knobs), then
a namespace's own entry under ``namespaces``, which always wins for that
namespace. The extender's own namespace is exempt: its pods always pass.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgspec

from extender.core.errors import ExtenderError
from extender.core.holds import HOLD_LIMIT
from extender.core.policy import Mode, Policy, PolicyTable, given, overlay, policy_fields_struct
from extender.core.quantity import QuantityError, to_units

DEFAULT_RESOURCE = "hugepages-2Mi"
# A 5,000-node full-Nodes request is ~20 MB; the worst 32 MiB request peaks near 340 MiB RSS
# (benchmarks/worst_request.py), which the chart's 512Mi limit holds with the cluster cache.
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
# Across every connection: request bodies being read and decided (a gzip'ed one at its inflated
# size), answers not yet taken (an answer is at most about 1.06 times its request), and the
# candidate lists kept for the next requests. Past it, the kept lists go, then the holders that
# stalled longest are cut.
DEFAULT_MAX_BUFFERED_BYTES = 2 * DEFAULT_MAX_REQUEST_BYTES
# Open connections per port; past it a new one closes the idlest (docs/reliability.md).
DEFAULT_MAX_CONNECTIONS = 64

DEFAULT_SHADOW_SETTLE_SECONDS = 60.0
DEFAULT_SHADOW_WINDOW_SECONDS = 3600.0

_HUGEPAGE_RESOURCE = re.compile(r"^hugepages-(?P<size>[0-9]+[KMGT]i)$")


class ConfigError(ExtenderError, ValueError):
    """An invalid config; the message names the key at fault."""


# Every knob of Policy, optional, with its bounds: the config keys are Policy's fields.
_PolicyFields = policy_fields_struct(forbid_unknown_fields=True)


class _ConfigFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    resource_name: str | None = None  # one size; the same as resourceNames: [it]
    resource_names: list[str] | None = None  # every size guarded, the first one the default of needFromMemoryResource
    max_request_bytes: Annotated[int, msgspec.Meta(gt=0)] = DEFAULT_MAX_REQUEST_BYTES
    max_buffered_bytes: Annotated[int, msgspec.Meta(gt=0)] | None = None  # None: twice maxRequestBytes
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_MAX_CONNECTIONS
    # The scheduler profile's (or its global) percentageOfNodesToScore, 0 its adaptive default: how many
    # feasible nodes it stops at, so whether it stopped short of a node that would hold a pod (window.py).
    percentage_of_nodes_to_score: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0
    # Shadow's scorecard (extender/state/scorecard.py): how long a pod stays Ready before it counts as ran, and
    # the window its precision and recall are over (a pod without an outcome that long expires).
    shadow_settle_seconds: Annotated[float, msgspec.Meta(ge=0)] = DEFAULT_SHADOW_SETTLE_SECONDS
    shadow_window_seconds: Annotated[float, msgspec.Meta(gt=0)] = DEFAULT_SHADOW_WINDOW_SECONDS
    defaults: dict[str, Any] = msgspec.field(default_factory=dict)  # read as _PolicyFields below
    namespaces: dict[str, Any] = msgspec.field(default_factory=dict)


# The config file's own keys (every knob of a policy is a key of ``policy.POLICY_KEYS``): what the chart's
# schema and the README show, tested against this.
FILE_KEYS: tuple[str, ...] = _ConfigFile.__struct_encode_fields__


@dataclass(frozen=True, slots=True)
class Config:
    resource_names: tuple[str, ...] = (DEFAULT_RESOURCE,)  # every hugepage size guarded, in the config's order
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    percentage_of_nodes_to_score: int = 0  # the scheduler's; 0: adaptive (window.feasible_nodes_to_find)
    shadow_settle_seconds: float = DEFAULT_SHADOW_SETTLE_SECONDS
    shadow_window_seconds: float = DEFAULT_SHADOW_WINDOW_SECONDS
    placement: PolicyTable = dataclasses.field(default_factory=PolicyTable)

    def policy_for(self, namespace: str) -> Policy:
        return self.placement.policy_for(namespace)

    def memory_resource(self, policy: Policy) -> str:
        """Which size a memory-derived need draws from: the policy's, else the first guarded."""
        return policy.need_from_memory_resource or self.resource_names[0]


def _env_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"environment variable {name}: expected true or false, got {value!r}")


def _env_number(name: str, value: str, kind: type[int] | type[float], *, positive: bool) -> Any:
    try:
        number = kind(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}: expected a number, got {value!r}") from None
    if number < 0 or (positive and number == 0) or math.isnan(number):
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"environment variable {name}: must be {bound}, got {value!r}")
    return number


def _env_fields(environ: Mapping[str, str]) -> dict[str, Any]:
    """The RFC's environment knobs, by Policy field. HUGEPAGE_FIT_FILTER=false is its shadow phase."""
    fields: dict[str, Any] = {}
    if (raw := environ.get("BEST_OF_K_HUGEPAGE_FIT_FILTER")) is not None:
        enforce = _env_bool("BEST_OF_K_HUGEPAGE_FIT_FILTER", raw)
        fields["mode"] = Mode.ENFORCE if enforce else Mode.SHADOW
    if (raw := environ.get("BEST_OF_K_HUGEPAGE_MEMORY")) is not None:
        fields["score_hugepages"] = _env_bool("BEST_OF_K_HUGEPAGE_MEMORY", raw)
    if (raw := environ.get("BEST_OF_K_K")) is not None:
        fields["sample_size"] = _env_number("BEST_OF_K_K", raw, int, positive=False)
    if (raw := environ.get("BEST_OF_K_R")) is not None:
        fields["overcommit_ratio"] = _env_number("BEST_OF_K_R", raw, float, positive=True)
    if (raw := environ.get("BEST_OF_K_ALPHA")) is not None:
        fields["alpha"] = _env_number("BEST_OF_K_ALPHA", raw, float, positive=False)
    return fields


def page_size_of(resource_name: str, *, key: str = "resourceName") -> int:
    match = _HUGEPAGE_RESOURCE.match(resource_name)
    if match is None:
        raise ConfigError(f"{key}: expected a hugepage resource such as hugepages-2Mi, got {resource_name!r}")
    try:
        return to_units(match["size"])
    except QuantityError as error:
        raise ConfigError(f"{key}: {error}") from None


def _yaml_off(fields: Any) -> Any:
    """YAML 1.1 reads an unquoted ``mode: off`` as the boolean false; take it as meant."""
    if isinstance(fields, dict) and fields.get("mode") is False:
        return {**fields, "mode": Mode.OFF.value}
    return fields


def build_config(
    document: Any,
    environ: Mapping[str, str],
    exempt_namespaces: frozenset[str] = frozenset(),
) -> Config:
    """Validate a parsed YAML document (None for an empty file) into a Config."""
    if isinstance(document, dict) and "defaults" in document:
        document = {**document, "defaults": _yaml_off(document["defaults"])}
    raw = _convert(document or {}, _ConfigFile, "")
    names = _resource_names(raw)
    page_size_of(names[0])  # a resourceName alone is read here: a name with no page size fails
    file_defaults = given(_convert(raw.defaults, _PolicyFields, "defaults"))
    defaults = overlay(overlay(Policy(), file_defaults), _env_fields(environ))
    namespaces = {
        str(name): overlay(defaults, given(_convert(_yaml_off(fields) or {}, _PolicyFields, f"namespaces.{name}")))
        for name, fields in raw.namespaces.items()
    }
    buffered = 2 * raw.max_request_bytes if raw.max_buffered_bytes is None else raw.max_buffered_bytes
    if buffered < 2 * raw.max_request_bytes:
        raise ConfigError(
            f"maxBufferedBytes: {buffered} is under twice maxRequestBytes ({raw.max_request_bytes}):"
            " the largest request's body and answer must fit"
        )
    _check_memory_resources(names, defaults, namespaces)
    return Config(
        resource_names=names,
        max_request_bytes=raw.max_request_bytes,
        max_buffered_bytes=buffered,
        max_connections=raw.max_connections,
        percentage_of_nodes_to_score=raw.percentage_of_nodes_to_score,
        shadow_settle_seconds=raw.shadow_settle_seconds,
        shadow_window_seconds=raw.shadow_window_seconds,
        placement=PolicyTable(defaults, namespaces, exempt_namespaces),
    )


def _resource_names(raw: _ConfigFile) -> tuple[str, ...]:
    """The sizes guarded: ``resourceNames``, or ``resourceName`` alone (the default, hugepages-2Mi)."""
    if raw.resource_names is None:
        return (raw.resource_name or DEFAULT_RESOURCE,)
    if raw.resource_name is not None:
        raise ConfigError("resourceName and resourceNames: give one of them (resourceNames lists every size)")
    names = tuple(raw.resource_names)
    if not names:
        raise ConfigError("resourceNames: name at least one hugepage resource")
    if len(set(names)) != len(names):
        raise ConfigError(f"resourceNames: a resource is named twice in {list(names)}")
    sizes: dict[int, str] = {}
    for name in names:
        size = page_size_of(name, key="resourceNames")
        if size in sizes:
            raise ConfigError(f"resourceNames: {sizes[size]} and {name} are the same page size")
        sizes[size] = name
    return names


def _check_memory_resources(names: tuple[str, ...], defaults: Policy, namespaces: Mapping[str, Policy]) -> None:
    for where, policy in (("defaults", defaults), *((f"namespaces.{n}", p) for n, p in namespaces.items())):
        wanted = policy.need_from_memory_resource
        if wanted and wanted not in names:
            raise ConfigError(
                f"{where}.needFromMemoryResource: {wanted} is not a size the extender guards ({', '.join(names)})"
            )


_T = TypeVar("_T")


def _convert(document: Any, kind: type[_T], prefix: str) -> _T:
    try:
        return msgspec.convert(document, kind)
    except msgspec.ValidationError as error:
        # msgspec says "... - at `$.defaults.mode`"; say it as the YAML key path.
        head, _, where = str(error).partition(" - at `$")
        key = ".".join(part for part in (prefix, where.rstrip("`").lstrip(".")) if part)
        if (renamed := _RENAMED.get(head.rpartition(" ")[2].strip("`'\""))) is not None:
            head = f"{head}: it is now {renamed}"
        raise ConfigError(f"{key}: {head}" if key else head) from None


# Keys renamed since an earlier release: the error names the new key.
_RENAMED = {"reservationTimeoutSeconds": "holdTimeoutSeconds"}


def holds_need_bind(config: Config) -> str | None:
    """Why this config over-commits pools without the bind verb, or None.

    An enforcing filter holds a pod's need on the nodes it admits, at most
    ``HOLD_LIMIT`` (16) of them; ``sampleSize: 0`` (every fitting node) or above
    16 admits more, places no hold, and a burst then over-commits pools until the
    watch shows each pod bound. Only the bind verb (which holds on the chosen
    node) closes that window, so such a config is refused without it.
    """
    policies = {"defaults": config.placement.defaults}
    policies.update({f"namespaces.{name}": policy for name, policy in config.placement.namespaces.items()})
    for where, policy in policies.items():
        if policy.mode is Mode.ENFORCE and not 1 <= policy.sample_size <= HOLD_LIMIT:
            return (
                f"{where}.sampleSize: {policy.sample_size} with mode enforce admits more nodes than a hold covers"
                f" (at most {HOLD_LIMIT}), so a burst can over-commit a pool; set sampleSize between 1 and"
                f" {HOLD_LIMIT}, or serve with --enable-bind (the scheduler's bindVerb)"
            )
    return None
