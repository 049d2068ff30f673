"""DRA conformance against upstream: kube-scheduler 1.37.2 and our ``explain`` on generated DRA cases.

The harness is :mod:`tests.integration.test_conformance`'s (its comparison, :func:`_compare`, is
reused as it is): the real kube-scheduler of the control plane's release, with its own default
profile (``percentageOfNodesToScore: 100``, score lines at verbosity 10, OpportunisticBatching off),
places each generated pod; then ``explain`` (live, on the same API server, our default profile)
explains it, on the cluster kube-scheduler saw (the bound pod taken off its node, its claims taken
back to unallocated). Compared, per pod: ``feasibleNodes``, the scored nodes and every (plugin,
node) weighted score (DynamicResources' included), kube-scheduler's node among our top ones, and
for an unschedulable pod the ``PodScheduled=False`` message, word for word. Beyond that, the
devices: where kube-scheduler allocated the pod's claims (their ``status.allocation``, written by
its PreBind), ours must allocate, on that same node, as many devices per claim and request
(subrequest, for ``firstAvailable``) as it did; when our top node is another one (ties), a second
``explain`` pinned to kube-scheduler's node by ``nodeSelector`` gives our allocation there.

The cases (:mod:`tests.integration.dra_cases`) are 3-7 nodes whose devices come from the DRA
driver stand-in (:mod:`custom_scheduler.devenv.dra_driver`: whole GPUs, tainted ones, MIG-style
partitions over shared counters, shared GPUs with consumable capacity, nodes with none), bound
pods holding some of them, and a pod with one or two claims (ResourceClaims or templates) whose
requests are ``exactly`` (count or All) or ``firstAvailable``, with CEL selectors (attributes,
``quantity()`` and ``semver()`` comparisons), tolerations, capacity requests and
matchAttribute / distinctAttribute constraints. ``CS_DRA_FEATURES`` chooses the features drawn
(see :data:`tests.integration.dra_cases.FEATURES`; default all); a failing example names the
features it holds. 50 derandomized examples by default; to hunt,
``CS_CONFORMANCE_EXAMPLES=200 CS_CONFORMANCE_RANDOM=1``, and ``CS_CONFORMANCE_SHRINK=1`` lets
hypothesis shrink a failure to a minimal case (slow: every step is a real scheduling).

The module starts kube-scheduler once, after creating the stand-in's DeviceClasses (its
DeviceClass informer's first LIST holds them); each example gets its own namespace, nodes and
slices, removed afterwards, and waits until kube-scheduler's caches hold all of them (the same
barrier as the conformance test's: a barrier node's delete event, each bound pod's add event,
each slice's ``ResourceSlice synced``, each held device's ``Observed ... allocation``).
:func:`test_stand_in_objects_validate_and_publish_idempotently` shows first that everything the
stand-in and the generator write is what the API server accepts.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings

from custom_scheduler import config
from custom_scheduler.devenv import cluster
from custom_scheduler.devenv import dra_driver as drv
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, node_path, pod_path
from custom_scheduler.plugins.builtin import full_registry
from custom_scheduler.tools.cluster_state import ClusterState
from custom_scheduler.tools.explain import Explanation, explain_pod
from custom_scheduler.tools.snapshot import fetch_live, quiet_logs
from tests.integration import dra_cases as dc
from tests.integration.test_conformance import _compare, _unallocate
from tests.upstream import Binding, KubeScheduler, default_profile_yaml

OUR_CONFIG = f"""
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 100
profiles:
- schedulerName: {dc.PROFILE}
"""

EXAMPLES = int(os.environ.get("CS_CONFORMANCE_EXAMPLES", "50"))
PHASES = (Phase.explicit, Phase.generate, *((Phase.shrink,) if os.environ.get("CS_CONFORMANCE_SHRINK") == "1" else ()))


@pytest.fixture(scope="module")
def kube_scheduler(
    control_plane: ControlPlane, kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeScheduler]:
    """kube-scheduler with its own default profile, started after the stand-in's DeviceClasses
    exist (no event tells when a later class reaches its informer)."""
    if control_plane.minor_version < 37:
        pytest.skip(f"conformance is against kube-scheduler 1.37+, the control plane is {control_plane.version}")
    classes = drv.device_classes(extended=True)
    drv.ensure_device_classes(kube, classes)
    workdir: Path = tmp_path_factory.mktemp("kube-scheduler-dra")
    ks = KubeScheduler(control_plane, workdir, default_profile_yaml(control_plane.kubeconfig(), dc.PROFILE))
    ks.start(kinds=("Node", "Pod", "DeviceClass"))
    yield ks
    ks.stop()
    drv.delete_device_classes(kube, classes)


# -- the objects are real ---------------------------------------------------------------------------

#: A claim with every request shape the generator draws, at once (the API server's validation is
#: what says these shapes exist in resource.k8s.io/v1 of 1.37).
EVERY_SHAPE: dict[str, Any] = {
    "requests": [
        {
            "name": "whole",
            "exactly": {
                "deviceClassName": drv.GPU_CLASS,
                "allocationMode": "All",
                "selectors": [{"cel": {"expression": f'{dc.ATTR}.driverVersion.isGreaterThan(semver("540.0.0"))'}}],
                "tolerations": [{"key": drv.UNHEALTHY, "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "name": "part",
            "firstAvailable": [
                {
                    "name": "big",
                    "deviceClassName": drv.MIG_CLASS,
                    "selectors": [{"cel": {"expression": f'{dc.ATTR}.profile == "3g.20gb"'}}],
                },
                {"name": "small", "deviceClassName": drv.MIG_CLASS, "count": 2},
            ],
        },
        {
            "name": "share",
            "exactly": {
                "deviceClassName": drv.SHARED_CLASS,
                "capacity": {"requests": {"memory": "6Gi", "compute": "20"}},
            },
        },
    ],
    "constraints": [
        {"matchAttribute": drv.PCIE_ROOT, "requests": ["whole", "part"]},
        {"distinctAttribute": f"{dc.D}/uuid"},
    ],
}


def test_stand_in_objects_validate_and_publish_idempotently(kube: KubeClient, kube_scheduler: KubeScheduler) -> None:
    """Every kind of device on one node: the API server accepts the slices (counters apart from
    devices, 64 devices at most per slice), publishing again writes nothing, another shape moves the
    pool to the next generation and drops the slices it no longer needs, unpublishing removes them;
    the classes exist, and a claim with every request shape passes validation (a dry run)."""
    node = f"drv-{uuid.uuid4().hex[:6]}"
    res = drv.NodeResources(gpus=2, tainted=1, partitionable=4, shared=1)
    try:
        first = drv.publish(kube, {node: res})[node]
        assert [s["metadata"]["name"] for s in first] == [drv.slice_name(node, p) for p in ("counters", "devices-0")]
        assert sum(len(s["spec"].get("devices") or ()) for s in first) == 2 + 1 + 4 * 13 + 1
        again = drv.publish(kube, {node: res})[node]
        assert [s["metadata"]["resourceVersion"] for s in again] == [s["metadata"]["resourceVersion"] for s in first]
        smaller = drv.publish(kube, {node: drv.NodeResources(gpus=1)})[node]
        assert [(s["metadata"]["name"], s["spec"]["pool"]["generation"]) for s in smaller] == [
            (drv.slice_name(node, "devices-0"), 2)
        ]
        assert len(kube.get(f"{drv.API}/resourceslices", {"labelSelector": f"{drv.NODE_LABEL}={node}"})["items"]) == 1
    finally:
        drv.unpublish(kube, [node])
    assert not kube.get(f"{drv.API}/resourceslices", {"labelSelector": f"{drv.NODE_LABEL}={node}"})["items"]
    for cls in drv.device_classes(extended=True):
        assert kube.get(f"{drv.API}/deviceclasses/{cls['metadata']['name']}")["spec"] == cls["spec"]
    claim = {"metadata": {"name": "every-shape"}, "spec": {"devices": EVERY_SHAPE}}
    created = kube.post(f"{drv.API}/namespaces/default/resourceclaims", claim, query={"dryRun": "All"})
    assert created["spec"]["devices"]["constraints"] == EVERY_SHAPE["constraints"]


# -- one example ------------------------------------------------------------------------------------

_examples = itertools.count()


def _slices(case: dc.Case) -> list[str]:
    return [s["metadata"]["name"] for i, res in case.resources.items() for s in drv.node_slices(case.names[i], res)]


def _create(kube: KubeClient, case: dc.Case, namespace: str, prefix: str) -> None:
    """The slices (as the stand-in publishes them), the nodes, the bound pods with their held
    devices, the pod's claims and templates."""
    case.names = [f"{prefix}-{node['metadata']['name']}" for node in case.nodes]
    drv.publish(kube, {case.names[i]: res for i, res in case.resources.items()})
    for node, name in zip(case.nodes, case.names, strict=True):
        obj = copy.deepcopy(node)
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"][dc.HOST] = name
        cluster.create_ready_node(kube, obj)
    for e in case.existing:
        _create_bound(kube, e, case.names[e.node], namespace)
    path = f"{drv.API}/namespaces/{namespace}"
    for claim in case.claims:
        kube.post(f"{path}/resourceclaims", claim)
    for template in case.templates:
        kube.post(f"{path}/resourceclaimtemplates", template)


def _create_bound(kube: KubeClient, e: dc.Existing, node: str, namespace: str) -> None:
    """A bound pod; one holding a device gets its claim allocated and reserved before the bind."""
    name = e.pod["metadata"]["name"]
    obj = copy.deepcopy(e.pod)
    obj["metadata"]["namespace"] = namespace
    if e.held is not None:
        obj = dc.with_claim(obj, f"hold-{name}")
    created = kube.post(pod_path(namespace), obj)
    if e.held is not None:
        claim, status = dc.held_claim(f"hold-{name}", node, e.held, created)
        path = f"{drv.API}/namespaces/{namespace}/resourceclaims"
        doc = kube.post(path, claim)
        doc["status"] = status
        kube.put(f"{path}/hold-{name}/status", doc)
    cluster.bind(kube, namespace, name, node)


def _cleanup(kube: KubeClient, case: dc.Case, namespace: str) -> None:
    for name in ["subject", *(e.pod["metadata"]["name"] for e in case.existing)]:
        with contextlib.suppress(api_errors.NotFound):
            kube.delete(pod_path(namespace, name), {"gracePeriodSeconds": 0})
    drv.unpublish(kube, [case.names[i] for i in case.resources])
    cluster.delete_nodes(kube, case.names)
    with contextlib.suppress(api_errors.KubeError):
        cluster.delete_namespace(kube, namespace)


def _barrier(kube: KubeClient, ks: KubeScheduler, case: dc.Case, namespace: str, prefix: str, since: int) -> None:
    """Wait until kube-scheduler's caches hold this example's cluster (see the module docstring)."""
    name = f"{prefix}-barrier"
    kube.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    kube.delete(node_path(name))
    want = [f'"Delete event for node" node="{name}"']
    want += [f'"Add event for scheduled pod" pod="{namespace}/{e.pod["metadata"]["name"]}"' for e in case.existing]
    want += [f'"ResourceSlice synced" resourceslice="{s}"' for s in _slices(case)]
    want += [
        dc.allocation_line(e.held, case.names[e.node], f"{namespace}/hold-{e.pod['metadata']['name']}")
        for e in case.existing
        if e.held is not None
    ]

    ks.wait_logged(want, since)


# -- the devices ------------------------------------------------------------------------------------

_NOTE = "DynamicResources allocates claim "
#: The claim kube-scheduler creates for a pod's DRA-backed extended resources (its PreBind), named
#: after the pod with a random suffix; compared by this key instead.
EXTENDED = "(extended resources)"
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def kube_allocations(state: ClusterState, uid: str) -> dict[str, Counter[str]]:
    """Claim name -> devices per request (``r0``, or ``r0/s1`` for a subrequest) of the claims
    kube-scheduler allocated and reserved for the pod ``uid``."""
    out: dict[str, Counter[str]] = {}
    for doc in state.dra:
        status = doc.get("status") or {}
        if doc.get("kind") == "ResourceClaim" and any(r.get("uid") == uid for r in status.get("reservedFor") or ()):
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
            meta = doc["metadata"]
            name = EXTENDED if (meta.get("annotations") or {}).get(EXTENDED_ANNOTATION) == "true" else meta["name"]
            out[name] = Counter(r["request"] for r in results)
    return out


def our_allocations(ex: Explanation, claims: set[str]) -> dict[str, Counter[str]]:
    """The same from explain's notes on its chosen node (``claim ns/name: r0=driver/pool/dev, ...``);
    a claim not among the pod's ``claims`` is the one for its extended resources."""
    out: dict[str, Counter[str]] = {}
    for note in ex.notes:
        if not note.startswith(_NOTE) or "(already allocated)" in note:
            continue
        key, _, devices = note.removeprefix(_NOTE).partition(": ")
        name = key.split("/", 1)[1]
        out[name if name in claims else EXTENDED] = Counter(d.split("=", 1)[0] for d in devices.split(", ") if d)
    return out


def _pod_claims(subject: dict[str, Any]) -> set[str]:
    """The names of the pod's claims (a template's from ``status.resourceClaimStatuses``)."""
    names = {rc.get("resourceClaimName") for rc in subject["spec"].get("resourceClaims") or ()}
    names |= {s.get("resourceClaimName") for s in (subject.get("status") or {}).get("resourceClaimStatuses") or ()}
    return {n for n in names if n}


def _compare_devices(
    ex: Explanation,
    decision: Binding,
    state: ClusterState,
    subject: dict[str, Any],
    kube_alloc: dict[str, Counter[str]],
) -> None:
    """Ours allocates on kube-scheduler's node as many devices per claim and request as it did."""
    if ex.node != decision.node:
        pinned = copy.deepcopy(subject)
        pinned["spec"]["nodeSelector"] = {dc.HOST: decision.node}
        with quiet_logs():
            ex = explain_pod(state, pinned, config.load_config(OUR_CONFIG, full_registry()), full_registry())
        assert ex.node == decision.node, f"pinned to {decision.node}, we place it on {ex.node}: {ex.message}"
        event("devices compared on kube-scheduler's node, not our pick (a tie)")
    ours = our_allocations(ex, _pod_claims(subject))
    event(f"devices compared: {sum(sum(c.values()) for c in kube_alloc.values())} allocated by kube-scheduler")
    assert ours == kube_alloc, (
        f"devices per claim and request on {decision.node}: kube-scheduler {kube_alloc}, ours {ours}"
    )


@dataclass(frozen=True, slots=True)
class SchedulerError:
    """kube-scheduler failed the pod with an error (``PodScheduled=False``, reason
    ``SchedulerError``), not as unschedulable: e.g. the allocator's "cannot add device ... because a
    claim constraint would not be satisfied" for an ``All`` request (``allocator_incubating.go``)."""

    message: str


def _scheduled_condition(kube: KubeClient, namespace: str) -> dict[str, Any]:
    doc = kube.get(pod_path(namespace, "subject"))
    for c in (doc.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return dict(c)
    return {}


def _decision(ks: KubeScheduler, kube: KubeClient, namespace: str, since: int) -> Binding | str | SchedulerError:
    """kube-scheduler's Binding for the pod, its unschedulable message or its error; when it makes
    none in time, what it said about the pod (its log lines) fails the example."""
    key = f"{namespace}/subject"

    def decided() -> Binding | str | SchedulerError | None:
        if not ks.alive():
            raise AssertionError(f"kube-scheduler exited:\n{ks.log_tail()}")
        if (b := ks.binding(key, since)) is not None:
            return b
        cond = _scheduled_condition(kube, namespace)
        if cond.get("reason") == "SchedulerError":
            return SchedulerError(str(cond.get("message") or ""))
        return str(cond.get("message") or "") if cond.get("reason") == "Unschedulable" else None

    try:
        result: Binding | str | SchedulerError = cluster.wait_for(
            decided, timeout=30, interval=0.05, what=f"kube-scheduler decides {key}"
        )
    except TimeoutError as e:
        with ks.log_path.open("rb") as f:
            f.seek(since)
            lines = [x for x in f.read().decode(errors="replace").splitlines() if key in x]
        raise AssertionError(f"{e}\n" + "\n".join(lines[-15:])) from None
    return result


def _record(case: dc.Case) -> None:
    for feature in sorted(case.used):
        event(f"feature: {feature}")
    event(f"nodes with slices: {len(case.resources)}/{len(case.nodes)}")


def _forget_extended_claim(state: ClusterState, uid: str) -> None:
    """Drop the claim kube-scheduler's PreBind created for the subject's extended resources: it did
    not exist when kube-scheduler decided (``_unallocate`` takes the other claims back to then).
    Left in, it is a claim from an earlier attempt, which Filter rejects on every node."""

    def made_for_subject(doc: dict[str, Any]) -> bool:
        meta = doc.get("metadata") or {}
        if doc.get("kind") != "ResourceClaim" or (meta.get("annotations") or {}).get(EXTENDED_ANNOTATION) != "true":
            return False
        return any(o.get("uid") == uid and o.get("controller") for o in meta.get("ownerReferences") or ())

    state.dra[:] = [doc for doc in state.dra if not made_for_subject(doc)]


def _run(kube: KubeClient, ks: KubeScheduler, case: dc.Case, namespace: str, prefix: str) -> None:
    since = ks.log_size()
    _create(kube, case, namespace, prefix)
    _barrier(kube, ks, case, namespace, prefix, since)
    since = ks.log_size()
    pod = copy.deepcopy(case.pod)
    pod["metadata"]["namespace"] = namespace
    kube.post(pod_path(namespace), pod)
    decision = _decision(ks, kube, namespace, since)
    state = fetch_live(kube)
    subject = kube.get(pod_path(namespace, "subject"))
    kube_alloc = kube_allocations(state, subject["metadata"]["uid"])
    _unallocate(state, subject["metadata"]["uid"])
    _forget_extended_claim(state, subject["metadata"]["uid"])
    with quiet_logs():
        ex = explain_pod(state, subject, config.load_config(OUR_CONFIG, full_registry()), full_registry())
    if isinstance(decision, SchedulerError):
        event("kube-scheduler: scheduler error")
        ours = f"node {ex.node}, error {ex.error!r}, message {ex.message!r}"
        assert (ex.node, ex.error) == (None, decision.message), f"\nkube-scheduler: {decision.message}\nours: {ours}"
        return
    if isinstance(decision, str):
        event("unschedulable: " + re.sub(r"\d+", "N", decision.split(". preemption:")[0]))
    _compare(ex, decision)
    if isinstance(decision, Binding):
        _compare_devices(ex, decision, state, subject, kube_alloc)


@pytest.mark.timeout(max(300, 4 * EXAMPLES))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("CS_CONFORMANCE_RANDOM") != "1",
    database=None,
    phases=PHASES,
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.data_too_large),
)
@given(case=dc.cases())
def test_explain_agrees_with_kube_scheduler_on_dra(
    kube: KubeClient, kube_scheduler: KubeScheduler, case: dc.Case
) -> None:
    n = next(_examples)
    _record(case)
    namespace = f"dra-{n}-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(kube, namespace)
    try:
        _run(kube, kube_scheduler, case, namespace, f"dra{n}")
    except AssertionError as e:
        raise AssertionError(f"[features of this example: {', '.join(sorted(case.used)) or 'base only'}] {e}") from None
    finally:
        _cleanup(kube, case, namespace)
