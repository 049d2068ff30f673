"""The pod fragments plugins sign with (upstream's ``fwk.*Signer`` helpers), for opportunistic batching.

Each function returns the ``(key, value)`` fragments of the pod that a family of plugins reads;
plugins that read the same parts share the key (upstream's ``*SignerName`` constants), so a
signature holds each part once. Values are plain comparable data (tuples, frozen dataclasses).
See :mod:`custom_scheduler.framework.batching`.
"""

from __future__ import annotations

import json
from typing import Any

from custom_scheduler.api.model import Pod
from custom_scheduler.api.resources import Resources

Fragments = list[tuple[str, Any]]


def _resources(r: Resources) -> tuple[Any, ...]:
    return (r.milli_cpu, r.memory, r.ephemeral_storage, tuple(sorted(r.scalar.items())))


def resources(pod: Pod) -> Fragments:
    """What NodeResourcesFit and BalancedAllocation read: the effective requests, the non-zero
    defaults scoring uses and the containers' own requests (resize and pod-level resources)."""
    containers = pod.container_requests
    return [
        (
            "resources",
            (
                _resources(pod.requests),
                pod.non_zero_milli_cpu,
                pod.non_zero_memory,
                repr(containers) if containers is not None else None,
            ),
        )
    ]


def tolerations(pod: Pod) -> Fragments:
    return [("tolerations", pod.tolerations)]


def volumes(pod: Pod) -> Fragments:
    return [("volumes", pod.volumes)]


def host_ports(pod: Pod) -> Fragments:
    return [("hostPorts", pod.host_ports)]


def node_affinity(pod: Pod) -> Fragments:
    affinity = (pod.affinity or {}).get("nodeAffinity")
    return [
        ("nodeAffinity", json.dumps(affinity, sort_keys=True) if affinity else None),
        ("nodeSelector", tuple(sorted(pod.node_selector.items()))),
    ]


def node_name(pod: Pod) -> Fragments:
    return [("nodeName", pod.node_name)]


def images(pod: Pod) -> Fragments:
    return [("images", tuple(sorted(set(pod.images))))]


def labels(pod: Pod) -> Fragments:
    return [("labels", tuple(sorted(pod.labels.items())))]


def features(pod: Pod) -> Fragments:
    return [("features", tuple(sorted(pod.required_node_features)))]
