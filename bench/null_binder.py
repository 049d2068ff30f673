"""A null binder: the API server's ceiling for binds per second, measured in the same run.

It binds every pending pod of its ``schedulerName`` to the next node, round robin, with no
scheduling logic at all: no cache of pods, no filter, no score, no events, no status writes. What
it reaches on a workload of plain pods is what the API server (and the machine it shares with the
harness) allows a scheduler; issue #25 asks that ours reach at least 60 % of it after start-up.
It is only meaningful where any node fits any pod (``plain``, ``SchedulingBasic``): elsewhere it
binds pods where they do not fit, and the placement checks say so.

Run by the harness as ``--schedulers custom,kube,null``: a LIST of the nodes, then a LIST and WATCH
of the pending pods, with the Bindings sent from a pool of threads on keep-alive connections (the
same HTTP path our daemon uses, so the comparison is about scheduling, not the client).
"""

from __future__ import annotations

import argparse
import itertools
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient
from custom_scheduler.kube.watch import list_all

NAME = "null-binder"


class NullBinder:
    def __init__(self, client: KubeClient, scheduler_name: str, workers: int) -> None:
        self.client = client
        self.scheduler_name = scheduler_name
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind")
        self.seen: set[str] = set()
        self.stop = threading.Event()
        self.bound = 0
        self._lock = threading.Lock()
        self._nodes = itertools.cycle(sorted(n["metadata"]["name"] for n in list_all(client, "/api/v1/nodes")[0]))

    def _selector(self) -> str:
        return f"spec.schedulerName={self.scheduler_name},spec.nodeName="

    def _offer(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if not uid or uid in self.seen or (pod.get("spec") or {}).get("nodeName"):
            return
        self.seen.add(uid)
        self.pool.submit(self._bind, str(meta.get("namespace", "")), str(meta.get("name", "")), next(self._nodes))

    def _bind(self, namespace: str, name: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self.client.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
        except api_errors.KubeError as e:
            print(f"bind {namespace}/{name}: {e}", file=sys.stderr, flush=True)
            return
        with self._lock:
            self.bound += 1

    def run(self) -> None:
        items, rv = list_all(self.client, "/api/v1/pods", self._selector())
        for pod in items:
            self._offer(pod)
        print(f"listed {len(items)} pending pods; watching", flush=True)
        while not self.stop.is_set():
            query = {"watch": "true", "resourceVersion": rv, "fieldSelector": self._selector(), "timeoutSeconds": 600}
            try:
                for line in self.client.stream("/api/v1/pods", query, read_timeout=90):
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if ev.get("type") == "ERROR":
                        items, rv = list_all(self.client, "/api/v1/pods", self._selector())
                        for pod in items:
                            self._offer(pod)
                        break
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        self._offer(obj)
            except api_errors.KubeError as e:
                if self.stop.is_set():
                    return
                print(f"watch: {e}", file=sys.stderr, flush=True)
                self.stop.wait(0.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.null_binder", description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scheduler-name", default=NAME)
    p.add_argument("--workers", type=int, default=16)
    args = p.parse_args(argv)
    client = KubeClient.from_kubeconfig(args.kubeconfig, qps=0, burst=1, pool_maxsize=args.workers + 2)
    binder = NullBinder(client, args.scheduler_name, args.workers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        binder.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    print(f"bound {binder.bound}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
