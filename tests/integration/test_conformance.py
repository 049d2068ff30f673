"""Conformance against upstream: kube-scheduler and our ``explain`` agree on random clusters and pods.

Hypothesis draws (:mod:`tests.integration.conformance_cases`) a cluster (5–12 nodes: cpu/memory/pods
capacity, zone and hostname labels, some nodes without a zone, NoSchedule/PreferNoSchedule taints,
now and then an unschedulable node, images with sizes in ``status.images``; about half of the nodes
publish a ResourceSlice of one to four devices of two models), pods already bound to its nodes
(``cluster.bind``: labels, one or two containers with requests or none, sidecar and regular init
containers, pod-level requests (``spec.resources``), their own required/preferred pod
(anti-)affinity, host ports; some resized in place: their status, patched before the bind as a
kubelet would, reports ``allocatedResources`` and ``resources`` above or below the spec per
container and init container, for pods with pod-level resources the pod-level ones too, rarely a
resize found Infeasible; some holding one of their node's devices through a ResourceClaim
allocated and reserved for them) and one pod to place (containers with requests and images,
sidecar and regular init containers, pod-level requests, a host port, tolerations, node selector,
required/preferred node affinity, topology spread on zone or hostname with either
``whenUnsatisfiable`` and ``minDomains``, ``nodeAffinityPolicy``, ``nodeTaintsPolicy``,
``matchLabelKeys``, required/preferred pod (anti-)affinity, and one or two resource claims, each
a ResourceClaim or a ResourceClaimTemplate with one ``exactly`` request of one or two devices of
the module's DeviceClass, now and then of one model). The real kube-scheduler of the control
plane's release places the pod; then ``explain`` (live, on the same API server) explains it:
explain takes the bound pod off its node, and the test takes its claims back to unallocated
(:func:`_unallocate`), so it sees exactly the cluster kube-scheduler saw.

Each runs its own default profile: kube-scheduler's configuration names no plugins (only
``percentageOfNodesToScore: 100``, the score lines at verbosity 10 and OpportunisticBatching off:
it may place a pod from an earlier pod's result, without scoring), so its plugins are the ones its
release and default feature gates give (:func:`tests.upstream.default_profile_yaml`); explain runs
ours (``custom_scheduler/config/defaults.py``). :func:`test_default_profiles_differ_only_as_documented`
reads the profile kube-scheduler logs at start-up and pins down every difference
(:data:`PROFILE_DIFFERENCES`). Each leaves the comparison sound for these pods:

- GangScheduling (ours: PreEnqueue, Permit): upstream adds it only with the GenericWorkload gate,
  beta and off by default in 1.37 (``apis/config/v1/default_plugins.go``: ``applyGangScheduling``);
  ours runs it always and it acts only on members of a PodGroup. No generated pod is one, so it
  admits and permits every pod.
- GangScheduling at PreFilter and Filter (ours only): reservations for gangs pending past a
  threshold (issue #28). No generated pod is in a gang, so no node is ever reserved: its PreFilter
  answers Skip and its Filter never runs.
- NodeName, NodeUnschedulable and TaintToleration at PreFilter (upstream only): they narrow the
  nodes to ``spec.nodeName``, or skip, only for a pod already on a node whose resize waits
  (InPlacePodVerticalScalingSchedulerPreemption, alpha and off). The subject has no node.
- DynamicResources at PreScore (ours only): ours prepares there what upstream computes in Score;
  the scores themselves are compared.
- PlacementScore (NodeResourcesFit) and PodGroupPostFilter (DynamicResources, DefaultPreemption):
  points of upstream's pod-group cycle, which single pods never reach.

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

Pod-level resources, in-place resizes, sidecars and resource claims, added to the generator in
one go, brought none to light in 50 derandomized and 784 random examples.

Upstream quirks the generator steers around (we follow them too, but cannot reproduce their
input):

- ImageLocality: an image's size is the ``sizeBytes`` of the *first* node that reported the name
  (``cacheImpl.addNodeImageStates`` creates the shared ``ImageStateSummary`` once); later nodes'
  sizes are ignored. Our cache does the same, but "first" is the informer's event order in
  kube-scheduler and the LIST order (by name) in ``explain``, so with different sizes per node the
  two disagree. A name stands for one image, so the generated nodes report one size per image.

Every pod has priority 0, so preemption never finds victims and never changes the cluster.

The module starts kube-scheduler once (after creating the one DeviceClass, which its first LIST
then holds); each example gets its own namespace, nodes and ResourceSlices, removed afterwards,
and waits until kube-scheduler's caches hold all of them (:func:`_barrier`). 50 examples,
derandomized (the same ones on every run while the generator is unchanged), take about 40 s. To
hunt further: ``CS_CONFORMANCE_EXAMPLES=200 CS_CONFORMANCE_RANDOM=1``, and
``--hypothesis-show-statistics`` shows which inputs, outcomes, filters and plugins the examples
exercised.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

from custom_scheduler import config
from custom_scheduler.api.resources import Resources
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.framework.profiles import build_frameworks
from custom_scheduler.framework.types import Snapshot
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path, pod_path
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools.cluster_state import ClusterState
from custom_scheduler.tools.explain import Explanation, explain_pod
from custom_scheduler.tools.snapshot import fetch_live, quiet_logs
from tests.integration.conformance_cases import (
    DRIVER,
    HOST,
    PROFILE,
    Scenario,
    device_class,
    held_claim,
    resource_slice,
    scenarios,
    with_claim,
)
from tests.upstream import Binding, KubeScheduler, default_profile_yaml

DRA_API = "/apis/resource.k8s.io/v1"

#: Where our default profile and kube-scheduler 1.37.2's own differ, per extension point: (the
#: plugins only ours runs there, the ones only upstream's runs), as
#: :func:`test_default_profiles_differ_only_as_documented` finds them. Why each leaves the
#: comparison sound is in the module docstring. ``Score`` entries carry their weight.
PROFILE_DIFFERENCES: dict[str, tuple[list[str], list[str]]] = {
    "PreEnqueue": (["GangScheduling"], []),
    # Ours only at PreFilter and Filter: GangScheduling's reservations for starving gangs
    # (docs/gangs.md); with no node reserved its PreFilter answers Skip and Filter is not run.
    "PreFilter": (["GangScheduling"], ["NodeName", "NodeUnschedulable", "TaintToleration"]),
    "Filter": (["GangScheduling"], []),
    "PreScore": (["DynamicResources"], []),
    "Permit": (["GangScheduling"], []),
    # The extension points of upstream's pod-group (workload) cycle, which ours does not have.
    "PlacementScore": ([], ["NodeResourcesFit"]),
    "PodGroupPostFilter": ([], ["DynamicResources", "DefaultPreemption"]),
}

_STARTS_WITH = "the scheduler starts to work with those plugins"

OUR_CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
- schedulerName: {PROFILE}
"""

# -- running both -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kube_scheduler(
    control_plane: ControlPlane, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeScheduler]:
    """kube-scheduler with its own default profile. The examples' one DeviceClass is created
    first, so the DeviceClass informer's initial LIST holds it (no event tells when a later one
    arrives, and a pod whose class is missing would be unschedulable)."""
    if control_plane.minor_version < 37:
        # Our plugins follow v1.37 (messages, BalancedAllocation's formula, ...): an older
        # kube-scheduler differs by design, and lacks the OpportunisticBatching gate we turn off.
        pytest.skip(f"conformance is against kube-scheduler 1.37+, the control plane is {control_plane.version}")
    cls = device_class()["metadata"]["name"]
    with contextlib.suppress(api_errors.Conflict):
        kube.post(f"{DRA_API}/deviceclasses", device_class())
    workdir: Path = tmp_path_factory.mktemp("kube-scheduler")
    ks = KubeScheduler(control_plane, workdir, default_profile_yaml(control_plane.kubeconfig(), PROFILE))
    ks.start(kinds=("Node", "Pod", "DeviceClass"))
    yield ks
    ks.stop()
    with contextlib.suppress(api_errors.NotFound):
        kube.delete(f"{DRA_API}/deviceclasses/{cls}")


_examples = itertools.count()


def _create(kube: KubeClient, sc: Scenario, namespace: str, prefix: str) -> None:
    """The ResourceSlices (first: see :func:`_barrier`), the nodes (named ``{prefix}-n{i}``), the
    bound pods and the subject's claims and claim templates."""
    sc.names = [f"{prefix}-{node['metadata']['name']}" for node in sc.nodes]
    for i, models in sc.devices.items():
        kube.post(f"{DRA_API}/resourceslices", resource_slice(sc.names[i], models))
    for node, name in zip(sc.nodes, sc.names, strict=True):
        obj = copy.deepcopy(node)
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"][HOST] = name
        cluster.create_ready_node(kube, obj)
    for e in sc.existing:
        _create_bound(kube, e.pod, sc.names[e.node], namespace, e.status, e.device)
    claims = f"{DRA_API}/namespaces/{namespace}"
    for claim in sc.claims:
        kube.post(f"{claims}/resourceclaims", claim)
    for template in sc.templates:
        kube.post(f"{claims}/resourceclaimtemplates", template)


def _create_bound(
    kube: KubeClient, pod: dict[str, Any], node: str, namespace: str, status: dict[str, Any] | None, device: str | None
) -> None:
    """One bound pod, as the cluster would hold it after it ran a while: its claim allocated to it
    (``device``) and the status its kubelet reported (``status``), both written before the bind,
    so the pod reaches kube-scheduler's cache complete, with its ``Add event for scheduled pod``."""
    name = pod["metadata"]["name"]
    obj = copy.deepcopy(pod)
    obj["metadata"]["namespace"] = namespace
    claim_name = f"hold-{name}"
    if device is not None:
        obj = with_claim(obj, claim_name)
    created = kube.post(pod_path(namespace), obj)
    if device is not None:
        claim, claim_status = held_claim(claim_name, node, device, created)
        path = f"{DRA_API}/namespaces/{namespace}/resourceclaims"
        doc = kube.post(path, claim)
        doc["status"] = claim_status
        kube.put(f"{path}/{claim_name}/status", doc)
    if status is not None:
        stored = kube.patch(pod_path(namespace, name) + "/status", {"status": status})["status"]
        assert _resources_of(stored) == _resources_of(status), "test bug: the API server dropped a resize report"
    cluster.bind(kube, namespace, name, node)


def _resources_of(status: dict[str, Any]) -> dict[str, Resources]:
    """The resources a status reports (pod-level and per container, allocated and actuated), as
    vectors: what the API server stored must be what the test sent (a field a disabled gate drops
    would leave both schedulers comparing a cluster without resizes)."""
    out = {}
    for cs in [status, *status.get("containerStatuses", ()), *status.get("initContainerStatuses", ())]:
        where = cs.get("name", "pod")
        if "allocatedResources" in cs:
            out[f"{where} allocated"] = Resources.from_json(cs["allocatedResources"])
        if "resources" in cs:
            out[f"{where} actuated"] = Resources.from_json(cs["resources"].get("requests"))
    return out


def _cleanup(kube: KubeClient, sc: Scenario, namespace: str) -> None:
    """Pods go at once (grace 0: no kubelet), then the slices, nodes and the namespace (with the
    claims), so the next example's cluster is the only one of this module that either scheduler
    sees."""
    for name in ["subject", *(e.pod["metadata"]["name"] for e in sc.existing)]:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(pod_path(namespace, name), {"gracePeriodSeconds": 0})
    for i in sc.devices:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(f"{DRA_API}/resourceslices/{resource_slice(sc.names[i], [])['metadata']['name']}")
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
    that. The bound pods, the ResourceSlices and the claims' allocations come on other watches, so
    each one's own line is waited for too (see :mod:`tests.upstream`)."""
    name = f"{prefix}-barrier"
    kube.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    kube.delete(node_path(name))
    want = [f'"Delete event for node" node="{name}"']
    want += [f'"Add event for scheduled pod" pod="{namespace}/{e.pod["metadata"]["name"]}"' for e in sc.existing]
    want += [
        f'"ResourceSlice synced" resourceslice="{resource_slice(sc.names[i], [])["metadata"]["name"]}"'
        for i in sc.devices
    ]
    want += [
        f'"Observed device allocation" device="{DRIVER}/{sc.names[e.node]}/{e.device}" '
        f'claim="{namespace}/hold-{e.pod["metadata"]["name"]}"'
        for e in sc.existing
        if e.device is not None
    ]

    ks.wait_logged(want, since)


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
    """Hypothesis statistics (``--hypothesis-show-statistics``): which outcomes, which filter
    verdicts and which score plugins actually told nodes apart, so a generator that drifts into
    trivial cases shows."""
    for plugin in sorted({v.plugin for v in ex.verdicts if not v.feasible and v.plugin}):
        event(f"some node filtered by: {plugin}")
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


def _record_input(sc: Scenario) -> None:
    """Hypothesis statistics of what the example held (the features each was drawn for)."""
    spec = sc.pod["spec"]
    kinds = {
        "subject: pod-level resources": bool(spec.get("resources")),
        "subject: sidecar": any(c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or ()),
        "subject: resource claims": bool(spec.get("resourceClaims")),
        "bound pods: pod-level resources": any(e.pod["spec"].get("resources") for e in sc.existing),
        "bound pods: resized (status resources)": any(e.status for e in sc.existing),
        "bound pods: sidecar": any(
            c.get("restartPolicy") == "Always" for e in sc.existing for c in e.pod["spec"].get("initContainers") or ()
        ),
        "bound pods: a device in use": any(e.device for e in sc.existing),
    }
    for name, present in kinds.items():
        if present:
            event(name)


def _unallocate(state: ClusterState, uid: str) -> None:
    """Take the subject's claims back to before kube-scheduler allocated them (its PreBind wrote
    ``status.allocation`` and ``reservedFor``), as explain takes the subject off its node: explain
    unbinds the pod but keeps its claims' allocations, which would pin it to the node kube-scheduler
    chose. So both see the cluster kube-scheduler saw."""
    for doc in state.dra:
        status = doc.get("status") or {}
        if doc.get("kind") == "ResourceClaim" and any(r.get("uid") == uid for r in status.get("reservedFor") or ()):
            status.pop("allocation", None)
            status.pop("reservedFor", None)


EXAMPLES = int(os.environ.get("CS_CONFORMANCE_EXAMPLES", "50"))


# An example takes about a second; the suite's 300 s timeout would cut a long hunt short.
@pytest.mark.timeout(max(300, 3 * EXAMPLES))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("CS_CONFORMANCE_RANDOM") != "1",
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
)
@given(sc=scenarios())
def test_explain_agrees_with_kube_scheduler(kube: KubeClient, kube_scheduler: KubeScheduler, sc: Scenario) -> None:
    n = next(_examples)
    _record_input(sc)
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
        subject = kube.get(pod_path(namespace, "subject"))
        _unallocate(state, subject["metadata"]["uid"])
        cfg = config.load_config(OUR_CONFIG, full_registry())
        with quiet_logs():
            ex = explain_pod(state, subject, cfg, full_registry())
        _compare(ex, decision)
    finally:
        _cleanup(kube, sc, namespace)


def _upstream_plugins(ks: KubeScheduler) -> dict[str, list[str]]:
    """kube-scheduler's profile as it logs it at start-up (``framework.go``: "the scheduler starts
    to work with those plugins" Plugins={...}): extension point -> its plugins in order."""
    for line in ks.log_path.read_text(errors="replace").splitlines():
        if _STARTS_WITH in line:
            doc = json.loads(line.split("Plugins=", 1)[1])
            return {point: _names(point, s.get("Enabled") or ()) for point, s in doc.items()}
    raise AssertionError(f"kube-scheduler logged no plugin list:\n{ks.log_tail()}")


def _names(point: str, plugins: Any) -> list[str]:
    return [f"{p['Name']}:{p['Weight']}" if point == "Score" else p["Name"] for p in plugins]


def _our_plugins() -> dict[str, list[str]]:
    """Our default profile's plugins per extension point, as the framework runs them (only the
    extension points each plugin implements), under upstream's names for the points."""
    cfg = config.load_config(OUR_CONFIG, full_registry())
    fwk = build_frameworks(cfg.profiles, full_registry(), Snapshot(), client=None)[PROFILE]
    points: dict[str, Sequence[Any]] = {
        "PreEnqueue": fwk.pre_enqueue,
        "QueueSort": [fwk.queue_sort],
        "PreFilter": fwk.pre_filter,
        "Filter": fwk.filter,
        "PostFilter": fwk.post_filter,
        "PreScore": fwk.pre_score,
        "Reserve": fwk.reserve,
        "Permit": fwk.permit,
        "PreBind": fwk.pre_bind,
        "Bind": fwk.bind,
        "PostBind": fwk.post_bind,
    }
    out = {point: [p.name for p in plugins] for point, plugins in points.items()}
    out["Score"] = [f"{p.name}:{w}" for p, w in fwk.score]
    return out


def test_default_profiles_differ_only_as_documented(kube_scheduler: KubeScheduler) -> None:
    """Both schedulers run their own default profile; this pins down how the two differ. The
    plugins both run at an extension point run in the same order (and score with the same
    weights), and the plugins only one side runs are exactly :data:`PROFILE_DIFFERENCES`: a plugin
    a release adds to upstream's defaults, or one our defaults gain or lose, fails here until the
    table and the docstring say why the comparison still holds."""
    upstream, ours = _upstream_plugins(kube_scheduler), _our_plugins()
    found: dict[str, tuple[list[str], list[str]]] = {}
    for point in sorted(upstream.keys() | ours.keys()):
        u, o = upstream.get(point, []), ours.get(point, [])
        assert [x for x in o if x in u] == [x for x in u if x in o], f"{point}: ours {o}, upstream {u}"
        only_ours, only_upstream = [x for x in o if x not in u], [x for x in u if x not in o]
        if only_ours or only_upstream:
            found[point] = (only_ours, only_upstream)
    assert found == PROFILE_DIFFERENCES
