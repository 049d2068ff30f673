"""Finishing graceful pod deletions as a kubelet does, but only ever the pod instance that was
being deleted: the final delete (grace 0) carries the pod's UID as a precondition.

Why: kwok v0.8.0's pod-delete stage finishes a Terminating pod with ``DELETE`` by name and no UID
precondition (``pkg/kwok/controllers/pod_controller.go``, ``deleteResource``). When that delete is
late — a stage replayed for a second watch event of the same pod — and a new pod of the same name
already exists, kwok removes the new pod. Upstream's e2e spec "PodTopologySpread Preemption"
deletes its probe pod ``without-label`` and re-creates it under the same name at once, so on a kwok
cluster it fails now and then, whatever the scheduler. A kubelet never does that: it deletes with
``preconditions.uid`` (``pkg/kubelet/status/status_manager.go``). The e2e run therefore leaves
deletions out of kwok's stages and lets :class:`PodFinisher` finish them the kubelet's way.

When a deletion is finished (:func:`due_at`): a pod whose containers have a preStop hook stays
Terminating until its grace period ends (its ``deletionTimestamp``), as a kubelet keeps it while the
hook runs — the async-preemption spec checks that its victims, with an 80 s grace period and a 79 s
preStop sleep, are still there once preempted; any other pod goes at once, as a kubelet finishes it
once its containers stop. Pods not bound to a node are the API server's business (it deletes them
without grace), so they are left alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path


def _epoch(rfc3339: str) -> float | None:
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def has_pre_stop(pod: Mapping[str, Any]) -> bool:
    """Whether any container (regular or sidecar init container) declares a preStop hook."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return any(((c.get("lifecycle") or {}).get("preStop")) for c in containers)


def due_at(pod: Mapping[str, Any], now: float) -> float | None:
    """When the final delete of ``pod`` is due (epoch seconds), or None when it is not ours to
    finish: not Terminating, or not bound to a node. An unreadable deletionTimestamp counts as due
    now: a pod left Terminating for ever is worse than one finished early."""
    meta = pod.get("metadata") or {}
    stamp = meta.get("deletionTimestamp")
    if not stamp or not (pod.get("spec") or {}).get("nodeName"):
        return None
    if not has_pre_stop(pod):
        return now
    end = _epoch(str(stamp))
    return now if end is None else end


def final_delete_body(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The DeleteOptions of the final delete: grace 0, and only this instance of the pod (its UID)."""
    return {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": (pod.get("metadata") or {}).get("uid")},
    }


class PodFinisher:
    """A background loop that finishes the cluster's graceful pod deletions (see the module doc),
    or one namespace's (``namespace``).

    It lists every pod each ``interval`` seconds: the e2e cluster holds a few hundred at most, and a
    LIST cannot be missed the way a watch event can be while a watch reconnects."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str = "",
        interval: float = 0.25,
        clock: Callable[[], float] | None = None,
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self._kube = kube
        self._pods = pod_path(namespace) if namespace else "/api/v1/pods"
        self._interval = interval
        self._clock = clock or time.time
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pod-finisher", daemon=True)
        self.finished = 0

    def start(self) -> PodFinisher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def sweep(self) -> int:
        """One pass: finish every deletion that is due; the number finished."""
        now = self._clock()
        n = 0
        for pod in self._kube.get(self._pods).get("items") or []:
            due = due_at(pod, now)
            if due is None or due > now:
                continue
            meta = pod["metadata"]
            try:
                self._kube.delete(pod_path(meta["namespace"], meta["name"]), final_delete_body(pod))
                n += 1
            except (api_errors.NotFound, api_errors.Conflict):
                pass  # gone already, or the name now belongs to a new pod: not ours to delete
        self.finished += n
        return n

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sweep()
            except api_errors.KubeError as e:  # a blip: the next pass retries
                self._log(f"pod finisher: {e}")
