"""Reading a live cluster into a :class:`~custom_scheduler.tools.cluster_state.ClusterState`.

``explain`` (without ``--cluster``) and ``snapshot`` LIST what the daemon's informers would watch,
with the pod field selector the daemon uses. The scheduling core must be readable: a failure on
nodes, pods or namespaces fails the tool. Everything else is optional and degrades as the daemon
would without it (no RBAC, an API the server does not serve), with a warning the tools print.
"""

from __future__ import annotations

import sys
from typing import Any

from custom_scheduler.api import podgroup as gang
from custom_scheduler.kube import api_errors as kerrors
from custom_scheduler.tools.cluster_state import ClusterState, JSONDict, parse_pod_group
from custom_scheduler.tools.plumbing import ToolError
from custom_scheduler.tools.snapshot_file import API_VERSIONS, POD_GROUP_KIND

#: Where each PodGroup API is listed, and the apiVersion its (kind-less) list items get.
POD_GROUP_APIS = ((gang.NATIVE_PATH, gang.NATIVE_GROUP_VERSION), (gang.CRD_PATH, gang.CRD_GROUP_VERSION))


def connect(kubeconfig: str | None, config_kubeconfig: str = "") -> Any:
    """A KubeClient for explain/snapshot (reads only; no client-side rate limit)."""
    from custom_scheduler.kube.client import KubeClient

    path = kubeconfig if kubeconfig is not None else config_kubeconfig
    try:
        return KubeClient.from_kubeconfig(path or "", qps=0, burst=1)
    except Exception as e:  # the kubernetes package raises assorted types for bad kubeconfigs
        where = path or "$KUBECONFIG / ~/.kube/config / in-cluster"
        raise ToolError(f"cannot load cluster credentials from {where}: {e}") from None


def list_all(client: Any, path: str, field_selector: str = "") -> list[JSONDict]:
    """Every item of a consistent LIST (the informers' paging: :func:`custom_scheduler.kube.watch.list_all`)."""
    from custom_scheduler.kube.watch import list_all as paged

    return paged(client, path, field_selector)[0]


def fetch_live(client: Any) -> ClusterState:
    """LIST nodes, non-terminal pods, namespaces, PriorityClasses, PDBs and workloads (Services,
    ReplicationControllers, ReplicaSets, StatefulSets) from the API server.

    Raises :class:`~custom_scheduler.kube.api_errors.KubeError` on failures of the first three;
    PriorityClasses and PDBs are optional (a forbidden or missing API leaves the list empty), and so
    are the workloads, whose failures are also kept in ``warnings``.
    """
    from custom_scheduler.core.informers import POD_FIELD_SELECTOR

    state = ClusterState(source=f"live {getattr(client, 'host', '')}".strip())
    state.nodes = [_with_kind(n, "Node") for n in list_all(client, "/api/v1/nodes")]
    state.pods = [_with_kind(p, "Pod") for p in list_all(client, "/api/v1/pods", POD_FIELD_SELECTOR)]
    state.namespaces = [_with_kind(n, "Namespace") for n in list_all(client, "/api/v1/namespaces")]
    try:
        pcs = list_all(client, "/apis/scheduling.k8s.io/v1/priorityclasses")
    except kerrors.ApiError:
        pcs = []
    state.priority_classes = [_with_kind(pc, "PriorityClass") for pc in pcs]
    try:
        pdbs = list_all(client, "/apis/policy/v1/poddisruptionbudgets")
    except kerrors.ApiError:
        pdbs = []
    state.pdbs = [_with_kind(b, "PodDisruptionBudget") for b in pdbs]
    _fetch_workloads(client, state)
    _fetch_storage(client, state)
    _fetch_dra(client, state)
    _fetch_pod_groups(client, state)
    return state


def _fetch_pod_groups(client: Any, state: ClusterState) -> None:
    """Add the PodGroups of both APIs. An API the server does not serve (404: a server before
    1.37 or without the GenericWorkload gate, or no scheduler-plugins CRD) is skipped silently, as
    the daemon's informers wait for it; another failure (RBAC) is a warning, since GangScheduling
    then sees no group and holds its members back. Malformed groups are warned about and skipped,
    as the informers skip them."""
    for path, api_version in POD_GROUP_APIS:
        items = _list_or_warn(
            client, state, path, f"{api_version} podgroups", "GangScheduling sees none of them", absent_ok=True
        )
        for o in items:
            o.setdefault("kind", POD_GROUP_KIND)
            o.setdefault("apiVersion", api_version)
            pg = parse_pod_group(o)
            if isinstance(pg, gang.GroupError):
                state.warnings.append(f"skipped a malformed {api_version} {pg}")
                continue
            state.pod_groups.append(o)


def _fetch_dra(client: Any, state: ClusterState) -> None:
    """Add ResourceSlices, DeviceClasses and ResourceClaims; a kind that cannot be listed (no
    RBAC, or a server without resource.k8s.io/v1) is skipped with a warning."""
    from custom_scheduler.core.informers import DRA_RESOURCES

    for kind, path, _ in DRA_RESOURCES:
        items = _list_or_warn(client, state, path, path.rsplit("/", 1)[1], "DynamicResources sees none")
        state.dra.extend(_with_kind(o, kind) for o in items)


def _fetch_storage(client: Any, state: ClusterState) -> None:
    """Add PVs, PVCs, StorageClasses and CSI objects; a kind that cannot be listed is skipped with
    a warning (the volume plugins then see none of it, as a daemon without that RBAC would)."""
    from custom_scheduler.core.informers import VOLUME_RESOURCES

    for kind, path, _ in VOLUME_RESOURCES:
        items = _list_or_warn(client, state, path, path.rsplit("/", 1)[1], "the volume plugins see none")
        state.storage.extend(_with_kind(o, kind) for o in items)


def _fetch_workloads(client: Any, state: ClusterState) -> None:
    """Add the objects of every workload kind to ``state``. A kind that cannot be listed (RBAC
    forbids it, the API fails) is skipped with a warning rather than failing the tool: the report
    is still right except for PodTopologySpread's default spreading, which the warning names."""
    from custom_scheduler.core.selectors import KINDS, SOURCES

    for kind, source in KINDS.items():
        items = _list_or_warn(
            client,
            state,
            SOURCES[source][0],
            source,
            "PodTopologySpread's default spreading ignores them, so its scores may differ from the daemon's",
        )
        state.workloads.extend(_with_kind(w, kind) for w in items)


def _list_or_warn(
    client: Any, state: ClusterState, path: str, what: str, consequence: str, *, absent_ok: bool = False
) -> list[JSONDict]:
    """LIST ``path``; when that fails, nothing, with the warning ``cannot list WHAT (error);
    CONSEQUENCE`` in ``state``: an optional kind the tool can do without must not fail it. With
    ``absent_ok``, an API the server does not serve (404) is nothing without a warning."""
    try:
        return list_all(client, path)
    except kerrors.KubeError as e:
        if absent_ok and isinstance(e, kerrors.NotFound):
            # Not served by this server: nothing is missing (the daemon's informers wait for it).
            return []
        state.warnings.append(f"cannot list {what} ({e}); {consequence}")
        return []


def _with_kind(doc: JSONDict, kind: str) -> JSONDict:
    doc.setdefault("kind", kind)
    doc.setdefault("apiVersion", API_VERSIONS.get(kind, "v1"))
    return doc


def print_warnings(tool: str, state: ClusterState) -> None:
    """What :func:`fetch_live` had to leave out, on stderr (stdout carries only the report)."""
    for w in state.warnings:
        print(f"custom-scheduler {tool}: warning: {w}", file=sys.stderr)
