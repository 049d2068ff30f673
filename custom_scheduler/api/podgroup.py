"""PodGroups, the unit of gang scheduling, projected from either API that declares them.

Two ways in, one model (issue #16):

- Kubernetes' own ``scheduling.k8s.io/v1beta1`` PodGroup (1.37, feature gate ``GenericWorkload``):
  ``spec.schedulingPolicy`` is a union of ``basic: {}`` and ``gang: {minCount}`` (minCount is
  mutable, the policy is not), ``spec.schedulingConstraints.topology[0].key`` an optional topology
  constraint (gate ``TopologyAwareWorkloadScheduling``); pods join with
  ``spec.schedulingGroup.podGroupName``; the scheduler reports ``PodGroupInitiallyScheduled``.
- scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1`` PodGroup CRD, which most clusters run today:
  ``spec.minMember``, ``spec.minResources``, ``spec.scheduleTimeoutSeconds``; pods join with the
  label ``scheduling.x-k8s.io/pod-group``; status carries a phase and member counts.

Everything here is pure: parsing returns a :class:`PodGroup` or a :class:`GroupError` *value*, so
the informer path (which must never raise on bad input) and tests read the same answer; the
projection used as an informer's ``project`` wraps the error in
:class:`~custom_scheduler.api.model.MalformedObject`, which the informer logs once per version and skips.
The status documents the writers send are computed here too (:func:`native_condition`,
:func:`crd_status`), so what is written is decided without I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from custom_scheduler.api.model import POD_GROUP_LABEL, MalformedObject, Pod, parse_time
from custom_scheduler.api.resources import Resources

Api = Literal["native", "crd"]
NATIVE: Api = "native"
CRD: Api = "crd"

NATIVE_GROUP_VERSION = "scheduling.k8s.io/v1beta1"
CRD_GROUP_VERSION = "scheduling.x-k8s.io/v1alpha1"
NATIVE_PATH = f"/apis/{NATIVE_GROUP_VERSION}/podgroups"
CRD_PATH = f"/apis/{CRD_GROUP_VERSION}/podgroups"

__all__ = ["POD_GROUP_LABEL"]  # re-exported: the label is parsed in model.pod_from_json (hot path)

#: Upstream's condition type and reasons (scheduling/v1beta1 ``PodGroupInitiallyScheduled``).
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
REASON_SCHEDULED = "Scheduled"  # a literal in schedule_one_podgroup.go, not an API constant
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

#: scheduler-plugins' phases (apis/scheduling/v1alpha1 ``PodGroupPhase``).
PHASE_PENDING = "Pending"
PHASE_SCHEDULING = "Scheduling"
PHASE_SCHEDULED = "Scheduled"
PHASE_RUNNING = "Running"
PHASE_UNKNOWN = "Unknown"

_INT32_MAX = 2**31 - 1

#: Topology levels a PodGroup asks for by annotation (issue #28): ``required`` — every member in
#: one domain of that node label; ``preferred`` — the level to try tightest-from, climbing when the
#: gang does not fit. Read on PodGroups of both APIs (the CRD has no field for them; a native group's
#: ``schedulingConstraints.topology`` wins over the required annotation).
ANN_TOPOLOGY_REQUIRED = "custom-scheduler.io/topology-required"
ANN_TOPOLOGY_PREFERRED = "custom-scheduler.io/topology-preferred"
#: Kueue's PodSet annotation names (sigs.k8s.io/kueue apis/kueue/v1beta2/topology_types.go), accepted
#: as aliases on the PodGroup so a Kueue-shaped job needs no second spelling.
KUEUE_TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
#: GangScheduling's reservation for a starving gang, written on its PodGroup by the leader so that a
#: new leader (and ``explain``) can read it (JSON; :mod:`custom_scheduler.framework.reservation_annotation`).
ANN_RESERVATION = "custom-scheduler.io/reservation"
#: A label key (``[prefix/]name``), as the API server validates ``TopologyConstraint.key``.
_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class GroupError:
    """Why a PodGroup object could not be read (``what`` names the object, ``why`` the field)."""

    what: str
    why: str

    def __str__(self) -> str:
        return f"podgroup {self.what}: {self.why}"


@dataclass(frozen=True, slots=True)
class Condition:
    """The ``PodGroupInitiallyScheduled`` condition as last read, so writers skip no-op patches and
    keep ``lastTransitionTime`` when only the message changes."""

    status: str
    reason: str
    message: str
    last_transition_time: str
    observed_generation: int = 0


@dataclass(frozen=True, slots=True)
class PodGroup:
    """One PodGroup of either API. ``min_count`` is 1 for a native ``basic`` group (``gang``
    False): such a group only names its pods, it holds none of them back.

    ``timeout`` is the Permit wait in seconds the group asks for (the CRD's
    ``scheduleTimeoutSeconds``; the native API has none: None means the plugin's default).
    ``topology_key`` is the native ``schedulingConstraints.topology[0].key`` (the CRD has none).
    ``topology_required`` / ``topology_preferred`` are the levels the group asks for (the native key,
    else the annotations; see :data:`ANN_TOPOLOGY_REQUIRED`): placement never leaves one domain of the
    required level and tries the tightest levels from the preferred one up.
    ``condition`` (native) and ``phase`` (CRD) are the status as read, for the status writers.
    """

    namespace: str
    name: str
    api: Api
    min_count: int
    gang: bool = True
    timeout: float | None = None
    min_resources: Resources | None = None
    topology_key: str | None = None
    resource_version: str = ""
    uid: str = ""
    creation_time: float = 0.0
    generation: int = 0
    condition: Condition | None = None
    phase: str = ""
    disrupt_all: bool = False
    """Native ``spec.disruptionMode.all``: the group's pods are preempted together or not at all
    (upstream's workload-aware preemption); ``single`` or unset (and every CRD group) lets them go
    one at a time."""
    topology_required: str | None = None
    topology_preferred: str | None = None
    priority: int | None = None
    """Native ``spec.priority`` (set by the Priority admission plugin from ``priorityClassName``):
    the priority of the group as a preemptor and as a victim; None reads as 0, as upstream's
    ``PodGroupPriority``. The CRD has none: its pods keep their own priorities."""
    reservation: str | None = None
    """The raw :data:`ANN_RESERVATION` annotation (decoded, and a bad one ignored, where it is read:
    a malformed reservation never makes the group malformed)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def initially_scheduled(self) -> bool:
        """Upstream's terminal state: once True the condition never goes back to False."""
        return self.condition is not None and self.condition.status == "True"


# --- membership ----------------------------------------------------------------------------------


def group_of(pod: Pod) -> str | None:
    """The key (``namespace/name``) of the PodGroup ``pod`` belongs to, or None.

    The native ``spec.schedulingGroup.podGroupName`` wins over the CRD label: it is the API the
    cluster itself validates, and a pod names its group in the pod's own namespace either way."""
    return f"{pod.namespace}/{pod.pod_group}" if pod.pod_group else None


def api_of(pod: Pod) -> Api | None:
    """Which API's PodGroup the pod joins (None: no group)."""
    if not pod.pod_group:
        return None
    return NATIVE if pod.pod_group_native else CRD


def group_version(api: Api) -> str:
    """The apiVersion of ``api``'s PodGroups (their status path, events and reports name it)."""
    return NATIVE_GROUP_VERSION if api == NATIVE else CRD_GROUP_VERSION


# --- parsing -------------------------------------------------------------------------------------


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _meta(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping):
        return {}, "?"
    return meta, f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _common(doc: object) -> tuple[Mapping[str, Any], str, dict[str, Any]] | GroupError:
    """What both APIs' PodGroups share: (the object, its ``namespace/name`` for messages, the
    PodGroup fields its metadata gives), or why it is malformed."""
    if not isinstance(doc, Mapping):
        return GroupError("?", "not an object")
    meta, what = _meta(doc)
    ns, name = meta.get("namespace"), meta.get("name")
    if not isinstance(ns, str) or not ns or not isinstance(name, str) or not name:
        return GroupError(what, "metadata.namespace and metadata.name must be non-empty strings")
    gen = meta.get("generation", 0)
    if not _is_int(gen):
        return GroupError(what, f"metadata.generation must be an integer, got {type(gen).__name__}")
    ts = meta.get("creationTimestamp")
    levels = _topology_annotations(meta.get("annotations"))
    if isinstance(levels, GroupError):
        return GroupError(what, levels.why)
    return (
        doc,
        what,
        {
            "namespace": ns,
            "name": name,
            "resource_version": str(meta.get("resourceVersion") or ""),
            "uid": str(meta.get("uid") or ""),
            "creation_time": parse_time(ts if isinstance(ts, str) else None) or 0.0,
            "generation": gen,
            "topology_required": levels[0],
            "topology_preferred": levels[1],
            "reservation": _reservation_annotation(meta.get("annotations")),
        },
    )


def _reservation_annotation(annotations: object) -> str | None:
    value = annotations.get(ANN_RESERVATION) if isinstance(annotations, Mapping) else None
    return value if isinstance(value, str) else None


def _topology_annotations(annotations: object) -> tuple[str | None, str | None] | GroupError:
    """(required, preferred) levels from the annotations (ours first, then Kueue's names)."""
    if annotations is None:
        return None, None
    if not isinstance(annotations, Mapping):
        return GroupError("", "metadata.annotations must be a map of strings")
    out: list[str | None] = []
    for names in ((ANN_TOPOLOGY_REQUIRED, KUEUE_TOPOLOGY_REQUIRED), (ANN_TOPOLOGY_PREFERRED, KUEUE_TOPOLOGY_PREFERRED)):
        value = next((annotations[n] for n in names if annotations.get(n) is not None), None)
        if value is not None and (not isinstance(value, str) or not _LABEL_KEY_RE.match(value)):
            name = next(n for n in names if annotations.get(n) is not None)
            return GroupError("", f"annotation {name} must be a node label key, got {value!r:.60}")
        out.append(value)
    return out[0], out[1]


def parse_native(doc: object) -> PodGroup | GroupError:
    """A ``scheduling.k8s.io/v1beta1`` PodGroup, or why it is malformed."""
    common = _common(doc)
    if isinstance(common, GroupError):
        return common
    obj, what, base = common
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return GroupError(what, "spec must be an object")
    policy = spec.get("schedulingPolicy")
    if not isinstance(policy, Mapping):
        return GroupError(what, "spec.schedulingPolicy must be an object")
    basic, gang = policy.get("basic"), policy.get("gang")
    if (basic is None) == (gang is None):
        return GroupError(what, "spec.schedulingPolicy must set exactly one of basic, gang")
    if gang is not None:
        if not isinstance(gang, Mapping):
            return GroupError(what, "spec.schedulingPolicy.gang must be an object")
        mc = gang.get("minCount")
        if not _is_int(mc) or not 1 <= mc <= _INT32_MAX:
            return GroupError(what, f"spec.schedulingPolicy.gang.minCount must be an int32 >= 1, got {mc!r:.40}")
        min_count, is_gang = int(mc), True
    else:
        min_count, is_gang = 1, False
    topology = _topology_key(spec.get("schedulingConstraints"))
    if isinstance(topology, GroupError):
        return GroupError(what, topology.why)
    cond = _initially_scheduled(obj.get("status"))
    if isinstance(cond, GroupError):
        return GroupError(what, cond.why)
    disrupt_all = _disrupt_all(spec.get("disruptionMode"))
    if isinstance(disrupt_all, GroupError):
        return GroupError(what, disrupt_all.why)
    priority = spec.get("priority")
    if priority is not None and not (_is_int(priority) and -(2**31) <= priority <= _INT32_MAX):
        return GroupError(what, f"spec.priority must be an int32, got {priority!r:.40}")
    if topology is not None:
        base["topology_required"] = topology  # the API's constraint wins over an annotation
    return PodGroup(
        api=NATIVE,
        min_count=min_count,
        gang=is_gang,
        topology_key=topology,
        condition=cond,
        disrupt_all=disrupt_all,
        priority=priority,
        **base,
    )


def _disrupt_all(mode: object) -> bool | GroupError:
    """``spec.disruptionMode``: a union of ``single: {}`` and ``all: {}``; unset means single."""
    if mode is None:
        return False
    if not isinstance(mode, Mapping) or (mode.get("all") is not None and mode.get("single") is not None):
        return GroupError("", "spec.disruptionMode must set at most one of single, all")
    return mode.get("all") is not None


def _topology_key(constraints: object) -> str | GroupError | None:
    if constraints is None:
        return None
    if not isinstance(constraints, Mapping):
        return GroupError("", "spec.schedulingConstraints must be an object")
    topo = constraints.get("topology") or []
    if not isinstance(topo, list) or not all(isinstance(t, Mapping) for t in topo):
        return GroupError("", "spec.schedulingConstraints.topology must be a list of objects")
    if not topo:
        return None
    key = topo[0].get("key")
    if not isinstance(key, str) or not _LABEL_KEY_RE.match(key):
        return GroupError("", f"spec.schedulingConstraints.topology[0].key must be a node label key, got {key!r:.60}")
    return key


def _initially_scheduled(status: object) -> Condition | GroupError | None:
    if status is None:
        return None
    if not isinstance(status, Mapping):
        return GroupError("", "status must be an object")
    conds = status.get("conditions") or []
    if not isinstance(conds, list):
        return GroupError("", "status.conditions must be a list")
    for c in conds:
        if isinstance(c, Mapping) and c.get("type") == INITIALLY_SCHEDULED:
            og = c.get("observedGeneration", 0)
            return Condition(
                str(c.get("status", "")),
                str(c.get("reason", "")),
                str(c.get("message", "")),
                str(c.get("lastTransitionTime", "")),
                og if _is_int(og) else 0,
            )
    return None


def parse_crd(doc: object) -> PodGroup | GroupError:
    """A scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup, or why it is malformed.

    ``minMember`` absent or 0 means 1, as the coscheduling plugin treats it (any pod may run
    alone); a negative one is malformed. ``scheduleTimeoutSeconds`` must be positive when set."""
    common = _common(doc)
    if isinstance(common, GroupError):
        return common
    obj, what, base = common
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return GroupError(what, "spec must be an object")
    mm = spec.get("minMember", 0)
    if mm is None:
        mm = 0
    if not _is_int(mm) or not 0 <= mm <= _INT32_MAX:
        return GroupError(what, f"spec.minMember must be a non-negative int32, got {mm!r:.40}")
    ts = spec.get("scheduleTimeoutSeconds")
    if ts is not None and (not _is_int(ts) or not 1 <= ts <= _INT32_MAX):
        return GroupError(what, f"spec.scheduleTimeoutSeconds must be a positive int32, got {ts!r:.40}")
    raw_res = spec.get("minResources")
    min_res: Resources | None = None
    if raw_res is not None:
        if not isinstance(raw_res, Mapping):
            return GroupError(what, "spec.minResources must be a map of quantities")
        for name, q in raw_res.items():
            if isinstance(q, bool) or not isinstance(q, str | int | float):
                return GroupError(what, f"spec.minResources.{name!s:.60}: a quantity must be a string, got {q!r:.40}")
        try:
            min_res = Resources.from_json(raw_res)
        except (ValueError, TypeError, ArithmeticError) as e:
            return GroupError(what, f"spec.minResources: {e}")
    status = obj.get("status") or {}
    phase = status.get("phase", "") if isinstance(status, Mapping) else ""
    return PodGroup(
        api=CRD,
        min_count=max(1, int(mm)),
        timeout=float(ts) if ts is not None else None,
        min_resources=min_res,
        phase=phase if isinstance(phase, str) else "",
        **base,
    )


def native_from_json(doc: dict[str, Any]) -> PodGroup:
    """Informer projection of a native PodGroup: raises only :class:`MalformedObject`."""
    got = parse_native(doc)
    if isinstance(got, GroupError):
        raise MalformedObject(str(got))
    return got


def crd_from_json(doc: dict[str, Any]) -> PodGroup:
    """Informer projection of a scheduler-plugins PodGroup: raises only :class:`MalformedObject`."""
    got = parse_crd(doc)
    if isinstance(got, GroupError):
        raise MalformedObject(str(got))
    return got


# --- decisions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangVerdict:
    """Whether a group cycle may commit: ``satisfied`` with the numbers that decided it, and the
    message upstream's PlacementFeasible gives (empty when satisfied)."""

    satisfied: bool
    scheduled: int
    remaining: int
    min_count: int
    message: str = ""


def placement_verdict(group: PodGroup, *, already_placed: int, placed: int, remaining: int = 0) -> GangVerdict:
    """The all-or-nothing rule of a group cycle (upstream GangScheduling's PlacementFeasible).

    ``already_placed`` members were assumed or bound before this cycle, ``placed`` got a node in
    it, ``remaining`` are still to be tried. Satisfied once ``already_placed + placed`` reaches
    ``min_count``; hopeless (commit nothing) when even the remaining ones cannot get it there.
    A basic (non-gang) group is satisfied by any placement, as upstream treats it as minCount 1.
    """
    scheduled = already_placed + placed
    need = group.min_count if group.gang else 1
    if scheduled >= need:
        return GangVerdict(True, scheduled, remaining, need)
    if scheduled + remaining < need:
        msg = f"minCount ({need}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
    else:
        msg = f"minCount ({need}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining"
    return GangVerdict(False, scheduled, remaining, need, msg)


def gang_satisfied(group: PodGroup, placed_uids: frozenset[str] | set[str], already_placed: frozenset[str]) -> bool:
    """Convenience form for the core: the members placed in the cycle plus those already
    assumed/bound (by uid, so a member counted in both is counted once) reach the quorum."""
    return placement_verdict(group, already_placed=len(already_placed | placed_uids), placed=0).satisfied


# --- status documents ----------------------------------------------------------------------------


def native_condition(
    group: PodGroup, outcome: Literal["scheduled", "unschedulable", "error"], message: str, now: str
) -> dict[str, Any] | None:
    """The ``PodGroupInitiallyScheduled`` condition to write for ``outcome``, or None when nothing
    must be written: it is True already (upstream never regresses it), or it says the same.

    ``lastTransitionTime`` changes only with the status, as ``meta.SetStatusCondition`` does."""
    status = "True" if outcome == "scheduled" else "False"
    reason = {
        "scheduled": REASON_SCHEDULED,
        "unschedulable": REASON_UNSCHEDULABLE,
        "error": REASON_SCHEDULER_ERROR,
    }[outcome]
    cur = group.condition
    if cur is not None and cur.status == "True" and status != "True":
        return None
    if cur is not None and (cur.status, cur.reason, cur.message, cur.observed_generation) == (
        status,
        reason,
        message,
        group.generation,
    ):
        return None
    ltt = cur.last_transition_time if cur is not None and cur.status == status and cur.last_transition_time else now
    return {
        "type": INITIALLY_SCHEDULED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": ltt,
        "observedGeneration": group.generation,
    }


@dataclass(frozen=True, slots=True)
class MemberCounts:
    """What the CRD status reports of a group's (non-terminal) members."""

    total: int
    scheduled: int
    running: int


def count_members(members: list[Pod] | tuple[Pod, ...], placed: frozenset[str] = frozenset()) -> MemberCounts:
    """``scheduled``: bound (``nodeName`` set) or assumed by this scheduler (``placed`` uids);
    ``running``: phase Running."""
    scheduled = sum(1 for p in members if p.node_name or p.uid in placed)
    running = sum(1 for p in members if p.phase == "Running")
    return MemberCounts(len(members), scheduled, running)


def crd_phase(group: PodGroup, counts: MemberCounts, *, rejected: bool = False, in_cycle: bool = False) -> str:
    """scheduler-plugins' phase from the member counts (its controller's rules, applied by the
    scheduler that knows them first): Running once minMember run, Scheduled once minMember are
    placed, Scheduling while a group cycle is under way, Unknown when a rejected group still has
    some members placed (the rest cannot be), else Pending."""
    if counts.total and counts.running >= group.min_count:
        return PHASE_RUNNING
    if counts.total and counts.scheduled >= group.min_count:
        return PHASE_SCHEDULED
    if rejected:
        return PHASE_UNKNOWN if counts.scheduled else PHASE_PENDING
    if in_cycle:
        return PHASE_SCHEDULING
    return PHASE_PENDING


def crd_status(
    group: PodGroup,
    counts: MemberCounts,
    *,
    rejected: bool = False,
    in_cycle: bool = False,
    schedule_start_time: str = "",
) -> dict[str, Any]:
    """The ``status`` merge patch for a scheduler-plugins PodGroup. ``scheduled`` is the field
    scheduler-plugins' CRD had until v0.27 (our CRD keeps it; a newer CRD prunes it silently)."""
    out: dict[str, Any] = {
        "phase": crd_phase(group, counts, rejected=rejected, in_cycle=in_cycle),
        "scheduled": counts.scheduled,
        "running": counts.running,
    }
    if schedule_start_time:
        out["scheduleStartTime"] = schedule_start_time
    return out
