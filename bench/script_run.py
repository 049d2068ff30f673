"""Run a workload's :mod:`bench.script` steps against the API server (the same for both schedulers).

The harness (:func:`bench.run.run_one`) makes one :class:`Runner` per round, runs the setup steps
before the measured window and the rest inside it, then asks it for what the checks need: when each
:class:`~bench.script.Release` happened (``held_bound``), what it created and deleted. A barrier
that times out (the scheduler does not bind, or never tries, what it should) ends the script: the
round then reports "bound X/M" like any other that falls short, with ``script.failed`` saying where.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench import script, workloads
from custom_scheduler.devenv import cluster
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import MERGE_PATCH_CT, STRATEGIC_PATCH_CT, KubeClient, node_path, pod_path

JSON = dict[str, Any]
JSON_PATCH_CT = "application/json-patch+json"
CONTENT_TYPES = {"merge": MERGE_PATCH_CT, "strategic": STRATEGIC_PATCH_CT, "tolerations": JSON_PATCH_CT}


@dataclass
class Runner:
    kube: KubeClient
    namespace: str
    scheduler_name: str
    wait: Callable[[set[str], float, bool], bool]
    """(pods, deadline, attempted) -> whether every pod was bound (or, attempted, tried) by the
    deadline: :meth:`bench.run.PodWatcher.wait` with the round's stall timeout."""
    create_pods: Callable[[list[JSON]], dict[str, float]]
    """Creates the (namespaced, scheduler-named) pods; returns name -> when the create returned."""
    workers: int = 32
    created: dict[str, float] = field(default_factory=dict)
    releases: list[tuple[script.Release, float]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    failed: str = ""
    errors: int = 0
    deleted: int = 0
    updated: int = 0
    _finalized: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def run(self, steps: Sequence[script.Step], deadline: float) -> bool:
        """Run ``steps`` in order; False (and ``failed`` set) when a barrier was not met by
        ``deadline`` or within the stall timeout."""
        for i, step in enumerate(steps):
            t0 = time.monotonic()
            ok = self._step(step, deadline)
            self.timeline.append({"step": type(step).__name__, "s": round(time.monotonic() - t0, 3), **_size(step)})
            if not ok:
                self.failed = f"step {i} ({type(step).__name__}) not met"
                return False
        return True

    def _step(self, step: script.Step, deadline: float) -> bool:
        if isinstance(step, script.CreateNodes):
            self._pool(lambda n: cluster.create_ready_node(self.kube, orjson.loads(orjson.dumps(n))), step.nodes)
            return True
        if isinstance(step, script.CreatePods):
            return self._create_pods(step, deadline)
        if isinstance(step, script.CreateVolumes):
            self._pool(self._bound_pair, step.pairs)
            return True
        if isinstance(step, script.CreateObjects):
            path = step.path.replace("{namespace}", self.namespace)
            self._pool(lambda o: self.kube.post(path, o), step.objects)
            return True
        if isinstance(step, script.Barrier):
            return self.wait(set(step.names), deadline, step.attempted)
        if isinstance(step, script.Release):
            self.releases.append((step, time.monotonic()))
            return True
        if isinstance(step, script.Update):
            self._paced(step.patches, step.per_second, lambda item: self._update(step, *item))
            return True
        if isinstance(step, script.DeletePods):
            if step.background:
                t = threading.Thread(target=self._delete_all, args=(step,), name="script-delete", daemon=True)
                self._threads.append(t)
                t.start()
            else:
                self._delete_all(step)
            return True
        return True  # Measure: the harness splits the steps there

    def _create_pods(self, step: script.CreatePods, deadline: float) -> bool:
        pods = workloads.for_scheduler(step.pods, self.scheduler_name, self.namespace)
        self._finalized += [p["metadata"]["name"] for p in pods if p["metadata"].get("finalizers")]
        self.created.update(self.create_pods(pods))
        if not step.wait:
            return True
        return self.wait(set(script.names(pods)), deadline, False)

    def _bound_pair(self, pair: tuple[JSON, JSON]) -> None:
        """A claim and its volume, bound to each other (statuses written after the creates, which
        reset them): the claim first, so the volume's ``claimRef`` can name its UID."""
        pv, pvc = orjson.loads(orjson.dumps(pair[0])), orjson.loads(orjson.dumps(pair[1]))
        claims = f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims"
        made = self.kube.post(claims, pvc)
        storage = pvc["spec"]["resources"]["requests"]["storage"]
        claim_status = {"phase": "Bound", "accessModes": pvc["spec"]["accessModes"], "capacity": {"storage": storage}}
        self.kube.patch(f"{claims}/{pvc['metadata']['name']}/status", {"status": claim_status})
        pv["spec"]["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": self.namespace,
            "name": pvc["metadata"]["name"],
            "uid": made["metadata"]["uid"],
        }
        self.kube.post("/api/v1/persistentvolumes", pv)
        self.kube.patch(f"/api/v1/persistentvolumes/{pv['metadata']['name']}/status", {"status": {"phase": "Bound"}})

    def _update(self, step: script.Update, name: str, patch: JSON) -> None:
        try:
            if step.target == "node":
                rest = {k: v for k, v in patch.items() if k != "status"}
                if rest:
                    self.kube.patch(node_path(name), rest)
                if "status" in patch:
                    self.kube.patch(node_path(name, "status"), {"status": patch["status"]})
            elif step.patch_type == "tolerations":
                self._add_tolerations(name, patch["tolerations"])
            else:
                path = pod_path(self.namespace, name, step.subresource)
                self.kube.patch(path, patch, content_type=CONTENT_TYPES[step.patch_type])
            self.updated += 1
        except api_errors.KubeError:
            self.errors += 1  # counted and reported; the pods it should have unblocked stay pending

    def _add_tolerations(self, name: str, tolerations: list[JSON]) -> None:
        """Append: a JSON patch adds to the list (tolerations may only be added, and a merge patch
        would replace the defaults the API server gave the pod); to a pod without any, the list."""
        path = pod_path(self.namespace, name)
        ops = [{"op": "add", "path": "/spec/tolerations/-", "value": t} for t in tolerations]
        try:
            self.kube.patch(path, ops, content_type=JSON_PATCH_CT)
        except api_errors.ApiError:
            self.kube.patch(path, [{"op": "add", "path": "/spec/tolerations", "value": tolerations}], JSON_PATCH_CT)

    def _delete_all(self, step: script.DeletePods) -> None:
        def one(name: str) -> None:
            try:
                self.kube.request("DELETE", pod_path(self.namespace, name), query={"gracePeriodSeconds": 0})
                self.deleted += 1
            except api_errors.NotFound:
                pass
            except api_errors.KubeError:
                self.errors += 1

        self._paced([(n,) for n in step.names], step.per_second, lambda item: one(*item))

    def _paced(
        self, items: Sequence[tuple[Any, ...]], per_second: float, fn: Callable[[tuple[Any, ...]], None]
    ) -> None:
        """Item ``i`` at ``start + (i + 1) / per_second`` (upstream's ticker), in this thread;
        ``per_second`` 0: all of them through the pool at once."""
        if per_second <= 0:
            self._pool(fn, items)
            return
        start = time.monotonic()
        for i, item in enumerate(items):
            if self._stop.wait(max(0.0, start + (i + 1) / per_second - time.monotonic())):
                return
            fn(item)

    def _pool(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="script") as ex:
            for f in [ex.submit(fn, item) for item in items]:
                f.result()

    def stop(self) -> None:
        """Stop the background deletions (the round is over)."""
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def drop_finalizers(self) -> None:
        """Take the finalizers off the pods created with one, so the round's cleanup can delete them."""
        for name in self._finalized:
            with contextlib.suppress(api_errors.KubeError):
                self.kube.patch(pod_path(self.namespace, name), {"metadata": {"finalizers": None}})

    def held_bound(self, bound: Mapping[str, float]) -> int:
        """The ``held_bound`` violations: see :func:`bench.script.held_bound`."""
        return script.held_bound(self.releases, bound)

    def summary(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "errors": self.errors,
            "updated": self.updated,
            "deleted": self.deleted,
            "steps": self.timeline,
        }


def _size(step: script.Step) -> dict[str, int]:
    for attr in ("nodes", "pods", "pairs", "objects", "names", "patches"):
        items = getattr(step, attr, None)
        if items is not None:
            return {"n": len(items)}
    return {}
