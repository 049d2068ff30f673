"""The scheduler_perf workloads of bench/perf_event_handling.py and bench/perf_more.py, pure: the
objects both schedulers are given, by count, ratio and label, and the scripts' invariants (every
measured pod created once inside the measured window, barriers and releases naming pods that exist
by then, updates naming objects that do). Upstream's own sizes reproduce upstream's parameters."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench import perf_event_handling as eh
from bench import script, workloads
from bench.workloads import HOST_KEY, ROLE_LABEL, RUN_LABEL, ZONE_KEY

JSON = dict[str, Any]
RUN = "r1"
NS = "WithNSSelector"
GATED = "SchedulingGatedPodsWithPodAffinityImpactForThroughput"


def _build(name: str, nodes: int, pods: int) -> workloads.Workload:
    return workloads.build(name, nodes, pods, RUN)


def _script_nodes(wl: workloads.Workload) -> list[JSON]:
    return script.created_nodes(wl.steps)


@pytest.mark.parametrize(
    ("name", "nodes", "pods", "want"),
    [
        # (initial nodes, nodes the script adds, init pods, gated pods, measured pods, every pod the script makes)
        pytest.param(
            "EventHandlingPodDelete", 20, 40, (4, 0, 0, 0, 4 * 40 + 2 * 35, 4 * 40 + 4 * 35), id="pod-delete-smoke"
        ),
        pytest.param(
            "EventHandlingPodDelete",
            50,
            500,
            (50, 0, 0, 0, 4 * 500 + 2 * 480, 4 * 500 + 4 * 480),
            id="pod-delete-upstream-50Nodes_500Pods",
        ),
        pytest.param(
            "EventHandlingPodDelete",
            2,
            40,
            (2, 0, 0, 0, 4 * 20 + 2 * 15, 4 * 20 + 4 * 15),
            id="pod-delete-nodes-cap-pods-as-upstreams-2Nodes_20Pods",
        ),
        pytest.param("EventHandlingPodUpdate", 20, 40, (1, 2, 0, 0, 6 * 40, 7 * 40), id="pod-update-smoke"),
        pytest.param(
            "EventHandlingPodUpdate", 1, 1000, (1, 2, 0, 0, 6000, 7000), id="pod-update-upstream-1Node_1000Pods"
        ),
        pytest.param("EventHandlingNodeAdd", 20, 40, (1, 1 + 3 * 4, 0, 0, 6 * 40, 6 * 40), id="node-add-smoke"),
        pytest.param(
            "EventHandlingNodeAdd",
            100,
            1000,
            (1, 1 + 3 * 100, 0, 0, 6000, 6000),
            id="node-add-upstream-100Nodes_1000Pods",
        ),
        pytest.param("EventHandlingPodAdd", 20, 40, (2, 0, 1, 0, 2 * 40, 4 * 40), id="pod-add-smoke"),
        pytest.param("EventHandlingNodeUpdate", 20, 40, (4, 3 * 4, 0, 0, 6 * 40, 6 * 40), id="node-update-smoke"),
        pytest.param("EventHandlingNodeUpdate", 2, 40, (2, 3 * 2, 0, 0, 6 * 20, 6 * 20), id="node-update-10-per-node"),
        pytest.param("SchedulingDaemonset", 20, 40, (21, 0, 0, 0, 40, 0), id="daemonset"),
        pytest.param(
            "SchedulingDeletedPodsWithFinalizers", 20, 40, (20, 0, 0, 0, 40, 80), id="deleted-with-finalizers"
        ),
        pytest.param("SchedulingWithExtendedResource", 20, 40, (20, 0, 0, 0, 20, 0), id="extended-one-per-node"),
        pytest.param("HostPortConflict", 20, 40, (20, 0, 0, 0, 20, 0), id="hostport-one-per-node"),
        pytest.param("ResourceSaturation", 20, 10, (20, 0, 0, 0, 10, 0), id="saturation"),
        pytest.param("PreferredTopologySpreading", 20, 40, (20, 0, 40, 0, 40, 0), id="preferred-spread"),
        pytest.param("DefaultTopologySpreading", 20, 40, (20, 0, 40, 0, 40, 40), id="default-spread"),
        pytest.param("SchedulingWithNodeInclusionPolicy", 20, 40, (20, 0, 0, 0, 40, 0), id="inclusion-policy"),
        pytest.param("SchedulingPodMatchingAntiAffinity", 20, 40, (20, 0, 4, 0, 40, 0), id="matching-anti"),
        pytest.param("SchedulingPodAffinity", 20, 40, (20, 0, 20, 0, 40, 0), id="pod-affinity"),
        pytest.param("SchedulingPreferredPodAntiAffinity", 20, 40, (20, 0, 20, 0, 40, 0), id="preferred-anti"),
        pytest.param("MixedSchedulingBasePod", 20, 40, (20, 0, 5 * 8, 0, 40, 0), id="mixed-base"),
        pytest.param("MixedSchedulingBasePod", 5, 40, (5, 0, 4 * 8 + 5, 0, 40, 0), id="mixed-base-anti-capped"),
        pytest.param(f"SchedulingRequiredPodAntiAffinity{NS}", 20, 40, (20, 0, 5, 0, 14, 0), id="ns-anti-capped"),
        pytest.param(f"SchedulingRequiredPodAntiAffinity{NS}", 500, 100, (500, 0, 40, 0, 100, 0), id="ns-anti"),
        pytest.param(f"SchedulingPreferredAntiAffinity{NS}", 500, 100, (500, 0, 40, 0, 100, 0), id="ns-pref-anti"),
        pytest.param(f"SchedulingRequiredPodAffinity{NS}", 500, 100, (500, 0, 40, 0, 100, 0), id="ns-affinity"),
        pytest.param(f"SchedulingPreferredAffinity{NS}", 500, 100, (500, 0, 40, 0, 100, 0), id="ns-pref-affinity"),
        pytest.param(GATED, 20, 40, (20, 0, 0, 20, 40, 40), id="gated-affinity"),
        pytest.param("PreemptionAsync", 20, 40, (20, 0, 80, 0, 20, 0), id="preemption-async"),
    ],
)
def test_object_counts(name: str, nodes: int, pods: int, want: tuple[int, ...]) -> None:
    wl = _build(name, nodes, pods)
    got = (
        len(wl.nodes),
        len(_script_nodes(wl)),
        len(wl.init_pods),
        len(wl.gated_pods),
        len(wl.pods),
        len(script.created_pods(wl.steps)),
    )
    assert got == want
    assert wl.name == name
    assert sum(wl.classes.values()) == len(wl.pods)


@pytest.mark.parametrize(
    ("name", "classes"),
    [
        (
            "EventHandlingPodDelete",
            {
                "podtopologyspread": 40,
                "volumerestrictions": 35,
                "nodeports": 40,
                "noderesources": 40,
                "nodevolumelimits": 35,
                "interpodaffinity": 40,
            },
        ),
        (
            "EventHandlingPodUpdate",
            {
                "nodeunschedulable": 40,
                "tainttoleration": 40,
                "interpodaffinity": 40,
                "noderesources": 40,
                "podtopologyspread": 40,
                "schedulinggates": 40,
            },
        ),
        (
            "EventHandlingNodeAdd",
            {
                "nodeunschedulable": 40,
                "noderesources": 40,
                "interpodaffinity": 40,
                "nodeaffinity": 40,
                "podtopologyspread": 40,
                "tainttoleration": 40,
            },
        ),
        ("EventHandlingPodAdd", {"podtopologyspread": 40, "interpodaffinity": 40}),
    ],
)
def test_event_handling_measures_one_group_per_plugin(name: str, classes: dict[str, int]) -> None:
    wl = _build(name, 20, 40)
    assert dict(wl.classes) == classes
    assert all(p["metadata"]["labels"]["type"] == "unsched" for p in wl.pods), "upstream's metrics label"


@pytest.mark.parametrize(
    ("nodes", "pods", "want"), [(20, 40, 4), (20, 45, 5), (2, 40, 2), (20, 3, 1), (0, 40, 1), (100, 1000, 100)]
)
def test_group_nodes_pair_ten_pods_a_node(nodes: int, pods: int, want: int) -> None:
    assert eh.group_nodes(nodes, pods) == want


def _all_pods(wl: workloads.Workload) -> list[JSON]:
    return [*wl.init_pods, *wl.gated_pods, *script.created_pods(wl.steps), *([] if wl.steps else wl.pods)]


@pytest.mark.parametrize("name", workloads.UPSTREAM_MORE)
@pytest.mark.parametrize(("nodes", "pods"), [(20, 40), (7, 13)])
def test_script_invariants(name: str, nodes: int, pods: int) -> None:
    """Every measured pod is created exactly once, inside the measured window; barriers, releases
    and updates name objects that exist by then; names are unique; every node is the round's."""
    wl = _build(name, nodes, pods)
    assert wl.pods, "something to measure"
    everything = _all_pods(wl)
    assert len({p["metadata"]["name"] for p in everything}) == len(everything), "pod names unique"
    assert all(ROLE_LABEL in p["metadata"]["labels"] for p in everything)
    measured = script.names(wl.pods)
    if wl.steps:
        made_in_window = Counter(p["metadata"]["name"] for p in script.created_pods(script.measured(wl.steps)))
        assert {n for n in measured if made_in_window[n] != 1} == set(), "each measured pod made once, measured"
    known_pods = set(script.names([*wl.init_pods, *wl.gated_pods]))
    known_nodes = {n["metadata"]["name"] for n in wl.nodes}
    for step in wl.steps:
        if isinstance(step, script.CreatePods):
            known_pods |= script.names(step.pods)
        elif isinstance(step, script.CreateNodes):
            known_nodes |= {n["metadata"]["name"] for n in step.nodes}
        elif isinstance(step, script.Barrier | script.Release):
            assert step.names
            assert step.names <= known_pods
        elif isinstance(step, script.Update):
            targets = {n for n, _ in step.patches}
            assert targets <= (known_nodes if step.target == "node" else known_pods)
        elif isinstance(step, script.DeletePods):
            assert set(step.names) <= known_pods
    for n in [*wl.nodes, *_script_nodes(wl)]:
        labels = n["metadata"]["labels"]
        assert labels[RUN_LABEL] == RUN
        assert labels[HOST_KEY] == n["metadata"]["name"]
        assert n["status"]["capacity"] == n["status"]["allocatable"]


def test_pod_delete_blockers_hold_each_group_and_upstream_ratios() -> None:
    """50 nodes / 500: 480 blockers per group (96 %), blue blockers with ports 80..811 and a
    ReadOnlyMany volume each, green ones with a ReadWriteOncePod claim the VolumeRestrictions pods
    share; a CSINode of 20 volumes per node."""
    wl = _build("EventHandlingPodDelete", 50, 500)
    made = {p["metadata"]["name"]: p for p in script.created_pods(wl.steps)}
    blue = [p for n, p in made.items() if n.startswith("blk-a-")]
    green = [p for n, p in made.items() if n.startswith("blk-b-")]
    assert len(blue) == len(green) == 480
    ports = Counter(p["spec"]["containers"][0]["ports"][0]["hostPort"] for p in blue)
    assert set(ports) == {80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 810, 811}
    assert blue[0]["spec"]["topologySpreadConstraints"][0] | {"labelSelector": None} == {
        "maxSkew": 10,
        "minDomains": 10000,
        "topologyKey": HOST_KEY,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": None,
    }
    vr = [p for n, p in made.items() if n.startswith("vr-")]
    assert sorted(p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for p in vr) == sorted(
        p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for p in green
    )
    pairs = [pair for s in wl.steps if isinstance(s, script.CreateVolumes) for pair in s.pairs]
    modes = Counter(pv["spec"]["accessModes"][0] for pv, _ in pairs)
    assert modes == {"ReadOnlyMany": 2 * 480, "ReadWriteOncePod": 480}
    assert all(pvc["spec"]["volumeName"] == pv["metadata"]["name"] for pv, pvc in pairs)
    assert all(pv["metadata"]["labels"][RUN_LABEL] == RUN for pv, _ in pairs), "cleanup finds the volumes"
    (csinodes,) = [s for s in wl.steps if isinstance(s, script.CreateObjects)]
    assert len(csinodes.objects) == 50
    assert {o["spec"]["drivers"][0]["allocatable"]["count"] for o in csinodes.objects} == {20}


@pytest.mark.parametrize(
    ("name", "blocker_prefix", "unsched_prefix"),
    [("EventHandlingPodDelete", "blk-b-", "ipa-"), ("EventHandlingPodUpdate", "blk-", "ipa-")],
)
def test_one_namespace_keeps_upstream_matching(name: str, blocker_prefix: str, unsched_prefix: str) -> None:
    """Upstream keeps its anti-affine pods in a namespace of their own; in the round's one
    namespace, each anti-affinity term must select blockers only (never another measured pod), or
    the pods would repel each other."""
    wl = _build(name, 20, 40)
    everyone = _all_pods(wl)
    for p in (q for q in everyone if q["metadata"]["name"].startswith(unsched_prefix)):
        (term,) = p["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        hits = [
            q["metadata"]["name"]
            for q in everyone
            if workloads._matches(term["labelSelector"], q["metadata"]["labels"])
        ]
        assert hits, p["metadata"]["name"]
        assert all(h.startswith(blocker_prefix) for h in hits), (p["metadata"]["name"], hits)


def test_pod_update_sizes_memory_to_upstreams_30000mi() -> None:
    """1000 blockers of 30Mi fill 30000Mi of the 32Gi node; the NodeResources pods are 30Mi each,
    and the ones that fit beside the blockers from the start are allowed early."""
    wl = _build("EventHandlingPodUpdate", 1, 1000)
    made = script.created_pods(wl.steps)
    blockers = [p for p in made if p["metadata"]["name"].startswith("blk-")]
    assert {p["spec"]["containers"][0]["resources"]["requests"]["memory"] for p in blockers} == {"30Mi"}
    (nr_release,) = [s for s in wl.steps if isinstance(s, script.Release) and s.early]
    assert nr_release.early == (32 * 1024 - 30000) // 30
    pts = [p for p in made if p["metadata"]["name"].startswith("pts-")]
    assert {p["spec"]["topologySpreadConstraints"][0]["maxSkew"] for p in pts} == {1000}


def test_node_update_tolerations_name_one_node_of_ten_pods() -> None:
    wl = _build("EventHandlingNodeUpdate", 20, 40)
    tt = [p for p in script.created_pods(wl.steps) if p["metadata"]["name"].startswith("tt-")]
    keys = Counter(p["spec"]["tolerations"][0]["key"] for p in tt)
    assert keys == {f"toleration-{i}": 10 for i in range(4)}
    (retaint,) = [s for s in wl.steps if isinstance(s, script.Update) and "taints" in str(s.patches[0][1])]
    assert [p["spec"]["taints"][0]["key"] for _, p in retaint.patches] == [f"toleration-{i}" for i in range(4)]


def test_node_add_spread_fits_every_pod_in_its_one_domain() -> None:
    for pods, skew in ((40, 1000), (1000, 1000), (2000, 2000)):
        wl = _build("EventHandlingNodeAdd", 20, pods)
        pts = [p for p in script.created_pods(wl.steps) if p["metadata"]["name"].startswith("pts-")]
        assert {p["spec"]["topologySpreadConstraints"][0]["maxSkew"] for p in pts} == {skew}


def test_pod_add_two_nodes_hold_every_pod() -> None:
    wl = _build("EventHandlingPodAdd", 20, 40)
    assert {n["status"]["allocatable"]["pods"] for n in wl.nodes} == {str(3 * 40 + 2)}
    (seed,) = wl.init_pods
    assert seed["metadata"]["labels"]["color"] == "green"


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("HostPortConflict", lambda p: p["spec"]["containers"][0]["ports"] == [{"containerPort": 80, "hostPort": 80}]),
        (
            "ResourceSaturation",
            lambda p: p["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "3", "memory": "1Gi"},
        ),
        ("SchedulingDaemonset", lambda p: "matchFields" in str(p["spec"]["affinity"])),
        ("SchedulingDeletedPodsWithFinalizers", lambda p: "finalizers" not in p["metadata"]),
        (
            "SchedulingGatedPodsWithPodAffinityImpactForThroughput",
            lambda p: p["metadata"]["labels"]["app"] == "scheduler-perf",
        ),
    ],
)
def test_measured_pods_are_upstreams_template(name: str, check: Any) -> None:
    assert all(check(p) for p in _build(name, 20, 40).pods)


@pytest.mark.parametrize(("name", "batch"), [("HostPortConflict", 10), ("ResourceSaturation", 10)])
def test_batching_signatures_change_every_batch(name: str, batch: int) -> None:
    pods = _build(name, 40, 40).pods
    sigs = [p["metadata"]["labels"]["signature"] for p in pods]
    assert sigs[0] == sigs[batch - 1] != sigs[batch]
    assert len(set(sigs)) == 40 // batch


def test_extended_resource_one_node_fits_each_pod() -> None:
    wl = _build("SchedulingWithExtendedResource", 5, 5)
    for i, (n, p) in enumerate(zip(wl.nodes, wl.pods, strict=True)):
        assert n["status"]["allocatable"][f"foo.com/bar-{i}"] == "1"
        assert p["spec"]["containers"][0]["resources"]["requests"] == {f"foo.com/bar-{i}": "1"}


def test_node_inclusion_policy_taints_a_fifth_and_honours_them() -> None:
    wl = _build("SchedulingWithNodeInclusionPolicy", 10, 8)
    assert sum(1 for n in wl.nodes if n["spec"]["taints"]) == 2
    c = wl.pods[0]["spec"]["topologySpreadConstraints"][0]
    assert (c["nodeTaintsPolicy"], c["nodeAffinityPolicy"], c["maxSkew"]) == ("Honor", "Honor", 1)


@pytest.mark.parametrize(
    "name",
    [
        "SchedulingRequiredPodAntiAffinityWithNSSelector",
        "SchedulingPreferredAntiAffinityWithNSSelector",
        "SchedulingRequiredPodAffinityWithNSSelector",
        "SchedulingPreferredAffinityWithNSSelector",
    ],
)
def test_ns_selector_workloads_label_the_namespace_they_select(name: str) -> None:
    wl = _build(name, 20, 40)
    assert wl.namespace_labels == {"team": "devops"}
    assert "'namespaceSelector': {'matchLabels': {'team': 'devops'}}" in str(wl.pods[0]["spec"]["affinity"])


def test_zone_labelled_nodes_for_zone_affinity() -> None:
    for name in ("SchedulingPodAffinity", "MixedSchedulingBasePod", "SchedulingRequiredPodAffinityWithNSSelector"):
        assert {n["metadata"]["labels"][ZONE_KEY] for n in _build(name, 6, 10).nodes} == {"zone1"}


def test_preemption_async_churn_preempts_and_is_not_judged_never_fitting() -> None:
    wl = _build("PreemptionAsync", 20, 40)
    assert wl.churn is not None
    assert (wl.churn.mode, wl.churn.interval_s, wl.churn.fits) == ("create", 0.2, True)
    assert wl.churn.pod is not None
    assert wl.churn.pod["spec"]["priorityClassName"] == workloads.priority_class_name(RUN, 9999999)
    assert {pc["value"] for pc in wl.priority_classes} == {0, 9999999}


def test_every_more_name_has_a_builder() -> None:
    assert set(workloads.more_builders()) == set(workloads.UPSTREAM_MORE)
    assert not set(workloads.UPSTREAM_MORE) & set(workloads.UPSTREAM + workloads.OURS)
