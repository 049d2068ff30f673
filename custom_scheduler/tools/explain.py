"""``custom-scheduler explain POD``: why a pod goes (or would go) where it does, plugin by plugin.

The decision is made by the daemon's own code: the profiles are built with
:func:`custom_scheduler.framework.profiles.build_frameworks`, the cluster is loaded into the daemon's
:class:`~custom_scheduler.core.cache.Cache` (nodes, then assigned non-terminal pods, as the informers
fill it), and :meth:`Algorithm.schedule <custom_scheduler.core.algorithm.Algorithm.schedule>` runs
with ``find_all=True`` so that every node gets a verdict and every feasible node a score. On top of
the framework's verdict (the first failing Filter plugin, which is what the daemon reports), each
Filter plugin is also run on its own against every node, so the output shows *all* the reasons a
node is unfit, not only the first.

Semantics worth knowing:

- **A gated pod is not placed**: PreEnqueue (SchedulingGates while ``spec.schedulingGates`` is not
  empty) runs first, as in the daemon's queue. A pod it rejects is reported as gated, with the
  plugin's message (``waiting for scheduling gates: [example.com/a]``) and no node verdicts: the
  daemon makes no scheduling attempt for it (no event, no condition) until the gates are removed.
- **A bound pod is explained as if unbound**: it is removed from its node first (so its own
  requests do not count against that node), and the answer is where the scheduler would place it
  *now*. When nothing changed since the daemon bound it, the verdict names that node, or a tie set
  containing it: the daemon breaks equal top scores uniformly at random.
- Pods bound after it still count, so for an old pod the cluster may have moved on; the output says
  when the verdict differs from the binding.
- Every node is evaluated, as the daemon does on clusters under 100 nodes. On larger clusters the
  daemon scores only a sample (``percentageOfNodesToScore``) and may pick a lower-ranked node.
- For an unschedulable pod, PostFilter (DefaultPreemption) runs as in the daemon but offline: the
  plugins get no API client, so preemption only *plans* (which node, which victims) and evicts
  nothing. The message is the daemon's, including its ``preemption: ...`` sentence.
- Pending pods with ``status.nominatedNodeName`` count on their nominated node, as the daemon's
  nominator does.
- PodTopologySpread's system default constraints spread a pod away from the other pods of its
  workload: the Services, ReplicationControllers, ReplicaSets and StatefulSets of the cluster (or
  the snapshot) that select it, as in the daemon. A snapshot without those sections, or a kind the
  credentials may not list (a warning on stderr), leaves the pod without a workload.
- **A gang member**: for a pod of a PodGroup the report says which group, its minCount, how many
  members exist and are placed, and whether GangScheduling's PreEnqueue barrier holds the pod
  (then it is gated, as above). :func:`explain_pod` gives this pod's own verdicts; the command
  (:mod:`.explain_context`) then replaces the result of a pending member by the group cycle's,
  since the daemon places a gang's queued members together and commits only a whole gang.
- **More than upstream's reasons**: each rejected node gets the particulars its failing plugins
  leave out (which taint, which label, short by how much of what, which claim), and an
  unschedulable pod the nodes closest to fitting with the smallest change each needs
  (:mod:`.explain_reasons`). The result's message stays the daemon's, word for word.
- Where the configuration comes from (the daemon's /configz, its ConfigMap, ``--config``) is
  :mod:`.explain_config`'s business; the report's first line names it.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Pod, pod_from_json
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.core.algorithm import Algorithm, ScheduleResult
from custom_scheduler.core.cycle import run_post_filter
from custom_scheduler.framework.extender import Extenders
from custom_scheduler.framework.gang_store import GangStore
from custom_scheduler.framework.interface import FilterPlugin, PostFilterResult
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.registry import Registry
from custom_scheduler.framework.runtime import Framework, FrameworkError, ScoredNode
from custom_scheduler.framework.types import Code, CycleState, FitError, NodeInfo, Snapshot, Status
from custom_scheduler.plugins import dynamic_resources, gang_scheduling
from custom_scheduler.tools import explain_claims, explain_reasons, explain_volumes, report
from custom_scheduler.tools.cluster_state import GroupReport
from custom_scheduler.tools.explain_reservations import reservation_of
from custom_scheduler.tools.snapshot import (
    ClusterState,
    ToolError,
    build_cache,
    dump_yaml,
    resolve_priority,
    to_pod,
)

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def code_name(code: Code) -> str:
    """kube's spelling of a status code (``UnschedulableAndUnresolvable``)."""
    return "".join(w.capitalize() for w in code.name.split("_"))


@dataclass(slots=True)
class FilterCheck:
    plugin: str
    verdict: str  # pass | fail | skip | error
    reason: str = ""


@dataclass(slots=True)
class NodeVerdict:
    name: str
    feasible: bool
    plugin: str = ""  # the failing plugin the scheduler reports ("" for PreFilter-excluded nodes)
    code: str = ""
    reasons: list[str] = field(default_factory=list)
    checks: list[FilterCheck] = field(default_factory=list)
    detail: list[str] = field(default_factory=list)
    """What the failing plugins' reasons leave out (:func:`explain_reasons.details`)."""

    @property
    def failing(self) -> list[str]:
        """The Filter plugins that reject the node: each one's own verdict when they ran, else the
        framework's (the first failing plugin)."""
        failed = [c.plugin for c in self.checks if c.verdict == "fail"]
        return failed or ([self.plugin] if self.plugin else [])


@dataclass(slots=True)
class PreemptionPlan:
    """What PostFilter decided offline: the node it would nominate and the pods it would evict."""

    node: str
    victims: list[Pod] = field(default_factory=list)
    cleared_nominations: list[Pod] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "victims": [v.key for v in self.victims],
            "clearedNominations": [p.key for p in self.cleared_nominations],
        }


@dataclass(frozen=True, slots=True)
class Gate:
    """The PreEnqueue verdict that keeps a pod out of the daemon's active queue."""

    plugin: str
    code: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class GangNote(GroupReport):
    """The PodGroup a pod belongs to, as GangScheduling sees it. ``held`` is the barrier's
    message when it keeps the pod out of the queue; ``enabled`` whether the profile runs
    GangScheduling at all (else the pod goes alone); ``reservation`` the one written on the group
    and ``reservation_note`` its sentence (:mod:`.explain_reservations`)."""

    enabled: bool
    held: str = ""
    reservation: dict[str, Any] | None = None
    reservation_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        detail = {"gangScheduling": self.enabled, "heldByBarrier": bool(self.held), "barrierMessage": self.held}
        return self._report({}, {**detail, "reservation": self.reservation})


def gang_note(pod: Pod, fwk: Framework, gangs: GangStore, gate: Status | None) -> GangNote | None:
    """What to say about ``pod``'s PodGroup (None: it names none). ``gate`` is PreEnqueue's
    verdict on the pod: the barrier holds it when GangScheduling is the plugin that rejected it."""
    api, key = gang.api_of(pod), gang.group_of(pod)
    if api is None or key is None:
        return None
    pg = gangs.group_for(pod)
    members = gangs.members(pg) if pg is not None else []
    held = gate.message if gate is not None and not gate.is_success and gate.plugin == gang_scheduling.NAME else ""
    reservation, sentence = reservation_of(pg, time.time())
    return GangNote(
        key=key,
        api=gang.group_version(api),
        min_count=pg.min_count if pg is not None else None,
        members=len(members),
        placed=len(gangs.placed(pg)) if pg is not None else 0,
        enabled=fwk.pod_group is not None,
        held=held,
        reservation=reservation,
        reservation_note=sentence,
    )


@dataclass(slots=True)
class Explanation:
    pod: str
    profile: str
    cluster: str
    nodes_total: int
    filter_plugins: list[str]
    score_plugins: list[tuple[str, int]]
    bound_node: str | None = None
    verdicts: list[NodeVerdict] = field(default_factory=list)
    scores: list[ScoredNode] = field(default_factory=list)
    node: str | None = None
    ties: list[str] = field(default_factory=list)
    message: str = ""
    error: str = ""
    skipped_filter: list[str] = field(default_factory=list)
    skipped_score: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    preemption: PreemptionPlan | None = None
    gate: Gate | None = None
    """Set when PreEnqueue rejects the pod: the daemon never attempts it, so nothing else is run."""
    gang: GangNote | None = None
    """Set for a pod of a PodGroup."""
    fixes: list[explain_reasons.NodeFix] = field(default_factory=list)
    """For an unschedulable pod: the nodes closest to fitting and what each lacks."""
    config_source: str = ""
    """Where the configuration came from (the first line of the report)."""
    group: list[tuple[str, str, str]] = field(default_factory=list)
    """For a gang member: the group cycle's verdict on every queued member (pod, result, node)."""

    @property
    def schedulable(self) -> bool:
        return self.node is not None

    @property
    def gated(self) -> bool:
        return self.gate is not None

    @property
    def feasible(self) -> int:
        return sum(1 for v in self.verdicts if v.feasible)

    @property
    def agrees(self) -> bool | None:
        """Whether the verdict matches the pod's binding (None for an unbound pod)."""
        if self.bound_node is None:
            return None
        return self.bound_node == self.node or self.bound_node in self.ties

    def to_dict(self) -> dict[str, Any]:
        weights = dict(self.score_plugins)
        chosen = [s.total for s in self.scores if s.name == self.node]
        top = chosen[0] if chosen else (self.scores[0].total if self.scores else None)
        return {
            "configSource": self.config_source,
            "pod": self.pod,
            "profile": self.profile,
            "cluster": self.cluster,
            "boundNode": self.bound_node,
            "nodesTotal": self.nodes_total,
            "feasibleNodes": self.feasible,
            "filterPlugins": list(self.filter_plugins),
            "scorePlugins": [{"name": n, "weight": w} for n, w in self.score_plugins],
            "skipped": {"filter": list(self.skipped_filter), "score": list(self.skipped_score)},
            "nodes": [
                {
                    "name": v.name,
                    "feasible": v.feasible,
                    "plugin": v.plugin,
                    "code": v.code,
                    "reasons": list(v.reasons),
                    "detail": list(v.detail),
                    "filters": [
                        {"plugin": c.plugin, "verdict": c.verdict, **({"reason": c.reason} if c.reason else {})}
                        for c in v.checks
                    ],
                }
                for v in self.verdicts
            ],
            "scores": [
                {
                    "node": s.name,
                    "total": s.total,
                    "plugins": [
                        {
                            "plugin": p,
                            "weight": weights.get(p, 1),
                            "raw": s.raw[p],
                            "normalized": s.normalized[p],
                            "weighted": s.weighted[p],
                        }
                        for p, _ in self.score_plugins
                        if p in s.raw
                    ],
                }
                for s in self.scores
            ],
            "result": {
                "schedulable": self.schedulable,
                "node": self.node,
                "score": top if self.schedulable else None,
                "ties": list(self.ties),
                "message": self.message,
            },
            "preemption": self.preemption.to_dict() if self.preemption else None,
            "gated": self.gate.to_dict() if self.gate else None,
            "gang": self.gang.to_dict() if self.gang else None,
            "groupCycle": [{"pod": p, "result": r, "node": n or None} for p, r, n in self.group] or None,
            "wouldFit": [f.to_dict() for f in self.fixes],
            "agreesWithBinding": self.agrees,
            "notes": list(self.notes),
            "error": self.error or None,
        }


# -- the explanation --------------------------------------------------------------------------------


def choose_profile(fwks: Mapping[str, Framework], pod: Pod, requested: str | None) -> tuple[Framework, str]:
    """The framework for ``pod``: ``requested``, else the pod's schedulerName, else the only/first
    profile (with a note saying so)."""
    if requested:
        fwk = fwks.get(requested)
        if fwk is None:
            raise ToolError(f"profile {requested!r} is not in the configuration (profiles: {', '.join(fwks)})")
        return fwk, ""
    fwk = fwks.get(pod.scheduler_name)
    if fwk is not None:
        return fwk, ""
    first = next(iter(fwks.values()))
    return first, (
        f"The pod's schedulerName {pod.scheduler_name!r} is not a profile of this configuration; "
        f"explained with profile {first.profile_name!r} (the daemon would not schedule this pod)."
    )


def offline_frameworks(
    cfg: SchedulerConfig,
    registry: Registry,
    state: ClusterState,
    snap: Snapshot,
    nominated: Callable[[str], Sequence[Pod]],
    *,
    gangs: GangStore | None = None,
    event_sink: Callable[..., None] | None = None,
    activator: Callable[[Sequence[Pod]], object] | None = None,
    preempting: Callable[[str], bool] | None = None,
    permit_clock: Callable[[], float] | None = None,
) -> dict[str, Framework]:
    """The daemon's frameworks (:func:`build_frameworks`) without an API client, reading ``snap``,
    the state's namespaces, PDBs, workload selectors and PodGroups (``gangs``, default: the
    state's :meth:`~ClusterState.gang_store`), and ``nominated`` (node -> pods nominated there, the
    nominator's view).

    Without a client no plugin can write; PostFilter only decides anyway (its victims are in its
    result, which the caller reports or carries out in memory).
    """
    return build_frameworks(
        cfg.profiles,
        registry,
        snap,
        client=None,
        namespace_labels=state.namespace_labels(),
        default_spread_selector=state.default_spread_selector(),
        volumes=state.volume_store(),
        dra=state.dra_store(),
        gangs=gangs if gangs is not None else state.gang_store(),
        pdb_lister=state.pdb_lister(),
        nominated_lister=nominated,
        event_sink=event_sink,
        activator=activator,
        preempting=preempting,
        permit_clock=permit_clock,
        extenders=Extenders.build(cfg.extenders),  # the daemon's answer includes them: called here too
    )


def preemption_plan(post: PostFilterResult | None) -> PreemptionPlan | None:
    """What PostFilter decided, for the report: the node and its victims, or None."""
    if post is None or not (post.status.is_success and post.nominated_node_name):
        return None
    return PreemptionPlan(post.nominated_node_name, list(post.victims), list(post.cleared_nominations))


def explain_pod(
    state: ClusterState,
    pod_doc: Mapping[str, Any],
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    profile: str | None = None,
    unbind: bool = True,
    seed: int | None = None,
) -> Explanation:
    """Explain ``pod_doc`` (a Pod's JSON) against ``state`` with the profiles of ``cfg``.

    ``unbind``: a pod with ``spec.nodeName`` is removed from its node and explained as pending
    (set False for a pod file that pins ``nodeName`` on purpose, which NodeName then enforces).
    """
    pod, bound = _as_pending(state, pod_doc, unbind)
    cache = build_cache(state, exclude=(pod.uid, pod.key))
    snap = Snapshot()
    nominated = nominated_pods(state, [p.scheduler_name for p in cfg.profiles], exclude=pod.uid)
    # The pod is a member as explained (unbound): it replaces its own state copy.
    gangs = state.gang_store([pod], is_placed=lambda uid: cache.get_pod(uid) is not None)
    fwks = offline_frameworks(cfg, registry, state, snap, lambda node: list(nominated.get(node, ())), gangs=gangs)
    fwk, note = choose_profile(fwks, pod, profile)
    cache.update_snapshot(snap)
    ex = Explanation(
        pod=pod.key,
        profile=fwk.profile_name,
        cluster=state.source,
        nodes_total=len(snap.node_list),
        filter_plugins=[p.name for p in fwk.filter],
        score_plugins=[(p.name, w) for p, w in fwk.score],
        bound_node=bound,
        notes=[note] if note else [],
    )
    pre = fwk.run_pre_enqueue(pod)
    ex.gang = gang_note(pod, fwk, gangs, pre)
    if ex.gang is not None and ex.gang.reservation_note:
        ex.notes.append(ex.gang.reservation_note)
    if not pre.is_success:
        # The daemon's queue would hold the pod back: no attempt, so no node verdicts either.
        ex.gate = Gate(pre.plugin, code_name(pre.code), pre.message)
        ex.message = pre.message
        return ex
    facts = Facts(explain_volumes.VolumeFacts.of(state.storage), explain_claims.ClaimFacts.of(state.dra))
    _attempt(ex, fwk, pod, snap, nominated, random.Random(seed), cfg.percentage_of_nodes_to_score, facts)
    return ex


def _as_pending(state: ClusterState, pod_doc: Mapping[str, Any], unbind: bool) -> tuple[Pod, str | None]:
    """The pod to explain, and the node it is bound to when ``unbind`` takes it off it (else None)."""
    doc = resolve_priority(dict(pod_doc), state.priority_classes)
    pod = to_pod(
        doc,
        default_uid=f"explain:{doc.get('metadata', {}).get('namespace') or 'default'}/"
        f"{doc.get('metadata', {}).get('name', '')}",
    )
    if unbind and pod.node_name:
        return dataclasses.replace(pod, node_name=""), pod.node_name
    return pod, None


def _attempt(
    ex: Explanation,
    fwk: Framework,
    pod: Pod,
    snap: Snapshot,
    nominated: Mapping[str, Sequence[Pod]],
    rng: random.Random,
    percentage_of_nodes_to_score: int,
    facts: Facts | None = None,
) -> None:
    """The scheduling attempt the daemon would make, on every node, recorded into ``ex``: the
    verdicts, and the chosen node with its scores, or why there is none (and PostFilter's plan)."""
    algo = Algorithm(rng=rng, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
    cs = CycleState(rng)
    result: ScheduleResult | None = None
    statuses: dict[str, Status] = {}
    prefilter_rejected = False
    try:
        result = algo.schedule(fwk, cs, pod, snap, nominated, find_all=True)
        statuses = result.statuses
    except FitError as fe:
        statuses = fe.statuses
        prefilter_rejected = bool(fe.pre_filter_msg)
        ex.preemption = preemption_plan(run_post_filter(fwk, cs, pod, fe))
        ex.message = str(fe)
    except (FrameworkError, RuntimeError) as e:
        ex.error = str(e)
        return
    ex.skipped_filter = sorted(cs.skip_filter)
    ex.skipped_score = sorted(cs.skip_score)
    ex.verdicts = node_verdicts(fwk, cs, pod, snap, statuses, each_filter=not prefilter_rejected, facts=facts)
    if result is None:
        by_name = {ni.name: ni for ni in snap.node_list}
        fixes = [explain_reasons.node_fix(pod, by_name[v.name], v.failing) for v in ex.verdicts if v.failing]
        ex.fixes = explain_reasons.best_fixes(fixes)
    if result is not None:
        ex.scores = sorted(result.scores, key=lambda s: (-s.total, s.name))
        top = ex.scores[0].total if ex.scores else None
        ex.ties = [s.name for s in ex.scores if s.total == top]
        ex.node = result.node
        # The devices DynamicResources' Filter chose on that node (its Reserve would take them).
        ex.notes.extend(f"DynamicResources allocates {d}" for d in dynamic_resources.chosen_devices(cs, result.node))
    if len(snap.node_list) >= 100:
        ex.notes.append(
            "Every node was evaluated; on clusters of 100+ nodes the daemon scores only a sample of the "
            "feasible nodes (percentageOfNodesToScore) and may pick a lower-ranked one."
        )


def node_verdicts(
    fwk: Framework,
    cs: CycleState,
    pod: Pod,
    snap: Snapshot,
    statuses: Mapping[str, Status],
    *,
    each_filter: bool,
    facts: Facts | None = None,
) -> list[NodeVerdict]:
    """Every node's verdict, by name: the framework's (``statuses``: the first failing plugin) and,
    with ``each_filter``, every Filter plugin's own, so that all the reasons a node is unfit show.
    A node PreFilter excluded (a status without a plugin) gets no per-plugin checks."""
    out: list[NodeVerdict] = []
    for ni in sorted(snap.node_list, key=lambda n: n.name):
        st = statuses.get(ni.name)
        v = NodeVerdict(ni.name, st is None)
        if st is not None:
            v.plugin, v.code, v.reasons = st.plugin, code_name(st.code), list(st.reasons)
        if each_filter and (st is None or st.plugin):
            v.checks = [_filter_check(p, cs, pod, ni) for p in fwk.filter]
        v.detail = node_details(v.failing, pod, ni, facts)
        out.append(v)
    return out


@dataclass(frozen=True, slots=True)
class Facts:
    """The cluster objects the volume and DRA details are derived from."""

    volumes: explain_volumes.VolumeFacts
    claims: explain_claims.ClaimFacts


def node_details(failing: Sequence[str], pod: Pod, ni: NodeInfo, facts: Facts | None) -> list[str]:
    """The particulars behind each failing plugin's reason, each line once (several volume
    plugins may fail on the same claim); the volume plugins' and DynamicResources' from the
    cluster's claims, volumes and slices when known."""
    out: list[str] = []
    for plugin in failing:
        try:
            if plugin in explain_reasons.VOLUME_PLUGINS and facts is not None:
                lines = explain_volumes.details(pod, ni, facts.volumes)
            elif plugin == explain_reasons.DRA and facts is not None:
                lines = explain_claims.details(pod, ni, facts.claims)
            else:
                lines = explain_reasons.details(plugin, pod, ni)
        except Exception as e:  # a gap in the derivation: said, never a failed explain
            lines = [f"{plugin}: no details ({type(e).__name__}: {e})"]
        out += [d for d in lines if d not in out]
    return out


def _filter_check(plugin: FilterPlugin, cs: CycleState, pod: Pod, ni: NodeInfo) -> FilterCheck:
    if plugin.name in cs.skip_filter:
        return FilterCheck(plugin.name, "skip")
    try:
        s = plugin.filter(cs, pod, ni)
    except Exception as e:  # a plugin bug: shown, not raised
        return FilterCheck(plugin.name, "error", f"{type(e).__name__}: {e}")
    if s.is_success:
        return FilterCheck(plugin.name, "pass")
    return FilterCheck(plugin.name, "error" if s.code is Code.ERROR else "fail", s.message)


def nominated_pods(state: ClusterState, profiles: Collection[str], exclude: str = "") -> dict[str, list[Pod]]:
    """Pending pods of our ``profiles`` (by schedulerName) with ``status.nominatedNodeName``, by node
    (the nominator's view)."""
    out: dict[str, list[Pod]] = {}
    for doc in state.pending_pods():
        p = pod_from_json(doc)
        if p.nominated_node_name and p.scheduler_name in profiles and p.uid != exclude and not p.deleting:
            out.setdefault(p.nominated_node_name, []).append(p)
    return out


def format_explanation(ex: Explanation, output: str, top: int = 3) -> str:
    """The report: JSON/YAML of :meth:`Explanation.to_dict`, or the text view, which opens with
    the configuration's source and ends with what only explain knows (the group cycle's verdict
    per member, the particulars behind each reason, what would make the pod fit)."""
    d = ex.to_dict()
    if output == "json":
        return json.dumps(d, indent=2) + "\n"
    if output == "yaml":
        return dump_yaml(d)
    head = f"Config: {ex.config_source}\n" if ex.config_source else ""
    return head + report.explain_text(d, wide=output == "wide", top=top) + extra_text(ex, wide=output == "wide")


def extra_text(ex: Explanation, *, wide: bool) -> str:
    """The sections the shared report does not draw: the group cycle, the details of the nodes
    closest to fitting (of every rejected node with ``wide``), and what would make the pod fit."""
    out: list[str] = []
    if ex.group:
        out += ["", "Group cycle (all queued members together):"]
        out += [f"  {p}: {r}" + (f" on {n}" if n else "") for p, r, n in ex.group]
    shown = {f.node for f in ex.fixes}
    detailed = [v for v in ex.verdicts if v.detail and (wide or v.name in shown)]
    if detailed:
        out += ["", "Details (beyond the scheduler's message):"]
        out += [f"  {v.name}: {d}" for v in detailed for d in v.detail]
    if ex.fixes or ex.preemption:
        out += ["", "What would make it fit (the smallest change per node closest to fitting):"]
        out += [f"  {f.text()}" for f in ex.fixes]
        if ex.preemption:
            victims = ", ".join(v.key for v in ex.preemption.victims) or "no pods"
            out.append(f"  or preemption: evict {victims} on {ex.preemption.node} (what DefaultPreemption picks)")
    return "\n".join(out) + "\n" if out else ""
