"""``custom-scheduler defrag``: which pods to move so a request shape fits, checked offline, and
optionally carried out through the Eviction API.

The shape is ``--shape "COUNTx RES=QTY[,RES=QTY...]"`` (``"2x nvidia.com/gpu=8,cpu=4"``: two pods
of 8 GPUs and 4 cpus each; ``COUNTx`` may be left out for one pod) or ``--pod NS/NAME``, a pending
pod: the shape is then that pod, or every pending member of its gang, and no pod of higher
priority than the pod's is moved. The cluster is live (``--kubeconfig``) or a snapshot
(``--cluster``).

Three steps:

1. **Plan** (:mod:`~custom_scheduler.tools.defrag_plan`, pure): the least disruptive moves under
   the rules there (controller-owned pods only, gangs whole, PDB budgets, priorities).
2. **Verify**: the same offline framework as ``simulate`` (the daemon's plugins and algorithm)
   runs on the cluster *after* the moves: the shape's pods are placed first, then every moved pod,
   as its controller re-creates it. The plan is verified only when all of them are placed and
   nothing had to be preempted for it. A plan that is not verified is never executed.
3. **Execute** (``--execute``, live only; :mod:`~custom_scheduler.tools.defrag_execute`): evict
   the moved pods at ``--rate`` pods a minute, stopping at the first refusal.

Exit codes: 0 the shape fits (already, or after the verified plan, executed when asked); 1 no
plan, a plan that the framework does not confirm, or an execution that stopped; 2 bad input.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import Resources
from custom_scheduler.config.schema import SchedulerConfig
from custom_scheduler.framework.registry import Registry
from custom_scheduler.tools import defrag_plan as dp
from custom_scheduler.tools.cluster_state import (
    ClusterState,
    JSONDict,
    build_cache,
    meta_of,
    pod_key,
    spec_of,
    state_pod,
)
from custom_scheduler.tools.plumbing import EXIT_OK, EXIT_RUNTIME, ToolError, load_scheduler_config, run_command
from custom_scheduler.tools.simulate import simulate
from custom_scheduler.tools.snapshot_file import dump_yaml

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
_SHAPE = re.compile(r"^\s*(?:(\d+)\s*[xX]\s*)?(.+?)\s*$")


# -- the shape --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShapeInput:
    """A shape and the pods that stand for it in the verification (Pod JSON, pending)."""

    shape: dp.Shape
    pod_docs: tuple[JSONDict, ...]


def parse_shape(text: str, *, priority: int | None = None, scheduler_name: str = "custom-scheduler") -> ShapeInput:
    """``"2x nvidia.com/gpu=8,cpu=4"`` as a shape of synthetic pods. Each extended resource gets the
    toleration the ExtendedResourceToleration admission plugin would add (``RES`` Exists), since
    accelerator nodes are usually tainted with their resource name."""
    m = _SHAPE.match(text)
    if not m or not m.group(2):
        raise ToolError(f"--shape {text!r}: expected COUNTx RES=QTY[,RES=QTY...], e.g. '2x nvidia.com/gpu=8'")
    count = int(m.group(1) or 1)
    if count < 1:
        raise ToolError(f"--shape {text!r}: the count must be at least 1")
    raw: dict[str, str] = {}
    for item in m.group(2).split(","):
        name, sep, qty = item.strip().partition("=")
        if not sep or not name.strip() or not qty.strip():
            raise ToolError(f"--shape {text!r}: {item.strip()!r} is not RES=QTY")
        raw[name.strip()] = qty.strip()
    try:
        requests = Resources.from_json(raw)
    except (ValueError, TypeError) as e:
        raise ToolError(f"--shape {text!r}: {e}") from None
    if requests.is_zero():
        raise ToolError(f"--shape {text!r}: requests nothing")
    extended = [n for n in raw if "/" in n]
    docs = tuple(_shape_pod(i, raw, extended, priority, scheduler_name) for i in range(count))
    return ShapeInput(dp.Shape(count, requests, priority, text.strip()), docs)


def _shape_pod(i: int, raw: Mapping[str, str], extended: Sequence[str], priority: int | None, sched: str) -> JSONDict:
    container = {
        "name": "shape",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": dict(raw), "limits": {n: raw[n] for n in extended}},
    }
    spec: JSONDict = {
        "schedulerName": sched,
        "priority": priority or 0,
        "containers": [container],
        "tolerations": [{"key": n, "operator": "Exists", "effect": "NoSchedule"} for n in extended],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"defrag-shape-{i}", "namespace": "default"},
        "spec": spec,
    }


def shape_of_pod(state: ClusterState, ref: str) -> ShapeInput:
    """The pending pod ``ns/name`` as the shape, or its gang's pending members (all of the same
    requests or not: the planner takes the largest request as every member's)."""
    ns, _, name = ref.rpartition("/")
    doc = state.find_pod(ns or "default", name)
    if doc is None:
        raise ToolError(f"--pod {ref}: no such pod in the cluster")
    if spec_of(doc).get("nodeName"):
        raise ToolError(f"--pod {ref}: already bound to {spec_of(doc)['nodeName']}; give a pending pod")
    pod = state_pod(doc, state.priority_classes)
    docs = [doc]
    if pod.pod_group:
        docs = [
            d
            for d in state.pending_pods()
            if meta_of(d).get("namespace", "default") == pod.namespace
            and state_pod(d, state.priority_classes).pod_group == pod.pod_group
        ]
    members = [state_pod(d, state.priority_classes) for d in docs]
    requests = Resources()
    for p in members:
        requests.set_max(p.requests)
    label = f"pod {pod.key}" + (f" (gang {pod.pod_group}, {len(members)} pending)" if pod.pod_group else "")
    return ShapeInput(dp.Shape(len(members), requests, max(p.priority for p in members), label), tuple(docs))


# -- planning inputs from a cluster state -----------------------------------------------------------


def pod_facts(doc: Mapping[str, Any]) -> dp.PodFacts:
    """Whether a raw pod has a controller, and whether it is a DaemonSet's or a mirror pod."""
    meta = meta_of(doc)
    owner = next((o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")), None)
    daemon = (owner is not None and owner.get("kind") == "DaemonSet") or MIRROR_ANNOTATION in (
        meta.get("annotations") or {}
    )
    return dp.PodFacts(controlled=owner is not None, daemon=daemon)


@dataclass(slots=True)
class Defrag:
    """A plan with its verification (and, once executed, what the execution did)."""

    source: str
    plan: dp.Plan
    verified: bool = False
    verification: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    execution: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        done = self.execution is None or not self.execution.get("stopped")
        return self.plan.feasible and self.verified and done

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {
            "cluster": self.source,
            "shape": p.shape.name,
            "count": p.shape.count,
            "priority": p.shape.priority,
            "feasible": p.feasible,
            "reason": p.reason,
            "domain": p.domain,
            "targets": dict(sorted(p.targets.items())),
            "moves": [
                {"unit": u.key, "priority": u.priority, "pods": [{"pod": x.key, "node": x.node_name} for x in u.pods]}
                for u in p.moves
            ],
            "evictions": p.evictions,
            "freedNodes": sorted(n for n in p.targets if any(x.node_name == n for x in p.evicted_pods())),
            "heldBack": dict(sorted(p.held_back.items())),
            "verified": self.verified,
            "verification": self.verification,
            "notes": self.notes,
            "execution": self.execution,
        }


def plan_defrag(
    state: ClusterState,
    shape: ShapeInput,
    cfg: SchedulerConfig,
    registry: Registry,
    *,
    domain_label: str = "",
    include_bare: bool = False,
    seed: int = 0,
    attempts: int = 3,
) -> Defrag:
    """Plan the moves for ``shape`` on ``state`` and verify them with the offline framework. A plan
    the framework rejects is retried with its target nodes avoided, ``attempts`` plans in all; the
    first unverified one is returned when none is verified (its failures are the informative ones)."""
    docs = {pod_key(d): d for d in state.assigned_pods()}
    pods = [state_pod(d, state.priority_classes) for d in docs.values()]
    facts = {p.uid: pod_facts(docs[p.key]) for p in pods}
    units = dp.units_of(pods, facts, shape.shape, include_bare=include_bare)
    nodes = build_cache(state).snapshot().node_list
    budgets = dp.Budgets(state.pdb_lister()())
    avoid: frozenset[str] = frozenset()
    first: Defrag | None = None
    for _ in range(attempts):
        plan = dp.plan(nodes, units, budgets, shape.shape, domain_label=domain_label, avoid=avoid)
        out = Defrag(state.source, plan)
        if not plan.feasible:
            break
        verify(out, state, shape, cfg, registry, seed=seed)
        if out.verified:
            if first is not None:
                out.notes.append(f"an earlier plan (shape on {', '.join(sorted(first.plan.targets))}) was not verified")
            return out
        first = first or out
        avoid |= frozenset(plan.targets)
    return first or out


def after_moves(state: ClusterState, moved: Sequence[Pod]) -> tuple[ClusterState, list[JSONDict]]:
    """The cluster without the moved pods, and the moved pods as their controllers re-create them
    (pending, to be placed again: see :func:`recreated`)."""
    gone = {p.key for p in moved}
    post = copy.copy(state)
    post.pods = [d for d in state.pods if pod_key(d) not in gone or not spec_of(d).get("nodeName")]
    again = [recreated(d, state.workloads) for d in state.pods if pod_key(d) in gone and spec_of(d).get("nodeName")]
    return post, again


def recreated(doc: JSONDict, workloads: Sequence[Mapping[str, Any]]) -> JSONDict:
    """The pod a controller makes in place of ``doc``: from its controller's pod template when the
    cluster state has it (a ReplicaSet, ReplicationController or StatefulSet: the template may have
    changed since ``doc`` was made, e.g. a node pin removed), else ``doc`` itself. The name stays,
    so the report can follow the pod."""
    meta = meta_of(doc)
    owner = next((o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")), None)
    if owner is None:
        return doc
    key = (owner.get("kind"), owner.get("name"), meta.get("namespace", "default"))
    for w in workloads:
        if (w.get("kind"), meta_of(w).get("name"), meta_of(w).get("namespace", "default")) != key:
            continue
        template = spec_of(w).get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            labels = meta_of(template).get("labels") or {}
            new_meta = {"name": meta.get("name"), "namespace": meta.get("namespace"), "labels": dict(labels)}
            new_meta["ownerReferences"] = meta.get("ownerReferences")
            return {"apiVersion": "v1", "kind": "Pod", "metadata": new_meta, "spec": copy.deepcopy(template["spec"])}
    return doc


def verify(
    out: Defrag, state: ClusterState, shape: ShapeInput, cfg: SchedulerConfig, registry: Registry, *, seed: int
) -> None:
    """Place the shape's pods, then the moved ones, with the offline framework on the cluster after
    the moves; the plan is verified when every pod is placed without preempting anyone."""
    post, again = after_moves(state, out.plan.evicted_pods())
    res = simulate(post, [*shape.pod_docs, *again], cfg, registry, seed=seed)
    failed = [o for o in res.outcomes if o.result != "scheduled"]
    out.verification = [{"pod": o.pod, "result": o.result, "node": o.node, "message": o.message} for o in res.outcomes]
    out.verified = not failed and not res.preempted
    if res.preempted:
        out.notes.append(f"the framework placed pods only by preempting {len(res.preempted)} pod(s): not verified")
    out.notes.extend(res.notes)


# -- reports ---------------------------------------------------------------------------------------


def format_defrag(d: Defrag, output: str) -> str:
    doc = d.to_dict()
    if output == "json":
        return json.dumps(doc, indent=2) + "\n"
    if output == "yaml":
        return dump_yaml(doc)
    return table(doc)


def table(doc: Mapping[str, Any]) -> str:
    """The plan as text: the shape, where it goes, the moves, what was held back, the verdicts."""
    prio = f", priority {doc['priority']}" if doc["priority"] is not None else ""
    lines = [f"Defrag for {doc['shape']} ({doc['count']} pod(s){prio}) on {doc['cluster']}"]
    if not doc["feasible"]:
        lines.append(f"NO PLAN: {doc['reason']}")
    else:
        where = ", ".join(f"{n} ({k})" for n, k in doc["targets"].items())
        lines.append(f"Shape goes to: {where}" + (f" in domain {doc['domain']}" if doc["domain"] else ""))
        if not doc["moves"]:
            lines.append("Moves: none (the shape fits as the cluster is)")
        else:
            lines.append(f"Moves: {doc['evictions']} pod(s) in {len(doc['moves'])} unit(s)")
            lines.append(f"  {'UNIT':<48} {'PRIORITY':>8}  PODS (NODE)")
            for m in doc["moves"]:
                pods = ", ".join(f"{x['pod']} ({x['node']})" for x in m["pods"])
                lines.append(f"  {m['unit']:<48} {m['priority']:>8}  {pods}")
            lines.append(f"Freed for the shape: {', '.join(doc['freedNodes']) or '-'}")
    for reason, n in doc["heldBack"].items():
        lines.append(f"Held back: {n} pod(s): {reason}")
    if doc["feasible"]:
        lines.append("Verification (offline framework, after the moves): " + ("OK" if doc["verified"] else "FAILED"))
        for v in doc["verification"]:
            detail = v["node"] if v["result"] == "scheduled" else f"{v['result']}: {v['message']}"
            lines.append(f"  {v['pod']:<48} {detail}")
    lines.extend(f"Note: {n}" for n in doc["notes"])
    if doc["execution"] is not None:
        e = doc["execution"]
        lines.append(
            f"Executed: {len(e['evicted'])} eviction(s)" + (f"; STOPPED: {e['stopped']}" if e["stopped"] else "")
        )
    return "\n".join(lines) + "\n"


# -- the command ------------------------------------------------------------------------------------


def _shape_input(args: argparse.Namespace, state: ClusterState, cfg: SchedulerConfig) -> ShapeInput:
    if bool(args.shape) == bool(args.pod):
        raise ToolError("give exactly one of --shape and --pod")
    if args.pod:
        return shape_of_pod(state, args.pod)
    return parse_shape(args.shape, priority=args.priority, scheduler_name=cfg.profiles[0].scheduler_name)


def _check_flags(args: argparse.Namespace) -> None:
    if args.execute and args.cluster:
        raise ToolError("--execute evicts on a live cluster; it cannot be combined with --cluster")
    if args.rate <= 0:
        raise ToolError(f"--rate {args.rate}: must be positive (pods per minute)")
    if args.max_evictions is not None and args.max_evictions < 0:
        raise ToolError(f"--max-evictions {args.max_evictions}: must not be negative")


def run(args: argparse.Namespace, registry: Registry) -> Defrag:
    """Read the cluster and the configuration, plan and verify; execute when asked."""
    from custom_scheduler.tools import defrag_execute
    from custom_scheduler.tools.live_cluster import connect, fetch_live, print_warnings
    from custom_scheduler.tools.plumbing import deployed_scheduler_config
    from custom_scheduler.tools.snapshot_file import load_cluster

    _check_flags(args)
    client = None
    if args.cluster:
        state = load_cluster(args.cluster)
        cfg = load_scheduler_config(args.config, registry)
    else:
        client = connect(args.kubeconfig)
        state = fetch_live(client)
        print_warnings("defrag", state)
        deployed = None if args.config else deployed_scheduler_config(client, args.config_map, registry)
        cfg = deployed or load_scheduler_config(args.config, registry)
    shape = _shape_input(args, state, cfg)
    result = plan_defrag(
        state, shape, cfg, registry, domain_label=args.domain_label or "", include_bare=args.include_bare
    )
    if args.execute and client is not None:
        result.execution = defrag_execute.execute_plan(
            client, result, rate=args.rate, max_evictions=args.max_evictions, log=sys.stderr
        ).to_dict()
    return result


def cmd_defrag(args: argparse.Namespace) -> int:
    from custom_scheduler.plugins.builtin import full_registry

    res = run_command("defrag", lambda: run(args, full_registry()))
    if isinstance(res, ToolError):
        return res.code
    sys.stdout.write(format_defrag(res, args.output))
    return EXIT_OK if res.ok else EXIT_RUNTIME
