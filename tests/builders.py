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

from custom_scheduler.model import Node, Pod, node_from_json, pod_from_json

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
        return self._obj["spec"]

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

    def nominated(self, node: str) -> PodBuilder:
        self._obj.setdefault("status", {})["nominatedNodeName"] = node
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._obj.setdefault("status", {})["phase"] = phase
        return self

    def start_time(self, ts: str) -> PodBuilder:
        self._obj.setdefault("status", {})["startTime"] = ts
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
