"""Conformance against upstream: kube-scheduler and our ``explain`` agree on random clusters and pods.

Hypothesis draws a cluster (5–12 nodes: cpu/memory/pods capacity, zone and hostname labels, some
nodes without a zone, NoSchedule/PreferNoSchedule taints, now and then an unschedulable node, images
with sizes in ``status.images``), pods already bound to its nodes (``cluster.bind``: labels, requests
or none, their own required/preferred pod (anti-)affinity, host ports) and one pod to place (requests
of several containers and an init container, a host port, tolerations, node selector, required/preferred node affinity,
topology spread on zone or hostname with either ``whenUnsatisfiable`` and ``minDomains``,
``nodeAffinityPolicy``, ``nodeTaintsPolicy``, ``matchLabelKeys``, required/preferred pod
(anti-)affinity, images). The real kube-scheduler of the control plane's release places the pod; then
``explain`` (live, on the same API server) explains it: explain takes the bound pod off its node, so
it sees exactly the cluster kube-scheduler saw.

Both run the same profile: kube-scheduler's configuration lists, per extension point, exactly the
plugins of our effective default profile in our order with our weights (``*`` disabled everywhere,
so whatever a release adds stays out unless we have it too — NodeDeclaredFeatures is in both now; see
:func:`tests.upstream.profile_yaml`), ``percentageOfNodesToScore: 100``, and OpportunisticBatching
off (it may place a pod from an earlier pod's result, without scoring).

What is compared, per pod:

- kube-scheduler bound the pod (its ``Successfully bound pod to node`` line):
  - ``evaluatedNodes`` equals explain's node count (both saw the same cluster: a check of the test);
  - ``feasibleNodes`` equals the number of nodes explain finds feasible;
  - when more than one node was feasible, the nodes kube-scheduler scored (its
    ``Plugin scored node for pod`` lines at verbosity 10) are exactly explain's feasible nodes, and
    for every (score plugin, node) the logged score — the *weighted* score, normalised × weight
    (``frameworkImpl.normalizeScores``) — equals explain's ``weighted`` score. A plugin skipped
    (by its PreScore) has no score; it counts as 0, so skipping where the other side scores 0
    passes (the statistics list such plugins) while a skip where the other side scores more fails;
  - the node it chose is among explain's top-scoring nodes (it breaks ties at random, so the
    chosen node itself is not compared); with one feasible node, that node is explain's only one.
- kube-scheduler could not place it: explain places it nowhere either, and explain's message is
  exactly the ``PodScheduled=False`` condition's (the per-reason node counts and preemption's
  sentence).

Deviations found and fixed (each with a unit test):

- ImageLocality matched a node's image names after normalising them, where upstream normalises only
  the pod's (a node reporting ``busybox`` does not hold the pod's ``busybox``, which upstream reads
  as ``busybox:latest``).
- The unschedulable message ended in ``..``: v1.37 appends PostFilter's message (which ends with a
  period) without adding another, where the 1.2x releases did.
- NodeResourcesBalancedAllocation scored the balance a node is left with; v1.37 scores the change
  the pod makes (``50 + (50 + with − without) / 2``) and skips best-effort pods at PreScore.
- TaintToleration named the untolerated taint (``{key: value}``); since v1.35 the reason is
  ``node(s) had untolerated taint(s)`` (taints may be sensitive).
- NodeResourcesFit answered Unschedulable when the pod asks for more than the node can allocate at
  all; upstream answers UnschedulableAndUnresolvable there, so preemption does not try the node
  (it showed as preemption's node counts: "No preemption victims" vs "not helpful").

Upstream quirks the generator steers around (we follow them too, but cannot reproduce their
input):

- ImageLocality: an image's size is the ``sizeBytes`` of the *first* node that reported the name
  (``cacheImpl.addNodeImageStates`` creates the shared ``ImageStateSummary`` once); later nodes'
  sizes are ignored. Our cache does the same, but "first" is the informer's event order in
  kube-scheduler and the LIST order (by name) in ``explain``, so with different sizes per node the
  two disagree. A name stands for one image, so the generated nodes report one size per image.

Every pod has priority 0, so preemption never finds victims and never changes the cluster.

The module starts kube-scheduler once; each example gets its own namespace and nodes, removed
afterwards. 25 examples, derandomized (the same ones on every run while this file is unchanged),
take about 45 s. To hunt further: ``CS_CONFORMANCE_EXAMPLES=200 CS_CONFORMANCE_RANDOM=1``, and
``--hypothesis-show-statistics`` shows which outcomes and plugins the examples exercised.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path, pod_path
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools.explain import Explanation, explain_pod
from custom_scheduler.tools.snapshot import fetch_live, quiet_logs
from tests.builders import PodBuilder, make_node, make_pod
from tests.upstream import Binding, KubeScheduler, profile_yaml

PROFILE = "kube-conformance"
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
APPS = ("web", "db", "cache")

#: Extension points where one of our plugins runs and upstream's (v1.37) does not: kube-scheduler
#: refuses a profile naming them, so its profile leaves them out. Each is a difference of ours
#: (a hook upstream does not have); scores are still compared plugin by plugin.
NOT_UPSTREAM: dict[str, set[str]] = {
    # Upstream's DynamicResources has PreEnqueue, PreFilter, Filter, PostFilter, Score, Reserve and
    # PreBind, but no PreScore (pkg/scheduler/framework/plugins/dynamicresources).
    "DynamicResources": {"preScore"},
}

OUR_CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
- schedulerName: {PROFILE}
"""

#: (key, value, effect); one key may carry two effects, never the same effect twice.
TAINTS = (
    ("dedicated", "batch", "NoSchedule"),
    ("dedicated", "batch", "PreferNoSchedule"),
    ("spot", "true", "PreferNoSchedule"),
    ("gpu", "", "NoSchedule"),
    ("maintenance", "", "PreferNoSchedule"),
)

_DIGEST = "sha256:" + "ab" * 32
#: The names a node reports for one image (``status.images[].names``), as kubelets do: fully
#: qualified, short, by digest, and one without a tag (which upstream does not normalise).
NODE_IMAGES = (
    ("docker.io/library/nginx:1.25", "nginx:1.25"),
    ("busybox",),
    ("busybox:latest",),
    ("registry.k8s.io/pause:3.9",),
    ("example.com/ml/trainer:v2",),
    (f"redis@{_DIGEST}", "redis:7"),
)
POD_IMAGES = (
    "nginx:1.25",
    "docker.io/library/nginx:1.25",
    "busybox",
    "busybox:latest",
    "registry.k8s.io/pause:3.9",
    "example.com/ml/trainer:v2",
    "example.com/ml/trainer",
    f"redis@{_DIGEST}",
    "redis:7",
)


# -- the random cluster -----------------------------------------------------------------------------


@dataclass(slots=True)
class Scenario:
    """Nodes (names relative to the example), pods bound to node indexes, the pod to place."""

    nodes: list[dict[str, Any]]  # Node objects (``status.images`` set: NodeBuilder.image has one name)
    existing: list[tuple[dict[str, Any], int]]  # Pod objects and the index of their node
    pod: dict[str, Any]
    names: list[str] = field(default_factory=list)


def _selector(draw: st.DrawFn) -> dict[str, Any]:
    apps = draw(st.lists(st.sampled_from(APPS), min_size=1, max_size=2, unique=True))
    return {"matchExpressions": [{"key": "app", "operator": "In", "values": sorted(apps)}]}


def _pod_term(draw: st.DrawFn) -> dict[str, Any]:
    return {"topologyKey": draw(st.sampled_from((ZONE, HOST))), "labelSelector": _selector(draw)}


def _pod_affinity(draw: st.DrawFn, b: PodBuilder, max_terms: int) -> None:
    """Random required and preferred pod affinity / anti-affinity terms on ``b``."""
    for _ in range(draw(st.integers(0, max_terms))):
        kind = draw(st.sampled_from(("podAffinity", "podAntiAffinity")))
        weight = draw(st.sampled_from((0, 0, 1, 10, 50, 100)))
        b.pod_affinity(kind, _pod_term(draw), weight=weight)


def _requests(draw: st.DrawFn) -> dict[str, str]:
    req: dict[str, str] = {}
    cpu = draw(st.sampled_from((None, "50m", "100m", "250m", "500m", "1", "1500m", "2", "4")))
    mem = draw(st.sampled_from((None, "64Mi", "128Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi")))
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    return req


@st.composite
def _node(draw: st.DrawFn, i: int, image_sizes: list[int]) -> dict[str, Any]:
    b = make_node(f"n{i}").capacity(
        cpu=f"{draw(st.integers(1, 32)) * 500}m",
        memory=f"{draw(st.integers(1, 64)) * 512}Mi",
        pods=str(draw(st.integers(2, 30))),
    )
    zone = draw(st.sampled_from(("a", "b", "c", "a", "b", None)))
    if zone:
        b.label(ZONE, zone)
    disk = draw(st.sampled_from(("ssd", "hdd", None)))
    if disk:
        b.label("disktype", disk)
    for t in sorted(draw(st.sets(st.integers(0, len(TAINTS) - 1), max_size=2))):
        b.taint(*TAINTS[t])
    if draw(st.integers(0, 19)) == 0:
        b.unschedulable()
    obj = b.obj()
    for img in sorted(draw(st.sets(st.integers(0, len(NODE_IMAGES) - 1), max_size=3))):
        obj["status"].setdefault("images", []).append({"names": list(NODE_IMAGES[img]), "sizeBytes": image_sizes[img]})
    return obj


@st.composite
def _existing(draw: st.DrawFn, i: int, n_nodes: int) -> tuple[dict[str, Any], int]:
    b = make_pod(f"e{i}").scheduler("nobody").label("app", draw(st.sampled_from(APPS)))
    b.label("tier", draw(st.sampled_from(("front", "back"))))  # for the subject's matchLabelKeys
    if req := _requests(draw):
        b.req_named(req)
    if draw(st.booleans()):
        _pod_affinity(draw, b, 2)
    if draw(st.integers(0, 5)) == 0:
        b.host_port(draw(st.sampled_from((8080, 9090))))
    return b.obj(), draw(st.integers(0, n_nodes - 1))


def _toleration(draw: st.DrawFn, b: PodBuilder) -> None:
    key, value, effect = draw(st.sampled_from(TAINTS))
    form = draw(st.sampled_from(("exact", "key-exists", "any-effect", "all")))
    if form == "exact" and value:
        b.toleration(key, value, effect)
    elif form == "exact":
        b.toleration(key, effect=effect, operator="Exists")  # a taint without a value: Exists is exact
    elif form == "key-exists":
        b.toleration(key, effect=effect, operator="Exists")
    elif form == "any-effect":
        b.toleration(key, operator="Exists")
    elif draw(st.integers(0, 3)) == 0:
        b.toleration(operator="Exists")  # tolerates every taint


@st.composite
def _test_pod(draw: st.DrawFn) -> dict[str, Any]:
    b = make_pod("subject").scheduler(PROFILE).label("app", draw(st.sampled_from((*APPS, "other"))))
    b.label("tier", draw(st.sampled_from(("front", "back"))))
    for c in range(draw(st.integers(1, 2))):
        b.req(container=c, **_requests(draw))
        b.image(draw(st.sampled_from(POD_IMAGES)), container=c)
    if draw(st.integers(0, 3)) == 0:
        b.init_req(_requests(draw) or {"cpu": "10m"}, sidecar=draw(st.booleans()))
        b.spec["initContainers"][-1]["image"] = draw(st.sampled_from(POD_IMAGES))
    if draw(st.integers(0, 4)) == 0:
        b.host_port(8080, container=0)
    for _ in range(draw(st.integers(0, 3))):
        _toleration(draw, b)
    if draw(st.integers(0, 5)) == 0:
        b.node_selector(disktype="ssd")
    if draw(st.integers(0, 2)) == 0:
        zones = draw(st.lists(st.sampled_from(("a", "b", "c")), min_size=1, max_size=2, unique=True))
        expr = draw(
            st.sampled_from(
                (
                    {"key": ZONE, "operator": "In", "values": sorted(zones)},
                    {"key": ZONE, "operator": "NotIn", "values": sorted(zones)},
                    {"key": ZONE, "operator": "Exists"},
                    {"key": "disktype", "operator": "DoesNotExist"},
                )
            )
        )
        b.required_node_affinity({"matchExpressions": [expr]})
    for _ in range(draw(st.integers(0, 2))):
        key, values = draw(st.sampled_from(((ZONE, ["a"]), (ZONE, ["b", "c"]), ("disktype", ["ssd"]))))
        b.preferred_node_affinity(
            draw(st.integers(1, 100)), {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
        )
    keys = draw(st.lists(st.sampled_from((ZONE, HOST)), max_size=2, unique=True))
    for key in keys:
        when = draw(st.sampled_from(("DoNotSchedule", "ScheduleAnyway", "ScheduleAnyway")))
        extra: dict[str, Any] = {}
        if when == "DoNotSchedule" and draw(st.integers(0, 3)) == 0:
            extra["minDomains"] = draw(st.integers(1, 4))
        if draw(st.integers(0, 3)) == 0:
            extra["nodeAffinityPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
        if draw(st.integers(0, 3)) == 0:
            extra["nodeTaintsPolicy"] = draw(st.sampled_from(("Honor", "Ignore")))
        if draw(st.integers(0, 3)) == 0:
            extra["matchLabelKeys"] = ["tier"]
        b.spread(draw(st.integers(1, 3)), key, when, selector=_selector(draw), **extra)
    _pod_affinity(draw, b, 3)
    return b.obj()


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n = draw(st.integers(5, 12))
    # One size per image on every node, as in a real cluster: see the ImageLocality quirk above.
    sizes = [draw(st.integers(1, 2000)) * 1_000_000 for _ in NODE_IMAGES]
    nodes = [draw(_node(i, sizes)) for i in range(n)]
    existing = [draw(_existing(i, n)) for i in range(draw(st.integers(0, 16)))]
    return Scenario(nodes, existing, draw(_test_pod()))


# -- running both -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kube_scheduler(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeScheduler]:
    if control_plane.minor_version < 37:
        # Our plugins follow v1.37 (messages, BalancedAllocation's formula, ...): an older
        # kube-scheduler differs by design, and lacks the OpportunisticBatching gate we turn off.
        pytest.skip(f"conformance is against kube-scheduler 1.37+, the control plane is {control_plane.version}")
    workdir: Path = tmp_path_factory.mktemp("kube-scheduler")
    profile = config.load_config(OUR_CONFIG, full_registry()).profiles[0]
    ks = KubeScheduler(
        control_plane, workdir, profile_yaml(control_plane.kubeconfig(), profile, not_upstream=NOT_UPSTREAM)
    )
    ks.start()
    yield ks
    ks.stop()


_examples = itertools.count()


def _create(kube: KubeClient, sc: Scenario, namespace: str, prefix: str) -> None:
    """Nodes (named ``{prefix}-n{i}``), then the bound pods, each created and bound in turn."""
    sc.names = []
    for node in sc.nodes:
        obj = copy.deepcopy(node)
        name = f"{prefix}-{obj['metadata']['name']}"
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"][HOST] = name
        cluster.create_ready_node(kube, obj)
        sc.names.append(name)
    for pod, i in sc.existing:
        obj = copy.deepcopy(pod)
        obj["metadata"]["namespace"] = namespace
        kube.post(pod_path(namespace), obj)
        cluster.bind(kube, namespace, obj["metadata"]["name"], sc.names[i])


def _cleanup(kube: KubeClient, sc: Scenario, namespace: str) -> None:
    """Pods go at once (grace 0: no kubelet), then the nodes and the namespace, so the next example's
    cluster is the only one of this module that either scheduler sees."""
    for name in ["subject", *(p["metadata"]["name"] for p, _ in sc.existing)]:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(pod_path(namespace, name), {"gracePeriodSeconds": 0})
    cluster.delete_nodes(kube, sc.names)
    with contextlib.suppress(api_errors.KubeError):
        cluster.delete_namespace(kube, namespace)


def _barrier(kube: KubeClient, ks: KubeScheduler, sc: Scenario, namespace: str, prefix: str, since: int) -> None:
    """Wait until kube-scheduler's cache holds this example's cluster, and nothing else, before the
    subject arrives.

    Node events come on a watch of their own, in resourceVersion order, and one handler applies them
    in that order: a barrier Node created and deleted after the example's nodes is handled after
    all of them (their creation and the patches that make them Ready and set their taints) and
    after the deletion of the previous example's nodes; its ``Delete event for node`` line shows
    that. The bound pods' handler is not the one that queues the subject, so each ``Add event for
    scheduled pod`` line is waited for too."""
    name = f"{prefix}-barrier"
    kube.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    kube.delete(node_path(name))
    want = [f'"Delete event for node" node="{name}"']
    want += [f'"Add event for scheduled pod" pod="{namespace}/{p["metadata"]["name"]}"' for p, _ in sc.existing]

    def caught_up() -> bool:
        if not ks.alive():
            raise AssertionError(f"kube-scheduler exited:\n{ks.log_tail()}")
        return not ks.logged(want, since)

    try:
        cluster.wait_for(caught_up, timeout=30, interval=0.05, what="kube-scheduler's cache to catch up")
    except TimeoutError as e:
        raise AssertionError(f"{e}: not logged: {ks.logged(want, since)}\n{ks.log_tail()}") from None


def _unschedulable_message(kube: KubeClient, namespace: str) -> str:
    doc = kube.get(pod_path(namespace, "subject"))
    for c in (doc.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
            return str(c.get("message") or "")
    return ""


def _kube_decision(ks: KubeScheduler, kube: KubeClient, namespace: str, since: int) -> Binding | str:
    """kube-scheduler's Binding for the subject, or its unschedulable message."""
    key = f"{namespace}/subject"

    def decided() -> Binding | str | None:
        if not ks.alive():
            raise AssertionError(f"kube-scheduler exited:\n{ks.log_tail()}")
        b = ks.binding(key, since)
        if b is not None:
            return b
        return _unschedulable_message(kube, namespace) or None

    result: Binding | str = cluster.wait_for(decided, timeout=30, interval=0.05, what=f"kube-scheduler decides {key}")
    return result


def _record(ex: Explanation, decision: Binding | str) -> None:
    """Hypothesis statistics (``--hypothesis-show-statistics``): which outcomes and which score
    plugins actually told nodes apart, so a generator that drifts into trivial cases shows."""
    if isinstance(decision, str):
        event("kube-scheduler: unschedulable")
        return
    event(f"kube-scheduler: bound, {'one feasible node' if decision.feasible == 1 else 'several feasible nodes'}")
    for plugin, _ in ex.score_plugins:
        if len({s.weighted.get(plugin) for s in ex.scores}) > 1:
            event(f"scores differ across nodes: {plugin}")


def _our_scores(ex: Explanation) -> dict[tuple[str, str], int]:
    return {(plugin, s.name): w for s in ex.scores for plugin, w in s.weighted.items()}


def _compare(ex: Explanation, decision: Binding | str) -> None:
    feasible = {v.name for v in ex.verdicts if v.feasible}
    assert not ex.error, ex.error
    _record(ex, decision)
    if isinstance(decision, str):
        assert ex.node is None, f"kube-scheduler: {decision!r}; we place it on {ex.node} (feasible {sorted(feasible)})"
        verdicts = {v.name: (v.plugin, v.code, v.reasons) for v in ex.verdicts}
        assert ex.message == decision, f"\nkube-scheduler: {decision}\nours:           {ex.message}\n{verdicts}"
        return
    assert decision.evaluated == ex.nodes_total, "test bug: kube-scheduler saw another cluster than explain"
    assert ex.node is not None, f"kube-scheduler bound it to {decision.node}; we: {ex.message}"
    assert decision.feasible == len(feasible), (decision.feasible, sorted(feasible))
    if decision.feasible == 1:
        assert feasible == {decision.node}
        return
    assert decision.scored_nodes == feasible
    ours = _our_scores(ex)
    for plugin in sorted({p for p, _ in decision.scores.keys() ^ ours.keys()}):
        event(f"scored by one side only (0 on the other): {plugin}")
    diff = {
        k: (decision.scores.get(k), ours.get(k))
        for k in sorted(decision.scores.keys() | ours.keys())
        if decision.scores.get(k, 0) != ours.get(k, 0)
    }
    assert not diff, f"(plugin, node): (kube-scheduler, ours) weighted scores differ: {diff}"
    assert decision.node in ex.ties, (decision.node, ex.ties)


@settings(
    max_examples=int(os.environ.get("CS_CONFORMANCE_EXAMPLES", "25")),
    deadline=None,
    derandomize=os.environ.get("CS_CONFORMANCE_RANDOM") != "1",
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
)
@given(sc=scenarios())
def test_explain_agrees_with_kube_scheduler(kube: KubeClient, kube_scheduler: KubeScheduler, sc: Scenario) -> None:
    n = next(_examples)
    namespace = f"cf-{n}-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(kube, namespace)
    try:
        since = kube_scheduler.log_size()
        _create(kube, sc, namespace, prefix=f"cf{n}")
        _barrier(kube, kube_scheduler, sc, namespace, f"cf{n}", since)
        since = kube_scheduler.log_size()
        pod = copy.deepcopy(sc.pod)
        pod["metadata"]["namespace"] = namespace
        kube.post(pod_path(namespace), pod)
        decision = _kube_decision(kube_scheduler, kube, namespace, since)
        state = fetch_live(kube)
        cfg = config.load_config(OUR_CONFIG, full_registry())
        with quiet_logs():
            ex = explain_pod(state, kube.get(pod_path(namespace, "subject")), cfg, full_registry())
        _compare(ex, decision)
    finally:
        _cleanup(kube, sc, namespace)
