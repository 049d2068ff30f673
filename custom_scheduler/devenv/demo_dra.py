"""The demo's DRA variant of the GPU scenario (issue #26 item 10): GPUs as ResourceSlices, not counts.

The ``gpu`` scenario shows AcceleratorIsolation with the ``nvidia.com/gpu`` extended resource. A
cluster on Dynamic Resource Allocation (resource.k8s.io/v1) publishes its GPUs differently: a
driver puts each GPU, with its attributes, into ResourceSlices, and pods ask for devices through
ResourceClaims (here made from ResourceClaimTemplates by kube-controller-manager's resourceclaim
controller). This module is that scenario, kept apart from :mod:`custom_scheduler.devenv.demo` so the
demo's other scenarios stay readable:

- two DRA GPU nodes, ``dra-1`` and ``dra-2``, each publishing through the driver stand-in
  (:mod:`custom_scheduler.devenv.dra_driver`) a whole GPU, a tainted (unhealthy) GPU, a
  partitionable GPU (MIG-style partitions over shared counters) and a shared GPU (GPU memory
  handed out as consumable capacity). No node taint: AcceleratorIsolation alone keeps ordinary pods
  off them, because they have accelerator devices published for them;
- first wave: pods asking for a whole GPU, a ``3g.20gb`` partition and 8Gi of a shared GPU's
  memory. Whichever node the first lands on, the others follow (AcceleratorIsolation's packing
  prefers the node whose accelerator devices are in use), so the other node stays whole; an
  ordinary pod allowed only onto the two DRA nodes stays pending;
- second wave (after the first settled): another whole-GPU pod. The packed node still has a whole
  GPU free, but it is the tainted one and the request does not tolerate the taint, so the pod goes
  to the other node.

The report reads each pod's device from its claim's ``status.allocation`` (the claim named in the
pod's ``status.resourceClaimStatuses``), checks the packing and that no claim holds a tainted GPU.
Builders and the report's wording are pure; :func:`setup`, :func:`allocations` and
:func:`cleanup` do the I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from custom_scheduler.devenv import dra_driver as drv
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient

JSON = dict[str, Any]

SCENARIO = "gpu-dra"
TITLE = "DRA GPUs (ResourceSlices): whole GPU, MIG partition and memory share packed on one node"
#: Each DRA node's GPUs, indexed whole, tainted, partitionable, shared: ``gpu-0`` is the whole
#: GPU, ``gpu-1`` the tainted one, ``gpu-2`` the partitionable one, ``gpu-3`` the shared one.
NODES: dict[str, drv.NodeResources] = {
    n: drv.NodeResources(gpus=1, tainted=1, partitionable=1, shared=1) for n in ("dra-1", "dra-2")
}
TAINTED = "gpu-1"
PROFILE = "3g.20gb"
SHARE = "8Gi"
#: The classes the demo's templates use (the stand-in's other classes are not created).
CLASS_NAMES = (drv.GPU_CLASS, drv.MIG_CLASS, drv.SHARED_CLASS)
LABELS = {"demo/scenario": SCENARIO}

#: template name → (DeviceClass, request fields beyond the class).
TEMPLATES: dict[str, tuple[str, JSON]] = {
    "dra-whole": (drv.GPU_CLASS, {}),
    "dra-mig": (
        drv.MIG_CLASS,
        {"selectors": [{"cel": {"expression": f'device.attributes["{drv.DRIVER}"].profile == "{PROFILE}"'}}]},
    ),
    "dra-share": (drv.SHARED_CLASS, {"capacity": {"requests": {"memory": SHARE}}}),
}
#: The first wave's claim pods (pod → template), the ones expected packed on one node.
PACKED = {"dra-whole": "dra-whole", "dra-mig": "dra-mig", "dra-share": "dra-share"}
#: The second wave's pod: a whole GPU, once the packed node's only free whole GPU is the tainted one.
SECOND = {"dra-whole-2": "dra-whole"}
ORDINARY = "dra-ordinary"


def nodes() -> list[JSON]:
    """The DRA GPU nodes (cpu and memory only: their GPUs are in ResourceSlices, not allocatable)."""
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, **LABELS}},
            "spec": {},
            "status": {"capacity": dict(alloc), "allocatable": dict(alloc)},
        }
        for n in NODES
    ]


def templates(namespace: str) -> list[JSON]:
    """The ResourceClaimTemplates: one request ``gpu`` each."""
    out = []
    for name, (cls, extra) in TEMPLATES.items():
        request = {"name": "gpu", "exactly": {"deviceClassName": cls, **extra}}
        spec = {"spec": {"devices": {"requests": [request]}}}
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }
        )
    return out


def _pod(name: str, namespace: str, template: str = "", **spec: Any) -> JSON:
    # Small cpu and memory requests: the GPUs, not cpu, decide where these pods go.
    container: JSON = {
        "name": "app",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
    if template:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {"schedulerName": "custom-scheduler", "containers": [container], **spec},
    }


def first_wave(namespace: str) -> list[JSON]:
    """The claim pods expected packed, and an ordinary pod that may go only to the DRA nodes."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(NODES)}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    pods = [_pod(name, namespace, template) for name, template in PACKED.items()]
    return [*pods, _pod(ORDINARY, namespace, affinity=affinity)]


def second_wave(namespace: str) -> list[JSON]:
    return [_pod(name, namespace, template) for name, template in SECOND.items()]


# -- I/O --------------------------------------------------------------------------------------------


def setup(kube: KubeClient, namespace: str) -> None:
    """DeviceClasses, the nodes' slices and the templates (the namespace exists already)."""
    drv.ensure_device_classes(kube, [c for c in drv.device_classes() if c["metadata"]["name"] in CLASS_NAMES])
    drv.publish(kube, NODES, labels=LABELS)
    for t in templates(namespace):
        with contextlib.suppress(api_errors.Conflict):  # left from a `--keep` run: the same template
            kube.post(f"{drv.API}/namespaces/{namespace}/resourceclaimtemplates", t)


def allocations(kube: KubeClient, namespace: str) -> dict[str, list[JSON]]:
    """Pod → the allocation results of its claims, found through the claim names the resourceclaim
    controller recorded in the pod's ``status.resourceClaimStatuses`` (empty: none allocated)."""
    claims = kube.get(f"{drv.API}/namespaces/{namespace}/resourceclaims")["items"]
    by_name = {c["metadata"]["name"]: c for c in claims}
    out: dict[str, list[JSON]] = {}
    for pod in kube.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": "demo/scenario=" + SCENARIO})[
        "items"
    ]:
        results: list[JSON] = []
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            claim = by_name.get(st.get("resourceClaimName") or "")
            alloc = ((claim or {}).get("status") or {}).get("allocation") or {}
            results.extend((alloc.get("devices") or {}).get("results") or ())
        out[pod["metadata"]["name"]] = results
    return out


def cleanup(kube: KubeClient) -> None:
    """Delete the slices and classes (cluster-scoped; templates and claims go with the namespace)."""
    drv.unpublish(kube, NODES)
    drv.delete_device_classes(kube, [c for c in drv.device_classes() if c["metadata"]["name"] in CLASS_NAMES])


# -- the report -------------------------------------------------------------------------------------


def describe(result: JSON) -> str:
    """One allocation result in words: the device and what it is (from its name and the stand-in's
    naming: ``gpu-<i>-mig-<profile>-<k>`` is a partition of GPU ``i``, a result with consumed
    capacity is a share)."""
    device = str(result.get("device", "?"))
    where = f"{result.get('pool', '?')}/{device}"
    consumed = result.get("consumedCapacity") or {}
    if consumed:
        amounts = ", ".join(f"{k} {v}" for k, v in sorted(consumed.items()))
        return f"{where} (share of a shared GPU: {amounts})"
    if "-mig-" in device:
        parent, profile = device.split("-mig-", 1)
        return f"{where} (partition {profile.rsplit('-', 1)[0].replace('-', '.', 1)} of {parent})"
    if device == TAINTED:
        return f"{where} (the TAINTED GPU)"
    return f"{where} (whole GPU)"


def notes(placed: Mapping[str, str], allocated: Mapping[str, Sequence[JSON]]) -> tuple[dict[str, str], list[str]]:
    """Per pod, the devices it got; and the scenario's checks as lines: the first wave packed on
    one node, the second-wave pod on the other, no claim holding a tainted GPU."""
    per_pod = {pod: "  " + "; ".join(describe(r) for r in results) for pod, results in allocated.items() if results}
    lines = []
    hosts = {placed.get(p, "") for p in PACKED}
    if len(hosts) == 1 and hosts <= set(NODES):
        [host] = hosts
        lines.append(f"packed: {', '.join(PACKED)} all on {host}; the other DRA node stays whole")
        for pod in SECOND:
            there = placed.get(pod, "")
            if there in NODES and there != host:
                lines.append(f"{pod} -> {there}: {host}'s free whole GPU is the tainted {TAINTED}, not tolerated")
    else:
        where = ", ".join(f"{p} -> {placed.get(p) or '-'}" for p in PACKED)
        lines.append(f"NOT packed: {where}")
    held = [f"{r.get('pool')}/{r.get('device')}" for results in allocated.values() for r in results]
    tainted = [h for h in held if h.endswith("/" + TAINTED)]
    tainted_names = ", ".join(f"{n}/{TAINTED}" for n in NODES)
    if tainted:
        lines.append(f"TAINTED device allocated: {', '.join(tainted)}")
    else:
        lines.append(f"tainted {tainted_names}: allocated to none of the {len(held)} claims' devices")
    return per_pod, lines
