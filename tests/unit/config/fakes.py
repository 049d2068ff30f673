"""A fake plugin registry for config tests: dummy plugin classes and small args parsers.

The classes only have the methods that make ``extension_points`` see the same points as the real
plugins (names as in ``EXTENSION_POINT_METHODS``); the parsers mimic the real ones' shape (frozen
dataclasses, ``ConfigError`` with paths below the given path). Nothing here depends on the real
plugins, which are written separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from custom_scheduler.errors import ConfigError, FieldError
from custom_scheduler.framework.registry import PluginSpec, Registry


class _Dummy:
    name: ClassVar[str] = ""

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        self.args = args


def _m(*_: Any) -> Any:
    return None


def _plugin(name: str, *methods: str) -> type:
    return type(name, (_Dummy,), {"name": name, **dict.fromkeys(methods, _m)})


# --- args --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


@dataclass(frozen=True, slots=True)
class ScoringStrategy:
    type: str = "LeastAllocated"
    resources: tuple[ResourceSpec, ...] = (ResourceSpec("cpu"), ResourceSpec("memory"))


@dataclass(frozen=True, slots=True)
class FitArgs:
    ignored_resources: tuple[str, ...] = ()
    scoring_strategy: ScoringStrategy = field(default_factory=ScoringStrategy)


@dataclass(frozen=True, slots=True)
class NodeAffinityArgs:
    added_affinity: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    hard_pod_affinity_weight: int = 1


@dataclass(frozen=True, slots=True)
class GangSchedulingArgs:
    permit_timeout_seconds: int = 300


def _check_keys(raw: Mapping[str, Any], allowed: set[str], path: str, errors: list[FieldError]) -> None:
    errors.extend(FieldError(f"{path}.{k}", f'unknown field "{k}"') for k in raw if k not in allowed)


def parse_fit(raw: Mapping[str, Any] | None, path: str) -> FitArgs:
    if raw is None:
        return FitArgs()
    errors: list[FieldError] = []
    _check_keys(raw, {"ignoredResources", "scoringStrategy"}, path, errors)
    ss_raw = raw.get("scoringStrategy") or {}
    ss_path = f"{path}.scoringStrategy"
    _check_keys(ss_raw, {"type", "resources"}, ss_path, errors)
    kind = ss_raw.get("type", "LeastAllocated")
    if kind not in {"LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"}:
        errors.append(FieldError(f"{ss_path}.type", f'unknown scoring strategy "{kind}"'))
    resources = (
        tuple(ResourceSpec(r["name"], r.get("weight", 1) or 1) for r in ss_raw.get("resources") or ())
        or ScoringStrategy().resources
    )
    for i, r in enumerate(resources):
        if not 1 <= r.weight <= 100:
            errors.append(FieldError(f"{ss_path}.resources[{i}].weight", "must be 1-100"))
    if errors:
        raise ConfigError(errors)
    return FitArgs(tuple(raw.get("ignoredResources") or ()), ScoringStrategy(kind, resources))


def parse_node_affinity(raw: Mapping[str, Any] | None, path: str) -> NodeAffinityArgs:
    if raw is None:
        return NodeAffinityArgs()
    errors: list[FieldError] = []
    _check_keys(raw, {"addedAffinity"}, path, errors)
    if errors:
        raise ConfigError(errors)
    return NodeAffinityArgs(raw.get("addedAffinity"))


def parse_inter_pod_affinity(raw: Mapping[str, Any] | None, path: str) -> InterPodAffinityArgs:
    weight = (raw or {}).get("hardPodAffinityWeight", 1)
    if not 0 <= weight <= 100:
        raise ConfigError(f"must be 0-100, got {weight}", f"{path}.hardPodAffinityWeight")
    return InterPodAffinityArgs(weight)


def parse_gang(raw: Mapping[str, Any] | None, path: str) -> GangSchedulingArgs:
    errors: list[FieldError] = []
    _check_keys(raw or {}, {"permitTimeoutSeconds"}, path, errors)
    if errors:
        raise ConfigError(errors)
    return GangSchedulingArgs(int((raw or {}).get("permitTimeoutSeconds", 300)))


class Opaque:
    """Args that are not a dataclass: rendered as nothing."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque)

    def __hash__(self) -> int:
        return 0


def parse_opaque(raw: Mapping[str, Any] | None, path: str) -> Opaque:
    return Opaque()


def parse_buggy(raw: Mapping[str, Any] | None, path: str) -> None:
    if raw is not None:
        raise TypeError("boom")


_FSS = ("pre_filter", "filter", "pre_score", "score")

PLUGINS: dict[str, tuple[tuple[str, ...], Any]] = {
    "SchedulingGates": (("pre_enqueue",), None),
    "PrioritySort": (("less",), None),
    "NodeUnschedulable": (("filter",), None),
    "NodeName": (("filter",), None),
    "TaintToleration": (("filter", "pre_score", "score"), None),
    "NodeAffinity": (_FSS, parse_node_affinity),
    "NodePorts": (("pre_filter", "filter"), None),
    "NodeResourcesFit": (_FSS, parse_fit),
    # The volume and DRA plugins with their filter-side points only (the real VolumeBinding and
    # DynamicResources also score, and DynamicResources is a PreEnqueue plugin), so the score and
    # preEnqueue tables of the config tests stay short.
    "VolumeRestrictions": (("pre_filter", "filter"), None),
    "NodeVolumeLimits": (("pre_filter", "filter"), None),
    "VolumeBinding": (("pre_filter", "filter", "reserve", "pre_bind"), None),
    "VolumeZone": (("pre_filter", "filter"), None),
    "PodTopologySpread": (_FSS, None),
    "InterPodAffinity": (_FSS, parse_inter_pod_affinity),
    "DynamicResources": (("pre_filter", "filter", "reserve", "pre_bind"), None),
    "DefaultPreemption": (("post_filter",), None),
    "NodeResourcesBalancedAllocation": (("pre_score", "score"), None),
    "ImageLocality": (("score",), None),
    "DefaultBinder": (("bind",), None),
    "NodeDeclaredFeatures": (("pre_filter", "filter"), None),
    # Not defaults:
    "GangScheduling": (("pre_enqueue", "permit"), parse_gang),
    "CustomScore": (("score",), None),
    "FifoSort": (("less",), None),
    "Gatekeeper": (("reserve", "unreserve", "permit"), parse_opaque),
    "OtherBinder": (("bind",), None),
    "QuotaGate": (("pre_enqueue",), None),
    "Buggy": (("filter",), parse_buggy),
    "Inert": ((), None),
}


def registry(*, without: tuple[str, ...] = ()) -> Registry:
    """The fake registry, optionally missing some plugins."""
    reg = Registry()
    for name, (methods, parser) in PLUGINS.items():
        if name in without:
            continue
        cls = _plugin(name, *methods)
        reg.register(PluginSpec(name, cls, parser) if parser else PluginSpec(name, cls))
    return reg
