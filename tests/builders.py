"""Builders for Pods and Nodes, the Python mirror of kube-scheduler's ``st.MakePod()``.

Each builder produces a valid API object (``.obj()``, a JSON dict the real API server accepts) and
the scheduler's compact view of it (``.build()``), so unit tests and integration tests describe
objects the same way::

    pod = make_pod("web").req(cpu="500m", memory="1Gi").toleration("gpu", "true").build()
    node = make_node("n1").capacity(cpu="4", memory="8Gi", pods=110).label("zone", "a").build()
"""

from __future__ import annotations

import copy
import itertools
import uuid
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.api.model import Node, Pod, node_from_json, pod_from_json
from custom_scheduler.api.podgroup import PodGroup
from custom_scheduler.api.storage import PersistentVolume, PersistentVolumeClaim, pv_from_json, pvc_from_json

_seq = itertools.count()

SCHEDULER_NAME = "custom-scheduler"


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {}},
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "containers": [{"name": "c0", "image": "registry.k8s.io/pause:3.9"}],
            },
        }

    # -- metadata ---------------------------------------------------------------------------------
    def uid(self, uid: str) -> PodBuilder:
        self._obj["metadata"]["uid"] = uid
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        self._obj["metadata"]["labels"][key] = value
        return self

    def labels(self, **labels: str) -> PodBuilder:
        self._obj["metadata"]["labels"].update(labels)
        return self

    def created(self, ts: str) -> PodBuilder:
        self._obj["metadata"]["creationTimestamp"] = ts
        return self

    def terminating(self) -> PodBuilder:
        self._obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        return self

    # -- spec -------------------------------------------------------------------------------------
    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def scheduler(self, name: str) -> PodBuilder:
        self.spec["schedulerName"] = name
        return self

    def node(self, name: str) -> PodBuilder:
        self.spec["nodeName"] = name
        return self

    def priority(self, value: int) -> PodBuilder:
        self.spec["priority"] = value
        return self

    def preemption_policy(self, policy: str) -> PodBuilder:
        self.spec["preemptionPolicy"] = policy
        return self

    def req(self, container: int = 0, **requests: str) -> PodBuilder:
        """Requests on container ``container`` (created if missing); resource names may use ``_``
        for ``-``/``.``/``/`` via :meth:`req_named`."""
        return self.req_named(requests, container=container)

    def req_named(self, requests: dict[str, str], container: int = 0) -> PodBuilder:
        cs = self.spec["containers"]
        while len(cs) <= container:
            cs.append({"name": f"c{len(cs)}", "image": "registry.k8s.io/pause:3.9"})
        res = cs[container].setdefault("resources", {})
        res.setdefault("requests", {}).update(requests)
        # Extended resources and hugepages must have limits equal to requests.
        limits = {k: v for k, v in requests.items() if "/" in k or k.startswith("hugepages")}
        if limits:
            res.setdefault("limits", {}).update(limits)
        return self

    def init_req(self, requests: dict[str, str], *, sidecar: bool = False) -> PodBuilder:
        c: dict[str, Any] = {
            "name": f"init{len(self.spec.get('initContainers', []))}",
            "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": dict(requests)},
        }
        if sidecar:
            c["restartPolicy"] = "Always"
        self.spec.setdefault("initContainers", []).append(c)
        return self

    def overhead(self, **res: str) -> PodBuilder:
        self.spec["overhead"] = res
        return self

    def image(self, image: str, container: int = 0) -> PodBuilder:
        self.spec["containers"][container]["image"] = image
        return self

    def host_port(self, port: int, protocol: str = "TCP", ip: str = "", container: int = 0) -> PodBuilder:
        p: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
        if ip:
            p["hostIP"] = ip
        self.spec["containers"][container].setdefault("ports", []).append(p)
        return self

    def toleration(self, key: str = "", value: str = "", effect: str = "", operator: str = "") -> PodBuilder:
        t: dict[str, Any] = {}
        if key:
            t["key"] = key
        if operator or not value:
            t["operator"] = operator or ("Exists" if not value else "Equal")
        if value:
            t["value"] = value
        if effect:
            t["effect"] = effect
        self.spec.setdefault("tolerations", []).append(t)
        return self

    def node_selector(self, **sel: str) -> PodBuilder:
        self.spec.setdefault("nodeSelector", {}).update(sel)
        return self

    def affinity(self, affinity: dict[str, Any]) -> PodBuilder:
        self.spec["affinity"] = copy.deepcopy(affinity)
        return self

    def required_node_affinity(self, *terms: dict[str, Any]) -> PodBuilder:
        na = self.spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": list(terms)}
        return self

    def preferred_node_affinity(self, weight: int, term: dict[str, Any]) -> PodBuilder:
        na = self.spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": weight, "preference": term}
        )
        return self

    def pod_affinity(self, kind: str, term: dict[str, Any], weight: int = 0) -> PodBuilder:
        """``kind`` is ``podAffinity`` or ``podAntiAffinity``; ``weight`` > 0 makes it preferred."""
        pa = self.spec.setdefault("affinity", {}).setdefault(kind, {})
        if weight:
            pa.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
                {"weight": weight, "podAffinityTerm": term}
            )
        else:
            pa.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(term)
        return self

    def spread(
        self,
        max_skew: int,
        topology_key: str,
        when: str = "DoNotSchedule",
        selector: dict[str, Any] | None = None,
        **extra: Any,
    ) -> PodBuilder:
        c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": topology_key, "whenUnsatisfiable": when}
        if selector is not None:
            c["labelSelector"] = selector
        c.update(extra)
        self.spec.setdefault("topologySpreadConstraints", []).append(c)
        return self

    def gates(self, *names: str) -> PodBuilder:
        """``spec.schedulingGates`` (the SchedulingGates PreEnqueue plugin holds the pod back)."""
        self.spec["schedulingGates"] = [{"name": n} for n in names]
        return self

    def scheduling_group(self, group: str) -> PodBuilder:
        """``spec.schedulingGroup.podGroupName``: a member of a scheduling.k8s.io PodGroup."""
        self.spec["schedulingGroup"] = {"podGroupName": group}
        return self

    def pod_group_label(self, group: str) -> PodBuilder:
        """The ``scheduling.x-k8s.io/pod-group`` label: a member of a scheduler-plugins PodGroup."""
        return self.label("scheduling.x-k8s.io/pod-group", group)

    def pvc(self, claim: str, volume: str = "", read_only: bool = False) -> PodBuilder:
        """A ``persistentVolumeClaim`` volume (named ``volume``, default: the claim's name)."""
        src: dict[str, Any] = {"claimName": claim}
        if read_only:
            src["readOnly"] = True
        return self.volume({"name": volume or claim, "persistentVolumeClaim": src})

    def ephemeral_volume(self, volume: str, storage_class: str = "", size: str = "1Gi") -> PodBuilder:
        """A generic ephemeral volume: its claim is ``<pod>-<volume>``, created by a controller."""
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        if storage_class:
            spec["storageClassName"] = storage_class
        return self.volume({"name": volume, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}})

    def volume(self, vol: dict[str, Any]) -> PodBuilder:
        """Any volume, as the API's JSON (``{"name": ..., "gcePersistentDisk": {...}}``)."""
        self.spec.setdefault("volumes", []).append(copy.deepcopy(vol))
        return self

    def nominated(self, node: str) -> PodBuilder:
        self._obj.setdefault("status", {})["nominatedNodeName"] = node
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def resized(
        self, allocated: dict[str, str], actual: dict[str, str] | None = None, container: int = 0
    ) -> PodBuilder:
        """The kubelet's report of an in-place resize on container ``container``: what it admitted
        (``allocatedResources``) and what the runtime applied (``resources.requests``, the
        allocation when None)."""
        name = self.spec["containers"][container]["name"]
        statuses = self._obj.setdefault("status", {}).setdefault("containerStatuses", [])
        statuses[:] = [cs for cs in statuses if cs["name"] != name]
        statuses.append(
            {"name": name, "allocatedResources": dict(allocated), "resources": {"requests": dict(actual or allocated)}}
        )
        return self

    def start_time(self, ts: str) -> PodBuilder:
        self._obj.setdefault("status", {})["startTime"] = ts
        return self

    def active_deadline(self, seconds: Any) -> PodBuilder:
        """``spec.activeDeadlineSeconds`` as given (any JSON value, for bad-input tests too)."""
        self.spec["activeDeadlineSeconds"] = seconds
        return self

    # -- output -----------------------------------------------------------------------------------
    def obj(self) -> dict[str, Any]:
        """The API object, for POSTing to the API server."""
        return copy.deepcopy(self._obj)

    def build(self) -> Pod:
        """The scheduler's view; fills uid and creation time when the test did not."""
        o = self.obj()
        o["metadata"].setdefault("uid", str(uuid.uuid4()))
        o["metadata"].setdefault("creationTimestamp", f"2024-01-01T00:{next(_seq) % 60:02d}:00Z")
        return pod_from_json(o)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"capacity": {}, "allocatable": {}},
        }

    def capacity(self, **res: str | int) -> NodeBuilder:
        return self.capacity_named({k: str(v) for k, v in res.items()})

    def capacity_named(self, res: dict[str, str]) -> NodeBuilder:
        self._obj["status"]["capacity"].update(res)
        self._obj["status"]["allocatable"].update(res)
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._obj["metadata"]["labels"][key] = value
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._obj["metadata"]["labels"].update(labels)
        return self

    def without_label(self, key: str) -> NodeBuilder:
        """Drops a label, the default ``kubernetes.io/hostname`` included."""
        self._obj["metadata"]["labels"].pop(key, None)
        return self

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        t = {"key": key, "effect": effect}
        if value:
            t["value"] = value
        self._obj["spec"].setdefault("taints", []).append(t)
        return self

    def unschedulable(self, flag: bool = True) -> NodeBuilder:
        self._obj["spec"]["unschedulable"] = flag
        return self

    def image(self, name: str, size: int) -> NodeBuilder:
        self._obj["status"].setdefault("images", []).append({"names": [name], "sizeBytes": size})
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def build(self) -> Node:
        o = self.obj()
        o["metadata"].setdefault("uid", str(uuid.uuid4()))
        return node_from_json(o)


def make_pod(name: str = "", namespace: str = "default") -> PodBuilder:
    return PodBuilder(name or f"pod-{next(_seq)}", namespace)


def make_node(name: str = "") -> NodeBuilder:
    return NodeBuilder(name or f"node-{next(_seq)}").capacity(cpu="4", memory="8Gi", pods="110")


# -- storage --------------------------------------------------------------------------------------


class PVBuilder:
    """A PersistentVolume (``.obj()`` for the API server, ``.build()`` for the compact view)."""

    def __init__(self, name: str) -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "labels": {}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/pv/{name}"},
            },
            "status": {"phase": "Available"},
        }

    def size(self, q: str) -> PVBuilder:
        self._obj["spec"]["capacity"]["storage"] = q
        return self

    def storage_class(self, name: str) -> PVBuilder:
        self._obj["spec"]["storageClassName"] = name
        return self

    def access(self, *modes: str) -> PVBuilder:
        self._obj["spec"]["accessModes"] = list(modes)
        return self

    def label(self, key: str, value: str) -> PVBuilder:
        self._obj["metadata"]["labels"][key] = value
        return self

    def on_node(self, node: str, key: str = "kubernetes.io/hostname") -> PVBuilder:
        """A local PV: node affinity to ``node`` (as local-path and local volumes have)."""
        self._obj["spec"].pop("hostPath", None)
        self._obj["spec"]["local"] = {"path": f"/mnt/{self._obj['metadata']['name']}"}
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": [node]}]}
        self._obj["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        return self

    def csi(self, driver: str, handle: str = "") -> PVBuilder:
        self._obj["spec"].pop("hostPath", None)
        self._obj["spec"]["csi"] = {"driver": driver, "volumeHandle": handle or self._obj["metadata"]["name"]}
        return self

    def claim_ref(self, namespace: str, name: str, uid: str = "") -> PVBuilder:
        ref = {"namespace": namespace, "name": name}
        if uid:
            ref["uid"] = uid
        self._obj["spec"]["claimRef"] = ref
        return self

    def phase(self, phase: str) -> PVBuilder:
        self._obj["status"]["phase"] = phase
        return self

    def rv(self, rv: str) -> PVBuilder:
        self._obj["metadata"]["resourceVersion"] = rv
        return self

    def obj(self) -> dict[str, Any]:
        o = copy.deepcopy(self._obj)
        o.pop("status", None)  # the PV controller sets it
        o["metadata"].pop("resourceVersion", None)
        return o

    def build(self) -> PersistentVolume:
        o = copy.deepcopy(self._obj)
        o["metadata"].setdefault("resourceVersion", "1")
        return pv_from_json(o)


class PVCBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "annotations": {}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }

    def size(self, q: str) -> PVCBuilder:
        self._obj["spec"]["resources"]["requests"]["storage"] = q
        return self

    def storage_class(self, name: str) -> PVCBuilder:
        self._obj["spec"]["storageClassName"] = name
        return self

    def access(self, *modes: str) -> PVCBuilder:
        self._obj["spec"]["accessModes"] = list(modes)
        return self

    def bound_to(self, pv: str) -> PVCBuilder:
        """Fully bound (as the PV controller leaves it): volumeName, bind-completed, phase Bound."""
        self._obj["spec"]["volumeName"] = pv
        self._obj["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
        self._obj.setdefault("status", {})["phase"] = "Bound"
        return self

    def volume_name(self, pv: str) -> PVCBuilder:
        self._obj["spec"]["volumeName"] = pv
        return self

    def selected_node(self, node: str) -> PVCBuilder:
        self._obj["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = node
        return self

    def phase(self, phase: str) -> PVCBuilder:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def owned_by(self, pod_uid: str) -> PVCBuilder:
        self._obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod_uid, "controller": True}
        ]
        return self

    def uid(self, uid: str) -> PVCBuilder:
        self._obj["metadata"]["uid"] = uid
        return self

    def terminating(self) -> PVCBuilder:
        self._obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        return self

    def obj(self) -> dict[str, Any]:
        o = copy.deepcopy(self._obj)
        o.pop("status", None)
        return o

    def build(self) -> PersistentVolumeClaim:
        o = copy.deepcopy(self._obj)
        o["metadata"].setdefault("uid", str(uuid.uuid4()))
        o["metadata"].setdefault("resourceVersion", "1")
        return pvc_from_json(o)


def storage_class_obj(
    name: str,
    provisioner: str = "kubernetes.io/no-provisioner",
    *,
    wffc: bool = True,
    allowed_zones: tuple[str, ...] = (),
    zone_key: str = "topology.kubernetes.io/zone",
) -> dict[str, Any]:
    sc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate",
        "reclaimPolicy": "Delete",
    }
    if allowed_zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": zone_key, "values": list(allowed_zones)}]}]
    return sc


def csinode_obj(node: str, limits: dict[str, int | None]) -> dict[str, Any]:
    """A CSINode with one driver per ``limits`` entry (its ``allocatable.count``, or None)."""
    drivers = []
    for name, count in limits.items():
        d: dict[str, Any] = {"name": name, "nodeID": node, "topologyKeys": None}
        if count is not None:
            d["allocatable"] = {"count": count}
        drivers.append(d)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": drivers},
    }


def make_pv(name: str = "") -> PVBuilder:
    return PVBuilder(name or f"pv-{next(_seq)}")


def make_pvc(name: str = "", namespace: str = "default") -> PVCBuilder:
    return PVCBuilder(name or f"pvc-{next(_seq)}", namespace)


# --- DRA (resource.k8s.io/v1) ----------------------------------------------------------------------


def resource_slice_obj(
    node: str,
    devices: dict[str, dict[str, Any]],
    *,
    driver: str = "gpu.example.com",
    all_nodes: bool = False,
    node_selector: dict[str, Any] | None = None,
    pool: str = "",
) -> dict[str, Any]:
    """A ResourceSlice of ``driver`` with ``devices`` (name -> attributes, plain values)."""

    def attr(v: Any) -> dict[str, Any]:
        return {"bool": v} if isinstance(v, bool) else {"int": v} if isinstance(v, int) else {"string": v}

    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or node or "shared", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": n, "attributes": {k: attr(v) for k, v in a.items()}} for n, a in devices.items()],
    }
    if all_nodes:
        spec["allNodes"] = True
    elif node_selector is not None:
        spec["nodeSelector"] = node_selector
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": f"{pool or node or 'shared'}-{driver}", "resourceVersion": "1"}, "spec": spec}


def device_class_obj(name: str = "gpu", *selectors: str) -> dict[str, Any]:
    sel = [{"cel": {"expression": e}} for e in selectors]
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": {"selectors": sel}}


class ClaimBuilder:
    """A ResourceClaim with requests, constraints and (optionally) an allocation."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self._obj: dict[str, Any] = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": []}},
        }

    def request(
        self, name: str = "gpu", cls: str = "gpu", *selectors: str, count: int = 1, mode: str = ""
    ) -> ClaimBuilder:
        exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
        if mode:
            exactly = {"deviceClassName": cls, "allocationMode": mode}
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        self._obj["spec"]["devices"]["requests"].append({"name": name, "exactly": exactly})
        return self

    def first_available(self, name: str, *subs: tuple[str, str, tuple[str, ...]]) -> ClaimBuilder:
        alts = [
            {"name": n, "deviceClassName": c, "selectors": [{"cel": {"expression": e}} for e in sel]}
            for n, c, sel in subs
        ]
        self._obj["spec"]["devices"]["requests"].append({"name": name, "firstAvailable": alts})
        return self

    def match_attribute(self, attr: str, *requests: str) -> ClaimBuilder:
        c: dict[str, Any] = {"matchAttribute": attr}
        if requests:
            c["requests"] = list(requests)
        self._obj["spec"]["devices"].setdefault("constraints", []).append(c)
        return self

    def owner(self, uid: str) -> ClaimBuilder:
        self._obj["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": uid, "controller": True}]
        return self

    def allocated(self, node: str, *devices: str, driver: str = "gpu.example.com") -> ClaimBuilder:
        results = [{"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices]
        sel = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        self._obj["status"] = {"allocation": {"devices": {"results": results}, "nodeSelector": sel}}
        return self

    def reserved_for(self, *uids: str) -> ClaimBuilder:
        self._obj.setdefault("status", {})["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in uids]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)


# -- PodGroups (gang scheduling) --------------------------------------------------------------------


class PodGroupBuilder:
    """A PodGroup of Kubernetes' ``scheduling.k8s.io/v1beta1`` (``crd=False``) or scheduler-plugins'
    ``scheduling.x-k8s.io/v1alpha1`` (``crd=True``) API. Native groups start as a gang of
    ``min_count``; CRD groups with ``minMember``."""

    def __init__(self, name: str, namespace: str = "default", *, crd: bool = False, min_count: int = 1) -> None:
        self.crd = crd
        self._obj: dict[str, Any] = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1" if crd else "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": min_count} if crd else {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self._obj["spec"]
        return spec

    def basic(self) -> PodGroupBuilder:
        self.spec["schedulingPolicy"] = {"basic": {}}
        return self

    def topology(self, key: str) -> PodGroupBuilder:
        self.spec["schedulingConstraints"] = {"topology": [{"key": key}]}
        return self

    def timeout(self, seconds: int) -> PodGroupBuilder:
        self.spec["scheduleTimeoutSeconds"] = seconds
        return self

    def min_resources(self, **res: str) -> PodGroupBuilder:
        self.spec["minResources"] = dict(res)
        return self

    def condition(
        self, status: str, reason: str, message: str = "", ts: str = "2024-01-01T00:00:00Z"
    ) -> PodGroupBuilder:
        cond = {"type": "PodGroupInitiallyScheduled", "status": status, "reason": reason, "message": message}
        cond["lastTransitionTime"] = ts
        self._obj.setdefault("status", {}).setdefault("conditions", []).append(cond)
        return self

    def phase(self, phase: str) -> PodGroupBuilder:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def set(self, path: str, value: Any) -> PodGroupBuilder:
        """Any field by dotted path (``spec.minMember``), for malformed-object tests."""
        *parents, last = path.split(".")
        d = self._obj
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._obj)

    def build(self) -> PodGroup:
        o = self.obj()
        o["metadata"].setdefault("uid", str(uuid.uuid4()))
        o["metadata"].setdefault("resourceVersion", str(next(_seq)))
        return gang.crd_from_json(o) if self.crd else gang.native_from_json(o)


def make_pod_group(name: str = "", namespace: str = "default", *, min_count: int = 1) -> PodGroupBuilder:
    return PodGroupBuilder(name or f"pg-{next(_seq)}", namespace, min_count=min_count)


def make_crd_pod_group(name: str = "", namespace: str = "default", *, min_member: int = 1) -> PodGroupBuilder:
    return PodGroupBuilder(name or f"pg-{next(_seq)}", namespace, crd=True, min_count=min_member)
