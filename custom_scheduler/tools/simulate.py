"""``custom-scheduler simulate``: place pending pods on a cluster snapshot, offline, as the daemon would.

The same objects as the daemon decide: the profiles come from
:func:`custom_scheduler.app.build_frameworks`, the cluster lives in the daemon's
:class:`~custom_scheduler.core.cache.Cache`, each cycle refreshes one
:class:`~custom_scheduler.framework.types.Snapshot` from it, and
:meth:`Algorithm.schedule <custom_scheduler.core.algorithm.Algorithm.schedule>` picks the node
(exactly the daemon's call: same sampling, same rotating start index). A placement is *assumed* in
the cache and Reserve/Permit run, so later pods see it; nothing is bound.

Queue order is the QueueSort plugin's (PrioritySort: higher priority first, then file order, which
stands for the time the pods were queued). A pod rejected by the filters waits, as in the daemon's
unschedulable queue, and is retried when a later placement may have made it schedulable: kube's
``AssignedPodAdd`` event moves only pods with pod (anti-)affinity or topology spread constraints,
since a new pod frees nothing. Such a retry is queued behind the pods not yet tried.

A pod that PreEnqueue rejects (SchedulingGates: ``spec.schedulingGates`` not empty) is *gated*: as
in the daemon's queue it is never attempted, holds no room and is reported with the plugin's
message. Nothing in a simulation removes a gate, so it stays gated.

Where the daemon and a simulation can differ, by design:

- **Ties**: equal top scores are broken uniformly at random (reservoir sampling). ``--seed`` fixes
  the simulation's choices; the live daemon's are not reproducible. Every placement reports its tie
  set, so a comparison with the daemon is exact for pods without ties.
- Preemption: PostFilter runs as in the daemon, without an API client, so DefaultPreemption only
  plans; simulate then carries the plan out in its own cache: the victims disappear at once (no
  graceful termination), the preemptor is nominated to the node and retried, and every waiting pod
  is retried (kube's ``AssignedPodDelete``). Victims are not re-created by their controllers.
- Timing: the daemon's queue order depends on when pods arrived and on retry backoff; simulate
  assumes all pods were queued at once, in file order.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import heapq
import json
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.core.algorithm import Algorithm
from custom_scheduler.framework.runtime import Framework, FrameworkError
from custom_scheduler.framework.types import CycleState, FitError, NodeInfo, Snapshot
from custom_scheduler.model import Pod
from custom_scheduler.tools import render
from custom_scheduler.tools.explain import choose_profile, offline_frameworks, run_post_filter
from custom_scheduler.tools.snapshot import (
    EXIT_OK,
    ClusterState,
    ToolError,
    build_cache,
    dump_yaml,
    load_cluster,
    load_pods,
    load_scheduler_config,
    pod_key,
    quiet_logs,
    resolve_priority,
    to_pod,
    write_text,
)

#: A pod that keeps preempting and still not fitting stops being retried after this many attempts.
MAX_ATTEMPTS = 20


@dataclass(slots=True)
class Preemption:
    """One victim of a simulated preemption."""

    pod: str
    node: str
    by: str


@dataclass(slots=True)
class Usage:
    requested: int
    allocatable: int

    @property
    def percent(self) -> float | None:
        return None if self.allocatable <= 0 else 100.0 * self.requested / self.allocatable

    def to_dict(self) -> dict[str, Any]:
        p = self.percent
        pct = None if p is None else round(p, 1)
        return {"requested": self.requested, "allocatable": self.allocatable, "percent": pct}


@dataclass(slots=True)
class NodeUsage:
    node: str
    cpu: Usage
    memory: Usage
    pods: Usage
    extended: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def of(cls, ni: NodeInfo) -> NodeUsage:
        alloc, req = ni.allocatable, ni.requested
        return cls(
            ni.name,
            Usage(req.milli_cpu, alloc.milli_cpu),
            Usage(req.memory, alloc.memory),
            Usage(len(ni.pods), alloc.allowed_pods),
            {k: Usage(req.scalar.get(k, 0), v) for k, v in sorted(alloc.scalar.items()) if v > 0},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu": self.cpu.to_dict(),
            "memory": self.memory.to_dict(),
            "pods": self.pods.to_dict(),
            "extended": {k: u.to_dict() for k, u in self.extended.items()},
        }

    def over_allocatable(self) -> list[str]:
        """Resources requested beyond allocatable (empty when the node is not over-committed)."""
        main = (("cpu", self.cpu), ("memory", self.memory), ("pods", self.pods))
        out = [n for n, u in main if u.requested > u.allocatable]
        out.extend(k for k, u in self.extended.items() if u.requested > u.allocatable)
        return out


@dataclass(slots=True)
class Outcome:
    """The last attempt for one pod."""

    pod: str
    profile: str
    result: str = "pending"  # scheduled | unschedulable | preempted | error | gated
    node: str = ""
    score: int | None = None
    ties: list[str] = field(default_factory=list)
    message: str = ""
    attempts: int = 0
    order: int = 0  # 1-based position among placements


@dataclass(slots=True)
class SimulationResult:
    cluster: str
    profile: str
    seed: int
    outcomes: list[Outcome]
    before: list[NodeUsage]
    after: list[NodeUsage]
    notes: list[str] = field(default_factory=list)
    preempted: list[Preemption] = field(default_factory=list)

    @property
    def placements(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.result == "scheduled"), key=lambda o: o.order)

    def placement_map(self) -> dict[str, str]:
        """``namespace/name`` → node, for placed pods."""
        return {o.pod: o.node for o in self.placements}

    def to_dict(self) -> dict[str, Any]:
        before = {u.node: u for u in self.before}
        unsched = [o for o in self.outcomes if o.result == "unschedulable"]
        errors = [o for o in self.outcomes if o.result == "error"]
        gated = [o for o in self.outcomes if o.result == "gated"]
        return {
            "cluster": self.cluster,
            "profile": self.profile,
            "seed": self.seed,
            "summary": {
                "nodes": len(self.after),
                "pods": len(self.outcomes),
                "placed": len(self.placements),
                "unschedulable": len(unsched),
                "errors": len(errors),
                "preempted": len(self.preempted),
                "gated": len(gated),
            },
            "placements": [
                {
                    "order": o.order,
                    "pod": o.pod,
                    "node": o.node,
                    "score": o.score,
                    "ties": list(o.ties),
                    "attempts": o.attempts,
                    "profile": o.profile,
                }
                for o in self.placements
            ],
            "unschedulablePods": [{"pod": o.pod, "message": o.message, "attempts": o.attempts} for o in unsched],
            "gatedPods": [{"pod": o.pod, "message": o.message} for o in gated],
            "preempted": [{"pod": p.pod, "node": p.node, "by": p.by} for p in self.preempted],
            "errorPods": [{"pod": o.pod, "message": o.message, "attempts": o.attempts} for o in errors],
            "utilisation": [
                {"node": u.node, "before": before[u.node].to_dict(), "after": u.to_dict()}
                for u in self.after
                if u.node in before
            ],
            "notes": list(self.notes),
        }


def usage(snap: Snapshot) -> list[NodeUsage]:
    return [NodeUsage.of(ni) for ni in sorted(snap.node_list, key=lambda n: n.name)]


def _pending(doc: Mapping[str, Any], index: int, priority_classes: Sequence[Mapping[str, Any]]) -> Pod:
    d = copy.deepcopy(dict(doc))
    d = resolve_priority(d, priority_classes)
    spec = d.setdefault("spec", {})
    spec.pop("nodeName", None)
    d.pop("status", None)
    return to_pod(d, default_uid=f"simulate:{index}:{pod_key(d)}")


def simulate(
    state: ClusterState,
    pod_docs: Sequence[Mapping[str, Any]],
    cfg: Any,
    registry: Any,
    *,
    seed: int | None = None,
    profile: str | None = None,
) -> SimulationResult:
    """Place ``pod_docs`` (Pod JSON, file order) on ``state`` with ``cfg``'s profiles.

    A pod's ``spec.nodeName`` and status are ignored: every pod is placed as if pending. Raises
    :class:`ToolError` for pods already assigned in the cluster or given twice.
    """
    if seed is None:
        seed = random.randrange(2**31)
    pods = [_pending(doc, i, state.priority_classes) for i, doc in enumerate(pod_docs)]
    seen: dict[str, int] = {}
    for p in pods:
        seen[p.key] = seen.get(p.key, 0) + 1
    dups = sorted(k for k, n in seen.items() if n > 1)
    if dups:
        raise ToolError(f"pods given more than once: {', '.join(dups[:10])}")
    existing = {pod_key(d): d.get("spec", {}).get("nodeName") for d in state.assigned_pods()}
    clash = sorted(k for k in seen if k in existing)
    if clash:
        raise ToolError(
            f"pod {clash[0]} is already assigned to {existing[clash[0]]} in the cluster snapshot"
            + (f" (and {len(clash) - 1} more)" if len(clash) > 1 else "")
            + "; remove it from the snapshot or from the pods file"
        )

    cache = build_cache(state)
    snap = Snapshot()
    nominator: dict[str, list[Pod]] = {}  # node -> pods nominated there by preemption
    fwks = offline_frameworks(cfg, registry, state, snap, nominator, seed)
    algo = Algorithm(rng=random.Random(seed), percentage_of_nodes_to_score=cfg.percentage_of_nodes_to_score)
    cache.update_snapshot(snap)
    before = usage(snap)

    chosen: dict[str, Framework] = {}
    notes: list[str] = []
    for p in pods:
        fwk, note = choose_profile(fwks, p, profile)
        chosen[p.uid] = fwk
        if note and not any(n.startswith("Pods whose schedulerName") for n in notes):
            notes.append(
                f"Pods whose schedulerName is not a profile of the configuration (e.g. {p.key}: "
                f"{p.scheduler_name!r}) were placed with profile {fwk.profile_name!r}."
            )
    default_profile = profile or next(iter(fwks))

    # The active queue: QueueSort order over (pod, time queued); file order stands for arrival time.
    sort = next(iter(fwks.values())).queue_sort

    @functools.total_ordering
    class _Entry:
        __slots__ = ("pod", "ts")

        def __init__(self, pod: Pod, ts: int) -> None:
            self.pod, self.ts = pod, ts

        def __lt__(self, other: _Entry) -> bool:
            if sort.less(self.pod, self.ts, other.pod, other.ts):
                return True
            if sort.less(other.pod, other.ts, self.pod, self.ts):
                return False
            return self.ts < other.ts

        def __eq__(self, other: object) -> bool:
            return isinstance(other, _Entry) and self.ts == other.ts

        __hash__ = None  # type: ignore[assignment]

    active: list[_Entry] = []
    clock = 0

    def enqueue(p: Pod) -> None:
        nonlocal clock
        heapq.heappush(active, _Entry(p, clock))
        clock += 1

    def unnominate(uid: str) -> None:
        for node in list(nominator):
            nominator[node] = [p for p in nominator[node] if p.uid != uid]
            if not nominator[node]:
                del nominator[node]

    outcomes = {p.uid: Outcome(p.key, chosen[p.uid].profile_name) for p in pods}
    for p in pods:
        # PreEnqueue, as the daemon's queue runs it: a gated pod never enters the active queue.
        pre = chosen[p.uid].run_pre_enqueue(p)
        if pre.is_success:
            enqueue(p)
        else:
            outcomes[p.uid].result, outcomes[p.uid].message = "gated", pre.message
    waiting: dict[str, Pod] = {}  # the unschedulable queue
    preempted: list[Preemption] = []
    placed = 0
    while active:
        pod = heapq.heappop(active).pod
        fwk = chosen[pod.uid]
        out = outcomes[pod.uid]
        out.attempts += 1
        cache.update_snapshot(snap)
        cs = CycleState()
        try:
            result = algo.schedule(fwk, cs, pod, snap, nominator, detail=True)
        except FitError as fe:
            plan = run_post_filter(fwk, cs, pod, fe)
            out.result, out.message = "unschedulable", str(fe)
            if plan is None or out.attempts >= MAX_ATTEMPTS:
                waiting[pod.uid] = pod
                continue
            # Preemption: the victims go (at once: no graceful termination offline), the pod is
            # nominated to the node and retried; the deletions may help every waiting pod.
            for v in plan.victims:
                cache.remove_pod(v)
                preempted.append(Preemption(v.key, plan.node, pod.key))
                victim = outcomes.get(v.uid)
                if victim is not None:
                    victim.result, victim.node = "preempted", plan.node
                    victim.message = f"preempted by {pod.key} on {plan.node}"
            for c in plan.cleared_nominations:
                unnominate(c.uid)
            unnominate(pod.uid)
            pod = dataclasses.replace(pod, nominated_node_name=plan.node)
            nominator.setdefault(plan.node, []).append(pod)
            out.message += f" (nominated to {plan.node} after preempting {len(plan.victims)} pod(s))"
            for w in waiting.values():
                enqueue(w)
            waiting.clear()
            enqueue(pod)
            continue
        except (FrameworkError, RuntimeError) as e:
            out.result, out.message = "error", str(e)
            continue
        node = result.node
        assumed = cache.assume(pod, node)
        unnominate(pod.uid)
        st = fwk.run_reserve(cs, assumed, node)
        if st.is_success:
            st = fwk.run_permit(cs, assumed, node)
        if not st.is_success:
            fwk.run_unreserve(cs, assumed, node)
            cache.forget(pod.uid)
            out.result, out.message = "error", st.message or "reserve/permit rejected the pod"
            continue
        placed += 1
        top = max((s.total for s in result.scores), default=None)
        out.result, out.node, out.order, out.message = "scheduled", node, placed, ""
        out.score = top
        out.ties = sorted(s.name for s in result.scores if s.total == top) if result.scores else [node]
        # AssignedPodAdd: only pods that may have failed on pod affinity or spread can now fit.
        for uid, w in list(waiting.items()):
            if w.has_pod_affinity or w.topology_spread_constraints:
                del waiting[uid]
                enqueue(w)
    cache.update_snapshot(snap)
    return SimulationResult(
        cluster=state.source,
        profile=default_profile,
        seed=seed,
        outcomes=[outcomes[p.uid] for p in pods],
        before=before,
        after=usage(snap),
        notes=notes,
        preempted=preempted,
    )


def run(args: argparse.Namespace, registry: Any) -> SimulationResult:
    cfg = load_scheduler_config(args.config, registry)
    state = load_cluster(args.cluster)
    pods = load_pods(args.pods)
    return simulate(state, pods, cfg, registry, seed=args.seed, profile=args.profile)


def format_result(res: SimulationResult, output: str) -> str:
    d = res.to_dict()
    if output == "json":
        return json.dumps(d, indent=2) + "\n"
    if output == "yaml":
        return dump_yaml(d)
    return render.simulation_text(d)


# -- the command ------------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    from custom_scheduler.builtin import full_registry

    try:
        with quiet_logs():
            res = run(args, full_registry())
        d = res.to_dict()
        if args.html:
            write_text(args.html, render.simulation_html(d))
    except ToolError as e:
        print(f"custom-scheduler simulate: {e}", file=sys.stderr)
        return e.code
    sys.stdout.write(format_result(res, args.output))
    return EXIT_OK
