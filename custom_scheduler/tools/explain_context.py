"""``explain`` in context: after the pods placed before it, and as its gang's group cycle decides.

Two questions :func:`~custom_scheduler.tools.explain.explain_pod` alone answers wrongly:

- **A pod of a multi-pod file** (``explain --pods FILE NAME``, ``simulate --explain NAME``): in
  the daemon the pods ahead of it in the queue are placed first, and they take room. The pods
  before NAME in the file are placed by the same offline simulation as ``simulate`` runs (queue
  order, preemption carried out in memory), their placements written into a copy of the cluster
  state (victims removed), and NAME is explained against that state.
- **A pending member of a PodGroup** whose profile runs GangScheduling: the daemon never places it
  alone. The group cycle places every queued member together and commits only if minCount of them
  fit; when they do not, every member fails with the group's message. Explaining the pod alone
  named a node ("Result: ml-1") while the daemon wrote FailedScheduling. So the group's pending
  members are simulated together (:func:`custom_scheduler.tools.simulate.simulate` drives the
  daemon's own group cycle) and the pod's result is the cycle's; the pod's own Filter verdicts and
  scores stay in the report (they say why each node does or does not take it). For a refused
  gang, "what would make it fit" is that of the first member that fits nowhere once the ones
  before it are placed (:func:`gang_fixes`).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import pod_from_json
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools.cluster_state import ClusterState, meta_of, pod_key
from custom_scheduler.tools.explain import Explanation, explain_pod
from custom_scheduler.tools.plumbing import ToolError
from custom_scheduler.tools.simulate import simulate
from custom_scheduler.tools.simulation_result import SimulationResult

JSONDict = dict[str, Any]


# -- a pod of a file, after the pods before it -------------------------------------------------------


def pick(pod_docs: Sequence[Mapping[str, Any]], name: str) -> int:
    """The index of NAME (``namespace/name``, or a name unique in the file) among ``pod_docs``."""
    if "/" in name:
        hits = [i for i, d in enumerate(pod_docs) if pod_key(d) == name]
    else:
        hits = [i for i, d in enumerate(pod_docs) if meta_of(d).get("name") == name]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ToolError(f"no pod {name!r} in the pods file ({len(pod_docs)} pods)")
    keys = ", ".join(pod_key(pod_docs[i]) for i in hits)
    raise ToolError(f"pod name {name!r} is ambiguous in the pods file ({keys}): give namespace/name")


def state_after(state: ClusterState, res: SimulationResult, placed_docs: Sequence[Mapping[str, Any]]) -> ClusterState:
    """A copy of ``state`` with the simulation's outcome applied: each placed pod bound to its
    node (as the daemon's cache holds it once bound), each victim gone."""
    where = res.placement_map()
    gone = {p.pod for p in res.preempted}
    pods = [p for p in state.pods if pod_key(p) not in gone]
    for doc in placed_docs:
        key = pod_key(doc)
        if key in where and key not in gone:
            bound = copy.deepcopy(dict(doc))
            bound.setdefault("spec", {})["nodeName"] = where[key]
            bound.pop("status", None)
            pods.append(bound)
    return dataclasses.replace(state, pods=pods, warnings=list(state.warnings))


def _pending_doc(doc: Mapping[str, Any]) -> JSONDict:
    """The pod as the queue would hold it: no node, no status (as ``simulate`` takes it)."""
    out = copy.deepcopy(dict(doc))
    out.setdefault("spec", {}).pop("nodeName", None)
    out.pop("status", None)
    return out


def explain_after(
    state: ClusterState,
    pod_docs: Sequence[Mapping[str, Any]],
    name: str,
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    profile: str | None = None,
    seed: int | None = None,
) -> Explanation:
    """Explain pod NAME of ``pod_docs`` after the pods before it are placed offline (then as its
    group decides, when it is a gang member: see :func:`explain_member`)."""
    idx = pick(pod_docs, name)
    before = pod_docs[:idx]
    after, unplaced, note = state, list(before), ""
    if before:
        res = simulate(state, before, cfg, registry, seed=seed if seed is not None else 0, profile=profile)
        after = state_after(state, res, before)
        where = res.placement_map()
        unplaced = [d for d in before if pod_key(d) not in where]
        note = (
            f"The {len(before)} pod(s) before it in the file were placed first by the offline simulation "
            f"(seed {res.seed}): {len(where)} placed, {len(unplaced)} not, {len(res.preempted)} victim(s) evicted."
        )
    # The file's other members of its gang that are not placed wait in the queue with it.
    waiting = [_pending_doc(d) for d in [*unplaced, *pod_docs[idx + 1 :]]]
    ex = explain_member(after, _pending_doc(pod_docs[idx]), cfg, registry, profile=profile, seed=seed, later=waiting)
    if note:
        ex.notes.insert(0, note)
    return ex


# -- a gang member, as the group cycle decides --------------------------------------------------------


def _same_group(doc: Mapping[str, Any], api: str | None, key: str | None) -> bool:
    p = pod_from_json(doc)
    if not p.namespace:
        p.namespace = "default"
    return gang.api_of(p) == api and gang.group_of(p) == key


def explain_member(
    state: ClusterState,
    pod_doc: Mapping[str, Any],
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    profile: str | None = None,
    unbind: bool = True,
    seed: int | None = None,
    later: Sequence[Mapping[str, Any]] = (),
) -> Explanation:
    """:func:`explain_pod`, and for a pending gang member the group cycle's verdict: the pod's
    group's pending members (the state's, and those of ``later``: pods of a file that would be
    queued too) are simulated together, and the pod's result becomes theirs."""
    ex = explain_pod(state, pod_doc, cfg, registry, profile=profile, unbind=unbind, seed=seed)
    g = ex.gang
    if g is None or not g.enabled or ex.gated or ex.error or ex.bound_node is not None or g.min_count is None:
        return ex
    me = pod_from_json(pod_doc)
    if not me.namespace:
        me.namespace = "default"
    api, key = gang.api_of(me), gang.group_of(me)
    mine = pod_key(pod_doc)
    others = [d for d in [*state.pending_pods(), *later] if pod_key(d) != mine and _same_group(d, api, key)]
    members = [_pending_doc(pod_doc), *(_pending_doc(d) for d in others)]
    rest = dataclasses.replace(state, pods=[p for p in state.pods if p not in others and pod_key(p) != mine])
    res = simulate(rest, members, cfg, registry, seed=seed if seed is not None else 0, profile=ex.profile)
    apply_group_verdict(ex, res, mine)
    if not ex.schedulable:
        gang_fixes(ex, rest, members, cfg, registry, seed=seed)
    return ex


def _without_group(doc: Mapping[str, Any]) -> JSONDict:
    """The pod as one that belongs to no PodGroup (scheduled alone)."""
    out = copy.deepcopy(dict(doc))
    out.setdefault("spec", {}).pop("schedulingGroup", None)
    labels = (out.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(gang.POD_GROUP_LABEL, None)
    return out


def gang_fixes(
    ex: Explanation,
    state: ClusterState,
    members: Sequence[Mapping[str, Any]],
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    seed: int | None,
) -> None:
    """What would make a refused gang fit: its members placed one by one in queue order (as the
    group cycle tries them, without the all-or-nothing), the first that fits nowhere is explained
    against the others' placements, and its smallest changes become the explanation's. A gang
    refused for another reason (every member fits, e.g. a topology constraint) gets none."""
    alone = [_without_group(d) for d in members]
    res = simulate(state, alone, cfg, registry, seed=seed if seed is not None else 0, profile=ex.profile)
    where = res.placement_map()
    missing = [d for d in alone if pod_key(d) not in where]
    if not missing:
        return
    first = explain_pod(state_after(state, res, alone), missing[0], cfg, registry, profile=ex.profile, seed=seed)
    ex.fixes = first.fixes
    ex.notes.append(
        f"For the gang: placed one by one in queue order, {len(where)} of its {len(alone)} pending member(s) fit; "
        f"{pod_key(missing[0])} is the first that does not, and what would make it fit is listed below."
    )


def apply_group_verdict(ex: Explanation, res: SimulationResult, key: str) -> None:
    """Make ``ex``'s result the group cycle's: the member's node, or the group's failure message
    (what the daemon writes in FailedScheduling); every member's outcome is listed."""
    by_pod = {o.pod: o for o in res.outcomes}
    ex.group = [(o.pod, o.result, o.node if o.result in ("scheduled", "waiting") else "") for o in res.outcomes]
    mine = by_pod[key]
    if mine.result == "scheduled":
        ex.node, ex.message, ex.preemption = mine.node, "", None
        ex.ties = [mine.node]
        ex.fixes = []
        if res.preempted:
            victims = ", ".join(f"{p.pod} on {p.node}" for p in res.preempted)
            ex.notes.append(f"The group cycle preempts to place the gang: {victims}.")
        return
    alone = ex.node
    ex.node, ex.ties, ex.message = None, [], mine.message or f"{mine.result} (group cycle)"
    if alone is not None:
        ex.preemption = None
        ex.notes.append(
            f"Alone the pod would go to {alone} (the scores above), but the daemon places the gang's "
            f"members together: the group cycle leaves it {mine.result}."
        )
