"""One test's world on the session's real API server, as one value: the ``env`` fixture.

Most integration tests used to take the same five or six fixtures (``kube``, ``namespace``,
``nodes``, ``create_pod``, ``start_scheduler``, ``control_plane``) and repeat the same few helpers
(the pods' placements, "wait until these pods are bound", the FailedScheduling notes of a pod). The
``env`` fixture (``tests/integration/conftest.py``) bundles the fixtures in a frozen :class:`Env`
with those helpers as methods; a test takes ``env`` plus whatever is its own (``proxy``, ``dra``,
a parameter). The separate fixtures still exist, and ``env`` is built from them, so a test that
takes both sees the same namespace, nodes and schedulers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from custom_scheduler.devenv import cluster
from custom_scheduler.devenv.controlplane import ControlPlane
from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import KubeClient, pod_path
from custom_scheduler.server.app import App
from tests.builders import NodeBuilder, PodBuilder


@dataclass(frozen=True)
class Env:
    """The control plane, an admin client, the test's namespace and the per-test factories.

    ``nodes(builder)`` creates a Ready node run by the session's kwok (its name made unique; deleted
    after the test) and
    returns the object; ``create_pod(obj)`` creates a pod in :attr:`namespace`; and
    ``start_scheduler(config_text=MINIMAL_CONFIG, **kw)`` starts an in-process :class:`App`
    (stopped after the test). The methods are the helpers many tests share.
    """

    control_plane: ControlPlane
    kube: KubeClient
    namespace: str
    nodes: Callable[[NodeBuilder], dict[str, Any]]
    create_pod: Callable[[dict[str, Any]], dict[str, Any]]
    start_scheduler: Callable[..., App]

    # -- nodes and pods ---------------------------------------------------------------------------
    def node(self, builder: NodeBuilder) -> str:
        """Create a Ready node from ``builder`` and return its (unique) name."""
        return str(self.nodes(builder)["metadata"]["name"])

    def pod(self, name: str) -> dict[str, Any]:
        """The pod ``name`` of the namespace as the API server has it now."""
        doc: dict[str, Any] = self.kube.get(pod_path(self.namespace, name))
        return doc

    def pods(self) -> dict[str, dict[str, Any]]:
        """Every pod of the namespace, by name."""
        return {p["metadata"]["name"]: p for p in cluster.list_pods(self.kube, self.namespace)}

    def placements(self) -> dict[str, str]:
        """Pod name -> the node it is bound to, ``""`` for a pod not bound (yet)."""
        return {
            p["metadata"]["name"]: p["spec"].get("nodeName") or "" for p in cluster.list_pods(self.kube, self.namespace)
        }

    def node_of(self, name: str) -> str:
        """The node pod ``name`` is bound to, ``""`` while it is not."""
        return str(self.pod(name)["spec"].get("nodeName") or "")

    def delete_pod_now(self, name: str) -> None:
        """Delete a pod with grace 0: gone before the next step, without waiting for kwok to
        finish a graceful delete (or forever, on a hand-made Node that no kubelet runs)."""
        try:
            self.kube.delete(pod_path(self.namespace, name), {"gracePeriodSeconds": 0})
        except api_errors.NotFound:
            pass

    # -- waits ------------------------------------------------------------------------------------
    def wait_bound(self, *names: str, timeout: float = 30.0) -> dict[str, str]:
        """Wait until every pod in ``names`` is bound; return :meth:`placements` (all the pods)."""

        def done() -> dict[str, str] | None:
            got = self.placements()
            return got if all(got.get(n) for n in names) else None

        shown = ", ".join(names) if len(names) <= 5 else f"{len(names)} pods"
        result: dict[str, str] = cluster.wait_for(done, timeout=timeout, what=f"{shown} bound")
        return result

    def wait_failed_scheduling(self, name: str, timeout: float = 30.0) -> list[str]:
        """Wait for a FailedScheduling event about pod ``name``; return the notes of all of them."""
        notes: list[str] = cluster.wait_for(
            lambda: self.failed_scheduling(name), timeout=timeout, what=f"FailedScheduling for {name}"
        )
        return notes

    # -- events -----------------------------------------------------------------------------------
    def events(self, reason: str | None = None, *, about: str | None = None) -> list[dict[str, Any]]:
        """The namespace's ``events.k8s.io`` Events, optionally only one ``reason`` and only those
        ``regarding`` the pod named ``about``."""
        items: list[dict[str, Any]] = (
            self.kube.get(f"/apis/events.k8s.io/v1/namespaces/{self.namespace}/events").get("items") or []
        )
        return [
            e
            for e in items
            if (reason is None or e.get("reason") == reason)
            and (about is None or (e.get("regarding") or {}).get("name") == about)
        ]

    def failed_scheduling(self, name: str) -> list[str]:
        """The notes of the FailedScheduling events about pod ``name`` (empty while there are none)."""
        return [str(e.get("note") or "") for e in self.events("FailedScheduling", about=name)]


def with_class(b: PodBuilder, priority_class: str) -> dict[str, Any]:
    """The pod of ``b`` with ``spec.priorityClassName`` set (the API server resolves the value)."""
    obj: dict[str, Any] = b.obj()
    obj["spec"]["priorityClassName"] = priority_class
    return obj
