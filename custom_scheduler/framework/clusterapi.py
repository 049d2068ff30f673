"""The cluster API as plugins see it: the Handle's ``client`` plus the pure values to use it with.

Plugins reach the cluster only through their :class:`~custom_scheduler.framework.interface.Handle`
(``handle.client``, None offline), as kube-scheduler's do; they import nothing from
:mod:`custom_scheduler.kube`. What they need besides the client object is re-exported here:

- :mod:`errors <custom_scheduler.kube.api_errors>`: the classification of API failures
  (``api_errors.NotFound``, ``api_errors.Conflict``, ``api_errors.is_retryable``, …), to tell a lost race from
  a transient failure;
- :func:`pod_path` and :data:`STRATEGIC_PATCH_CT`: the pod paths and the patch content type that
  binding and preemption write with.
"""

from __future__ import annotations

from custom_scheduler.kube import api_errors
from custom_scheduler.kube.client import STRATEGIC_PATCH_CT, pod_path

__all__ = ["STRATEGIC_PATCH_CT", "api_errors", "pod_path"]
