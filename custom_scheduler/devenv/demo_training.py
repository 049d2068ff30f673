"""The demo's ML-training scenarios (issue #28): reservations, job-level preemption, elastic gangs, defrag.

They run under a second profile of the demo's config, ``custom-scheduler-training``
(:data:`PROFILE`), configured as ``docs/scenarios.md`` documents each capability: GangScheduling with
``topologyLevels``, ``jobLevelPreemption: true`` and a reservation ``threshold`` of 1 s (the
default is 30 s; a demo cannot wait that long), and AcceleratorIsolation's packing. A profile of its
own because the threshold is a profile's: with 1 s in the first profile the ``[gangs]`` scenario's
waiting gang would reserve too. Every node here is tainted ``demo/training`` and labelled with its
scenario, and every pod selects its scenario's nodes, so the scenarios never meet. (defrag-job,
pending past the threshold, reserves the nodes the plan frees; the re-created pods, which declare no
runtime, stay off them.)

- **reservation** (``res-1``, 4 GPUs): two busy pods hold 2 GPUs and declare 60 s of runtime
  (``custom-scheduler.io/expected-runtime``); gang ``res-job`` (2 x 2 GPUs) cannot fit and, 1 s
  later, reserves all 4 GPUs (the ``Reserved`` event, the ``custom-scheduler.io/reservation``
  annotation on its PodGroup). Then ``short`` (``activeDeadlineSeconds: 30``, gone before the gang
  can start) backfills into the reserved room and ``no-runtime`` is kept off with the reason.
- **job-preemption** (racks ``jl-r1``, ``jl-r2``, one 4-CPU node each): low-priority gangs
  ``low-a`` and ``low-b`` (4 x 1 CPU, minCount 4) fill one rack each; ``high-job`` (2 x 1 CPU, one
  rack required) preempts a whole gang, all 4 pods although 2 CPUs would do (never half a gang).
- **elastic** (rack ``el-r1`` = el-1, el-2 of 4 CPUs; rack ``el-r2`` = el-3 of 2 CPUs): a resident
  fills el-2; ``elastic-job`` (4 x 2 CPUs, minCount 2, one rack required) starts with 2 on el-1; the
  extras wait, though el-3 has room for one (another rack); once the resident is gone (the demo
  deletes it) they join on el-2.
- **defrag** (defrag-1..3, 4 GPUs each): ReplicaSet pods of 1 GPU leave 3, 3 and 2 GPUs free, so
  ``defrag-job`` (2 x 4 GPUs) fits nowhere. ``custom-scheduler defrag --pod demo/defrag-job-0``'s
  plan (the same functions, in process) moves one pod off defrag-1 and one off defrag-2; the demo
  executes it (Eviction API), the ReplicaSets re-create the pods, packed onto defrag-3, and the gang
  takes the two freed nodes.

The pod and node factories come from ``demo.py``, as for :mod:`.demo_topology`. Building objects and
the report's lines are pure; :func:`setup`, :func:`between_waves`, :func:`await_moved` and
:func:`observe` do the I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from custom_scheduler import config
from custom_scheduler.api import podgroup as gang
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.demo_topology import BLOCK, LEVELS, RACK
from custom_scheduler.framework import reservation_annotation as ra
from custom_scheduler.framework.reservations import RUNTIME_ANNOTATION
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, KubeClient
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools import defrag_execute
from custom_scheduler.tools.defrag import plan_defrag, shape_of_pod
from custom_scheduler.tools.live_cluster import fetch_live
from custom_scheduler.tools.plumbing import quiet_logs

JSON = dict[str, Any]
PodFactory = Callable[..., JSON]
NodeFactory = Callable[..., JSON]

PROFILE = "custom-scheduler-training"
THRESHOLD = "1s"
GPU = "nvidia.com/gpu"
LABEL = "demo/training"
TAINT = {"key": LABEL, "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}

#: The second profile (an item of the config's ``profiles`` list).
PROFILE_CONFIG = f"""\
- schedulerName: {PROFILE}
  plugins:
    multiPoint:
      enabled:
      - {{name: AcceleratorIsolation, weight: 5}}
      - {{name: GangScheduling}}
  pluginConfig:
  - name: AcceleratorIsolation
    args: {{resources: [{GPU}]}}
  - name: GangScheduling
    args:
      topologyLevels: [{", ".join(LEVELS)}]
      jobLevelPreemption: true
      reservation: {{threshold: {THRESHOLD}}}
"""

RESERVATION, JOB_PREEMPTION, ELASTIC, DEFRAG = "reservation", "job-preemption", "elastic", "defrag"
#: scenario -> title, in the order the report shows them.
SCENARIOS = {
    RESERVATION: f"a gang that cannot fit reserves after {THRESHOLD} pending (the demo's threshold; default 30s): "
    "only a pod that ends in time backfills",
    JOB_PREEMPTION: "a high-priority gang preempts a lower gang as a unit: all of it, never part",
    ELASTIC: "an elastic gang (minCount 2 of 4) starts in one rack; its extras join that rack when room frees",
    DEFRAG: "custom-scheduler defrag: a plan frees two whole GPU nodes, the evictions run, the gang fits",
}

#: node -> (scenario, rack or "", cpu, GPUs)
NODES: dict[str, tuple[str, str, str, int]] = {
    "res-1": (RESERVATION, "", "8", 4),
    "jl-1": (JOB_PREEMPTION, "jl-r1", "4", 0),
    "jl-2": (JOB_PREEMPTION, "jl-r2", "4", 0),
    "el-1": (ELASTIC, "el-r1", "4", 0),
    "el-2": (ELASTIC, "el-r1", "4", 0),
    "el-3": (ELASTIC, "el-r2", "2", 0),
    "defrag-1": (DEFRAG, "", "8", 4),
    "defrag-2": (DEFRAG, "", "8", 4),
    "defrag-3": (DEFRAG, "", "8", 4),
}
#: gang -> (members, minCount, required level or "")
GANGS: dict[str, tuple[int, int, str]] = {
    "res-job": (2, 2, ""),
    "low-a": (4, 4, ""),
    "low-b": (4, 4, ""),
    "high-job": (2, 2, RACK),
    "elastic-job": (4, 2, RACK),
    "defrag-job": (2, 2, ""),
}
BUSY_RUNTIME = "60s"
SHORT_DEADLINE = 30
RESIDENT = "resident"
#: ReplicaSet -> (node its pods start on, replicas): 3, 3 and 2 GPUs left free.
FRAGMENTS = {"frag-1": ("defrag-1", 1), "frag-2": ("defrag-2", 1), "frag-3": ("defrag-3", 2)}
FRAGMENT_LABEL = "demo/fragment"
#: Pods of the second wave that stay pending (the second wave's other pods must bind).
KEPT_OFF = ("no-runtime",)
#: First-wave pods that bind only after the waves in between: the elastic extras, the defragged gang.
BOUND_LATER = tuple(f"{g}-{i}" for g in ("elastic-job", "defrag-job") for i in range(GANGS[g][0]))


def nodes(make_node: NodeFactory) -> list[JSON]:
    out = []
    for name, (scenario, rack, cpu, gpus) in NODES.items():
        labels = {LABEL: scenario, **({BLOCK: rack.split("-")[0], RACK: rack} if rack else {})}
        extra = {"resources": {GPU: str(gpus)}} if gpus else {}
        out.append(make_node(name, cpu, "32Gi", labels=labels, taints=[TAINT], **extra))
    return out


def pod_groups(namespace: str) -> list[JSON]:
    """Native PodGroups; the preemption scenario's carry their priority class, as their pods do."""
    out = []
    for name, (_, min_count, required) in GANGS.items():
        spec: JSON = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        if required:
            spec["schedulingConstraints"] = {"topology": [{"key": required}]}
        if name in ("low-a", "low-b", "high-job"):
            spec["priorityClassName"] = "demo-online" if name == "high-job" else "demo-batch"
        meta = {"name": name, "namespace": namespace}
        out.append({"apiVersion": gang.NATIVE_GROUP_VERSION, "kind": "PodGroup", "metadata": meta, "spec": spec})
    return out


def _on(scenario: str, **more: str) -> JSON:
    return {"nodeSelector": {LABEL: scenario, **more}, "tolerations": [TOLERATION]}


def _members(make_pod: PodFactory, group: str, scenario: str, **kw: Any) -> list[JSON]:
    return [
        make_pod(f"{group}-{i}", scenario, scheduler=PROFILE, schedulingGroup={"podGroupName": group}, **kw)
        for i in range(GANGS[group][0])
    ]


def first_wave(make_pod: PodFactory) -> list[JSON]:
    gpus = {"extended": {GPU: "1"}, "tolerations": [TOLERATION]}
    busy = [make_pod(f"busy-{i}", RESERVATION, scheduler=PROFILE, nodeName="res-1", **gpus) for i in range(2)]
    for p in busy:  # bound at creation: "running" when the gang comes
        p["metadata"]["annotations"] = {RUNTIME_ANNOTATION: BUSY_RUNTIME}
    out = busy + _members(make_pod, "res-job", RESERVATION, extended={GPU: "2"}, **_on(RESERVATION))
    for group, rack in (("low-a", "jl-r1"), ("low-b", "jl-r2")):
        on_rack = _on(JOB_PREEMPTION, **{RACK: rack})
        out += _members(make_pod, group, JOB_PREEMPTION, cpu="1", priorityClassName="demo-batch", **on_rack)
    out += _members(make_pod, "elastic-job", ELASTIC, cpu="2", **_on(ELASTIC))
    out += _members(make_pod, "defrag-job", DEFRAG, extended={GPU: "4"}, **_on(DEFRAG))
    return out


def second_wave(make_pod: PodFactory) -> list[JSON]:
    """Created once the reservation exists, the resident is gone and the defrag plan executed."""
    out = _members(
        make_pod, "high-job", JOB_PREEMPTION, cpu="1", priorityClassName="demo-online", **_on(JOB_PREEMPTION)
    )
    res = _on(RESERVATION)
    out.append(make_pod("short", RESERVATION, scheduler=PROFILE, extended={GPU: "1"}, **res))
    out[-1]["spec"]["activeDeadlineSeconds"] = SHORT_DEADLINE
    out.append(make_pod("no-runtime", RESERVATION, scheduler=PROFILE, extended={GPU: "1"}, **res))
    return out


def _replica_set(make_pod: PodFactory, name: str, node: str, replicas: int) -> JSON:
    """A ReplicaSet of 1-GPU pods created on ``node`` (``nodeName``: no scheduling, so the layout is
    exact); :func:`setup` then unpins its template, so its re-created pods go to any defrag node."""
    pod = make_pod("x", DEFRAG, scheduler=PROFILE, extended={GPU: "1"}, nodeName=node, tolerations=[TOLERATION])
    labels = {**pod["metadata"]["labels"], FRAGMENT_LABEL: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {FRAGMENT_LABEL: name}},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def setup(kube: KubeClient, namespace: str, make_pod: PodFactory) -> None:
    """What is there before the scheduler: the resident on el-2 and the fragmenting ReplicaSets
    (their pods made and bound, then the templates unpinned)."""
    resident = make_pod(RESIDENT, ELASTIC, cpu="4", scheduler=PROFILE, nodeName="el-2", tolerations=[TOLERATION])
    kube.post(f"/api/v1/namespaces/{namespace}/pods", resident)
    for name, (node, replicas) in FRAGMENTS.items():
        kube.post(f"/apis/apps/v1/namespaces/{namespace}/replicasets", _replica_set(make_pod, name, node, replicas))
    want = sum(n for _, n in FRAGMENTS.values())
    cluster.wait_for(lambda: len(fragments(kube, namespace)) == want, timeout=30, what=f"{want} fragment pods")
    unpinned = {"spec": {"template": {"spec": {"nodeName": None, "nodeSelector": {LABEL: DEFRAG}}}}}
    for name in FRAGMENTS:
        kube.patch(f"/apis/apps/v1/namespaces/{namespace}/replicasets/{name}", unpinned, MERGE_PATCH_CT)


def fragments(kube: KubeClient, namespace: str) -> dict[str, str]:
    """The ReplicaSets' live pods (not terminating): name -> node ("" while pending)."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName") or ""
        for p in cluster.list_pods(kube, namespace, FRAGMENT_LABEL)
        if not p["metadata"].get("deletionTimestamp")
    }


def _reservation(kube: KubeClient, namespace: str) -> str | None:
    doc = kube.get(f"/apis/{gang.NATIVE_GROUP_VERSION}/namespaces/{namespace}/podgroups/res-job")
    value = ((doc.get("metadata") or {}).get("annotations") or {}).get(ra.ANNOTATION)
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class DefragRun:
    """The defrag plan as ``custom-scheduler defrag -o json`` reports it, and the fragment pods
    before it ran (name -> node)."""

    plan: JSON = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)


def between_waves(kube: KubeClient, namespace: str, config_text: str, out: TextIO, run: DefragRun) -> None:
    """After the first wave settled: let the resident finish, plan and execute the defrag (the
    command's functions, in process; ``run`` records it), and wait for res-job's reservation (so
    the second wave's ``short`` and ``no-runtime`` meet it)."""
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{RESIDENT}", {"gracePeriodSeconds": 0})
    run.before = fragments(kube, namespace)
    registry = full_registry()
    with quiet_logs():  # as the command runs it: the offline framework's logs are not the report
        state = fetch_live(kube)
        shape = shape_of_pod(state, f"{namespace}/defrag-job-0")
        result = plan_defrag(state, shape, config.load_config(config_text, registry), registry)
        result.execution = defrag_execute.execute_plan(kube, result, rate=600, max_evictions=4).to_dict()
    run.plan = result.to_dict()
    try:
        cluster.wait_for(lambda: _reservation(kube, namespace), timeout=15, interval=0.1, what="res-job's reservation")
    except TimeoutError as e:
        print(f"warning: {e}", file=out)


def await_moved(kube: KubeClient, namespace: str, timeout: float, out: TextIO) -> None:
    """Wait until the ReplicaSets' re-created pods are bound (playing the kubelet for the evicted)."""
    want = sum(n for _, n in FRAGMENTS.values())

    def placed() -> bool:
        cluster.finish_terminating_pods(kube, namespace)
        now = fragments(kube, namespace)
        return len(now) == want and all(now.values())

    try:
        cluster.wait_for(placed, timeout=timeout, interval=0.25, what="the moved pods re-created and bound")
    except TimeoutError as e:
        print(f"warning: {e}", file=out)


@dataclass(frozen=True, slots=True)
class Observed:
    """What the report reads from the cluster for these scenarios."""

    reservation: str | None
    events: tuple[JSON, ...]
    fragments: Mapping[str, str]


def observe(kube: KubeClient, namespace: str) -> Observed:
    events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events").get("items") or ()
    return Observed(_reservation(kube, namespace), tuple(events), fragments(kube, namespace))


# -- the report's lines (pure) ----------------------------------------------------------------------


def group_notes(events: Iterable[Mapping[str, Any]], group: str, reason: str) -> list[str]:
    return [
        str(e.get("note") or "")
        for e in events
        if e.get("reason") == reason
        and (e.get("regarding") or {}).get("kind") == "PodGroup"
        and (e.get("regarding") or {}).get("name") == group
    ]


def reservation_lines(annotation: str | None, events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The Reserved event and the annotation, as written."""
    lines = [
        f"busy-0, busy-1 declare {RUNTIME_ANNOTATION}: {BUSY_RUNTIME}; short declares activeDeadlineSeconds: "
        f"{SHORT_DEADLINE} (gone before the gang can start: backfills); no-runtime declares nothing (kept off)"
    ]
    lines += [f"Reserved event on PodGroup res-job: {n}" for n in group_notes(events, "res-job", "Reserved")]
    lines.append(f"PodGroup res-job annotation {ra.ANNOTATION}: {annotation or '(none)'}")
    return lines


def victims(result: Mapping[str, str]) -> dict[str, list[str]]:
    """gang -> its preempted members (of the low gangs)."""
    out: dict[str, list[str]] = {}
    for g in ("low-a", "low-b"):
        gone = [f"{g}-{i}" for i in range(GANGS[g][0]) if result.get(f"{g}-{i}") == "preempted"]
        if gone:
            out[g] = gone
    return out


def preemption_lines(result: Mapping[str, str]) -> list[str]:
    by_gang = victims(result)
    if len(by_gang) != 1:
        return [f"NOT one gang's victims: {by_gang or 'no victims'}"]
    [(g, gone)] = by_gang.items()
    size, min_count, _ = GANGS[g]
    other = "low-b" if g == "low-a" else "low-a"
    whole = f"all {size} pods" if len(gone) == size else f"only {len(gone)} of the {size} pods (PART)"
    need = GANGS["high-job"][0]
    return [f"victims: {whole} of gang {g} (minCount {min_count}) for high-job's {need} CPUs; {other} untouched"]


def rack_of(node: str) -> str:
    return NODES[node][1] if node in NODES else node


def elastic_lines(result: Mapping[str, str]) -> list[str]:
    """Where the elastic gang went: its core at once, its extras on el-2 once the resident left
    it, all in rack el-r1, none on el-3 (rack el-r2), which had room for one all along."""
    names = [f"elastic-job-{i}" for i in range(GANGS["elastic-job"][0])]
    where = {n: result.get(n, "missing") for n in names}
    if {rack_of(n) for n in where.values()} != {"el-r1"}:
        return ["NOT in one rack: " + ", ".join(f"{n} -> {w}" for n, w in where.items())]
    first = [n for n in names if where[n] == "el-1"]
    later = [n for n in names if where[n] == "el-2"]
    return [
        f"{', '.join(first)} at once on el-1 (minCount {GANGS['elastic-job'][1]}); {', '.join(later)} on el-2 "
        "once the resident left it: all in rack el-r1, none on el-3 (rack el-r2), free all along"
    ]


def defrag_lines(run: DefragRun, now: Mapping[str, str]) -> list[str]:
    """The plan's moves, the verification and execution, and where the moved pods went."""
    plan = run.plan
    if not plan.get("feasible"):
        return [f"NO PLAN: {plan.get('reason', 'defrag did not run')}"]
    moves = ", ".join(f"{x['pod']} ({x['node']})" for m in plan["moves"] for x in m["pods"])
    verified = "verified by the offline framework" if plan["verified"] else "NOT verified"
    lines = [
        f"custom-scheduler defrag --pod demo/defrag-job-0 --execute: shape {plan['shape']}",
        f"plan: move {moves}; frees {', '.join(plan['freedNodes'])}; {verified}",
    ]
    ex = plan.get("execution") or {}
    lines.append(
        f"executed: {len(ex.get('evicted') or ())} eviction(s)"
        + (f"; STOPPED: {ex['stopped']}" if ex.get("stopped") else "")
    )
    new = sorted(n for n in now if n not in run.before)
    lines.append(
        "re-created by their ReplicaSets: " + (", ".join(f"{n} -> {now[n] or 'pending'}" for n in new) or "none")
    )
    return lines + [f"NOT the plan this layout calls for: {why}" for why in check_plan(plan, run.before)]


def notes(result: Mapping[str, str], seen: Observed, run: DefragRun) -> dict[str, list[str]]:
    """scenario -> the lines the report prints under its pods."""
    return {
        RESERVATION: reservation_lines(seen.reservation, seen.events),
        JOB_PREEMPTION: preemption_lines(result),
        ELASTIC: elastic_lines(result),
        DEFRAG: defrag_lines(run, seen.fragments),
    }


def moved_pods(plan: Mapping[str, Any]) -> list[str]:
    """``ns/name`` of every pod the plan moves."""
    return [x["pod"] for m in plan.get("moves") or () for x in m["pods"]]


def check_plan(plan: Mapping[str, Any], before: Mapping[str, str]) -> list[str]:
    """Why the plan is not a valid one for this layout (empty when it is): feasible and verified,
    each move a fragment pod (a ReplicaSet's, so it comes back) on the node it names, every node
    the shape takes freed by a move, every eviction carried out and nothing else."""
    problems = []
    if not plan.get("feasible") or not plan.get("verified"):
        problems.append("not feasible and verified")
    moved = moved_pods(plan)
    for m in plan.get("moves") or ():
        for x in m["pods"]:
            name = x["pod"].partition("/")[2]
            if before.get(name) != x["node"]:
                problems.append(f"{x['pod']} is not a fragment pod on {x['node']}")
    if sorted(plan.get("targets") or {}) != sorted(plan.get("freedNodes") or ()):
        problems.append(f"targets {plan.get('targets')} are not the freed nodes {plan.get('freedNodes')}")
    ex = plan.get("execution") or {}
    if sorted(ex.get("evicted") or ()) != sorted(moved) or ex.get("stopped"):
        problems.append(f"execution {ex} did not evict exactly {moved}")
    if not moved:
        problems.append("no moves (the shape should not fit before them)")
    return problems
