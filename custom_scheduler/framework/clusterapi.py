"""The cluster API as plugins see it: the Handle's ``client`` plus the pure values to use it with.

Plugins reach the cluster only through their :class:`~custom_scheduler.framework.interface.Handle`
(``handle.client``, None offline), as kube-scheduler's do; they import nothing from
:mod:`custom_scheduler.kube`. What they may call on it is :class:`ClusterClient`, and what they
need besides is re-exported here:

- :mod:`errors <custom_scheduler.kube.api_errors>`: the classification of API failures
  (``api_errors.NotFound``, ``api_errors.Conflict``, ``api_errors.is_retryable``, …), to tell a lost race from
  a transient failure;
- :func:`pod_path` and :data:`STRATEGIC_PATCH_CT`: the pod paths and the patch content type that
  binding and preemption write with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT, pod_path

__all__ = ["STRATEGIC_PATCH_CT", "ClusterClient", "Timeout", "api_errors", "pod_path"]

Timeout = tuple[float, float]
"""(connect, read) seconds of one request."""


class ClusterClient(Protocol):
    """The requests plugins and the framework's services send (DefaultBinder's binding, the
    DRA claim and volume updates of PreBind, preemption's evictions, PodGroup status).

    A Protocol rather than :class:`~custom_scheduler.kube.client.KubeClient` itself, so the plugins'
    contract is these five verbs and no more (no watches, no clones, no rate-limit switch) and a
    test hands in a recording fake. ``KubeClient`` satisfies it structurally (checked below).
    Every call raises :class:`~custom_scheduler.kube.api_errors.KubeError` on failure and returns
    the server's answer as decoded JSON.
    """

    def get(self, path: str, *, timeout: Timeout = ...) -> Any: ...

    def post(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = ...) -> Any: ...

    def put(self, path: str, body: Mapping[str, Any], *, timeout: Timeout = ...) -> Any: ...

    def patch(self, path: str, body: Mapping[str, Any], content_type: str = ..., *, timeout: Timeout = ...) -> Any:
        """A merge patch unless ``content_type`` says otherwise (:data:`STRATEGIC_PATCH_CT`)."""
        ...

    def delete(self, path: str, body: Mapping[str, Any] | None = None, *, timeout: Timeout = ...) -> Any:
        """``body``: DeleteOptions (a uid precondition), or None."""
        ...


if TYPE_CHECKING:
    from custom_scheduler.kube.client import KubeClient

    def _kube_client_is_a_cluster_client(c: KubeClient) -> ClusterClient:
        # mypy checks this assignment: a KubeClient change that breaks the plugins' contract fails here.
        return c
